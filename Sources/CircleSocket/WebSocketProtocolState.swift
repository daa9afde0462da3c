import NIOCore
import NIOWebSocket

/// RFC 6455 message logic of one connection, without I/O: turns inbound frames into
/// messages and replies, turns outbound messages into frames, and tracks the close handshake.
///
/// The channel handler owns one and performs the actions it returns; tests drive it directly.
package struct WebSocketProtocolState {
    package enum Role: Sendable {
        case client
        case server
    }

    package enum CloseState: Equatable {
        case open
        /// This side sent a close frame and waits for the peer's.
        case closeSent(WebSocketCloseCode)
        /// The peer sent a close frame and this side answered.
        case closeReceived
        /// Both close frames were exchanged.
        case closed
    }

    /// What the owner must do after an inbound frame.
    package enum InboundAction {
        case none
        case deliver(WebSocketMessage)
        /// A text message as its bytes, with ``deliversTextBytes`` set: the receiver checks their
        /// UTF-8 (an unfragmented, uncompressed message's were not checked here).
        case deliverText(ByteBuffer)
        /// Send this frame (a pong).
        case reply(WebSocketFrame)
        case pong(ByteBuffer)
        /// The peer sent a close frame; `reply` is the answer to send, if this side had not sent one.
        case peerClosed(code: WebSocketCloseCode, reason: String, reply: WebSocketFrame?)
        /// The peer broke the protocol: send a close frame with this code (if none was sent) and drop the connection.
        case fail(WebSocketCloseCode, WebSocketError)
    }

    private struct PartialMessage {
        var isText: Bool
        var isCompressed: Bool
        var buffer: ByteBuffer
        var validator = UTF8Validator()
    }

    package let role: Role
    package let maxMessageSize: Int
    private let deflate: PerMessageDeflate?
    private var partial: PartialMessage?
    package private(set) var closeState: CloseState = .open
    /// The code of the close frame this side sent, if any.
    package private(set) var sentCloseCode: WebSocketCloseCode?
    /// The masking keys of this side's frames (client role only).
    private var maskingKeys = MaskingKeySource()

    /// Whether a text message is delivered as its bytes (``InboundAction/deliverText(_:)``)
    /// rather than as a `String`. For a receiver that parses the bytes and checks their UTF-8 as
    /// it goes (the chat session's JSON parser): an unfragmented, uncompressed message is then not
    /// validated here first, and the receiver fails the connection with 1007 when it is not UTF-8.
    package var deliversTextBytes = false

    package init(role: Role, maxMessageSize: Int, deflate: PerMessageDeflate?) {
        self.role = role
        self.maxMessageSize = maxMessageSize
        self.deflate = deflate
    }

    package var canSend: Bool { self.closeState == .open }

    // MARK: Inbound

    package mutating func receive(_ frame: WebSocketFrame, allocator: ByteBufferAllocator) -> InboundAction {
        switch self.closeState {
        case .open, .closeSent: break
        case .closeReceived, .closed: return .none  // nothing may follow the peer's close frame
        }
        let header = WebSocketFrameHeader(frame)
        if let violation = header.violation(receivedBy: self.role) {
            return self.protocolError(violation)
        }
        switch frame.opcode {
        case .text, .binary:
            guard self.partial == nil else {
                return self.protocolError("a new message began before the previous one ended")
            }
            if frame.rsv1 && self.deflate == nil {
                return self.protocolError("a frame had the compression bit set but compression was not negotiated")
            }
            let isText = frame.opcode == .text
            if frame.fin && !frame.rsv1 {
                return self.singleFrameMessage(frame.fastUnmaskedData, isText: isText)
            }
            self.partial = PartialMessage(
                isText: isText,
                isCompressed: frame.rsv1,
                buffer: allocator.buffer(capacity: frame.rsv1 ? 0 : frame.length)
            )
            return self.append(frame.fastUnmaskedData, fin: frame.fin)
        case .continuation:
            guard self.partial != nil else {
                return self.protocolError("a continuation frame arrived outside a fragmented message")
            }
            if frame.rsv1 {
                return self.protocolError("a continuation frame had the compression bit set")
            }
            return self.append(frame.fastUnmaskedData, fin: frame.fin)
        case .ping:
            if frame.rsv1 { return self.protocolError("a control frame had the compression bit set") }
            guard self.closeState == .open else { return .none }
            return .reply(self.makeFrame(fin: true, opcode: .pong, data: frame.fastUnmaskedData))
        case .pong:
            if frame.rsv1 { return self.protocolError("a control frame had the compression bit set") }
            return .pong(frame.fastUnmaskedData)
        case .connectionClose:
            if frame.rsv1 { return self.protocolError("a control frame had the compression bit set") }
            return self.receiveClose(frame.fastUnmaskedData)
        default:
            // Not reached: a reserved opcode is the header's violation above.
            return self.protocolError("a frame used the reserved opcode \(frame.opcode)")
        }
    }

    private mutating func singleFrameMessage(_ data: ByteBuffer, isText: Bool) -> InboundAction {
        guard data.readableBytes <= self.maxMessageSize else { return self.tooBig() }
        guard isText else { return .deliver(.binary(data)) }
        if self.deliversTextBytes { return .deliverText(data) }
        guard let text = String(validating: data.readableBytesView, as: UTF8.self) else {
            return self.invalidUTF8()
        }
        return .deliver(.text(text))
    }

    private mutating func append(_ data: ByteBuffer, fin: Bool) -> InboundAction {
        guard var message = self.partial else { return .none }
        self.partial = nil  // keeps the buffer uniquely referenced while it grows
        let start = message.buffer.writerIndex
        if message.isCompressed, let deflate = self.deflate {
            do {
                try deflate.inflate(data, into: &message.buffer, limit: self.maxMessageSize)
                if fin { try deflate.finishMessage(into: &message.buffer, limit: self.maxMessageSize) }
            } catch PerMessageDeflateError.tooBig {
                return self.tooBig()
            } catch {
                return self.fail(.invalidPayloadData, WebSocketError(.protocolViolation, "a compressed message could not be inflated"))
            }
        } else {
            guard message.buffer.readableBytes + data.readableBytes <= self.maxMessageSize else { return self.tooBig() }
            var data = data
            message.buffer.writeBuffer(&data)
        }
        if message.isText {
            let valid = message.buffer.withUnsafeReadableBytes { bytes in
                message.validator.validate(UnsafeRawBufferPointer(rebasing: bytes[(start - message.buffer.readerIndex)...]))
            }
            guard valid, !fin || message.validator.isComplete else { return self.invalidUTF8() }
        }
        guard fin else {
            self.partial = message
            return .none
        }
        if message.isText {
            if self.deliversTextBytes { return .deliverText(message.buffer) }
            return .deliver(.text(String(decoding: message.buffer.readableBytesView, as: UTF8.self)))
        }
        return .deliver(.binary(message.buffer))
    }

    private mutating func receiveClose(_ data: ByteBuffer) -> InboundAction {
        var data = data
        var code = WebSocketCloseCode.noStatusReceived
        var reason = ""
        switch data.readableBytes {
        case 0:
            break
        case 1:
            return self.protocolError("a close frame had a one-byte payload")
        default:
            code = WebSocketCloseCode(data.readInteger(as: UInt16.self)!)
            guard code.isSendable else {
                return self.protocolError("a close frame carried the invalid code \(code.rawValue)")
            }
            guard let text = String(validating: data.readableBytesView, as: UTF8.self) else {
                return self.invalidUTF8()
            }
            reason = text
        }
        switch self.closeState {
        case .open:
            self.closeState = .closeReceived
            self.partial = nil
            let answer = code == .noStatusReceived ? nil : code
            self.sentCloseCode = answer
            return .peerClosed(code: code, reason: reason, reply: self.makeCloseFrame(code: answer, reason: ""))
        case .closeSent:
            self.closeState = .closed
            return .peerClosed(code: code, reason: reason, reply: nil)
        case .closeReceived, .closed:
            return .none
        }
    }

    private mutating func protocolError(_ message: String) -> InboundAction {
        self.fail(.protocolError, WebSocketError(.protocolViolation, message))
    }

    private mutating func invalidUTF8() -> InboundAction {
        self.fail(.invalidPayloadData, WebSocketError(.invalidUTF8, "a text message was not valid UTF-8"))
    }

    private mutating func tooBig() -> InboundAction {
        self.fail(
            .messageTooBig,
            WebSocketError(.messageTooBig, "a message exceeded the limit of \(self.maxMessageSize) bytes")
        )
    }

    private mutating func fail(_ code: WebSocketCloseCode, _ error: WebSocketError) -> InboundAction {
        self.partial = nil
        return .fail(code, error)
    }

    // MARK: Outbound

    /// The frames for one outbound message, compressed and fragmented as configured.
    /// Throws ``WebSocketError/Code/notOpen`` once the close handshake has begun.
    package mutating func frames(
        for message: WebSocketMessage,
        fragmentSize: Int?,
        allocator: ByteBufferAllocator
    ) throws -> [WebSocketFrame] {
        guard self.canSend else {
            throw WebSocketError(.notOpen, "the connection is closing; nothing more can be sent")
        }
        let opcode: WebSocketOpcode
        var payload: ByteBuffer
        switch message {
        case .text(let text):
            opcode = .text
            payload = allocator.buffer(string: text)
        case .binary(let buffer):
            opcode = .binary
            payload = buffer
        }
        var compressed = false
        if let deflate, let output = try deflate.compress(payload, allocator: allocator) {
            payload = output
            compressed = true
        }
        return self.fragment(payload, opcode: opcode, compressed: compressed, fragmentSize: fragmentSize)
    }

    /// The frame for one whole outbound message whose payload is already encoded, compressed
    /// when compression was negotiated and the payload is at or over the threshold; `nil` once
    /// the close handshake has begun.
    package mutating func frame(
        opcode: WebSocketOpcode,
        payload: ByteBuffer,
        allocator: ByteBufferAllocator
    ) throws -> WebSocketFrame? {
        guard self.canSend else { return nil }
        if let deflate, let output = try deflate.compress(payload, allocator: allocator) {
            return self.makeFrame(fin: true, opcode: opcode, rsv1: true, data: output)
        }
        return self.makeFrame(fin: true, opcode: opcode, data: payload)
    }

    /// A frame for a payload that was deflated elsewhere, once for many connections (see
    /// ``PerMessageDeflate/sharedCompression``); `nil` once the close handshake has begun.
    package mutating func frame(opcode: WebSocketOpcode, deflated payload: ByteBuffer) -> WebSocketFrame? {
        guard self.canSend else { return nil }
        return self.makeFrame(fin: true, opcode: opcode, rsv1: true, data: payload)
    }

    /// How this connection's compressor could share its output with others: the window size
    /// when every message is compressed on its own (no context takeover), else `nil`.
    package var sharedCompression: PerMessageDeflate.SharedCompression? {
        self.deflate?.sharedCompression
    }

    /// The close code and reason for an error the frame decoder raised in the pipeline, or `nil`
    /// when the error is not about the WebSocket protocol (the transport failed).
    package func closeCode(forDecoderError error: any Error) -> (WebSocketCloseCode, WebSocketError)? {
        switch error {
        case let violation as WebSocketFrameHeaderViolation:
            return (.protocolError, WebSocketError(.protocolViolation, violation.message))
        case NIOWebSocketError.invalidFrameLength:
            return (.messageTooBig, WebSocketError(.messageTooBig, "message larger than \(self.maxMessageSize) bytes"))
        case let error as NIOWebSocketError:
            return (.protocolError, WebSocketError(.protocolViolation, "\(error)"))
        default:
            return nil
        }
    }

    private mutating func fragment(_ payload: ByteBuffer, opcode: WebSocketOpcode, compressed: Bool, fragmentSize: Int?) -> [WebSocketFrame] {
        var payload = payload
        guard let fragmentSize, fragmentSize > 0, payload.readableBytes > fragmentSize else {
            return [self.makeFrame(fin: true, opcode: opcode, rsv1: compressed, data: payload)]
        }
        var frames: [WebSocketFrame] = []
        frames.reserveCapacity(payload.readableBytes / fragmentSize + 1)
        var first = true
        while payload.readableBytes > 0 {
            let slice = payload.readSlice(length: min(fragmentSize, payload.readableBytes))!
            frames.append(
                self.makeFrame(
                    fin: payload.readableBytes == 0,
                    opcode: first ? opcode : .continuation,
                    rsv1: first && compressed,
                    data: slice
                )
            )
            first = false
        }
        return frames
    }

    /// A ping frame, or `nil` once the close handshake has begun.
    package mutating func pingFrame(payload: ByteBuffer) -> WebSocketFrame? {
        self.canSend ? self.makeFrame(fin: true, opcode: .ping, data: payload) : nil
    }

    /// Starts the close handshake. Returns the close frame to send, or `nil` when a close frame
    /// was already sent (by this call earlier, or in answer to the peer's).
    package mutating func close(code: WebSocketCloseCode, reason: String) -> WebSocketFrame? {
        guard self.closeState == .open else { return nil }
        self.closeState = .closeSent(code)
        self.sentCloseCode = code
        return self.makeCloseFrame(code: code, reason: reason)
    }

    private mutating func makeCloseFrame(code: WebSocketCloseCode?, reason: String) -> WebSocketFrame {
        var buffer = ByteBuffer()
        if let code {
            buffer.writeInteger(code.rawValue)
            // A control frame carries at most 125 bytes; cut the reason on a character boundary.
            var reason = Substring(reason)
            while reason.utf8.count > 123 { reason.removeLast() }
            buffer.writeString(String(reason))
        }
        return self.makeFrame(fin: true, opcode: .connectionClose, data: buffer)
    }

    package mutating func makeFrame(fin: Bool, opcode: WebSocketOpcode, rsv1: Bool = false, data: ByteBuffer) -> WebSocketFrame {
        WebSocketFrame(
            fin: fin,
            rsv1: rsv1,
            opcode: opcode,
            maskKey: self.role == .client ? self.maskingKeys.nextKey() : nil,
            data: data
        )
    }
}

