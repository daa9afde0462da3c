import CircleSocket
import CircleWire
import Foundation
import Logging

/// Settings for a ``CircleClient``. Every field but the servers and the token provider has a default.
public struct CircleClientConfiguration: Sendable {
    /// Server URLs (`ws://…/v1/ws` or `wss://…/v1/ws`), tried in turn on failures and after 1001.
    public var servers: [String]
    /// Returns a fresh access token; asked at the first connect and whenever the server says
    /// the token is no longer good (HTTP 401, close 4001).
    public var tokenProvider: @Sendable () async throws -> String
    public var reconnect: ReconnectPolicy
    public var heartbeat: HeartbeatPolicy
    /// When the token of an open connection is renewed with `auth` (docs/CLIENT.md).
    public var tokenRenewal: TokenRenewalPolicy
    /// Time allowed for a reply to join, history, typing and leave while connected.
    public var requestTimeout: Duration
    /// Time a post may take, across reconnects, before it resolves as timed out.
    public var postTimeout: Duration
    /// Throw ``CircleClientError/Code/notConnected`` at once for a post while disconnected,
    /// instead of queueing it in the outbox.
    public var failFast: Bool
    /// Whether joining a circle tells its members (`joined`/`left`). Off for one-shot clients
    /// (a script that posts once): their joins are sent with `"quiet": true`.
    public var announcesPresence: Bool
    /// Where the outbox and the per-circle cursors live: `nil` keeps them in memory; a file path
    /// keeps them in SQLite, so unsent posts survive an app restart and readers resume where they were.
    public var stateFile: String?
    /// With a ``stateFile``: how many posts per circle the offline cache keeps (the newest; older
    /// ones are dropped). `0` turns the cache off. See ``CircleClient/cachedPosts(in:)``.
    public var cacheLimit: Int
    /// The transport settings (TLS, timeouts, …); subprotocol and Authorization are set by the client.
    /// Media transfers use the same TLS trust and pins.
    public var socket: WebSocketConfiguration
    /// Photo uploads and downloads: timeouts, retries, waiting for connectivity, the cache.
    public var transfers: TransferConfiguration
    public var logger: Logger

    public init(
        servers: [String],
        tokenProvider: @escaping @Sendable () async throws -> String,
        reconnect: ReconnectPolicy = .init(),
        heartbeat: HeartbeatPolicy = .init(),
        tokenRenewal: TokenRenewalPolicy = .init(),
        requestTimeout: Duration = .seconds(10),
        postTimeout: Duration = .seconds(120),
        failFast: Bool = false,
        announcesPresence: Bool = true,
        stateFile: String? = nil,
        cacheLimit: Int = 500,
        socket: WebSocketConfiguration = .init(),
        transfers: TransferConfiguration = .init(),
        logger: Logger = Logger(label: "circle.client")
    ) {
        self.servers = servers
        self.tokenProvider = tokenProvider
        self.tokenRenewal = tokenRenewal
        self.reconnect = reconnect
        self.heartbeat = heartbeat
        self.requestTimeout = requestTimeout
        self.postTimeout = postTimeout
        self.failFast = failFast
        self.announcesPresence = announcesPresence
        self.stateFile = stateFile
        self.cacheLimit = max(0, cacheLimit)
        self.socket = socket
        self.transfers = transfers
        self.logger = logger
    }
}

/// The client's connection, as an app shows it.
public enum ConnectionState: Sendable, Hashable {
    case disconnected
    case connecting(attempt: Int)
    case connected
    case waitingToReconnect(until: ContinuousClock.Instant, attempt: Int)
    case closed(StopReason)
}

/// A page of a circle's posts and the point of the circle's stream it reflects.
public struct CircleHistoryPage: Sendable, Hashable {
    /// Oldest first, each in its current state (edits, deletes and reactions applied).
    public var posts: [CirclePost]
    /// Whether older posts exist (from the cache offline: whether it holds older ones).
    public var more: Bool
    /// The newest entry of the circle's stream (a post or a change) the page reflects: the
    /// server's snapshot, or the offline cache's. `nil` from servers older than this field, and
    /// offline without a cache.
    public var lastSeq: Int64?

    public init(posts: [CirclePost], more: Bool, lastSeq: Int64?) {
        self.posts = posts
        self.more = more
        self.lastSeq = lastSeq
    }
}

