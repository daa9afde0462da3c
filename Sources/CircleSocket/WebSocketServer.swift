import Logging
import NIOCore
import NIOHTTP1
import NIOPosix
import NIOSSL
import NIOWebSocket

/// Settings for ``WebSocketServer``. Every field has a default.
public struct WebSocketServerConfiguration: Sendable {
    /// Address to bind.
    public var host: String
    /// Port to bind; 0 picks a free one (see ``WebSocketServer/port``).
    public var port: Int
    /// TLS for `wss://`; `nil` serves plain `ws://`.
    public var tls: TLSConfiguration?
    /// Subprotocols the server speaks, most preferred first; the first one the client also offers is chosen.
    public var subprotocols: [String]
    /// Whether to accept a client's permessage-deflate offer.
    public var compression: Bool
    /// Largest inbound message; a larger one closes the connection with 1009.
    public var maxMessageSize: Int
    /// Time to wait for the client's close frame after sending one.
    public var closeTimeout: TimeAmount
    /// Inbound messages buffered per connection before reading pauses.
    public var inboundBufferLimit: Int

    public init(
        host: String = "127.0.0.1",
        port: Int = 0,
        tls: TLSConfiguration? = nil,
        subprotocols: [String] = [],
        compression: Bool = true,
        maxMessageSize: Int = WebSocketConfiguration.defaultMaxMessageSize,
        closeTimeout: TimeAmount = .seconds(5),
        inboundBufferLimit: Int = 64
    ) {
        self.host = host
        self.port = port
        self.tls = tls
        self.subprotocols = subprotocols
        self.compression = compression
        self.maxMessageSize = maxMessageSize
        self.closeTimeout = closeTimeout
        self.inboundBufferLimit = inboundBufferLimit
    }
}

/// What the server does with an upgrade request.
public enum WebSocketUpgradeDecision: Sendable {
    /// Upgrade the connection.
    case accept
    /// Answer with this HTTP status and body instead of upgrading.
    case refuse(HTTPResponseStatus, body: String)
}

/// A small WebSocket server on SwiftNIO: every accepted connection is handed to an async
/// handler as a ``WebSocket``. Used for tests, the conformance echo endpoint and benchmarks.
///
/// ```swift
/// let server = try await WebSocketServer.start { socket, _ in
///     for try await message in socket.messages { try await socket.send(message) }
/// }
/// print(server.port)
/// ```
public final class WebSocketServer: Sendable {
    public typealias Handler = @Sendable (WebSocket, HTTPRequestHead) async -> Void
    public typealias Decider = @Sendable (HTTPRequestHead) -> WebSocketUpgradeDecision

    private let channel: any Channel
    /// The bound port.
    public let port: Int

    private init(channel: any Channel) {
        self.channel = channel
        self.port = channel.localAddress?.port ?? 0
    }