extension WebSocketFrame {
    /// The payload unmasked, into a buffer of its own, a word or more at a time. NIO's
    /// `unmaskedData` works byte by byte, which the echo benchmark measured as two thirds of the
    /// server's CPU for 16 KiB messages (benchmarks/README.md). The frame's payload is a slice of
    /// the read buffer, so unmasking it in place would copy it first (copy-on-write): this copies
    /// and unmasks in one pass.
    package var fastUnmaskedData: ByteBuffer {
        guard let key = self.maskKey else { return self.data }
        // The mask runs over extension data and application data together (RFC 6455 5.3).
        let offset = (self.extensionData?.readableBytes ?? 0) % 4
        let length = self.data.readableBytes
        var unmasked = ByteBufferAllocator().buffer(capacity: length)
        unmasked.writeWithUnsafeMutableBytes(minimumWritableBytes: length) { target in
            self.data.withUnsafeReadableBytes { copyWebSocketMasked($0, to: target, key: key, offset: offset) }
            return length
        }
        return unmasked
    }
}

/// XORs `bytes` with the masking key, where byte 0 of `bytes` is at position `offset` of the key
/// cycle. Masking and unmasking are the same operation.
package func applyWebSocketMask(_ bytes: UnsafeMutableRawBufferPointer, key: WebSocketMaskingKey, offset: Int) {
    guard let base = bytes.baseAddress else { return }
    let count = bytes.count
    let key64 = maskWord(key: key, offset: offset)
    // A counted loop with wrapping arithmetic: the compiler vectorizes it (16 bytes or more per
    // step). With `index += 8` its overflow check kept it to one word per step, several times
    // slower on 16 KiB (a micro-benchmark of the loop; the client's cost: docs/bench/client.md).
    let words = count / 8
    for word in 0..<words {
        let at = word &* 8
        base.storeBytes(of: base.loadUnaligned(fromByteOffset: at, as: UInt64.self) ^ key64, toByteOffset: at, as: UInt64.self)
    }
    var index = words &* 8
    while index < count {
        let byte = base.load(fromByteOffset: index, as: UInt8.self)
        base.storeBytes(of: byte ^ key[(index + offset) % 4], toByteOffset: index, as: UInt8.self)
        index += 1
    }
}