/// What a post resolved to.
public struct PostReceipt: Sendable, Hashable {
    /// The post's request id (its idempotency key).
    public var id: String
    public var circle: String
    /// The post's sequence number in the circle.
    public var seq: Int64
    /// Commit time, milliseconds since 1970.
    public var time: Int64
    /// Whether the server had stored it before (a retry after a lost ack).
    public var duplicate: Bool
}

/// Why a call failed: a code to switch on and a sentence.
public struct CircleClientError: Error, Sendable, Hashable, CustomStringConvertible {
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        public let rawValue: String
        /// The server refused with this `circle.v1` error code (forbidden, too_large, rate_limited, …).
        public static func server(_ code: CircleErrorCode) -> Code { Code(rawValue: code.rawValue) }
        public static let forbidden = server(.forbidden)
        public static let tooLarge = server(.tooLarge)
        public static let rateLimited = server(.rateLimited)
        public static let notFound = server(.notFound)
        public static let badRequest = server(.badRequest)
        /// No answer within the timeout.
        public static let timedOut = Code(rawValue: "timed_out")
        /// Not connected, and `failFast` is on (or the request cannot wait for a connection).
        public static let notConnected = Code(rawValue: "not_connected")
        /// The client was stopped (`disconnect()`, or the server ended the session for good).
        public static let stopped = Code(rawValue: "stopped")
        /// A local file could not be read or written (a photo to upload, a download's target).
        public static let fileError = Code(rawValue: "file_error")
        /// The server answered a transfer with an HTTP status this client cannot act on.
        public static let httpError = Code(rawValue: "http_error")
        /// A downloaded file's bytes do not hash to its media id.
        public static let corrupt = Code(rawValue: "corrupt")
        /// The server's certificate is not trusted, or its key matches none of the pins.
        public static let tlsFailed = Code(rawValue: "tls_failed")
        /// The server refused the token (HTTP 401) of an API call.
        public static let unauthorized = server(.unauthorized)
        /// The name is taken (creating a circle that exists).
        public static let conflict = server(.conflict)
        /// An edit, delete, reaction or reply names a seq that is not a post of the circle.
        public static let noSuchPost = server(.noSuchPost)
        /// An edit, delete or reaction of a deleted post.
        public static let postDeleted = server(.postDeleted)
        /// Editing someone else's post, or deleting it outside a private circle one owns.
        public static let notAuthor = server(.notAuthor)
        /// The reaction is not exactly one emoji.
        public static let invalidEmoji = server(.invalidEmoji)
        /// A new emoji beyond the per-post limit of distinct reactions.
        public static let tooManyReactions = server(.tooManyReactions)
        /// The circle's publish hook refused the post; the message is its reason.
        public static let refusedByHook = server(.refusedByHook)
        /// The circle's publish hook could not be asked, and its policy refuses then.
        public static let hookUnavailable = server(.hookUnavailable)
        /// The circle is read-only for members.
        public static let readOnly = server(.readOnly)
        /// The outbox entry was cancelled (``CircleClient/cancelOutboxEntry(_:)``) before it was sent.
        public static let cancelled = Code(rawValue: "cancelled")
        public var description: String { self.rawValue }
    }

    public var code: Code
    public var message: String
    /// The HTTP status of the answer, when the error is the server's answer to an HTTP call
    /// (the API calls, transfers, ``CircleClient/developmentToken(for:server:tls:)``).
    public var httpStatus: Int?
    public var description: String { "\(self.code): \(self.message)" + (self.httpStatus.map { " (HTTP \($0))" } ?? "") }

    /// Creates an error.
    ///
    /// - Parameters:
    ///   - code: what to switch on.
    ///   - message: the sentence (the server's `message` when it refused).
    ///   - httpStatus: the HTTP status, for errors of HTTP calls.
    public init(_ code: Code, _ message: String, httpStatus: Int? = nil) {
        self.code = code
        self.message = message
        self.httpStatus = httpStatus
    }
}

