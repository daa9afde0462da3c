import CCircleCPU
import NIOCore
import Tracing
import NIOSSL

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

#if os(Linux)
private let openFilesResource = __rlimit_resource_t(RLIMIT_NOFILE.rawValue)
#else
private let openFilesResource = RLIMIT_NOFILE
#endif

/// The process's soft limit on open files (1,024 when it cannot be read or is unlimited).
func openFileLimit() -> Int {
    var limit = rlimit()
    guard getrlimit(openFilesResource, &limit) == 0, limit.rlim_cur < rlim_t(Int32.max) else { return 1024 }
    return Int(limit.rlim_cur)
}

/// Raises this process's soft open-file limit to the hard limit, as servers do: every
/// connection costs a descriptor, and the usual soft limit (1,024) is far below what the
/// machine allows. `circle serve` calls it at start; an app that mounts the server decides for
/// itself. Returns the soft limit in force afterwards.
@discardableResult
public func raiseOpenFileLimit() -> Int {
    var limit = rlimit()
    if getrlimit(openFilesResource, &limit) == 0, limit.rlim_cur < limit.rlim_max {
        limit.rlim_cur = limit.rlim_max
        _ = setrlimit(openFilesResource, &limit)
    }
    return openFileLimit()
}

/// The CPUs this process may run on: NIO's `System.coreCount` (which follows a cgroup's CPU
/// quota and cpuset) further bounded by the process's CPU affinity (`taskset`, systemd's
/// `CPUAffinity=`, `numactl`), which `System.coreCount` does not read.
///
/// NIO sizes its singleton event-loop group by `System.coreCount`. A server pinned to one CPU of
/// two then runs two event loops that take turns on that CPU, with a thread switch between
/// their turns; `circle serve` starts one loop per CPU it may use instead (`--event-loops`).
public func usableCoreCount() -> Int {
    let cores = System.coreCount
    let allowed = Int(circle_cpu_affinity_count())
    return allowed > 0 ? min(cores, allowed) : cores
}

/// Everything `circle serve` can be told. Every field has a default that works on a laptop.
public struct CircleServerConfiguration: Sendable {
    /// Address to bind (`0.0.0.0` or `::` to serve the network).
    public var host: String
    /// Port to bind; 0 picks a free one.
    public var port: Int
    /// Where the SQLite file (and later media) live.
    public var dataDirectory: String
    /// Keys for access tokens.
    public var tokenKeys: TokenKeys
    /// Identity providers whose tokens are accepted too, each with its JWKS (docs/API.md,
    /// "Tokens from your identity provider").
    public var tokenIssuers: [TokenIssuer]
    /// How the issuers' JWKS documents are fetched and refreshed.
    public var jwks: JWKSSettings
    /// Lets outbound fetches of configured URLs (JWKS) reach private, loopback, link-local and
    /// unspecified addresses; off, only public addresses are used (``OutboundAddressPolicy``).
    public var allowPrivateOutbound: Bool
    /// How webhook deliveries are sent (docs/API.md, "Webhooks").
    public var webhooks: WebhookSettings
    /// How Web Push notifications are sent (docs/OPERATIONS.md, "Push notifications"); off
    /// until ``PushSettings/contact`` is set.
    public var push: PushSettings = .init()
    /// TLS certificate chain and key; `nil` serves plain HTTP and `ws://`.
    public var tls: TLSConfiguration?
    /// Limits that keep one client from hurting the others.
    public var limits: Limits
    /// Development mode: `GET /v1/dev/token?user=NAME` hands out tokens (never enable in production).
    public var developmentTokens: Bool
    /// Serve `/v1/echo`, a plain WebSocket echo used by the conformance suite and benchmarks.
    public var echoEndpoint: Bool
    /// Accept permessage-deflate on `circle.v1` connections. Off by default: each compressed
    /// connection holds zlib state of a few hundred KiB, against the idle-memory budget.
    public var compression: Bool
    /// Messages shorter than this many bytes are sent uncompressed on a compressed connection
    /// (RFC 7692 allows it; for tiny messages deflate costs more CPU than it saves bytes).
    public var compressionMinimumBytes: Int
    /// A browser origin on another site allowed to call the HTTP API (CORS), such as
    /// `https://app.example.com`; `*` allows any. `nil` (the default) sends no CORS headers, so
    /// browsers keep other sites' pages from reading the API.
    public var corsOrigin: String?
    /// With a store several nodes share (``SharedCircleStore``): how often the node asks the
    /// store which of its subscribed circles advanced and which members were removed, making
    /// good any signal from another node that was lost. The longest a post stored through
    /// another node can take to reach this node's subscribers when its signal is lost.
    public var nodePollInterval: Duration
    /// How often the server checks whether the C allocator (glibc's malloc) holds memory freed
    /// after a burst, and returns its free pages to the kernel (`malloc_trim`) when the resident
    /// size has settled, has grown since the last trim by 1 MiB or 1/32 of itself, and at least
    /// that much is free (`HeapTrimState`). `nil` (the default) never trims: the heap is the whole process's, so an app that
    /// mounts Circle decides; `circle serve` sets one second. No effect where the allocator is
    /// not glibc.
    public var heapTrimInterval: Duration?
    /// How often circles with a retention policy lose their entries that are due
    /// (``RetentionSweeper``; docs/OPERATIONS.md, "Retention"); the first sweep runs within a
    /// minute of the start.
    public var retentionInterval: Duration
    /// Accounts, sessions, sign-in: the public URL, session lifetimes, password rules.
    public var identity: IdentityConfiguration
    /// The path under which the standalone server (``CircleServer/run()``) answers everything —
    /// the page, the API, the WebSocket — such as `/chat` (then `/chat/`, `/chat/v1/ws`, …):
    /// for a reverse proxy that forwards a path without stripping it. Empty (the default) for
    /// the root. Segments of letters, digits, `.`, `_`, `~`, `-`; no trailing `/`. An app that
    /// mounts Circle in its own router chooses the prefix there instead (docs/API.md, "Mounting
    /// Circle in your app").
    public var pathPrefix: String = ""
    /// Where the server's spans go (docs/OPERATIONS.md, "Tracing"): each post's way from its
    /// arrival through its commit to its fan-out, and each HTTP request (Hummingbird's
    /// `TracingMiddleware`, which reads the process's `InstrumentationSystem`: bootstrap it with
    /// the same tracer). `nil` (the default): no spans are made. `circle serve --otlp-endpoint`
    /// sets it to swift-otel's tracer, exporting over OTLP/HTTP.
    public var tracer: (any Tracer)?

