import CircleSocket
import CircleWire
import HTTPTypes
import Hummingbird
import HummingbirdCore
import HummingbirdHTTP2
import Logging
import NIOCore
import NIOHTTP1
import NIOHTTPTypes
import NIOHTTPTypesHTTP1
import NIOSSL
import NIOTLS
import NIOWebSocket

/// Circle's connection: HTTP/1.1 for the API (answered by a Hummingbird responder, the router),
/// and on `/v1/ws` and `/v1/echo` the WebSocket upgrade to Circle's own event-loop session.
///
/// It is a Hummingbird `ServerChildChannel`, built the way hummingbird-websocket's
/// `HTTP1WebSocketUpgradeChannel` is: NIO's typed upgrade handler decides on the first request;
/// a request that is not an upgrade continues as HTTP through an `NIOAsyncChannel`. After the
/// `101` it calls ``WebSocketSessionInstaller/install(on:endpoint:extensionOffers:services:)``
/// and its task ends: the HTTP handlers are gone from the pipeline and the session runs on the
/// event loop, no task per connection or frame.
///
/// Issue 10's hardening lives here too: connection admission (per address and in total),
/// ``HTTPTimeoutHandler``'s timeouts, socket options, and a parser error answered with 400
/// and a close.
public struct CircleHTTPChannel: ServerChildChannel, HTTPChannelHandler {
    public struct Value: ServerChildChannelValue {
        let connection: EventLoopFuture<Connection>
        public let channel: any Channel
    }

    enum Connection: Sendable {
        /// Plain HTTP. `upgradeRequest` is a first request that asked for an upgrade and did not
        /// get it: NIO's upgrade handler has consumed it, so it is answered from its head (with
        /// `refusal` when the upgrade was refused, by the router when it was not one of ours).
        /// `drain` ends the connection after an answer (``InboundDrain``).
        case http(
            NIOAsyncChannel<HTTPRequestPart, HTTPResponsePart>,
            upgradeRequest: HTTPRequest?,
            refusal: APIError?,
            drain: NIOLoopBound<InboundDrain>
        )
        /// A WebSocket session is installed and owns the channel.
        case upgraded
        /// HTTP/2 (TLS with ALPN `h2`): Hummingbird's HTTP/2 channel answers its streams.
        case http2(HTTP2Channel.Value)
    }

    /// What ALPN chose; HTTP/1.1 then still waits for its first request.
    private enum Negotiated: Sendable {
        case http1(EventLoopFuture<Connection>)
        case http2(HTTP2Channel.Value)
    }

    /// What the upgrade decided, for the handlers that run after it.
    struct UpgradeDecision {
        /// The first request's head, when it asked for an upgrade.
        var upgradeHead: HTTPRequestHead?
        var user: AuthenticatedUser?
        var refusal: APIError?
        /// The user whose connection slot this upgrade reserved, until the session takes it over
        /// (or the channel closes without one and it is released).
        var reservedFor: String?
    }

    public let responder: HTTPChannelHandler.Responder
    let services: ServerServices
    let paths: UpgradePaths
    let tls: NIOSSLContext?

    /// Where the WebSocket endpoints are (under a mount prefix, say).
    struct UpgradePaths: Sendable {
        var chat: String
        var echo: String

        init(prefix: String) {
            let base = prefix.hasSuffix("/") ? String(prefix.dropLast()) : prefix
            self.chat = base + HTTPAPI.Path.webSocket
            self.echo = base + HTTPAPI.Path.echo
        }
    }

    /// Streams of HTTP/2 connections (API and media; WebSockets stay on HTTP/1.1).
    let http2: HTTP2Channel

    init(responder: @escaping HTTPChannelHandler.Responder, services: ServerServices, paths: UpgradePaths, tls: NIOSSLContext?) {
        self.responder = responder
        self.services = services
        self.paths = paths
        self.tls = tls
        let limits = services.configuration.limits
        self.http2 = HTTP2Channel(
            responder: responder,
            configuration: .init(idleTimeout: Self.duration(limits.keepAliveTimeout), gracefulCloseTimeout: .seconds(5))
        )
    }

