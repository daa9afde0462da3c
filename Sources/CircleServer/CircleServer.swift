import CircleWire
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdCore
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import NIOSSL
import ServiceLifecycle

/// The Circle server: the `circle.v1` WebSocket at `/v1/ws`, the HTTP API beside it, durable
/// history in a ``CircleStore`` and fan-out to every subscriber.
///
/// Standalone (what `circle serve` runs), `run()` binds the configured address and serves until
/// graceful shutdown:
/// ```swift
/// let server = try await CircleServer(configuration: .init(tokenKeys: .hs256(secret: secret)))
/// try await ServiceGroup(services: [server], gracefulShutdownSignals: [.sigterm, .sigint], logger: logger).run()
/// ```
///
/// Mounted in an app's own Hummingbird server, the app adds Circle's routes to its router,
/// serves with Circle's child channel (for the WebSocket upgrade) and runs ``service`` in its
/// service group (docs/API.md, "Mounting Circle in your app"):
/// ```swift
/// let circle = try await CircleServer(configuration: configuration)
/// let router = Router(context: AppContext.self)
/// circle.addRoutes(to: router.group("chat"))
/// let app = Application(router: router, server: circle.httpServer(prefix: "/chat"), services: [circle.service])
/// ```
///
/// HTTP runs on Hummingbird's router and middleware; a WebSocket is Circle's own event-loop
/// session behind a custom upgrade (``CircleHTTPChannel``): measured on this project's machine,
/// hummingbird-websocket spent more server CPU per echoed message and more memory per idle
/// connection than this project's targets allowed (its echo is still measured beside Circle's:
/// docs/bench/echo.md).
public final class CircleServer: Service, Sendable {
    let services: ServerServices
    let media: MediaService
    private let eventLoopGroup: any EventLoopGroup
    private let sslContext: NIOSSLContext?
    private let ownsStore: Bool
    /// The lock on the data directory, held while this server serves from it; `nil` with a
    /// store several nodes share.
    private let dataLock: DataDirectoryLock?
    private let bound = Latch<Int>()
    private let stopRequested = Latch<Void>()
    private let stopped = Latch<Void>()
    private let setupLinkBox = NIOLockedValueBox<String?>(nil)

    /// Checks the configuration, prepares the data directory, opens (and migrates) the store and
    /// prepares the media folders. Nothing is bound and no work is started until ``run()`` (or
    /// ``service``'s `run()`).
    ///
    /// Unless the store is one several nodes share (``SharedCircleStore``, such as
    /// ``PostgresStore``), the server locks its data directory (`circle.lock` in it) until it
    /// stops: a second server on the same directory would serve the same SQLite store without
    /// hearing of the first's posts, so it is refused.
    ///
    /// - Parameter store: the store to use; by default an ``SQLiteStore`` in the data directory,
    ///   which the server then closes when it stops.
    /// - Throws: ``CircleServerConfiguration/InvalidSetting`` for a setting out of range (a port
    ///   above 65,535); ``DataDirectoryError`` when the data directory cannot be used or another
    ///   process serves it; the store's error when it cannot be opened.
    public init(
        configuration: CircleServerConfiguration,
        store: (any CircleStore)? = nil,
        eventLoopGroup: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton,
        logger: Logger = Logger(label: "circle.server")
    ) async throws {
        try configuration.validate()
        try DataDirectory.prepare(configuration.dataDirectory)
        let lock: DataDirectoryLock?
        if store is any SharedCircleStore {
            // Nodes share their data directory (photos, the token secret) by design.
            lock = nil
        } else {
            lock = try DataDirectoryLock.acquire(directory: configuration.dataDirectory, logger: logger)
        }
        let opened: any CircleStore
        if let store {
            opened = store
        } else {
            do {
                opened = try await Self.openDefaultStore(configuration: configuration, logger: logger)
            } catch {
                lock?.release()
                throw error
            }
        }
        do {
            try await opened.migrate()
            let authority = try await TokenAuthority(configuration.tokenKeys)
            self.sslContext = try configuration.tls.map { try CircleHTTPChannel.tlsContext($0) }
            self.services = ServerServices(configuration: configuration, store: opened, authority: authority, logger: logger)
            self.media = MediaService(services: self.services, files: MediaFiles(dataDirectory: configuration.dataDirectory))
            try self.media.files.prepare()
        } catch {
            // A store this call opened is this call's to close.
            if store == nil { try? await opened.close() }
            lock?.release()
            throw error
        }
        self.eventLoopGroup = eventLoopGroup
        self.ownsStore = store == nil
        self.dataLock = lock
    }

