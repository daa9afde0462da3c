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
}

/// Sends the HTTP upgrade request (after TLS and the pin check, if any), validates the
/// response and swaps the HTTP handlers for the WebSocket ones.
///
/// NIO's `NIOWebSocketClientUpgrader` is not used because it gives no hook to hold the request
/// until a certificate pin is checked, drops the body of a refused handshake, and leaves
/// subprotocol and extension negotiation to the caller anyway.
final class WebSocketClientHandshakeHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPClientResponsePart
    typealias OutboundOut = HTTPClientRequestPart

    struct Request {
        var host: String
        var port: Int
        var defaultPort: Int
        var uri: String
        var configuration: WebSocketConfiguration
        var pins: [[UInt8]]
        var usesTLS: Bool
    }

    private enum State {
        case waiting
        case requestSent
        /// The 101 arrived; the HTTP handlers are being removed and inbound bytes are buffered.
        case upgrading
        case done
    }

    private static let maxRefusalBody = 64 * 1024

    private let request: Request
    private let key = NIOWebSocketClientUpgrader.randomRequestKey()
    private let promise: EventLoopPromise<WebSocketUpgradeResult>
    private let httpHandlers: [any RemovableChannelHandler]
    private let logger: Logger
    private var state = State.waiting
    private var responseHead: HTTPResponseHead?
    private var body: ByteBuffer?
    private var timeout: Scheduled<Void>?
    private var buffered: [NIOAny] = []

    init(
        request: Request,
        httpHandlers: [any RemovableChannelHandler],
        promise: EventLoopPromise<WebSocketUpgradeResult>,
        logger: Logger
    ) {
        self.request = request
        self.httpHandlers = httpHandlers
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
        if case TLSUserEvent.handshakeCompleted = event {
            if self.checkPins(context: context) {
                self.sendRequest(context: context)
            } else {
                context.close(promise: nil)
            }
        }
        context.fireUserInboundEventTriggered(event)
    }

    private func checkPins(context: ChannelHandlerContext) -> Bool {
        guard !self.request.pins.isEmpty else { return true }
        let certificate = try? context.pipeline.syncOperations.handler(type: NIOSSLClientHandler.self).peerCertificate
        guard let certificate, let digest = try? WebSocketTLSConfiguration.spkiSHA256(of: certificate) else {
            self.finish(.failure(WebSocketError(.pinMismatch, "the server presented no certificate to check against the pins")))
            return false
        }
        guard self.request.pins.contains(digest) else {
            let seen = (try? WebSocketTLSConfiguration.publicKeyPin(of: certificate)) ?? "?"
            self.finish(
                .failure(
                    WebSocketError(
                        .pinMismatch,
                        "the certificate of \(self.request.host) is trusted but its key (\(seen)) matches none of the \(self.request.pins.count) pinned keys"
                    )
                )
            )
            return false
        }
        return true
    }

    private func sendRequest(context: ChannelHandlerContext) {
        guard case .waiting = self.state else { return }
        self.state = .requestSent
        let configuration = self.request.configuration
        var headers = HTTPHeaders()
        let hostLiteral = self.request.host.contains(":") ? "[\(self.request.host)]" : self.request.host
        headers.add(
            name: "Host",
            value: self.request.port == self.request.defaultPort ? hostLiteral : "\(hostLiteral):\(self.request.port)"
        )
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
        let head = HTTPRequestHead(version: .http1_1, method: .GET, uri: self.request.uri, headers: headers)
        context.write(self.wrapOutboundOut(.head(head)), promise: nil)
        context.writeAndFlush(self.wrapOutboundOut(.end(nil)), promise: nil)
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        if case .upgrading = self.state {
            // Frames that came right behind the 101, forwarded by the departing HTTP decoder.
            self.buffered.append(data)
            return
        }
        guard case .requestSent = self.state else { return }
        switch self.unwrapInboundIn(data) {
        case .head(let head):
            self.responseHead = head
        case .body(var chunk):
            if head101 { return }
            let room = Self.maxRefusalBody - (self.body?.readableBytes ?? 0)
            if room > 0, let slice = chunk.readSlice(length: min(room, chunk.readableBytes)) {
                self.body.setOrWriteImmutableBuffer(slice)
            }
        case .end:
            guard let head = self.responseHead else { return }
            if head.status == .switchingProtocols {
                self.upgrade(context: context, head: head)
            } else {
                self.refuse(head: head)
                context.close(promise: nil)
            }
        }
    }

    private var head101: Bool { self.responseHead?.status == .switchingProtocols }

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

    private func upgrade(context: ChannelHandlerContext, head: HTTPResponseHead) {
        let compression: PerMessageDeflateParameters?
        do {
            compression = try self.validate(head: head)
        } catch {
            self.finish(.failure(error))
            context.close(promise: nil)
            return
        }
        // As NIO's own upgrade handler does: first take the HTTP codec out (the decoder may only
        // leave once it finished the current read), buffering what arrives meanwhile; then add
        // the WebSocket handlers, replay the buffer, and only then hand the socket to the caller.
        self.state = .upgrading
        let loopBound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
        let removals = self.httpHandlers.map { context.pipeline.syncOperations.removeHandler($0) }
        EventLoopFuture.andAllSucceed(removals, on: context.eventLoop).whenComplete { result in
            let (handler, context) = loopBound.value
            do {
                try result.get()
                try handler.installWebSocket(context: context, head: head, compression: compression)
            } catch {
                handler.state = .requestSent
                handler.finish(.failure(error))
                context.close(promise: nil)
            }
        }
    }

    private func installWebSocket(
        context: ChannelHandlerContext,
        head: HTTPResponseHead,
        compression: PerMessageDeflateParameters?
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
                WebSocketFrameEncoder(),
                ByteToMessageHandler(WebSocketFrameDecoder(maxFrameSize: configuration.effectiveMaxFrameSize)),
                handler,
            ],
            position: .after(self)
        )
        let buffered = self.buffered
        self.buffered = []
        for data in buffered { context.fireChannelRead(data) }
        if !buffered.isEmpty { context.fireChannelReadComplete() }
        self.state = .requestSent
        self.finish(
            .success(
                WebSocketUpgradeResult(
                    status: head.status,
                    headers: head.headers,
                    subprotocol: head.headers.first(name: "Sec-WebSocket-Protocol"),
                    compression: compression,
                    messages: messages,
                    closed: closed.futureResult
                )
            )
        )
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
        if error is NIOSSLError || error is BoringSSLError || error is NIOSSLExtraError {
            self.finish(.failure(WebSocketError(.tlsFailed, "the TLS handshake with \(self.request.host) failed", underlying: error)))
        } else {
            self.finish(.failure(WebSocketError(.connectionFailed, "the connection to \(self.request.host) failed", underlying: error)))
        }
        context.close(promise: nil)
    }

    func channelInactive(context: ChannelHandlerContext) {
        if case .upgrading = self.state { self.state = .requestSent }
        if let head = self.responseHead, head.status != .switchingProtocols {
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