    private static func duration(_ amount: TimeAmount) -> Duration {
        .nanoseconds(amount.nanoseconds)
    }

    /// TLS settings for Circle's listener: ALPN offers `h2` and `http/1.1` (a client that offers
    /// neither gets HTTP/1.1).
    static func tlsContext(_ configuration: TLSConfiguration) throws -> NIOSSLContext {
        var configuration = configuration
        configuration.applicationProtocols = ["h2", "http/1.1"]
        return try NIOSSLContext(configuration: configuration)
    }

    public func setup(channel: any Channel, logger: Logger) -> EventLoopFuture<Value> {
        channel.eventLoop.makeCompletedFuture {
            let services = self.services
            switch services.admission.admit(address: channel.remoteAddress) {
            case .failure(let refused):
                services.metrics.limitHit(refused.reason.rawValue)
                channel.close(promise: nil)
                throw refused
            case .success(let ticket):
                // Released when the channel closes, or at the upgrade (``ServerServices/markWebSocket(_:)``).
                services.track(channel, admitted: ticket)
            }
            try Self.setOptions(channel, limits: services.configuration.limits)
            let sync = channel.pipeline.syncOperations
            guard let tls = self.tls else {
                return Value(connection: try self.configureHTTP1(channel: channel, logger: logger), channel: channel)
            }
            try sync.addHandler(NIOSSLServerHandler(context: tls))
            let alpn = NIOTypedApplicationProtocolNegotiationHandler<Negotiated> { result in
                switch result {
                case .negotiated("h2"):
                    return self.http2.setup(channel: channel, logger: logger).map { .http2($0) }
                default:
                    return channel.eventLoop.makeCompletedFuture {
                        .http1(try self.configureHTTP1(channel: channel, logger: logger))
                    }
                }
            }
            try sync.addHandler(alpn)
            let connection = alpn.protocolNegotiationResult.flatMap { negotiated -> EventLoopFuture<Connection> in
                switch negotiated {
                case .http1(let connection): return connection
                case .http2(let value): return channel.eventLoop.makeSucceededFuture(.http2(value))
                }
            }
            return Value(connection: connection, channel: channel)
        }
    }

    static func setOptions(_ channel: any Channel, limits: CircleServerConfiguration.Limits) throws {
        guard let options = channel.syncOptions else { return }
        try options.setOption(.socketOption(.tcp_nodelay), value: 1)
        // Small first reads: an idle chat connection then holds a 256-byte receive buffer
        // instead of NIO's default 2 KiB (benchmarks/idle.py), and it grows for bulk traffic.
        try options.setOption(.recvAllocator, value: AdaptiveRecvByteBufferAllocator(minimum: 64, initial: 256, maximum: 64 * 1024))
        try options.setOption(.writeBufferWaterMark, value: .init(low: limits.outboundQueueBytes / 2, high: limits.outboundQueueBytes))
        // A peer's FIN ends the connection (Hummingbird's server enables half-closure).
        try options.setOption(.allowRemoteHalfClosure, value: false)
    }

    /// After the upgrade: NIO keeps up to `maxMessagesPerRead` receive buffers per channel, and
    /// reading the HTTP request may have left a second one (and grown the next read's size).
    /// Shrinking the pool to one buffer and back drops the others, and a fresh adaptive
    /// allocator starts the WebSocket's reads small again: an idle connection then holds one
    /// small receive buffer (benchmarks/idle.py).
    static func trimReceiveBuffers(_ channel: any Channel) throws {
        guard let options = channel.syncOptions else { return }
        let perRead = try options.getOption(.maxMessagesPerRead)
        try options.setOption(.maxMessagesPerRead, value: 1)
        try options.setOption(.maxMessagesPerRead, value: perRead)
        try options.setOption(.recvAllocator, value: AdaptiveRecvByteBufferAllocator(minimum: 64, initial: 256, maximum: 64 * 1024))
    }