    /// Opens the store, binds and starts serving in a task of its own; ``shutdown()`` stops it.
    /// For tests and tools; an app runs the server in its `ServiceGroup` instead.
    public static func start(
        configuration: CircleServerConfiguration,
        store: (any CircleStore)? = nil,
        eventLoopGroup: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton,
        logger: Logger = Logger(label: "circle.server")
    ) async throws -> CircleServer {
        let server = try await CircleServer(configuration: configuration, store: store, eventLoopGroup: eventLoopGroup, logger: logger)
        let running = Task { try await server.run() }
        do {
            _ = try await server.listeningPort
        } catch {
            running.cancel()
            _ = await running.result
            throw error
        }
        return server
    }

    /// The SQLite store in the data directory (which ``DataDirectory/prepare(_:)`` has made).
    private static func openDefaultStore(configuration: CircleServerConfiguration, logger: Logger) async throws -> any CircleStore {
        let path = (configuration.dataDirectory as NSString).appendingPathComponent("circle.sqlite")
        return try await SQLiteStore.open(path: path, logger: logger)
    }

    // MARK: - Standalone

    /// The port ``run()`` bound, once it has (it throws if binding failed).
    public var listeningPort: Int {
        get async throws { try await self.bound.wait() }
    }

    /// Changes the settings the server reads at use time (`circle serve` on SIGHUP: the connection
    /// and presence limits); the new configuration is checked first and, when it is invalid,
    /// the running one is kept and ``CircleServerConfiguration/InvalidSetting`` thrown.
    public func reload(_ change: (inout CircleServerConfiguration) -> Void) throws {
        try self.services.reload(change)
    }

    /// The configuration as it is now (after any ``reload(_:)``).
    public var currentConfiguration: CircleServerConfiguration { self.services.configuration }

    /// The bound port (0 before ``run()`` has bound).
    public var port: Int { self.bound.value.flatMap { try? $0.get() } ?? 0 }

    /// Binds the configured address, serves HTTP and WebSockets, and runs the long-lived work
    /// (the commit loop, the upload sweeper), all in this task's task group, until graceful
    /// shutdown (SIGTERM/SIGINT in a `ServiceGroup`), cancellation or ``shutdown()``; then
    /// shuts down gracefully.
    public func run() async throws {
        let configuration = self.services.configuration
        let logger = self.services.logger
        let router = Router(context: BasicCircleRequestContext.self)
        self.addMiddleware(to: router)
        CircleRoutes(services: self.services, media: self.media).add(to: router.group(RouterPath(configuration.pathPrefix)))
        let childChannel = CircleHTTPChannel(
            responder: Self.responder(router.buildResponder(), logger: logger),
            services: self.services,
            paths: .init(prefix: configuration.pathPrefix),
            tls: self.sslContext
        )
        let listener: Listener<CircleHTTPChannel>
        do {
            listener = try await Listener.bind(
                host: configuration.host,
                port: configuration.port,
                childChannel: childChannel,
                eventLoopGroup: self.eventLoopGroup,
                onAcceptPause: { [services] in services.metrics.limitHit("accept_paused_out_of_descriptors") },
                logger: logger
            )
        } catch {
            self.bound.fail(error)
            await self.closeStore()
            self.stopped.open(())
            throw error
        }
        await self.startIdentity(port: listener.port)
        self.bound.open(listener.port)
        logger.info(
            "circle server listening",
            metadata: [
                "address": "\(configuration.tls == nil ? "ws" : "wss")://\(configuration.host):\(listener.port)/v1/ws",
                "data": "\(configuration.dataDirectory)",
            ]
        )
        await withTaskGroup(of: Void.self) { group in
            group.addTask { await listener.run() }
            group.addTask { await self.runBackgroundWork() }
            await self.waitForStop()
            await self.stop(closing: listener)
            group.cancelAll()
        }
        await self.closeStore()
        logger.info("stopped")
        self.stopped.open(())
    }

    /// Graceful shutdown from outside ``run()``: stop accepting, finish in-flight commits, close
    /// every WebSocket with 1001 (clients reconnect elsewhere or later), close the store. Returns
    /// once ``run()`` has finished.
    public func shutdown() async {
        self.stopRequested.open(())
        guard self.bound.value != nil else { return }
        _ = try? await self.stopped.wait()
    }