    public struct Limits: Sendable {
        /// Largest post text, in UTF-8 bytes (`too_large`).
        public var maxPostBytes: Int
        /// Largest inbound WebSocket message (close 1009).
        public var maxMessageBytes: Int
        /// Posts per second per connection (token bucket refill rate; `rate_limited`).
        public var postsPerSecond: Double
        /// Burst size of the post token bucket.
        public var postBurst: Double
        /// Outbound bytes queued for one connection before it counts as a slow consumer (close 1013).
        public var outboundQueueBytes: Int
        /// Open WebSocket connections per user (HTTP 429 at upgrade).
        public var maxConnectionsPerUser: Int
        /// A connection that sends nothing (not even a ping) for this long is closed (4002).
        public var idleTimeout: TimeAmount
        /// Circles one connection may join at once.
        public var maxJoinedCircles: Int
        /// `joined` and `left` events are sent only in circles with at most this many subscribed
        /// connections on the node. Each join tells every member, so presence costs N²/2 events
        /// for N members: 50 million at 10,000 (benchmarks/idle.py), and all at once when every
        /// member rejoins after a restart (benchmarks/recovery.py: 1,000 clients resumed in 0.9 s
        /// without presence, 7.5 s with it). Large circles go quiet on presence, as large rooms do
        /// elsewhere; posts and typing are unaffected.
        public var presenceLimit: Int
        /// Largest media upload in bytes (HTTP 413 `too_large`).
        public var maxMediaBytes: Int64
        /// Resumable uploads not completed per user (HTTP 429 `rate_limited` beyond).
        public var maxPendingUploadsPerUser: Int
        /// How long an upload may stay unfinished (and a finished one answer for its media id)
        /// before its bytes and record are deleted.
        public var uploadExpiry: TimeAmount
        /// HTTP: a new connection must send its first request head within this time (an idle or
        /// half-sent request is closed). The clock does not restart on partial input.
        public var requestHeadTimeout: TimeAmount
        /// HTTP: a request body may pause this long between bytes before the connection is closed.
        public var requestBodyTimeout: TimeAmount
        /// HTTP: an idle keep-alive connection waits this long for its next request.
        public var keepAliveTimeout: TimeAmount
        /// HTTP: a response the client does not read (the socket stays full) is given this long
        /// before the connection is closed.
        public var writeStallTimeout: TimeAmount
        /// Connections not yet upgraded to an authenticated WebSocket (plain HTTP ones included),
        /// in all; a new connection beyond is closed at once. 0 means half the process's
        /// open-file limit, so that descriptors are left for WebSockets and the store.
        public var maxPendingConnections: Int
        /// The same per peer IP address; 0 for no per-address bound (use 0 behind a reverse
        /// proxy, where every connection comes from the proxy). Only connections in their first
        /// seconds count, so 128 leaves room for a whole office behind one NAT reconnecting at
        /// once after a restart.
        public var maxPendingConnectionsPerAddress: Int
        /// Requests of one WebSocket connection that read the store (`join`, `history`) being
        /// answered at once; further requests wait, unread, until one is answered.
        public var maxRequestsInFlight: Int