/// What happens in a circle, in order.
public enum CircleEvent: Sendable, Hashable {
    /// A post, delivered once, in sequence order.
    case post(CirclePost)
    /// Posts `from...to` could not be replayed by the server; they are missing for good.
    case gap(from: Int64, to: Int64)
    case joined(user: String)
    case left(user: String)
    case typing(user: String)
    /// This user's read marker in the circle moved to `seq` (marked read on another connection).
    case read(seq: Int64)
    /// This user's notification level in the circle is now `level` (set on any of their connections).
    case notify(level: NotificationLevel)
}

/// A change to the user's list of circles, told by the server as it happens.
public enum CircleListEvent: Sendable, Hashable {
    /// The user was added to this circle, or someone started a direct message with them: the
    /// circle as their list shows it (``CircleSummary/direct`` names a DM's members).
    case added(CircleSummary)
}

/// What an outbox entry asks the server to do.
public enum OutboxAction: String, Sendable, Hashable, Codable {
    /// A new post (or a reply, with ``OutboxEntry/replyTo``).
    case post
    /// Replace the text of post ``OutboxEntry/target``.
    case edit
    /// Delete post ``OutboxEntry/target``.
    case delete
    /// Add reaction ``OutboxEntry/emoji`` to post ``OutboxEntry/target``.
    case react
    /// Take back reaction ``OutboxEntry/emoji`` from post ``OutboxEntry/target``.
    case unreact
}

/// A post, or a change to a post, waiting in the outbox.
public struct OutboxEntry: Sendable, Hashable, Codable {
    /// The request id (the idempotency key the server stores the entry once by).
    public var id: String
    public var circle: String
    /// What the entry does (`post` for entries written by older versions).
    public var action: OutboxAction
    /// A post's text, or an edit's new text.
    public var text: String?
    public var attachment: String?
    /// The post an edit, delete or reaction applies to.
    public var target: Int64?
    /// A reaction's emoji.
    public var emoji: String?
    /// A reply: the post it answers.
    public var replyTo: Int64?
    /// When it was queued, milliseconds since 1970.
    public var createdAt: Int64

    public init(
        id: String,
        circle: String,
        action: OutboxAction = .post,
        text: String? = nil,
        attachment: String? = nil,
        target: Int64? = nil,
        emoji: String? = nil,
        replyTo: Int64? = nil,
        createdAt: Int64
    ) {
        self.id = id
        self.circle = circle
        self.action = action
        self.text = text
        self.attachment = attachment
        self.target = target
        self.emoji = emoji
        self.replyTo = replyTo
        self.createdAt = createdAt
    }

    private enum CodingKeys: String, CodingKey {
        case id, circle, action, text, attachment, target, emoji, replyTo, createdAt
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        self.id = try container.decode(String.self, forKey: .id)
        self.circle = try container.decode(String.self, forKey: .circle)
        self.action = try container.decodeIfPresent(OutboxAction.self, forKey: .action) ?? .post
        self.text = try container.decodeIfPresent(String.self, forKey: .text)
        self.attachment = try container.decodeIfPresent(String.self, forKey: .attachment)
        self.target = try container.decodeIfPresent(Int64.self, forKey: .target)
        self.emoji = try container.decodeIfPresent(String.self, forKey: .emoji)
        self.replyTo = try container.decodeIfPresent(Int64.self, forKey: .replyTo)
        self.createdAt = try container.decode(Int64.self, forKey: .createdAt)
    }

    /// The request that sends this entry.
    var request: CircleRequest {
        var request = CircleRequest(action: self.action.wireAction, id: self.id, circle: self.circle, text: self.text, attachment: self.attachment)
        request.target = self.target
        request.emoji = self.emoji
        request.replyTo = self.replyTo
        return request
    }
}

extension OutboxAction {
    var wireAction: CircleAction {
        switch self {
        case .post: return .post
        case .edit: return .edit
        case .delete: return .delete
        case .react: return .react
        case .unreact: return .unreact
        }
    }

    /// Whether the entry has text an app may replace before it is sent.
    var hasText: Bool { self == .post || self == .edit }
}

/// The life of an outbox entry, for an app's "sending / sent / failed" UI.
public enum OutboxEvent: Sendable, Hashable {
    /// Added to the outbox (persisted first when there is a state file).
    case queued(OutboxEntry)
    /// Written to a connection (again after each reconnect until acknowledged).
    case sending(OutboxEntry)
    case sent(OutboxEntry, PostReceipt)
    case failed(OutboxEntry, CircleClientError)
}
