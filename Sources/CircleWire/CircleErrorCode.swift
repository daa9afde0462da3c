/// The documented error codes of `circle.v1`, sent in `error` replies and HTTP error bodies.
public struct CircleErrorCode: RawRepresentable, Hashable, Sendable, Codable, CustomStringConvertible {
    public var rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }

    /// Malformed JSON, a missing field, a field of the wrong type or value.
    public static let badRequest = Self(rawValue: "bad_request")
    /// The `action` is not one the server knows.
    public static let unknownAction = Self(rawValue: "unknown_action")
    /// No valid token (HTTP 401).
    public static let unauthorized = Self(rawValue: "unauthorized")
    /// The token has expired (HTTP 401; on a WebSocket the connection closes with 4001).
    public static let tokenExpired = Self(rawValue: "token_expired")
    /// Not a member of this private circle, or posting in a circle not joined.
    public static let forbidden = Self(rawValue: "forbidden")
    /// No circle (or media) with that name.
    public static let notFound = Self(rawValue: "not_found")
    /// The circle already exists.
    public static let conflict = Self(rawValue: "conflict")
    /// The post's text is longer than the server accepts.
    public static let tooLarge = Self(rawValue: "too_large")
    /// Too many posts too fast; the connection stays open, retry later.
    public static let rateLimited = Self(rawValue: "rate_limited")
    /// The server is shutting down or overloaded; retry on another connection.
    public static let unavailable = Self(rawValue: "unavailable")
    /// A media upload whose bytes are not the declared (or an accepted) content type (HTTP 415).
    public static let unsupportedMediaType = Self(rawValue: "unsupported_media_type")
    /// A `Range` that does not overlap the media (HTTP 416).
    public static let rangeNotSatisfiable = Self(rawValue: "range_not_satisfiable")
    /// A post's `attachment` is not a media id its author uploaded.
    public static let invalidAttachment = Self(rawValue: "invalid_attachment")
    /// `edit`, `delete`, `react`, `unreact`, or a reply: no post with that `seq` in the circle
    /// (or the `seq` names a change, not a post).
    public static let noSuchPost = Self(rawValue: "no_such_post")
    /// Editing or reacting to a post that was deleted.
    public static let postDeleted = Self(rawValue: "post_deleted")
    /// Editing someone else's post, or deleting it outside a private circle one owns.
    public static let notAuthor = Self(rawValue: "not_author")
    /// A post already has the maximum number of distinct reaction emoji.
    public static let tooManyReactions = Self(rawValue: "too_many_reactions")
    /// `react` or `unreact` with an `emoji` that is not exactly one emoji.
    public static let invalidEmoji = Self(rawValue: "invalid_emoji")
    /// An invite link that is unknown, revoked, used up or expired; or a setup link that is
    /// wrong, expired or used (HTTP 404).
    public static let inviteInvalid = Self(rawValue: "invite_invalid")
    /// The account is deactivated or banned (HTTP 403; an open connection closes with 4005).
    public static let accountDisabled = Self(rawValue: "account_disabled")
    /// `auth`: the new token is valid but names another user than the connection's (the
    /// connection keeps its token; reconnect to change users).
    public static let userMismatch = Self(rawValue: "user_mismatch")
    /// `search`: the query is longer than 512 UTF-8 bytes (HTTP 400).
    public static let queryTooLong = Self(rawValue: "query_too_long")
    /// `search`: more than 16 terms, exclusions and filters (HTTP 400).
    public static let tooManyTerms = Self(rawValue: "too_many_terms")
    /// `search`: no word or phrase to look for (HTTP 400).
    public static let nothingToFind = Self(rawValue: "nothing_to_find")
    /// `search`: a `before`/`after` that is not a date or an ISO-8601 time (HTTP 400).
    public static let badDate = Self(rawValue: "bad_date")
    /// `search`: a cursor not made by this search (another order, damaged, too deep) (HTTP 400).
    public static let badCursor = Self(rawValue: "bad_cursor")
    /// `search`: the server is still indexing the posts stored before its search index
    /// existed (after an upgrade); retry later (HTTP 503 with `Retry-After`).
    public static let stillIndexing = Self(rawValue: "still_indexing")
    /// `search`: stopped at its time bound; narrow the search (HTTP 422).
    public static let searchTimedOut = Self(rawValue: "search_timed_out")
    /// The circle's publish hook refused the post or edit; the message carries its reason (HTTP 403).
    public static let refusedByHook = Self(rawValue: "refused_by_hook")
    /// The circle's publish hook did not answer in time, failed, or answered something that is
    /// not a verdict, and the hook's policy refuses then; nothing was stored (HTTP 503). Retry
    /// with the same id.
    public static let hookUnavailable = Self(rawValue: "hook_unavailable")
    /// The circle is read-only for members: only its owner, admins, bots and API keys write
    /// there (HTTP 403).
    public static let readOnly = Self(rawValue: "read_only")
    /// The API key's `expiresAt` has passed (HTTP 401); an admin makes a new one.
    public static let keyExpired = Self(rawValue: "key_expired")
    /// Something failed inside the server; the request may be retried.
    public static let internalError = Self(rawValue: "internal")

    public init(from decoder: any Decoder) throws {
        self.rawValue = try decoder.singleValueContainer().decode(String.self)
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(self.rawValue)
    }

    public var description: String { self.rawValue }
}

/// WebSocket close codes of `circle.v1` besides the standard ones the server sends (1001 going
/// away, 1002 protocol error, 1007 invalid data, 1009 message too big, 1011 internal error,
/// 1013 try again later). 4003 and 4004 are reserved for servers that refuse an open connection
/// for those reasons; this server refuses at the upgrade instead (HTTP 429, 401).
public enum CircleCloseCode {
    /// The token expired on an open connection: get a fresh token, then reconnect.
    public static let tokenExpired: UInt16 = 4001
    /// No frame (not even a ping) arrived within the idle timeout.
    public static let idleTimeout: UInt16 = 4002
    /// The user already has the maximum number of open connections.
    public static let tooManyConnections: UInt16 = 4003
    /// The connection was refused for a reason the client cannot fix by reconnecting (banned user, …).
    public static let forbidden: UInt16 = 4004
    /// The session the connection signed in with ended (signed out, signed out everywhere), or
    /// the account was deactivated or banned: sign in again (or not at all).
    public static let accessEnded: UInt16 = 4005
}