/// Writes `source` masked with `key` (byte 0 at key position `offset`) to the first
/// `source.count` bytes of `target`: a copy and ``applyWebSocketMask(_:key:offset:)`` in one pass.
/// Source and target must not overlap. In place, use ``applyWebSocketMask(_:key:offset:)``: the
/// two loops stay separate because given the same memory twice, this one fails the vectorized
/// loop's overlap check and runs a word at a time (0.80 against 0.53 µs per 16 KiB in a
/// micro-benchmark of the two loops).
package func copyWebSocketMasked(_ source: UnsafeRawBufferPointer, to target: UnsafeMutableRawBufferPointer, key: WebSocketMaskingKey, offset: Int = 0) {
    let count = source.count
    precondition(target.count >= count, "the target is smaller than the source")
    guard let from = source.baseAddress, let to = target.baseAddress else { return }
    let key64 = maskWord(key: key, offset: offset)
    let words = count / 8  // vectorized, as in applyWebSocketMask
    for word in 0..<words {
        let at = word &* 8
        to.storeBytes(of: from.loadUnaligned(fromByteOffset: at, as: UInt64.self) ^ key64, toByteOffset: at, as: UInt64.self)
    }
    var index = words &* 8
    while index < count {
        let byte = from.load(fromByteOffset: index, as: UInt8.self)
        to.storeBytes(of: byte ^ key[(index + offset) % 4], toByteOffset: index, as: UInt8.self)
        index += 1
    }
}

