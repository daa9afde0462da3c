import CircleSocket
import CircleWire
import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
import NIOPosix
import NIOSSL
import NIOWebSocket
import ServiceLifecycle

/// The Circle server: the `circle.v1` WebSocket at `/v1/ws`, the HTTP API beside it, durable
/// history in a ``CircleStore`` and fan-out to every subscriber.
///
/// ```swift
/// let server = try await CircleServer.start(configuration: .init(tokenKeys: .hs256(secret: secret)))
/// print("listening on \(server.port)")
/// try await ServiceGroup(services: [server], gracefulShutdownSignals: [.sigterm, .sigint], logger: logger).run()
/// ```
///
/// The network layer is written on SwiftNIO directly rather than on Hummingbird: measured on
/// this project's machine, hummingbird-websocket spent 21 µs of server CPU per echoed message
/// and 27 KB per idle connection, against targets of 10 µs and 8 KB; a connection here is a
/// channel handler with no task of its own.
public final class CircleServer: Service, Sendable {
    private let services: ServerServices
    private let channel: any Channel
    /// The bound port.
    public let port: Int
    private let shutdownOnce = ShutdownLatch()
    /// Deletes expired uploads in the background until shutdown.
    private let uploadSweeper: Task<Void, Never>

    private init(services: ServerServices, channel: any Channel, router: APIRouter) {
        self.services = services
        self.channel = channel
        self.port = channel.localAddress?.port ?? 0
        let media = router.media
        self.uploadSweeper = Task { await media.runExpiry() }
    }

    /// Opens the store, binds and starts serving.
    ///
    /// - Parameter store: the store to use; by default an ``SQLiteStore`` in the data directory.
    public static func start(
        configuration: CircleServerConfiguration,
        store: (any CircleStore)? = nil,
        eventLoopGroup: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton,
        logger: Logger = Logger(label: "circle.server")
    ) async throws -> CircleServer {
        let opened: any CircleStore
        if let store {
            opened = store
        } else {
            opened = try await Self.openDefaultStore(configuration: configuration, logger: logger)
        }
        do {
            return try await Self.serve(configuration: configuration, store: opened, eventLoopGroup: eventLoopGroup, logger: logger)
        } catch {
            // A store this call opened is this call's to close (the port may be taken, say).
            if store == nil { try? await opened.close() }
            throw error
        }
    }

