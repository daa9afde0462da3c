import CircleHTTPClient
import Crypto
import Foundation
import Logging
import NIOCore
import NIOHTTP1
import NIOSSL
import NIOTLS
import NIOWebSocket

/// What a successful client handshake hands to ``WebSocket``.
struct WebSocketUpgradeResult: Sendable {
    var status: HTTPResponseStatus
    var headers: HTTPHeaders
    var subprotocol: String?
    var compression: PerMessageDeflateParameters?
    var messages: WebSocketInboundProducer
    var closed: EventLoopFuture<WebSocketCloseInfo>
    var handler: NIOLoopBound<WebSocketChannelHandler>
    var outbound: WebSocketOutbound
}

/// Sends the HTTP upgrade request (after TLS and the pin check of CircleHTTPClient's
/// `TLSHandshakeGate`, if any), reads the response and puts the WebSocket handlers in its place.
/// The target, `Host` header, TLS context and pins come from CircleHTTPClient, as for every
/// other client connection.
///
/// It speaks the few lines of HTTP/1.1 a handshake needs itself, on raw bytes, instead of
/// NIO's HTTP codec and `NIOWebSocketClientUpgrader`: those drop the body of a refused
/// handshake, and — because `ByteToMessageHandler.removeHandler` finishes one event-loop turn
/// later (NIOCore `Codec.swift`) — lose frames that arrive in the same read as the 101 when the
/// server closes right after them (the Autobahn suite's `/getCaseCount` does exactly that).
final class WebSocketClientHandshakeHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = ByteBuffer
    typealias InboundOut = ByteBuffer
    typealias OutboundOut = ByteBuffer

    struct Request {
        var target: HTTPTarget
        var uri: String
        var configuration: WebSocketConfiguration
        var host: String { self.target.host }
        var port: Int { self.target.port }
        var usesTLS: Bool { self.target.usesTLS }
    }

    private enum State {
        case waiting
        case requestSent
        /// A refusal's head arrived; its body is being read.
        case readingRefusalBody(HTTPResponseHead, remaining: Int?)
        case done
    }

    private static let maxRefusalBody = 64 * 1024
    private static let maxHead = 16 * 1024

    private let request: Request
    private let key = NIOWebSocketClientUpgrader.randomRequestKey()
    private let promise: EventLoopPromise<WebSocketUpgradeResult>
    private let logger: Logger
    private var state = State.waiting
    private var received = ByteBuffer()
    private var body: ByteBuffer?
    private var timeout: Scheduled<Void>?

    init(
        request: Request,
        promise: EventLoopPromise<WebSocketUpgradeResult>,
        logger: Logger
    ) {
        self.request = request
        self.promise = promise
        self.logger = logger
    }

    func handlerAdded(context: ChannelHandlerContext) {
        let loopBound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
        let timeout = self.request.configuration.connectTimeout
        self.timeout = context.eventLoop.scheduleTask(in: timeout) {
            let (handler, context) = loopBound.value
            handler.finish(
                .failure(
                    WebSocketError(
                        .connectTimeout,
                        "no WebSocket connection to \(handler.request.host):\(handler.request.port) within \(timeout.nanoseconds / 1_000_000) ms"
                    )
                )
            )
            context.close(promise: nil)
        }
        if context.channel.isActive && !self.request.usesTLS {
            self.sendRequest(context: context)
        }
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        self.finish(
            .failure(
                WebSocketError(.connectionFailed, "could not connect to \(self.request.host):\(self.request.port)")
            )
        )
    }

    func channelActive(context: ChannelHandlerContext) {
        if !self.request.usesTLS { self.sendRequest(context: context) }
        context.fireChannelActive()
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        // The TLS gate in front passes this event on only once the key matched the pins.
        if case TLSUserEvent.handshakeCompleted = event {
            self.sendRequest(context: context)
        }
        context.fireUserInboundEventTriggered(event)
    }

    private func sendRequest(context: ChannelHandlerContext) {
        guard case .waiting = self.state else { return }
        self.state = .requestSent
        let configuration = self.request.configuration
        var headers = HTTPHeaders()
        headers.add(name: "Host", value: self.request.target.hostHeader)
        headers.add(name: "Upgrade", value: "websocket")
        headers.add(name: "Connection", value: "Upgrade")
        headers.add(name: "Sec-WebSocket-Key", value: self.key)
        headers.add(name: "Sec-WebSocket-Version", value: "13")
        if !configuration.subprotocols.isEmpty {
            headers.add(name: "Sec-WebSocket-Protocol", value: configuration.subprotocols.joined(separator: ", "))
        }
        if let compression = configuration.compression {
            headers.add(name: "Sec-WebSocket-Extensions", value: PerMessageDeflateNegotiation.offer(compression))
        }
        headers.add(contentsOf: configuration.headers)
        var bytes = context.channel.allocator.buffer(capacity: 512)
        bytes.writeString("GET \(self.request.uri) HTTP/1.1\r\n")
        for (name, value) in headers {
            bytes.writeString("\(name): \(value)\r\n")
        }
        bytes.writeString("\r\n")
        context.writeAndFlush(self.wrapOutboundOut(bytes), promise: nil)
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        var bytes = self.unwrapInboundIn(data)
        switch self.state {
        case .waiting, .done:
            return
        case .readingRefusalBody(let head, let remaining):
            self.collectBody(&bytes, head: head, remaining: remaining, context: context)
        case .requestSent:
            self.received.writeBuffer(&bytes)
            guard let headEnd = self.received.readableBytesView.firstRange(of: [13, 10, 13, 10]) else {
                if self.received.readableBytes > Self.maxHead {
                    self.fail(context: context, WebSocketError(.handshakeInvalid, "the response head is larger than \(Self.maxHead) bytes"))
                }
                return
            }
            let headLength = headEnd.upperBound - self.received.readerIndex
            let headText = self.received.readString(length: headLength) ?? ""
            var rest = self.received
            self.received = ByteBuffer()
            guard let head = Self.parseHead(headText) else {
                self.fail(context: context, WebSocketError(.handshakeInvalid, "the server did not answer with HTTP/1.1"))
                return
            }
            if head.status == .switchingProtocols {
                self.upgrade(context: context, head: head, leftover: rest)
            } else {
                let length = head.headers.first(name: "Content-Length").flatMap { Int($0) }
                self.state = .readingRefusalBody(head, remaining: length)
                self.collectBody(&rest, head: head, remaining: length, context: context)
            }
        }
    }

    /// Reads a refusal's body: `Content-Length` bytes, or (without one) until the server closes.
    /// Chunked bodies are kept as they come; the first 64 KiB are enough for a person to read.
    private func collectBody(_ bytes: inout ByteBuffer, head: HTTPResponseHead, remaining: Int?, context: ChannelHandlerContext) {
        let take = min(bytes.readableBytes, remaining ?? bytes.readableBytes)
        if let slice = bytes.readSlice(length: take) {
            let room = Self.maxRefusalBody - (self.body?.readableBytes ?? 0)
            if room > 0 { self.body.setOrWriteImmutableBuffer(slice.getSlice(at: slice.readerIndex, length: min(room, slice.readableBytes))!) }
        }
        if let remaining {
            let left = remaining - take
            if left <= 0 {
                self.refuse(head: head)
                context.close(promise: nil)
            } else {
                self.state = .readingRefusalBody(head, remaining: left)
            }
        } else if head.headers["Transfer-Encoding"].contains(where: { $0.lowercased().contains("chunked") }),
            let body = self.body, body.readableBytesView.firstRange(of: Array("0\r\n\r\n".utf8)) != nil
        {
            self.body = Self.dechunk(body)
            self.refuse(head: head)
            context.close(promise: nil)
        }
    }

    private static func dechunk(_ body: ByteBuffer) -> ByteBuffer {
        var input = body
        var output = ByteBuffer()
        while let line = input.readableBytesView.firstRange(of: [13, 10]) {
            let sizeText = input.readString(length: line.lowerBound - input.readerIndex) ?? ""
            input.moveReaderIndex(forwardBy: 2)
            guard let size = Int(sizeText.split(separator: ";").first ?? "", radix: 16), size > 0,
                let chunk = input.readSlice(length: min(size, input.readableBytes))
            else { break }
            output.writeImmutableBuffer(chunk)
            input.moveReaderIndex(forwardBy: min(2, input.readableBytes))
        }
        return output
    }

    /// Parses "HTTP/1.1 101 Switching Protocols" and the header lines.
    private static func parseHead(_ text: String) -> HTTPResponseHead? {
        var lines = text.split(separator: "\r\n", omittingEmptySubsequences: true)[...]
        guard let statusLine = lines.popFirst() else { return nil }
        let parts = statusLine.split(separator: " ", maxSplits: 2)
        guard parts.count >= 2, parts[0].hasPrefix("HTTP/1."), let code = Int(parts[1]) else { return nil }
        var headers = HTTPHeaders()
        for line in lines {
            guard let colon = line.firstIndex(of: ":") else { continue }
            headers.add(name: String(line[..<colon]).trimmingASCIISpaces(), value: String(line[line.index(after: colon)...]).trimmingASCIISpaces())
        }
        return HTTPResponseHead(version: parts[0] == "HTTP/1.0" ? .http1_0 : .http1_1, status: .init(statusCode: code), headers: headers)
    }

    private func fail(context: ChannelHandlerContext, _ error: WebSocketError) {
        self.finish(.failure(error))
        context.close(promise: nil)
    }

    private func refuse(head: HTTPResponseHead) {
        let bodyText = self.body.map { String(decoding: $0.readableBytesView, as: UTF8.self) } ?? ""
        self.finish(
            .failure(
                WebSocketError(
                    .handshakeRefused,
                    "the server answered the upgrade with HTTP \(head.status.code) \(head.status.reasonPhrase)"
                        + (bodyText.isEmpty ? "" : ": \(bodyText.prefix(500))"),
                    httpStatus: Int(head.status.code),
                    httpHeaders: head.headers,
                    httpBody: bodyText
                )
            )
        )
    }

    private func upgrade(context: ChannelHandlerContext, head: HTTPResponseHead, leftover: ByteBuffer) {
        do {
            let compression = try self.validate(head: head)
            try self.installWebSocket(context: context, head: head, compression: compression, leftover: leftover)
        } catch {
            self.fail(context: context, (error as? WebSocketError) ?? WebSocketError(.handshakeInvalid, "\(error)"))
        }
    }

    private func installWebSocket(
        context: ChannelHandlerContext,
        head: HTTPResponseHead,
        compression: PerMessageDeflateParameters?,
        leftover: ByteBuffer
    ) throws {
        let configuration = self.request.configuration
        let deflate = try compression.map {
            try PerMessageDeflate(
                parameters: $0,
                isClient: true,
                compressionLevel: configuration.compression?.compressionLevel ?? 6,
                minimumCompressedSize: configuration.compression?.minimumCompressedSize ?? 64
            )
        }
        let closed = context.eventLoop.makePromise(of: WebSocketCloseInfo.self)
        var logger = self.logger
        logger[metadataKey: "ws.host"] = "\(self.request.host)"
        let handler = WebSocketChannelHandler(
            state: WebSocketProtocolState(role: .client, maxMessageSize: configuration.maxMessageSize, deflate: deflate),
            closeTimeout: configuration.closeTimeout,
            closedPromise: closed,
            logger: logger
        )
        let messages = handler.makeInboundSequence(eventLoop: context.eventLoop, bufferLimit: configuration.inboundBufferLimit)
        try context.pipeline.syncOperations.addHandlers(
            [
                WebSocketFrameWriter(),
                WebSocketFrameReader(maxFrameSize: configuration.effectiveMaxFrameSize),
                handler,
            ],
            position: .after(self)
        )
        // The socket is the caller's from here on, whatever the frames behind the 101 do to it.
        self.finish(
            .success(
                WebSocketUpgradeResult(
                    status: head.status,
                    headers: head.headers,
                    subprotocol: head.headers.first(name: "Sec-WebSocket-Protocol"),
                    compression: compression,
                    messages: messages,
                    closed: closed.futureResult,
                    handler: NIOLoopBound(handler, eventLoop: context.eventLoop),
                    outbound: handler.outbound
                )
            )
        )
        if leftover.readableBytes > 0 {
            context.fireChannelRead(self.wrapInboundOut(leftover))
            context.fireChannelReadComplete()
        }
        context.pipeline.syncOperations.removeHandler(context: context, promise: nil)
    }

    /// RFC 6455 4.1: the checks a client makes on the server's 101 response.
    private func validate(head: HTTPResponseHead) throws -> PerMessageDeflateParameters? {
        guard head.headers["Upgrade"].contains(where: { $0.lowercased() == "websocket" }) else {
            throw WebSocketError(.handshakeInvalid, "the 101 response has no \"Upgrade: websocket\" header")
        }
        guard head.headers[canonicalForm: "Connection"].contains(where: { $0.lowercased() == "upgrade" }) else {
            throw WebSocketError(.handshakeInvalid, "the 101 response has no \"Connection: Upgrade\" header")
        }
        let expected = Data(Insecure.SHA1.hash(data: Data((self.key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11").utf8)))
            .base64EncodedString()
        guard head.headers["Sec-WebSocket-Accept"] == [expected] else {
            throw WebSocketError(.handshakeInvalid, "the 101 response has a wrong Sec-WebSocket-Accept key")
        }
        let protocols = head.headers["Sec-WebSocket-Protocol"]
        if let chosen = protocols.first {
            guard protocols.count == 1, self.request.configuration.subprotocols.contains(chosen) else {
                throw WebSocketError(.handshakeInvalid, "the server chose the subprotocol \"\(chosen)\", which was not offered")
            }
        }
        return try PerMessageDeflateNegotiation.accept(
            responseHeaderValues: head.headers["Sec-WebSocket-Extensions"],
            offered: self.request.configuration.compression
        )
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        if let error = error as? HTTPClientError {
            self.finish(.failure(WebSocketError(error)))
        } else if error is NIOSSLError || error is BoringSSLError || error is NIOSSLExtraError {
            self.finish(.failure(WebSocketError(.tlsFailed, "the TLS handshake with \(self.request.host) failed", underlying: error)))
        } else {
            self.finish(.failure(WebSocketError(.connectionFailed, "the connection to \(self.request.host) failed", underlying: error)))
        }
        context.close(promise: nil)
    }

    func channelInactive(context: ChannelHandlerContext) {
        if case .readingRefusalBody(let head, _) = self.state {
            if head.headers["Transfer-Encoding"].contains(where: { $0.lowercased().contains("chunked") }), let body = self.body {
                self.body = Self.dechunk(body)
            }
            self.refuse(head: head)
        } else {
            self.finish(
                .failure(
                    WebSocketError(.connectionFailed, "the server closed the connection during the handshake")
                )
            )
        }
        context.fireChannelInactive()
    }

    private func finish(_ result: Result<WebSocketUpgradeResult, any Error>) {
        guard case .done = self.state else {
            self.state = .done
            self.timeout?.cancel()
            self.promise.completeWith(result)
            return
        }
    }
}