    /// The HTTP/1.1 pipeline with the WebSocket upgrade.
    func configureHTTP1(channel: any Channel, logger: Logger) throws -> EventLoopFuture<Connection> {
        let services = self.services
        let limits = services.configuration.limits
        let metrics = services.metrics
        let timeoutHandler = HTTPTimeoutHandler(
            timeouts: .init(
                requestHead: limits.requestHeadTimeout,
                bodyIdle: limits.requestBodyTimeout,
                keepAlive: limits.keepAliveTimeout,
                writeStall: limits.writeStallTimeout
            ),
            onTimeout: { metrics.limitHit($0.rawValue) }
        )
        let decision = NIOLoopBoundBox(UpgradeDecision(), eventLoop: channel.eventLoop)
        // A slot reserved for an upgrade that never became a session (the peer left, or NIO
        // failed the upgrade on a malformed request) goes back when the channel closes.
        channel.closeFuture.whenComplete { _ in
            if let user = decision.value.reservedFor {
                decision.value.reservedFor = nil
                services.releaseConnection(for: user)
            }
        }
        let loopBoundTimeout = NIOLoopBound(timeoutHandler, eventLoop: channel.eventLoop)
        let drain = InboundDrain()
        let loopBoundDrain = NIOLoopBound(drain, eventLoop: channel.eventLoop)
        let upgrader = WebSocketServerUpgrader<Connection>(
            maxFrameSize: limits.maxMessageBytes,
            shouldUpgrade: { channel, head in
                self.shouldUpgrade(channel: channel, head: head, decision: decision).map { headers in
                    // Accepted: from here the connection is no longer HTTP. NIO's upgrade
                    // handler next removes the HTTP decoder, which hands the bytes that came
                    // after the request (a client's first frame, pipelined bytes) to the
                    // handlers behind it as a ByteBuffer: nothing that reads HTTP parts may
                    // still be there (the recorder left at the first head). The upgrade
                    // handler buffers those bytes and passes them to the frame reader after
                    // the 101 (RFC 6455 §4.1).
                    if headers != nil {
                        channel.pipeline.syncOperations.removeHandler(loopBoundTimeout.value, promise: nil)
                        channel.pipeline.syncOperations.removeHandler(loopBoundDrain.value, promise: nil)
                    }
                    return headers
                }
            },
            upgradePipelineHandler: { channel, head in
                channel.eventLoop.makeCompletedFuture {
                    let sync = channel.pipeline.syncOperations
                    // A WebSocket is bounded per user (and by its own timeouts) from here on:
                    // marking it releases its admission ticket.
                    services.markWebSocket(channel)
                    try Self.trimReceiveBuffers(channel)
                    let endpoint: WebSocketSessionInstaller.Endpoint
                    if URI(head.uri).path == self.paths.echo {
                        endpoint = .echo
                    } else if let user = decision.value.user {
                        endpoint = .chat(user)
                        // The session releases the slot from here (or the installer, if it fails).
                        decision.value.reservedFor = nil
                    } else {
                        throw ChannelError.inappropriateOperationForState
                    }
                    try WebSocketSessionInstaller.install(
                        on: sync,
                        endpoint: endpoint,
                        extensionOffers: head.headers["Sec-WebSocket-Extensions"],
                        services: services
                    )
                    return Connection.upgraded
                }
            }
        )
        let secure = self.tls != nil
        var configuration = NIOUpgradableHTTPServerPipelineConfiguration<Connection>(
            upgradeConfiguration: .init(
                upgraders: [upgrader],
                notUpgradingCompletionHandler: { channel in
                    channel.eventLoop.makeCompletedFuture {
                        try channel.pipeline.syncOperations.addHandler(HTTP1ToHTTPServerCodec(secure: secure))
                        // Hummingbird's: on a mounting app's graceful shutdown an idle connection
                        // closes, a busy one after its answer (timeouts are HTTPTimeoutHandler's).
                        try channel.pipeline.syncOperations.addHandler(HTTPConnectionStateHandler(idleTimeout: nil, logger: logger))
                        let asyncChannel = try NIOAsyncChannel<HTTPRequestPart, HTTPResponsePart>(
                            wrappingChannelSynchronously: channel,
                            configuration: .init(isOutboundHalfClosureEnabled: true)
                        )
                        let refusal = decision.value.refusal
                        let upgradeRequest = try decision.value.upgradeHead.map { try HTTPRequest($0, secure: secure, splitCookie: false) }
                        decision.value = UpgradeDecision()
                        return Connection.http(asyncChannel, upgradeRequest: upgradeRequest, refusal: refusal, drain: loopBoundDrain)
                    }
                }
            )
        )
        // Requests are answered one at a time by the NIOAsyncChannel loop (``serve``), which
        // reads the next request only after the answer is written: pipelined requests wait.
        configuration.enablePipelining = false
        // A request the parser refuses gets NIO's 400; HTTPTimeoutHandler then closes.
        configuration.enableErrorHandling = true
        configuration.enableResponseHeaderValidation = false
        let sync = channel.pipeline.syncOperations
        try sync.addHandler(drain)
        let future = try sync.configureUpgradableHTTPServerPipeline(configuration: configuration)
        let upgradeHandler = try sync.context(handlerType: NIOTypedHTTPServerUpgradeHandler<Connection>.self).handler
        try sync.addHandler(timeoutHandler, position: .before(upgradeHandler))
        try sync.addHandler(UpgradeRequestRecorder(decision: decision), position: .before(upgradeHandler))
        return future
    }