/// Eight key bytes in memory order, starting at key position `offset`: XORed as a word, in
/// either byte order, it masks eight bytes.
private func maskWord(key: WebSocketMaskingKey, offset: Int) -> UInt64 {
    var pattern: (UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8) = (0, 0, 0, 0, 0, 0, 0, 0)
    return withUnsafeMutableBytes(of: &pattern) { raw in
        for index in 0..<8 { raw[index] = key[(index + offset) % 4] }
        return raw.loadUnaligned(as: UInt64.self)
    }
}

/// What a frame's first two bytes say, and the breaches of RFC 6455 they show whatever the
/// connection negotiated: the one place for these rules, applied to whole frames by
/// ``WebSocketProtocolState/receive(_:allocator:)`` and to a header as soon as it arrives by
/// ``WebSocketFrameParser`` (a server's, so that a peer speaking something else — a second HTTP
/// request behind its upgrade — is failed at once, not after the payload length its bytes
/// happen to announce).
package struct WebSocketFrameHeader {
    var masked: Bool
    var rsv2: Bool
    var rsv3: Bool
    var opcode: UInt8

    init(_ frame: WebSocketFrame) {
        self.masked = frame.maskKey != nil
        self.rsv2 = frame.rsv2
        self.rsv3 = frame.rsv3
        self.opcode = UInt8(webSocketOpcode: frame.opcode)
    }

    init(first: UInt8, second: UInt8) {
        self.masked = second & 0x80 != 0
        self.rsv2 = first & 0x20 != 0
        self.rsv3 = first & 0x10 != 0
        self.opcode = first & 0x0F
    }

    /// The breach, as the close reason says it; nil when the header is allowed. RSV1 is not
    /// judged here: it depends on permessage-deflate.
    func violation(receivedBy role: WebSocketProtocolState.Role) -> String? {
        switch role {
        case .client where self.masked: return "the server sent a masked frame"
        case .server where !self.masked: return "the client sent an unmasked frame"
        default: break
        }
        if self.rsv2 || self.rsv3 { return "a frame had reserved bits set" }
        switch self.opcode {
        case 0x0, 0x1, 0x2, 0x8, 0x9, 0xA: return nil
        default: return "a frame used the reserved opcode \(WebSocketOpcode(encodedWebSocketOpcode: self.opcode).map { "\($0)" } ?? "\(self.opcode)")"
        }
    }
}

/// A frame header the reader refused as soon as it arrived (``WebSocketFrameHeader``); the
/// connection closes with 1002 and `message`.
package struct WebSocketFrameHeaderViolation: Error, Equatable {
    package var message: String
}