    /// Binds and starts serving.
    ///
    /// - Parameters:
    ///   - decide: called for each upgrade request; refuse to answer with an HTTP status.
    ///   - handler: runs for each connection in its own task.
    public static func start(
        configuration: WebSocketServerConfiguration = .init(),
        eventLoopGroup: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton,
        logger: Logger = Logger(label: "circle.socket.server"),
        decide: @escaping Decider = { _ in .accept },
        handler: @escaping Handler
    ) async throws -> WebSocketServer {
        let sslContext = try configuration.tls.map { try NIOSSLContext(configuration: $0) }
        let channel = try await ServerBootstrap(group: eventLoopGroup)
            .serverChannelOption(.backlog, value: 1024)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelOption(.socketOption(.tcp_nodelay), value: 1)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    if let sslContext {
                        try channel.pipeline.syncOperations.addHandler(NIOSSLServerHandler(context: sslContext))
                    }
                    let upgrader = WebSocketServerUpgrader<Void>(
                        maxFrameSize: min(configuration.maxMessageSize, Int(UInt32.max)),
                        shouldUpgrade: { channel, head in
                            channel.eventLoop.makeSucceededFuture(Self.responseHeaders(for: head, configuration, decide))
                        },
                        upgradePipelineHandler: { channel, head in
                            channel.eventLoop.makeCompletedFuture {
                                try Self.startConnection(channel: channel, head: head, configuration, logger, handler)
                            }
                        }
                    )
                    try channel.pipeline.syncOperations.configureHTTPServerPipeline(
                        withServerUpgrade: (upgraders: [upgrader], completionHandler: { _ in }),
                        withErrorHandling: true
                    )
                    try channel.pipeline.syncOperations.addHandler(RefusalHandler(decide: decide))
                }
            }
            .bind(host: configuration.host, port: configuration.port)
            .get()
        return WebSocketServer(channel: channel)
    }

    /// Stops accepting connections. Open connections are left to their handlers.
    public func shutdown() async {
        try? await self.channel.close()
    }

    private static func responseHeaders(
        for head: HTTPRequestHead,
        _ configuration: WebSocketServerConfiguration,
        _ decide: Decider
    ) -> HTTPHeaders? {
        guard case .accept = decide(head) else { return nil }
        var headers = HTTPHeaders()
        if let chosen = self.subprotocol(for: head, configuration) {
            headers.add(name: "Sec-WebSocket-Protocol", value: chosen)
        }
        if let compression = self.compression(for: head, configuration) {
            headers.add(name: "Sec-WebSocket-Extensions", value: compression.description)
        }
        return headers
    }

    private static func subprotocol(for head: HTTPRequestHead, _ configuration: WebSocketServerConfiguration) -> String? {
        let offered = head.headers["Sec-WebSocket-Protocol"].flatMap { $0.split(separator: ",") }.map { $0.trimmingASCIISpaces() }
        return configuration.subprotocols.first { offered.contains($0) }
    }

    private static func compression(
        for head: HTTPRequestHead,
        _ configuration: WebSocketServerConfiguration
    ) -> PerMessageDeflateParameters? {
        guard configuration.compression else { return nil }
        return PerMessageDeflateNegotiation.respond(toOffers: head.headers["Sec-WebSocket-Extensions"])
    }

    private static func startConnection(
        channel: any Channel,
        head: HTTPRequestHead,
        _ configuration: WebSocketServerConfiguration,
        _ logger: Logger,
        _ handler: @escaping Handler
    ) throws {
        let compression = self.compression(for: head, configuration)
        let deflate = try compression.map {
            try PerMessageDeflate(parameters: $0, isClient: false, compressionLevel: 6, minimumCompressedSize: 64)
        }
        // The refusal handler sits behind the HTTP handlers NIO removed; raw frames must not reach it.
        let refusal = try channel.pipeline.syncOperations.handler(type: RefusalHandler.self)
        channel.pipeline.syncOperations.removeHandler(refusal, promise: nil)
        let closed = channel.eventLoop.makePromise(of: WebSocketCloseInfo.self)
        let channelHandler = WebSocketChannelHandler(
            state: WebSocketProtocolState(role: .server, maxMessageSize: configuration.maxMessageSize, deflate: deflate),
            closeTimeout: configuration.closeTimeout,
            closedPromise: closed,
            logger: logger
        )
        let messages = channelHandler.makeInboundSequence(
            eventLoop: channel.eventLoop,
            bufferLimit: configuration.inboundBufferLimit
        )
        try channel.pipeline.syncOperations.addHandler(channelHandler)
        let socket = WebSocket(
            channel: channel,
            handler: NIOLoopBound(channelHandler, eventLoop: channel.eventLoop),
            outbound: channelHandler.outbound,
            subprotocol: self.subprotocol(for: head, configuration),
            compression: compression,
            handshakeHeaders: head.headers,
            messages: messages,
            closed: closed.futureResult,
            fragmentSize: nil
        )
        Task { await handler(socket, head) }
    }
}

/// Answers requests that were not upgraded: a refused upgrade gets the decider's status and
/// body; anything else gets 426 (Upgrade Required) or 400.
private final class RefusalHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart

    private let decide: WebSocketServer.Decider
    private var head: HTTPRequestHead?

    init(decide: @escaping WebSocketServer.Decider) {
        self.decide = decide
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch self.unwrapInboundIn(data) {
        case .head(let head):
            self.head = head
        case .body:
            break
        case .end:
            guard let head = self.head else { return }
            let status: HTTPResponseStatus
            let body: String
            if case .refuse(let refusedStatus, let refusedBody) = self.decide(head) {
                status = refusedStatus
                body = refusedBody
            } else if head.headers["Upgrade"].contains(where: { $0.lowercased() == "websocket" }) {
                status = .badRequest
                body = "invalid WebSocket upgrade request"
            } else {
                status = .upgradeRequired
                body = "this endpoint speaks WebSocket only"
            }
            var headers = HTTPHeaders()
            headers.add(name: "Content-Type", value: "text/plain; charset=utf-8")
            headers.add(name: "Content-Length", value: "\(body.utf8.count)")
            headers.add(name: "Connection", value: "close")
            context.write(self.wrapOutboundOut(.head(HTTPResponseHead(version: .http1_1, status: status, headers: headers))), promise: nil)
            context.write(self.wrapOutboundOut(.body(.byteBuffer(context.channel.allocator.buffer(string: body)))), promise: nil)
            let loopBound = NIOLoopBound(context, eventLoop: context.eventLoop)
            context.writeAndFlush(self.wrapOutboundOut(.end(nil))).whenComplete { _ in
                loopBound.value.close(promise: nil)
            }
        }
    }
}