    public func handle(value: Value, logger: Logger) async {
        do {
            switch try await value.connection.get() {
            case .upgraded:
                // The session owns the channel on its event loop from here.
                return
            case .http2(let value):
                await self.http2.handle(value: value, logger: logger)
            case .http(let asyncChannel, let upgradeRequest, let refusal, let drain):
                await self.serve(asyncChannel, upgradeRequest: upgradeRequest, refusal: refusal, drain: drain, logger: logger)
            }
        } catch {
            logger.debug("connection ended before its first request", metadata: ["error": "\(error)"])
            value.channel.close(promise: nil)
        }
    }

    // MARK: - The upgrade

    private func shouldUpgrade(
        channel: any Channel,
        head: HTTPRequestHead,
        decision: NIOLoopBoundBox<UpgradeDecision>
    ) -> EventLoopFuture<HTTPHeaders?> {
        let services = self.services
        let path = URI(head.uri).path
        guard path == self.paths.chat || (path == self.paths.echo && services.configuration.echoEndpoint) else {
            return channel.eventLoop.makeSucceededFuture(nil)
        }
        // The handshake is a GET without a body (RFC 6455 §4.1). One that announces a body would
        // keep the upgrade waiting for it after the HTTP timeouts have left the pipeline.
        if head.method != .GET || head.headers.contains(name: "Transfer-Encoding")
            || head.headers["Content-Length"].contains(where: { $0.trimmingCharacters(in: .whitespaces) != "0" })
        {
            decision.value.refusal = APIError(.badRequest, .badRequest, "a WebSocket upgrade is a GET request without a body")
            return channel.eventLoop.makeSucceededFuture(nil)
        }
        // RFC 6455 §4.2.1: `Connection` lists the token `upgrade`. NIO's upgrade handler does not
        // check it, but NIO's parser stops reading HTTP only after a request that has it:
        // without it, a request pipelined behind this one would be parsed and handed, as HTTP
        // parts, to the WebSocket's frame reader (found by the pipeline fuzz target).
        guard head.headers[canonicalForm: "connection"].contains(where: { $0.trimmingCharacters(in: .whitespaces).lowercased() == "upgrade" }) else {
            decision.value.refusal = APIError(.badRequest, .badRequest, "a WebSocket upgrade needs the header Connection: Upgrade")
            return channel.eventLoop.makeSucceededFuture(nil)
        }
        var headers = HTTPHeaders()
        if services.configuration.compression || path == self.paths.echo,
            let deflate = PerMessageDeflateNegotiation.respond(toOffers: head.headers["Sec-WebSocket-Extensions"])
        {
            headers.add(name: "Sec-WebSocket-Extensions", value: deflate.description)
        }
        if path == self.paths.echo {
            return channel.eventLoop.makeSucceededFuture(headers)
        }
        guard services.isAccepting else {
            decision.value.refusal = APIError(.serviceUnavailable, .unavailable, "the server is shutting down")
            return channel.eventLoop.makeSucceededFuture(nil)
        }
        let offered = head.headers["Sec-WebSocket-Protocol"].flatMap { $0.split(separator: ",") }.map {
            $0.trimmingCharacters(in: .whitespaces)
        }
        if offered.contains(circleSubprotocol) {
            headers.add(name: "Sec-WebSocket-Protocol", value: circleSubprotocol)
        } else if !offered.isEmpty {
            decision.value.refusal = APIError(.badRequest, .badRequest, "this server speaks the subprotocol \(circleSubprotocol) only")
            return channel.eventLoop.makeSucceededFuture(nil)
        }
        let address = channel.remoteAddress.logDescription
        let credentials = CredentialsInput(
            bearer: Self.token(from: head),
            cookieHeader: head.headers["Cookie"].joined(separator: "; "),
            origin: head.headers.first(name: "Origin"),
            host: head.headers.first(name: "Host"),
            changesState: false,
            csrfHeader: nil,
            isUpgrade: true,
            address: address
        )
        let responseHeaders = headers
        let verified = channel.eventLoop.makePromise(of: Result<AuthenticatedUser, APIError>.self)
        verified.completeWithTask {
            do {
                return .success(try await services.authenticate(credentials))
            } catch let error as APIError {
                return .failure(error)
            } catch {
                return .failure(APIError(.internalServerError, .internalError, "\(error)"))
            }
        }
        return verified.futureResult.map { result -> HTTPHeaders? in
            switch result {
            case .success(let user):
                // Gone while its token was checked: nothing to reserve (the channel's close,
                // which releases a reservation, has already happened).
                guard channel.isActive else { return nil }
                guard services.reserveConnection(for: user.name) else {
                    services.metrics.error("too_many_connections")
                    decision.value.refusal = APIError(
                        .tooManyRequests,
                        .rateLimited,
                        "\(user.name) already has \(services.configuration.limits.maxConnectionsPerUser) connections open"
                    )
                    return nil
                }
                decision.value.user = user
                decision.value.reservedFor = user.name
                return responseHeaders
            case .failure(let error):
                decision.value.refusal = error
                return nil
            }
        }
    }

    private static func token(from head: HTTPRequestHead) -> String? {
        bearerToken(authorization: head.headers.first(name: "Authorization"), uri: URI(head.uri))
    }
}

/// Remembers the first request's head when it asks for an upgrade (NIO's upgrade handler keeps
/// such a request from the HTTP handlers when it does not upgrade), then leaves the pipeline.
final class UpgradeRequestRecorder: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias InboundOut = HTTPServerRequestPart

    private let decision: NIOLoopBoundBox<CircleHTTPChannel.UpgradeDecision>

    init(decision: NIOLoopBoundBox<CircleHTTPChannel.UpgradeDecision>) {
        self.decision = decision
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard case .head(let head) = self.unwrapInboundIn(data) else {
            context.fireChannelRead(data)
            return
        }
        // Recorded before the upgrade handler sees it: it may decide at once, in this call.
        if head.headers.contains(name: "Upgrade") { self.decision.value.upgradeHead = head }
        context.fireChannelRead(data)
        context.pipeline.syncOperations.removeHandler(self, promise: nil)
    }
}
