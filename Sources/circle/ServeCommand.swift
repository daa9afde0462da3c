import ArgumentParser
import CircleDiscovery
import CircleServer
import Foundation
import Logging
import NIOCore
import NIOSSL
import ServiceLifecycle
import UnixSignals

struct ServeCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "serve",
        abstract: "Run the Circle server on its embedded SQLite store (or on PostgreSQL with --postgres).",
        discussion: """
            With no options it listens on 127.0.0.1:8080, keeps its data in ./circle-data and \
            generates a token secret there; the chat page is at http://127.0.0.1:8080/. The \
            options that say "Env:" can also be set in the environment: CIRCLE_HOST, CIRCLE_PORT, \
            CIRCLE_DATA, CIRCLE_JWT_SECRET, CIRCLE_JWT_PUBLIC_KEY, CIRCLE_JWT_PRIVATE_KEY, \
            CIRCLE_TLS_CERT, CIRCLE_TLS_KEY and CIRCLE_LOG_LEVEL; the others only on the command line.
            SIGINT/SIGTERM shut down gracefully: no new connections, in-flight posts committed, \
            WebSockets closed with 1001.

            With --postgres (or CIRCLE_POSTGRES_URL), circles, members, posts and upload records are \
            kept in PostgreSQL instead; photo bytes and the token secret stay in the data directory. \
            Any number of nodes may share one database behind a load balancer: give them the same \
            --data directory (a shared mount) so that they share photos and the token secret \
            (docs/SCALING.md).

            Without --postgres the server locks its data directory (circle.lock in it, holding its \
            PID) for as long as it runs: a second server on the same directory is refused with \
            exit status 6 and the PID and command line of the one that holds it. The kernel \
            drops the lock however the server ends (even SIGKILL), so a stale circle.lock never \
            blocks a restart. Nodes on PostgreSQL take no lock: they share their data directory \
            (photos, the token secret) by design.

            Every number is checked against its range (--port 0 to 65535, sizes and counts as \
            docs/API.md lists them); a value outside it is a usage error, never truncated.

            With --config FILE, every option can be set in a JSON file under its name without -- \
            ({"port": 9000, "dev": true}); the command line and the environment win over it; \
            SIGHUP re-reads it (docs/OPERATIONS.md, "Configuration file"; circle config check FILE).

            Exit status: 0 stopped by SIGINT/SIGTERM; 2 PostgreSQL cannot be reached; 5 cannot start: \
            the port is in use or may not be bound, the data directory or a key or certificate file \
            cannot be used, the --config file cannot be read; 6 another server serves the data \
            directory; 64 usage, a number out of range and a --config file with problems included.

            Examples:
              circle serve
              circle serve --dev --port 9000 --data /tmp/circle-demo
              circle serve --host 0.0.0.0 --tls-cert cert.pem --tls-key key.pem
            """
    )

    @Option(
        help: ArgumentHelp(
            "Read settings from this JSON file: keys are these options without --, e.g. {\"port\": 9000}; the command line and CIRCLE_* variables win over it. SIGHUP re-reads it (docs/OPERATIONS.md, \"Configuration file\").",
            valueName: "file"
        )
    )
    var config: String?

    @Option(help: "Address to bind (0.0.0.0 or :: for the network). Env: CIRCLE_HOST.")
    var host: String = ProcessInfo.processInfo.environment["CIRCLE_HOST"] ?? "127.0.0.1"

    @Option(help: "Port, 0 to 65535 (0 picks a free one). Default: 8080. Env: CIRCLE_PORT.")
    var port: Int?

    @OptionGroup var keys: KeyOptions

    @OptionGroup(title: "Connection limits") var connectionLimits: ConnectionLimitOptions

    @OptionGroup(title: "Identity providers (JWKS)") var issuers: IssuerOptions

    @OptionGroup(title: "Webhooks") var webhooks: WebhookOptions

    @OptionGroup(title: "Push notifications") var push: PushOptions

    @OptionGroup(title: "Tracing") var tracing: TracingOptions

    @Option(name: .long, help: ArgumentHelp("TLS certificate chain (PEM); serves wss:// and https://. Env: CIRCLE_TLS_CERT.", valueName: "file"))
    var tlsCert: String?

    @Option(name: .long, help: ArgumentHelp("TLS private key (PEM). Env: CIRCLE_TLS_KEY.", valueName: "file"))
    var tlsKey: String?

    /// The limits' defaults are the server's own (one place: ``CircleServerConfiguration/Limits``).
    static let defaults = CircleServerConfiguration.Limits()

    @Option(help: "Largest post text in bytes (too_large), 1 to 1 GiB.")
    var maxPostBytes: Int = Self.defaults.maxPostBytes

    @Option(help: "Largest media upload in bytes (HTTP 413 too_large), 1 to 1 TiB.")
    var maxMediaBytes: Int64 = Self.defaults.maxMediaBytes

    @Option(help: "Delete uploads left unfinished for this long, e.g. 24h.")
    var uploadExpiry: String = "24h"

    @Option(help: "Largest WebSocket message in bytes (close 1009), 1 to 1 GiB.")
    var maxMessageBytes: Int = Self.defaults.maxMessageBytes

    @Option(help: "Posts per second per connection (rate_limited), more than 0 and at most 1,000,000.")
    var postsPerSecond: Double = Self.defaults.postsPerSecond

    @Option(help: "Post burst per connection, 1 to 1,000,000.")
    var postBurst: Double = Self.defaults.postBurst

    @Option(help: "Outbound bytes queued per connection before it is closed as a slow consumer (1013), 1 to 1 GiB.")
    var outboundQueueBytes: Int = Self.defaults.outboundQueueBytes

    @Option(help: "Open WebSocket connections per user (HTTP 429 beyond), 1 to 1,000,000.")
    var maxConnectionsPerUser: Int = Self.defaults.maxConnectionsPerUser

    @Option(help: "Send joined/left events only in circles with at most this many connected members, 0 to 1,000,000.")
    var presenceLimit: Int = Self.defaults.presenceLimit

    @Option(help: "Close connections silent for this long (4002), e.g. 75s.")
    var idleTimeout: String = "75s"

    @Option(help: "Log level: trace, debug, info, notice, warning, error, critical. Env: CIRCLE_LOG_LEVEL.")
    var logLevel: String = ProcessInfo.processInfo.environment["CIRCLE_LOG_LEVEL"] ?? "info"

    @Flag(help: "Development mode: GET /v1/dev/token?user=NAME hands out tokens. Never in production.")
    var dev = false

    @Flag(help: "Serve /v1/echo, a bare WebSocket echo for conformance tests and benchmarks.")
    var echo = false

    @Flag(help: "Accept permessage-deflate on chat connections (costs memory per connection).")
    var compression = false

    @Option(help: "With permessage-deflate, send messages shorter than this many bytes uncompressed, 0 to 1 GiB.")
    var compressionMinBytes = 64

    @Option(
        name: .long,
        help: ArgumentHelp(
            "Let pages from this browser origin call the HTTP API (CORS), e.g. https://app.example.com; * for any. Env: CIRCLE_CORS_ORIGIN.",
            valueName: "origin"
        )
    )
    var corsOrigin: String?

    @Option(
        name: .long,
        help: ArgumentHelp(
            "Serve everything under this path, e.g. /chat (the page at /chat/, the WebSocket at /chat/v1/ws), for a reverse proxy that keeps the path.",
            valueName: "path"
        )
    )
    var pathPrefix: String?

    @Option(
        name: .long,
        help: ArgumentHelp(
            "The address people open the page at, e.g. https://chat.example.com: setup and invite links, the session cookie's Secure flag, origin checks; passkeys need it (its host is their RP ID). Env: CIRCLE_PUBLIC_URL.",
            valueName: "url"
        )
    )
    var publicURL: String?

    /// `--public-url`, else `CIRCLE_PUBLIC_URL`.
    var effectivePublicURL: String? { self.publicURL ?? ProcessInfo.processInfo.environment["CIRCLE_PUBLIC_URL"] }

    @Option(
        name: .long,
        help: ArgumentHelp(
            "Keep the data in PostgreSQL: postgres://USER:PASSWORD@HOST:PORT/DATABASE[?sslmode=disable|prefer|require|verify-full]. Env: CIRCLE_POSTGRES_URL.",
            valueName: "url"
        )
    )
    var postgres: String?

    @Option(help: "With --postgres: how often to ask the database which circles advanced through other nodes, a net under their signals, e.g. 1s or 500ms.")
    var pollInterval: String = "1s"

    @Option(help: "How often to check whether memory freed after a burst can go back to the kernel (malloc_trim), e.g. 1s; off never trims.")
    var heapTrimInterval: String = "1s"

    @Option(help: "How often circles with a retention policy lose the entries that are due, e.g. 1h or 10m (at least 1s).")
    var retentionInterval: String = "1h"

    @Option(help: "Event-loop threads that serve connections, 1 to 1024. Default: one per CPU this process may run on (its CPU affinity and cgroup limit).")
    var eventLoops: Int?

    @Flag(name: .shortAndLong, help: "When the server cannot start, print the technical details too.")
    var verbose = false

    @Option(
        defaultAsFlag: "",
        help: ArgumentHelp("Announce the server on the local network (DNS-SD, _circle._tcp) as NAME, by default \"Circle on HOSTNAME\"; needs --host 0.0.0.0 or ::.", valueName: "name")
    )
    var announce: String?

    /// The port to bind: `--port`, else `CIRCLE_PORT`, else 8080 (both checked in ``validate()``).
    var listenPort: Int {
        self.port ?? ProcessInfo.processInfo.environment["CIRCLE_PORT"].flatMap { Int($0) } ?? 8080
    }

    /// The numbers, each against its range (docs/API.md, "Flags, environment variables, defaults"),
    /// and `--announce`.
    func validate() throws {
        typealias Allowed = CircleServerConfiguration.Allowed
        if let url = self.effectivePublicURL, !IdentityConfiguration.isValidPublicURL(url) {
            throw ValidationError("--public-url (or CIRCLE_PUBLIC_URL) is an origin such as https://chat.example.com or http://localhost:8080, without a path; got \(url)")
        }
        if let port = self.port {
            try OptionRanges.check("--port", port, Allowed.port, note: " (0 picks a free port)")
        } else if let text = ProcessInfo.processInfo.environment["CIRCLE_PORT"] {
            guard let port = Int(text) else {
                throw ValidationError("CIRCLE_PORT must be a port number from 0 to 65,535, not \"\(text)\"")
            }
            try OptionRanges.check("CIRCLE_PORT", port, Allowed.port, note: " (0 picks a free port)")
        }
        try OptionRanges.check("--max-post-bytes", self.maxPostBytes, Allowed.maxPostBytes)
        try OptionRanges.check("--max-media-bytes", self.maxMediaBytes, Allowed.maxMediaBytes)
        try OptionRanges.check("--max-message-bytes", self.maxMessageBytes, Allowed.maxMessageBytes)
        try OptionRanges.checkPositive("--posts-per-second", self.postsPerSecond, atMost: Allowed.maxPostsPerSecond)
        try OptionRanges.check("--post-burst", self.postBurst, Allowed.postBurst)
        try OptionRanges.check("--outbound-queue-bytes", self.outboundQueueBytes, Allowed.outboundQueueBytes)
        try OptionRanges.check("--max-connections-per-user", self.maxConnectionsPerUser, Allowed.maxConnectionsPerUser)
        try OptionRanges.check("--presence-limit", self.presenceLimit, Allowed.presenceLimit)
        try OptionRanges.check("--compression-min-bytes", self.compressionMinBytes, Allowed.compressionMinimumBytes)
        if let loops = self.eventLoops {
            try OptionRanges.check("--event-loops", loops, 1...1024)
        }
        try self.validateAnnounce()
    }

    func run() async throws {
        do {
            try await self.serve()
        } catch let error as ValidationError {
            throw error
        } catch let error as CLIFailure {
            exitWithFailure("serve", error, verbose: self.verbose)
        } catch let error as DataDirectoryError {
            exitWithFailure("serve", CLIFailure.dataDirectory(error), verbose: self.verbose)
        } catch {
            // A data directory, key or certificate that cannot be used.
            exitWithFailure(
                "serve",
                CLIFailure(.local, "the server could not start: \(error.localizedDescription)", detail: String(reflecting: error)),
                verbose: self.verbose
            )
        }
    }

    /// The values `serve` derives from its options, each checked, before anything is touched;
    /// `circle config check` runs the same checks (``ServeSettings``).
    struct Resolved {
        var level: Logger.Level
        var limits: CircleServerConfiguration.Limits
        var pollInterval: Duration
        var heapTrimInterval: Duration?
        var retentionInterval: Duration
    }

    func resolve() throws -> Resolved {
        guard let level = Logger.Level(rawValue: self.logLevel.lowercased()) else {
            throw ValidationError("--log-level must be one of trace, debug, info, notice, warning, error, critical")
        }
        guard let idle = parseDuration(self.idleTimeout), idle > .zero else {
            throw ValidationError("--idle-timeout takes a duration of at most 100 years, such as 75s or 5m")
        }
        guard let expiry = parseDuration(self.uploadExpiry), expiry > .zero else {
            throw ValidationError("--upload-expiry takes a duration of at most 100 years, such as 24h or 7d")
        }
        guard let pollInterval = parseDuration(self.pollInterval), pollInterval >= .milliseconds(10) else {
            throw ValidationError("--poll-interval must be a duration of at least 10ms, such as 1s or 500ms")
        }
        let heapTrimInterval: Duration?
        if self.heapTrimInterval == "off" {
            heapTrimInterval = nil
        } else if let interval = parseDuration(self.heapTrimInterval), interval >= .milliseconds(100) {
            heapTrimInterval = interval
        } else {
            throw ValidationError("--heap-trim-interval must be off or a duration of at least 100ms, such as 1s")
        }
        guard let retentionInterval = parseDuration(self.retentionInterval), retentionInterval >= .seconds(1) else {
            throw ValidationError("--retention-interval must be a duration of at least 1s, such as 1h or 10m, not \"\(self.retentionInterval)\"")
        }
        let environment = ProcessInfo.processInfo.environment
        if ((self.tlsCert ?? environment["CIRCLE_TLS_CERT"]) == nil) != ((self.tlsKey ?? environment["CIRCLE_TLS_KEY"]) == nil) {
            throw ValidationError("--tls-cert and --tls-key go together")
        }
        var limits = CircleServerConfiguration.Limits(
            maxPostBytes: self.maxPostBytes,
            maxMessageBytes: self.maxMessageBytes,
            postsPerSecond: self.postsPerSecond,
            postBurst: self.postBurst,
            outboundQueueBytes: self.outboundQueueBytes,
            maxConnectionsPerUser: self.maxConnectionsPerUser,
            idleTimeout: TimeAmount(idle),
            presenceLimit: self.presenceLimit,
            maxMediaBytes: self.maxMediaBytes,
            uploadExpiry: TimeAmount(expiry)
        )
        try self.connectionLimits.apply(to: &limits)
        // The groups' own checks, on scratch values (serve applies them to its configuration).
        var scratch = CircleServerConfiguration(tokenKeys: .hs256(secret: String(repeating: "x", count: TokenAuthority.minimumSecretLength)))
        try self.issuers.apply(to: &scratch)
        try self.webhooks.apply(to: &scratch.webhooks)
        try self.push.apply(to: &scratch.push)
        return Resolved(level: level, limits: limits, pollInterval: pollInterval, heapTrimInterval: heapTrimInterval, retentionInterval: retentionInterval)
    }

    private func serve() async throws {
        let resolved = try self.resolve()
        let level = resolved.level
        let pollInterval = resolved.pollInterval
        let heapTrimInterval = resolved.heapTrimInterval
        let retentionInterval = resolved.retentionInterval
        // Before anything uses NIO's singleton event-loop group (the server, the stores): it is
        // made once, with the count suggested at its first use. NIO's own variable
        // (NIO_SINGLETON_GROUP_LOOP_COUNT) is still honoured when --event-loops is not given.
        if let loops = self.eventLoops ?? (ProcessInfo.processInfo.environment["NIO_SINGLETON_GROUP_LOOP_COUNT"] == nil ? usableCoreCount() : nil) {
            NIOSingletons.groupLoopCountSuggestion = loops
        }
        ServerLogHandler.level.withLockedValue { $0 = level }
        let tracingOn = self.tracing.otlpEndpoint != nil
        let logger = Logger(label: "circle.server") { label in
            var handler = ServerLogHandler(label: label)
            if tracingOn { handler.metadataProvider = TracingOptions.logMetadata }
            return handler
        }
        var tls: TLSConfiguration?
        let environment = ProcessInfo.processInfo.environment
        switch (self.tlsCert ?? environment["CIRCLE_TLS_CERT"], self.tlsKey ?? environment["CIRCLE_TLS_KEY"]) {
        case (let cert?, let key?):
            tls = TLSConfiguration.makeServerConfiguration(
                certificateChain: try NIOSSLCertificate.fromPEMFile(cert).map { .certificate($0) },
                privateKey: .privateKey(try NIOSSLPrivateKey(file: key, format: .pem))
            )
        case (nil, nil):
            tls = nil
        default:
            throw ValidationError("--tls-cert and --tls-key go together")
        }
        let limits = resolved.limits
        // Before the token secret is written there: a data directory that cannot be used is
        // one sentence that names it.
        try DataDirectory.prepare(self.keys.data)
        raiseOpenFileLimit()
        var configuration = CircleServerConfiguration(
            host: self.host,
            port: self.listenPort,
            dataDirectory: self.keys.data,
            tokenKeys: try self.keys.tokenKeys(createSecret: true),
            tls: tls,
            limits: limits,
            developmentTokens: self.dev,
            echoEndpoint: self.echo,
            compression: self.compression,
            compressionMinimumBytes: self.compressionMinBytes,
            corsOrigin: self.corsOrigin ?? ProcessInfo.processInfo.environment["CIRCLE_CORS_ORIGIN"],
            nodePollInterval: pollInterval,
            heapTrimInterval: heapTrimInterval,
            retentionInterval: retentionInterval,
            identity: IdentityConfiguration(publicURL: self.effectivePublicURL)
        )
        configuration.pathPrefix = self.pathPrefix ?? ""
        let tracing = try self.tracing.bootstrap(logger: logger)
        configuration.tracer = tracing?.tracer
        try self.issuers.apply(to: &configuration)
        try self.webhooks.apply(to: &configuration.webhooks)
        try self.push.apply(to: &configuration.push)
        guard let postgresURL = self.postgres ?? ProcessInfo.processInfo.environment["CIRCLE_POSTGRES_URL"] else {
            try await self.serve(configuration: configuration, store: nil, logger: logger, exporter: tracing?.service)
            return
        }
        let store: PostgresStore
        do {
            store = try PostgresStore(url: postgresURL, logger: logger)
        } catch let error as PostgresStore.ConfigurationError {
            throw ValidationError("--postgres: \(error.message)")
        }
        // The store's connection pool runs beside the server, in this task's group.
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { await store.run() }
            do {
                try await store.checkConnection()
            } catch {
                exitWithFailure(
                    "serve",
                    CLIFailure(.unreachable, "PostgreSQL at \(store.configuration.redacted) cannot be used: \(error)", detail: String(reflecting: error)),
                    verbose: self.verbose
                )
            }
            try await self.serve(configuration: configuration, store: store, logger: logger, exporter: tracing?.service)
            group.cancelAll()
        }
    }

    /// Runs the server; `exporter` (the spans' exporter, when tracing is on) starts first and
    /// stops last, so the spans of the shutdown are sent.
    private func serve(configuration: CircleServerConfiguration, store: PostgresStore?, logger: Logger, exporter: (any Service)?) async throws {
        let tls = configuration.tls
        let server: CircleServer
        do {
            server = try await CircleServer(configuration: configuration, store: store, logger: logger)
        } catch let error as DataDirectoryError {
            exitWithFailure("serve", CLIFailure.dataDirectory(error), verbose: self.verbose)
        } catch let error as CircleServerConfiguration.InvalidSetting {
            exitWithFailure("serve", CLIFailure(.usage, "\(error)"), verbose: self.verbose)
        } catch {
            let hint = store.map { "check PostgreSQL at \($0.configuration.redacted)" } ?? "check that \(self.keys.data) is a directory you may write"
            exitWithFailure(
                "serve",
                CLIFailure(.local, "the server could not start: \(error) — \(hint)", detail: String(reflecting: error)),
                verbose: self.verbose
            )
        }
        let secure = tls != nil
        let announcerLogger = logger
        let announced = AnnounceWhenListening(server: server) { port in
            self.printBanner(port: port, tls: secure, setupLink: server.setupLink)
            return try self.makeAnnouncer(port: port, tls: secure, logger: announcerLogger)
        }
        var services: [ServiceGroupConfiguration.ServiceConfiguration] = exporter.map { [.init(service: $0)] } ?? []
        services.append(.init(service: server))
        if let path = self.config {
            // A reload that fails is logged and changes nothing; the server goes on serving.
            let reloader = ConfigurationReloader(
                path: path,
                commandLine: Array(CommandLine.arguments.drop { $0 != "serve" }.dropFirst()),
                server: server,
                logger: logger,
                signals: await UnixSignalsSequence(trapping: .sighup)
            )
            services.append(.init(service: reloader, successTerminationBehavior: .ignore, failureTerminationBehavior: .ignore))
        }
        let group = ServiceGroup(
            configuration: .init(
                services: services + [
                    // Without a usable network the server goes on serving; the announcer has logged why.
                    .init(service: announced, successTerminationBehavior: .ignore, failureTerminationBehavior: .ignore),
                ],
                gracefulShutdownSignals: [.sigterm, .sigint],
                logger: logger
            )
        )
        do {
            try await group.run()
        } catch let error as IOError {
            exitWithFailure("serve", CLIFailure.listenFailure(error, host: self.host, port: self.listenPort), verbose: self.verbose)
        }
    }

    private func printBanner(port: Int, tls: Bool, setupLink: String?) {
        let scheme = tls ? "wss" : "ws"
        let httpScheme = tls ? "https" : "http"
        let shownHost = self.host.contains(":") ? "[\(self.host)]" : self.host
        let browseHost = ["0.0.0.0", "::"].contains(self.host) ? "127.0.0.1" : shownHost
        let circle = Self.invocation
        let dataArgument = self.keys.data == "./circle-data" ? "" : " --data \(self.keys.data)"
        Console.err(
            """
            Circle \(CircleVersion.current) is running.
              chat page  \(httpScheme)://\(browseHost):\(port)/\(self.dev ? "   (--dev: sign in with just a name)" : "")
              WebSocket  \(scheme)://\(shownHost):\(port)/v1/ws   (subprotocol circle.v1)
              HTTP API   \(httpScheme)://\(shownHost):\(port)/v1/circles   health: /healthz   metrics: /metrics
              data       \(self.keys.data)
              dev mode   \(self.dev ? "on: GET /v1/dev/token?user=NAME hands out tokens — never in production" : "off (--dev lets the chat page sign in with just a name)")
              a token    \(circle) token --user alice\(dataArgument)
              a chat     \(circle) chat general --user alice\(dataArgument)   (after: \(circle) circle create general --user alice\(dataArgument))
            Press Ctrl-C to stop.

            """
        )
        if let setupLink {
            // Whatever the log level: without it no one can sign in on a new server.
            Console.err(
                """
                No account exists yet. Open this link to create the first admin (it works once, for an hour):
                  \(setupLink)

                """
            )
        }
    }

    /// How to run `circle` as this process was run: `swift run circle` from a checkout's
    /// `.build`, else the path or name it was started with.
    static var invocation: String {
        let path = ProcessInfo.processInfo.arguments.first ?? "circle"
        if path.contains("/.build/") { return "swift run circle" }
        return path.contains("/") ? path : "circle"
    }
}

/// Once the server has bound: the banner, then the LAN announcer (if any) until shutdown.
struct AnnounceWhenListening: Service {
    let server: CircleServer
    let start: @Sendable (Int) throws -> ServiceAnnouncer?

    func run() async throws {
        guard let port = try? await self.server.listeningPort else { return }
        guard let announcer = try self.start(port) else { return }
        try await announcer.run()
    }
}