    private static func serve(
        configuration: CircleServerConfiguration,
        store opened: any CircleStore,
        eventLoopGroup: any EventLoopGroup,
        logger: Logger
    ) async throws -> CircleServer {
        try await opened.migrate()
        let authority = try await TokenAuthority(configuration.tokenKeys)
        let services = ServerServices(configuration: configuration, store: opened, authority: authority, logger: logger)
        let sslContext = try configuration.tls.map { try NIOSSLContext(configuration: $0) }
        let router = APIRouter(services: services)
        try router.media.files.prepare()
        let limits = configuration.limits
        let channel = try await ServerBootstrap(group: eventLoopGroup)
            // Out of file descriptors (EMFILE), accept() fails at once and would be retried at
            // once, spinning a core; this pauses accepting for a moment instead.
            .serverChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(
                        AcceptPauseHandler(pause: .milliseconds(250)) { services.metrics.limitHit("accept_paused_out_of_descriptors") }
                    )
                }
            }
            .serverChannelOption(.backlog, value: 4096)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelOption(.socketOption(.tcp_nodelay), value: 1)
            // Small first reads: an idle chat connection then holds a 256-byte receive buffer instead
            // of NIO's default 2 KiB (benchmarks/idle.py), and it grows for bulk traffic.
            .childChannelOption(.recvAllocator, value: AdaptiveRecvByteBufferAllocator(minimum: 64, initial: 256, maximum: 64 * 1024))
            .childChannelOption(.writeBufferWaterMark, value: .init(low: limits.outboundQueueBytes / 2, high: limits.outboundQueueBytes))
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    switch services.admission.admit(address: channel.remoteAddress) {
                    case .failure(let refused):
                        services.metrics.limitHit(refused.reason.rawValue)
                        channel.close(promise: nil)
                    case .success(let ticket):
                        let ticket = AdmissionTicketHolder(ticket, admission: services.admission)
                        channel.closeFuture.whenComplete { _ in ticket.release() }
                        try Self.configure(channel: channel, sslContext: sslContext, services: services, router: router, ticket: ticket)
                    }
                }
            }
            .bind(host: configuration.host, port: configuration.port)
            .get()
        let server = CircleServer(services: services, channel: channel, router: router)
        logger.info(
            "circle server listening",
            metadata: [
                "address": "\(configuration.tls == nil ? "ws" : "wss")://\(configuration.host):\(server.port)/v1/ws",
                "data": "\(configuration.dataDirectory)",
            ]
        )
        return server
    }

    private static func openDefaultStore(configuration: CircleServerConfiguration, logger: Logger) async throws -> any CircleStore {
        try FileManager.default.createDirectory(
            atPath: configuration.dataDirectory,
            withIntermediateDirectories: true,
            attributes: [.posixPermissions: 0o700]
        )
        let path = (configuration.dataDirectory as NSString).appendingPathComponent("circle.sqlite")
        return try await SQLiteStore.open(path: path, logger: logger)
    }

    private static func configure(
        channel: any Channel,
        sslContext: NIOSSLContext?,
        services: ServerServices,
        router: APIRouter,
        ticket: AdmissionTicketHolder
    ) throws {
        services.track(channel)
        let sync = channel.pipeline.syncOperations
        if let sslContext { try sync.addHandler(NIOSSLServerHandler(context: sslContext)) }
        let decision = UpgradeDecision()
        let httpHandler = HTTPChannelHandler(router: router, decision: decision)
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
        let loopBoundDecision = NIOLoopBound(decision, eventLoop: channel.eventLoop)
        let loopBoundHandlers = NIOLoopBound((httpHandler, timeoutHandler), eventLoop: channel.eventLoop)
        let configuration = services.configuration
        let upgrader = NIOWebSocketServerUpgrader(
            maxFrameSize: configuration.limits.maxMessageBytes,
            automaticErrorHandling: false,
            shouldUpgrade: { channel, head in
                Self.shouldUpgrade(channel: channel, head: head, services: services, decision: loopBoundDecision)
            },
            upgradePipelineHandler: { channel, head in
                channel.eventLoop.makeCompletedFuture {
                    let (httpHandler, timeoutHandler) = loopBoundHandlers.value
                    channel.pipeline.syncOperations.removeHandler(timeoutHandler, promise: nil)
                    // A WebSocket is bounded per user (and by its own timeouts) from here on.
                    ticket.release()
                    try Self.upgrade(channel: channel, head: head, services: services, decision: loopBoundDecision.value, httpHandler: httpHandler)
                }
            }
        )
        try sync.configureHTTPServerPipeline(
            withServerUpgrade: (upgraders: [upgrader], completionHandler: { _ in }),
            withErrorHandling: true
        )
        try sync.addHandler(timeoutHandler)
        try sync.addHandler(httpHandler)
    }

    private static func shouldUpgrade(
        channel: any Channel,
        head: HTTPRequestHead,
        services: ServerServices,
        decision: NIOLoopBound<UpgradeDecision>
    ) -> EventLoopFuture<HTTPHeaders?> {
        let request = APIRequest(head: head, body: nil)
        var headers = HTTPHeaders()
        if services.configuration.compression || request.path == "/v1/echo",
            let deflate = PerMessageDeflateNegotiation.respond(toOffers: head.headers["Sec-WebSocket-Extensions"])
        {
            headers.add(name: "Sec-WebSocket-Extensions", value: deflate.description)
        }
        switch request.path {
        case "/v1/echo" where services.configuration.echoEndpoint:
            return channel.eventLoop.makeSucceededFuture(headers)
        case "/v1/ws":
            break
        default:
            return channel.eventLoop.makeSucceededFuture(nil)
        }
        guard services.isAccepting else {
            decision.value.refusal = .error(.serviceUnavailable, .unavailable, "the server is shutting down")
            return channel.eventLoop.makeSucceededFuture(nil)
        }
        let offered = head.headers["Sec-WebSocket-Protocol"].flatMap { $0.split(separator: ",") }.map {
            $0.trimmingCharacters(in: .whitespaces)
        }
        if offered.contains(circleSubprotocol) {
            headers.add(name: "Sec-WebSocket-Protocol", value: circleSubprotocol)
        } else if !offered.isEmpty {
            decision.value.refusal = .error(.badRequest, .badRequest, "this server speaks the subprotocol \(circleSubprotocol) only")
            return channel.eventLoop.makeSucceededFuture(nil)
        }
        guard let token = request.token else {
            decision.value.refusal = .error(.unauthorized, .unauthorized, "send a token as \"Authorization: Bearer …\" or ?token=")
            services.metrics.error("unauthorized")
            return channel.eventLoop.makeSucceededFuture(nil)
        }
        let promise = channel.eventLoop.makePromise(of: HTTPHeaders?.self)
        let responseHeaders = headers
        Task {
            let result: Result<AuthenticatedUser, TokenError>
            do throws(TokenError) {
                result = .success(try await services.authority.verify(token))
            } catch {
                result = .failure(error)
            }
            promise.futureResult.eventLoop.execute {
                switch result {
                case .success(let user):
                    guard services.reserveConnection(for: user.name) else {
                        services.metrics.error("too_many_connections")
                        decision.value.refusal = .error(
                            .tooManyRequests,
                            .rateLimited,
                            "\(user.name) already has \(services.configuration.limits.maxConnectionsPerUser) connections open"
                        )
                        promise.succeed(nil)
                        return
                    }
                    decision.value.user = user
                    promise.succeed(responseHeaders)
                case .failure(let error):
                    services.metrics.error(error.code.rawValue)
                    services.logger.info(
                        "refused a token",
                        metadata: ["circle.code": "\(error.code.rawValue)", "circle.reason": "\(error.message)", "circle.address": "\(channel.remoteAddress.logDescription)"]
                    )
                    decision.value.refusal = .error(.unauthorized, error.code, error.message)
                    promise.succeed(nil)
                }
            }
        }
        return promise.futureResult
    }

    private static func upgrade(
        channel: any Channel,
        head: HTTPRequestHead,
        services: ServerServices,
        decision: UpgradeDecision,
        httpHandler: HTTPChannelHandler
    ) throws {
        let sync = channel.pipeline.syncOperations
        sync.removeHandler(httpHandler, promise: nil)
        let path = splitURI(head.uri).path
        let endpoint: WebSocketSessionInstaller.Endpoint
        if path == "/v1/echo" {
            endpoint = .echo
        } else if let user = decision.user {
            endpoint = .chat(user)
        } else {
            throw ChannelError.inappropriateOperationForState
        }
        try WebSocketSessionInstaller.install(
            on: sync,
            endpoint: endpoint,
            extensionOffers: head.headers["Sec-WebSocket-Extensions"],
            services: services
        )
    }

    /// Runs until graceful shutdown is requested (SIGTERM/SIGINT in a `ServiceGroup`), then shuts down.
    public func run() async throws {
        try? await gracefulShutdown()
        await self.shutdown()
    }

    /// Graceful shutdown: stop accepting, finish in-flight commits, close every WebSocket with
    /// 1001 (clients reconnect elsewhere or later), then close the store.
    public func shutdown() async {
        guard self.shutdownOnce.claim() else { return }
        self.services.logger.info("shutting down")
        self.services.stopAccepting()
        self.uploadSweeper.cancel()
        await self.uploadSweeper.value
        try? await self.channel.close()
        await self.services.committer.finish()
        self.services.hub.shutDownAll()
        let deadline = ContinuousClock.now + .seconds(3)
        while self.services.hub.connectionCount > 0 && ContinuousClock.now < deadline {
            try? await Task.sleep(for: .milliseconds(20))
        }
        self.services.closeAllChannels()
        while self.services.openChannelCount > 0 && ContinuousClock.now < deadline + .seconds(1) {
            try? await Task.sleep(for: .milliseconds(10))
        }
        try? await self.services.store.close()
        self.services.logger.info("stopped")
    }

    /// Mints a token with this server's keys (development and tests).
    public func mintToken(user: String, ttl: Duration = .seconds(3600)) async throws -> String {
        try await self.services.authority.mint(user: user, ttl: ttl)
    }
}

/// Lets exactly one caller through.
private final class ShutdownLatch: Sendable {
    private let claimed = NIOLockedValueBox(false)
    func claim() -> Bool {
        self.claimed.withLockedValue { claimed in
            defer { claimed = true }
            return !claimed
        }
    }
}