        public init(
            maxPostBytes: Int = 8 * 1024,
            maxMessageBytes: Int = 64 * 1024,
            postsPerSecond: Double = 20,
            postBurst: Double = 40,
            outboundQueueBytes: Int = 1024 * 1024,
            maxConnectionsPerUser: Int = 16,
            idleTimeout: TimeAmount = .seconds(75),
            maxJoinedCircles: Int = 100,
            presenceLimit: Int = 200,
            maxMediaBytes: Int64 = 25 * 1024 * 1024,
            maxPendingUploadsPerUser: Int = 16,
            uploadExpiry: TimeAmount = .hours(24),
            requestHeadTimeout: TimeAmount = .seconds(10),
            requestBodyTimeout: TimeAmount = .seconds(30),
            keepAliveTimeout: TimeAmount = .seconds(60),
            writeStallTimeout: TimeAmount = .seconds(30),
            maxPendingConnections: Int = 0,
            maxPendingConnectionsPerAddress: Int = 128,
            maxRequestsInFlight: Int = 8
        ) {
            self.maxPostBytes = maxPostBytes
            self.maxMessageBytes = maxMessageBytes
            self.postsPerSecond = postsPerSecond
            self.postBurst = postBurst
            self.outboundQueueBytes = outboundQueueBytes
            self.maxConnectionsPerUser = maxConnectionsPerUser
            self.idleTimeout = idleTimeout
            self.maxJoinedCircles = maxJoinedCircles
            self.presenceLimit = presenceLimit
            self.maxMediaBytes = maxMediaBytes
            self.maxPendingUploadsPerUser = maxPendingUploadsPerUser
            self.uploadExpiry = uploadExpiry
            self.requestHeadTimeout = requestHeadTimeout
            self.requestBodyTimeout = requestBodyTimeout
            self.keepAliveTimeout = keepAliveTimeout
            self.writeStallTimeout = writeStallTimeout
            self.maxPendingConnections = maxPendingConnections
            self.maxPendingConnectionsPerAddress = maxPendingConnectionsPerAddress
            self.maxRequestsInFlight = maxRequestsInFlight
        }

        /// ``maxPendingConnections`` with 0 resolved against the open-file limit.
        var effectiveMaxPendingConnections: Int {
            if self.maxPendingConnections > 0 { return self.maxPendingConnections }
            return max(64, openFileLimit() / 2)
        }
    }

    public init(
        host: String = "127.0.0.1",
        port: Int = 8080,
        dataDirectory: String = "./circle-data",
        tokenKeys: TokenKeys,
        tokenIssuers: [TokenIssuer] = [],
        jwks: JWKSSettings = .init(),
        allowPrivateOutbound: Bool = false,
        tls: TLSConfiguration? = nil,
        limits: Limits = .init(),
        developmentTokens: Bool = false,
        echoEndpoint: Bool = false,
        compression: Bool = false,
        compressionMinimumBytes: Int = 64,
        corsOrigin: String? = nil,
        nodePollInterval: Duration = .seconds(1),
        heapTrimInterval: Duration? = nil,
        retentionInterval: Duration = .seconds(3600),
        identity: IdentityConfiguration = .init(),
        webhooks: WebhookSettings = .init()
    ) {
        self.host = host
        self.port = port
        self.dataDirectory = dataDirectory
        self.tokenKeys = tokenKeys
        self.tokenIssuers = tokenIssuers
        self.jwks = jwks
        self.allowPrivateOutbound = allowPrivateOutbound
        self.tls = tls
        self.limits = limits
        self.developmentTokens = developmentTokens
        self.echoEndpoint = echoEndpoint
        self.compression = compression
        self.compressionMinimumBytes = compressionMinimumBytes
        self.corsOrigin = corsOrigin
        self.nodePollInterval = nodePollInterval
        self.heapTrimInterval = heapTrimInterval
        self.retentionInterval = retentionInterval
        self.identity = identity
        self.webhooks = webhooks
    }
}
