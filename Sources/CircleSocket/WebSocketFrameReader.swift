import NIOCore
import NIOWebSocket

/// Splits a connection's bytes into WebSocket frames (RFC 6455 5.2), the job of NIO's
/// `ByteToMessageHandler(WebSocketFrameDecoder(...))`, with the same checks and the same errors
/// (`NIOWebSocketError`), but without copying whole frames.
///
/// Why our own: `ByteToMessageHandler` merges every read into the bytes left over from the last
/// one, and reclaims consumed bytes with `discardReadBytes`. While the frames it already passed
/// on still share that storage, each reclaim copies the rest into fresh memory. With 16 KiB
/// messages those copies and their page faults were a large share of the client's CPU per message
/// in the client benchmark (`perf`; docs/bench/client.md). Here a frame that lies whole in
/// a read is passed on as a slice of it; only a frame cut by the end of a read is copied into a
/// buffer of its own, which the next reads fill. That buffer grows with what has arrived (see
/// ``WebSocketFrameParser/capacity(frameSize:holding:)``): a peer that sends a header announcing
/// a large frame and then stalls holds a few KiB, not the announced size. When the next read
/// completes the frame, the buffer grows once, to the frame's size. Both sides use it: the client
/// after its handshake, servers through ``WebSocketServerUpgrader``.
///
/// A value without I/O: ``WebSocketFrameReader`` feeds it the channel's reads.
package struct WebSocketFrameParser {
    private let maxFrameSize: Int
    /// Judge each header as soon as its first two bytes are there, as received by this role.
    private let checkHeadersAs: WebSocketProtocolState.Role?
    /// The start of a frame cut by the end of a read: its header bytes so far, or its whole
    /// header and part of its payload (see ``capacity(frameSize:holding:)``).
    private var pending: ByteBuffer?

    /// The least capacity of a kept partial frame, unless the frame is smaller.
    package static let pendingFloor = 4096

    /// - Parameter checkHeadersAs: when set, a header that breaks the rules of
    ///   ``WebSocketFrameHeader`` for that receiving role throws
    ///   ``WebSocketFrameHeaderViolation`` as soon as its first two bytes have arrived, before
    ///   NIO's checks; nil checks what NIO's decoder checks, no more.
    package init(maxFrameSize: Int, checkHeadersAs: WebSocketProtocolState.Role? = nil) {
        precondition(maxFrameSize <= UInt32.max, "invalid overlarge max frame size")
        self.maxFrameSize = maxFrameSize
        self.checkHeadersAs = checkHeadersAs
    }

    /// The next whole frame from `pending` and `input`, reading from `input` what it takes; `nil`
    /// when `input` is used up first (its bytes are then kept for the next call). Throws when the
    /// peer broke the protocol; the connection is then over and the parser must not be used again.
    package mutating func next(from input: inout ByteBuffer) throws -> WebSocketFrame? {
        if self.pending != nil {
            return try self.continuePending(from: &input)
        }
        guard input.readableBytes > 0 else { return nil }
        let size = try self.frameSize(of: input)
        guard let size, input.readableBytes >= size else {
            self.keep(&input, frameSize: size)
            return nil
        }
        return Self.readFrame(from: &input)
    }

    /// Moves the rest of `input` to `pending`.
    private mutating func keep(_ input: inout ByteBuffer, frameSize: Int?) {
        let capacity = Self.capacity(frameSize: frameSize, holding: input.readableBytes)
        var buffer = ByteBufferAllocator().buffer(capacity: capacity)
        buffer.writeBuffer(&input)
        self.pending = buffer
    }

    /// The capacity to ask for a partial frame of `frameSize` bytes (`nil`: its header is not
    /// complete yet) that must hold `count` bytes: `count`, at least ``pendingFloor``, at most the
    /// frame (or the longest header). `ByteBuffer` rounds capacities up to a power of two, so the
    /// buffer holds less than twice `max(count, pendingFloor)` (or than twice the frame), and it
    /// grows in doublings: each received byte is copied a bounded number of times.
    package static func capacity(frameSize: Int?, holding count: Int) -> Int {
        let limit = frameSize ?? WebSocketFrameHeader.maxSize
        return max(count, min(limit, Self.pendingFloor))
    }

    /// The capacity of the partial frame kept now, if any (for tests).
    package var pendingCapacity: Int? { self.pending?.capacity }

    private mutating func continuePending(from input: inout ByteBuffer) throws -> WebSocketFrame? {
        guard var buffer = self.pending else { return nil }
        self.pending = nil  // so that `buffer` is the storage's only owner while it grows
        while true {
            let needed: Int
            if buffer.readableBytes < 2 {
                needed = 2
            } else if let size = try self.frameSize(of: buffer) {
                // `frameSize` checked the header before the buffer grows to the frame's size.
                if buffer.readableBytes == size {
                    return Self.readFrame(from: &buffer)
                }
                needed = size
            } else {
                needed = Self.headerSize(firstTwo: buffer)
            }
            let take = min(needed - buffer.readableBytes, input.readableBytes)
            guard take > 0 else {
                self.pending = buffer
                return nil
            }
            if buffer.writableBytes < take {
                let total = buffer.readableBytes + take
                let capacity = Self.capacity(frameSize: needed, holding: total)
                buffer.reserveCapacity(minimumWritableBytes: capacity - buffer.readableBytes)
            }
            var part = input.readSlice(length: take)!
            buffer.writeBuffer(&part)
        }
    }

    /// The header's size, from its first two bytes (at least two must be readable).
    private static func headerSize(firstTwo buffer: ByteBuffer) -> Int {
        let second = buffer.getInteger(at: buffer.readerIndex + 1, as: UInt8.self)!
        let lengthSize: Int
        switch second & 0x7F {
        case 126: lengthSize = 2
        case 127: lengthSize = 8
        default: lengthSize = 0
        }
        return 2 + lengthSize + (second & 0x80 != 0 ? 4 : 0)
    }

    /// The whole frame's size (header and payload) when `buffer` starts with a whole header,
    /// `nil` when the header is not all there yet. Throws, as soon as the length field is there
    /// (before the masking key, as NIO's decoder does), the errors NIO's decoder throws for the
    /// same frames: a payload over `maxFrameSize` (or over 2⁶³), a fragmented control frame, a
    /// control frame over 125 bytes.
    private func frameSize(of buffer: ByteBuffer) throws -> Int? {
        guard buffer.readableBytes >= 2 else { return nil }
        let start = buffer.readerIndex
        let first = buffer.getInteger(at: start, as: UInt8.self)!
        let second = buffer.getInteger(at: start + 1, as: UInt8.self)!
        if let role = self.checkHeadersAs, let violation = WebSocketFrameHeader(first: first, second: second).violation(receivedBy: role) {
            throw WebSocketFrameHeaderViolation(message: violation)
        }
        let length: UInt64
        switch second & 0x7F {
        case 126:
            guard let word = buffer.getInteger(at: start + 2, as: UInt16.self) else { return nil }
            length = UInt64(word)
        case 127:
            guard let word = buffer.getInteger(at: start + 2, as: UInt64.self) else { return nil }
            length = word
        case let short:
            length = UInt64(short)
        }
        guard length <= UInt64(self.maxFrameSize) else { throw NIOWebSocketError.invalidFrameLength }
        let isControl = first & 0x08 != 0
        if isControl && first & 0x80 == 0 { throw NIOWebSocketError.fragmentedControlFrame }
        if isControl && length > 125 { throw NIOWebSocketError.multiByteControlFrameLength }
        let headerSize = Self.headerSize(firstTwo: buffer)
        guard buffer.readableBytes >= headerSize else { return nil }
        return headerSize + Int(length)
    }

    /// Reads one frame whose bytes are all readable (its size checked by `frameSize`); the
    /// payload is a slice of `buffer`.
    private static func readFrame(from buffer: inout ByteBuffer) -> WebSocketFrame {
        let first = buffer.readInteger(as: UInt8.self)!
        let second = buffer.readInteger(as: UInt8.self)!
        let length: Int
        switch second & 0x7F {
        case 126: length = Int(buffer.readInteger(as: UInt16.self)!)
        case 127: length = Int(buffer.readInteger(as: UInt64.self)!)
        case let short: length = Int(short)
        }
        var maskKey: WebSocketMaskingKey?
        if second & 0x80 != 0 {
            // From the buffer's bytes in place: `readBytes` would allocate an array per frame.
            maskKey = buffer.withUnsafeReadableBytes { WebSocketMaskingKey(UnsafeRawBufferPointer(rebasing: $0.prefix(4))) }
            buffer.moveReaderIndex(forwardBy: 4)
        }
        return WebSocketFrame(
            fin: first & 0x80 != 0,
            rsv1: first & 0x40 != 0,
            rsv2: first & 0x20 != 0,
            rsv3: first & 0x10 != 0,
            opcode: WebSocketOpcode(encodedWebSocketOpcode: first & 0x0F)!,  // four bits: never nil
            maskKey: maskKey,
            data: buffer.readSlice(length: length)!
        )
    }
}

/// The channel handler around ``WebSocketFrameParser``: reads `ByteBuffer`s, passes on
/// `WebSocketFrame`s. After a protocol error it passes the error on (`errorCaught`, a
/// `NIOWebSocketError`, as `ByteToMessageHandler` does) and drops every later byte. A frame cut
/// off by the end of the connection is dropped.
package final class WebSocketFrameReader: ChannelInboundHandler, RemovableChannelHandler {
    package typealias InboundIn = ByteBuffer
    package typealias InboundOut = WebSocketFrame

    private var parser: WebSocketFrameParser
    private var failed = false

    package init(maxFrameSize: Int, checkHeadersAs: WebSocketProtocolState.Role? = nil) {
        self.parser = WebSocketFrameParser(maxFrameSize: maxFrameSize, checkHeadersAs: checkHeadersAs)
    }

    package func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard !self.failed else { return }
        var input = self.unwrapInboundIn(data)
        do {
            while let frame = try self.parser.next(from: &input) {
                context.fireChannelRead(self.wrapInboundOut(frame))
                if self.failed { return }
            }
        } catch {
            self.failed = true
            context.fireErrorCaught(error)
        }
    }
}

@available(*, unavailable)
extension WebSocketFrameReader: Sendable {}