    /// Loads what sign-in needs and, on an empty store, makes and logs the setup link (with the
    /// public URL's origin when configured, else the listening address's).
    func startIdentity(port: Int) async {
        let configuration = self.services.configuration
        let scheme = configuration.tls == nil ? "http" : "https"
        let host = ["0.0.0.0", "::", ""].contains(configuration.host) ? "localhost" : configuration.host
        let origin = "\(scheme)://\(host.contains(":") ? "[\(host)]" : host):\(port)"
        do {
            if let link = try await self.services.identity.start(listeningAt: origin, pathPrefix: configuration.pathPrefix) {
                self.setupLinkBox.withLockedValue { $0 = link }
                self.services.logger.notice(
                    "no account yet: open the setup link to create the first admin (it works once, for an hour)",
                    metadata: ["setup": "\(link)"]
                )
            }
        } catch {
            self.services.logger.warning("could not read the accounts at start", metadata: ["error": "\(error)"])
        }
    }

    /// The first-run setup link (`…/#setup=TOKEN`) while the store has no account: opening it
    /// creates the first admin. `circle serve` prints it; `nil` once an account exists.
    public var setupLink: String? {
        self.services.identity.setupPending ? self.setupLinkBox.withLockedValue { $0 } : nil
    }

    /// Mints a token with this server's keys (development and tests).
    public func mintToken(user: String, ttl: Duration = .seconds(3600)) async throws -> String {
        try await self.services.authority.mint(user: user, ttl: ttl)
    }

    // MARK: - Mounted in an app

    /// Adds Circle's HTTP API, media routes and chat page to an app's router (or a group of it,
    /// for a prefix), with Circle's middleware (JSON errors, route metrics, CORS when
    /// configured) on them. The WebSocket upgrade needs ``httpServer(prefix:)`` as well.
    public func addRoutes<Context: CircleRequestContext>(to router: some RouterMethods<Context>) {
        let group = router.group()
        self.addMiddleware(to: group)
        CircleRoutes(services: self.services, media: self.media).add(to: group)
    }

    /// The HTTP server for an app that mounts Circle: HTTP/1.1 for the app's router, and on
    /// `PREFIX/v1/ws` (and `PREFIX/v1/echo` when enabled) the upgrade to Circle's WebSocket
    /// session. Connection admission and HTTP timeouts apply to the app's requests too.
    public func httpServer(prefix: String = "") -> HTTPServerBuilder {
        let services = self.services
        let tls = self.sslContext
        return HTTPServerBuilder { responder in
            CircleHTTPChannel(responder: responder, services: services, paths: .init(prefix: prefix), tls: tls)
        }
    }

    /// Circle's long-lived work for an app's `ServiceGroup` when Circle is mounted: the commit
    /// loop and the upload sweeper; on graceful shutdown it closes Circle's WebSockets with 1001
    /// and closes the store. (The standalone ``run()`` runs the same work.)
    public var service: some Service { MountedService(server: self) }

    // MARK: - Parts

    private func addMiddleware<Context: RequestContext>(to router: some RouterMethods<Context>) {
        if self.services.configuration.tracer != nil {
            // First, so its span covers the others; a WebSocket's token is not recorded.
            _ = router.add(middleware: TracingMiddleware<Context>(redactingQueryParameters: ["token", "access_token"]))
        }
        _ = router.add(middleware: LogRequestsMiddleware<Context>(.debug))
        _ = router.add(middleware: RouteMetricsMiddleware<Context>(metrics: self.services.metrics))
        _ = router.add(middleware: CurrentCORSMiddleware<Context>(services: self.services))
        _ = router.add(middleware: CircleErrorMiddleware<Context>())
    }

    /// Hummingbird's request handling for the standalone server: a context per request, the
    /// router's answer written out (errors are answers already, from ``CircleErrorMiddleware``).
    private static func responder(_ router: some HTTPResponder<BasicCircleRequestContext>, logger: Logger) -> HTTPChannelHandler.Responder {
        { request, writer, channel in
            let context = BasicCircleRequestContext(source: .init(channel: channel, logger: logger))
            let response: Response
            do {
                response = try await router.respond(to: request, context: context)
            } catch {
                response = APIError(.internalServerError, .internalError, "\(error)").response
            }
            try await writer.write(response: response.head, body: response.body)
        }
    }

    /// The commit loop, the upload sweeper, the hub's link (store reads for holes; with a
    /// shared store, the other nodes' signals and the poll) and the heap trimmer when
    /// configured, until cancelled.
    func runBackgroundWork() async {
        let media = self.media
        let services = self.services
        await withTaskGroup(of: Void.self) { group in
            // On the store's commit thread when it has one (SQLite): wake, commit, publish and
            // answer without a hop.
            group.addTask(executorPreference: services.store.commitExecutor) { await services.committer.run() }
            group.addTask { await media.runExpiry() }
            group.addTask { await services.identity.runCleanup() }
            group.addTask { await services.webhooks.run() }
            group.addTask { await services.push.run() }
            group.addTask { await services.presence.run() }
            group.addTask { await services.publishHooks.run() }
            group.addTask {
                await RetentionSweeper(
                    store: services.store,
                    media: MediaFiles(dataDirectory: services.configuration.dataDirectory),
                    interval: services.configuration.retentionInterval,
                    logger: services.logger,
                    removed: { services.metrics.retentionRemoved.increment(by: $0) }
                ).run()
            }
            group.addTask {
                // An upgraded database's older posts, indexed in the background; like the other
                // children, it returns only when cancelled (the first to return ends them all).
                await SearchBackfill.run(services.store, logger: services.logger) { progress in
                    services.metrics.searchBackfillIndexed.set(progress.indexed)
                    services.metrics.searchIndexReady.set(progress.done ? 1 : 0)
                }
                while !Task.isCancelled { try? await Task.sleep(for: .seconds(3600)) }
            }
            group.addTask {
                await services.hub.link.run(
                    hub: services.hub,
                    store: services.store,
                    pollInterval: services.configuration.nodePollInterval,
                    metrics: services.metrics,
                    logger: services.logger
                )
            }
            for keys in services.verifier.issuerKeys {
                group.addTask { await keys.run() }
            }
            if let interval = services.configuration.heapTrimInterval {
                group.addTask {
                    await HeapTrimmer(interval: interval, minimumThreshold: 1 << 20, trims: services.metrics.heapTrims, logger: services.logger).run()
                }
            }
            await group.next()
            group.cancelAll()
        }
    }

    /// Returns when graceful shutdown is requested, the task is cancelled or ``shutdown()`` is called.
    func waitForStop() async {
        let stop = self.stopRequested
        await withTaskCancellationHandler {
            await withGracefulShutdownHandler {
                _ = try? await stop.wait()
            } onGracefulShutdown: {
                stop.open(())
            }
        } onCancel: {
            stop.open(())
        }
    }

    /// The shutdown sequence: each step waits on an event (a deadline bounds the waits).
    func stop(closing listener: Listener<CircleHTTPChannel>?) async {
        self.services.logger.info("shutting down")
        self.services.stopAccepting()
        await listener?.close()
        await self.services.committer.finish()
        self.services.hub.shutDownAll()
        let deadline = ContinuousClock.now + .seconds(3)
        await self.services.wait(until: .noWebSockets, deadline: deadline)
        self.services.closeAllChannels()
        await self.services.wait(until: .noChannels, deadline: deadline + .seconds(1))
    }

    /// Closes the store when this server opened it, then releases the data directory's lock.
    func closeStore() async {
        if self.ownsStore { try? await self.services.store.close() }
        self.dataLock?.release()
    }
}

/// ``CircleServer/service``: Circle's work in an app's service group.
private struct MountedService: Service {
    let server: CircleServer

    func run() async throws {
        await self.server.startIdentity(port: self.server.services.configuration.port)
        await withTaskGroup(of: Void.self) { group in
            group.addTask { await self.server.runBackgroundWork() }
            await self.server.waitForStop()
            await self.server.stop(closing: nil)
            group.cancelAll()
        }
        await self.server.closeStore()
    }
}

/// A value set once that tasks wait for.
final class Latch<Value: Sendable>: Sendable {
    private struct State {
        var result: Result<Value, any Error>?
        var waiters: [CheckedContinuation<Value, any Error>] = []
    }

    private let state = NIOLockedValueBox(State())

    var value: Result<Value, any Error>? { self.state.withLockedValue { $0.result } }

    func open(_ value: Value) { self.complete(.success(value)) }

    func fail(_ error: any Error) { self.complete(.failure(error)) }

    private func complete(_ result: Result<Value, any Error>) {
        let waiters = self.state.withLockedValue { state -> [CheckedContinuation<Value, any Error>] in
            guard state.result == nil else { return [] }
            state.result = result
            defer { state.waiters = [] }
            return state.waiters
        }
        for waiter in waiters { waiter.resume(with: result) }
    }

    func wait() async throws -> Value {
        try await withCheckedThrowingContinuation { continuation in
            let result = self.state.withLockedValue { state -> Result<Value, any Error>? in
                if let result = state.result { return result }
                state.waiters.append(continuation)
                return nil
            }
            if let result { continuation.resume(with: result) }
        }
    }
}
