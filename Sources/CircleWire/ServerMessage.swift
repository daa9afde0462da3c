import Foundation

/// The subprotocol name for this protocol version.
public let circleSubprotocol = "circle.v1"

/// What a stream entry changes, when it is not a post of its own.
///
/// Every stored entry of a circle has the next `seq`: posts, and the changes made to posts
/// (edits, deletes, reactions). So `join since=N` replays changes too, once and in order.
public enum CircleChange: String, Sendable, Hashable, Codable, CaseIterable {
    /// The author replaced the text of post `target`; `text` is the new text.
    case edit
    /// Post `target` was deleted (by its author, the owner of a private circle, or an API key with `moderate`).
    case delete
    /// The entry's author added reaction `emoji` to post `target`.
    case react
    /// The entry's author took back reaction `emoji` from post `target`.
    case unreact
}

/// What a system entry records: a change to a circle's membership, written by the server in the
/// stream (PROTOCOL.md §4, "System entries"). The entry's `author` is who did it, `member` whom
/// it concerns. (A circle's creation writes none: its first post stays `seq` 1, and `owner` and
/// `createdAt` say who made it and when.)
public enum CircleSystemEvent: String, Sendable, Hashable, Codable, CaseIterable {
    /// `author` added `member`.
    case added
    /// `author` removed `member`.
    case removed
    /// `member` (the `author`) left.
    case left
}

/// The reactions with one emoji on a post, in a post's current state (history pages).
public struct CircleReaction: Sendable, Hashable, Codable {
    public var emoji: String
    /// How many users reacted with this emoji (the length of `users`).
    public var count: Int64
    /// Who reacted, in the order they did.
    public var users: [String]
    /// Whether the user who asked for the page is one of them.
    public var me: Bool

    public init(emoji: String, users: [String], me: Bool) {
        self.emoji = emoji
        self.count = Int64(users.count)
        self.users = users
        self.me = me
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        self.emoji = try container.decode(String.self, forKey: .emoji)
        self.users = try container.decodeIfPresent([String].self, forKey: .users) ?? []
        self.count = try container.decodeIfPresent(Int64.self, forKey: .count) ?? Int64(self.users.count)
        self.me = try container.decodeIfPresent(Bool.self, forKey: .me) ?? false
    }
}

/// One entry of a circle's ordered stream as clients see it: a post, (with `change` set) a
/// change to an earlier post, or (with `event` set) a system entry.
///
/// A post (no `change`) carries its *current* state wherever it is served: edited text with
/// `edited`, or a tombstone (`deleted`, no `text` or `attachment`) once deleted. History pages
/// add `reactions`; streamed posts do not, since the `react`/`unreact` entries that follow
/// carry them. Applying entries in `seq` order with ``CircleTimeline`` is idempotent, so a
/// reader that resumes with `since` ends in the same state as one that never left.
public struct CirclePost: Sendable, Hashable, Codable {
    public var circle: String
    /// Position in the circle: 1, 2, 3, … with no gaps.
    public var seq: Int64
    public var author: String
    /// A post's text; an `edit`'s new text (absent once the target is deleted).
    public var text: String?
    public var attachment: String?
    /// Commit time, milliseconds since 1970 (UTC).
    public var time: Int64
    /// The request id the author's client gave the entry (its idempotency key).
    public var id: String
    /// Set on change entries: what the entry does to post `target`.
    public var change: CircleChange?
    /// The `seq` of the post a change entry applies to.
    public var target: Int64?
    /// `react`/`unreact`: the emoji.
    public var emoji: String?
    /// A reply: the `seq` of the post it answers.
    public var replyTo: Int64?
    /// A post edited since it was made: the time of the last edit (ms since 1970).
    public var edited: Int64?
    /// A deleted post (a tombstone): `text` and `attachment` are gone.
    public var deleted: Bool
    /// History pages only: the post's reactions, in the order each emoji was first used (an emoji
    /// keeps its place while any reaction with it stands; PROTOCOL.md §4).
    public var reactions: [CircleReaction]?
    /// A post (or an edit): the members its text mentions (`@name`), resolved by the server when
    /// the entry was committed (``MentionParser``), without the author; `nil` for none. A post
    /// carries the mentions of its current text.
    public var mentions: [String]?
    /// A post (or an edit) whose `@here` or `@everyone` (by the circle's owner or an admin)
    /// mentions every member.
    public var mentionsEveryone: Bool
    /// A system entry: the membership change it records (no `text`; not a post: it is not
    /// unread, mentions no one, and no change or reply may target it).
    public var event: CircleSystemEvent?
    /// A system entry's member: who was added, removed or left.
    public var member: String?

    public init(
        circle: String,
        seq: Int64,
        author: String,
        text: String?,
        attachment: String?,
        time: Int64,
        id: String,
        change: CircleChange? = nil,
        target: Int64? = nil,
        emoji: String? = nil,
        replyTo: Int64? = nil,
        edited: Int64? = nil,
        deleted: Bool = false,
        reactions: [CircleReaction]? = nil,
        mentions: [String]? = nil,
        mentionsEveryone: Bool = false,
        event: CircleSystemEvent? = nil,
        member: String? = nil
    ) {
        self.circle = circle
        self.seq = seq
        self.author = author
        self.text = text
        self.attachment = attachment
        self.time = time
        self.id = id
        self.change = change
        self.target = target
        self.emoji = emoji
        self.replyTo = replyTo
        self.edited = edited
        self.deleted = deleted
        self.reactions = reactions
        self.mentions = mentions
        self.mentionsEveryone = mentionsEveryone
        self.event = event
        self.member = member
    }

    /// Whether the entry mentions `user`, by name or as one of everyone.
    public func mentions(_ user: String) -> Bool {
        self.mentionsEveryone || (self.mentions ?? []).contains(user)
    }

    private enum CodingKeys: String, CodingKey {
        case circle, seq, author, text, attachment, time, id, change, target, emoji, replyTo, edited, deleted, reactions, mentions, mentionsEveryone, event, member
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        self.circle = try container.decode(String.self, forKey: .circle)
        self.seq = try container.decode(Int64.self, forKey: .seq)
        self.author = try container.decode(String.self, forKey: .author)
        self.text = try container.decodeIfPresent(String.self, forKey: .text)
        self.attachment = try container.decodeIfPresent(String.self, forKey: .attachment)
        self.time = try container.decode(Int64.self, forKey: .time)
        self.id = try container.decode(String.self, forKey: .id)
        self.change = try container.decodeIfPresent(CircleChange.self, forKey: .change)
        self.target = try container.decodeIfPresent(Int64.self, forKey: .target)
        self.emoji = try container.decodeIfPresent(String.self, forKey: .emoji)
        self.replyTo = try container.decodeIfPresent(Int64.self, forKey: .replyTo)
        self.edited = try container.decodeIfPresent(Int64.self, forKey: .edited)
        self.deleted = try container.decodeIfPresent(Bool.self, forKey: .deleted) ?? false
        self.reactions = try container.decodeIfPresent([CircleReaction].self, forKey: .reactions)
        self.mentions = try container.decodeIfPresent([String].self, forKey: .mentions)
        self.mentionsEveryone = try container.decodeIfPresent(Bool.self, forKey: .mentionsEveryone) ?? false
        self.event = try container.decodeIfPresent(CircleSystemEvent.self, forKey: .event)
        self.member = try container.decodeIfPresent(String.self, forKey: .member)
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(self.circle, forKey: .circle)
        try container.encode(self.seq, forKey: .seq)
        try container.encode(self.author, forKey: .author)
        try container.encodeIfPresent(self.text, forKey: .text)
        try container.encodeIfPresent(self.attachment, forKey: .attachment)
        try container.encode(self.time, forKey: .time)
        try container.encode(self.id, forKey: .id)
        try container.encodeIfPresent(self.change, forKey: .change)
        try container.encodeIfPresent(self.target, forKey: .target)
        try container.encodeIfPresent(self.emoji, forKey: .emoji)
        try container.encodeIfPresent(self.replyTo, forKey: .replyTo)
        try container.encodeIfPresent(self.edited, forKey: .edited)
        if self.deleted { try container.encode(true, forKey: .deleted) }
        try container.encodeIfPresent(self.reactions, forKey: .reactions)
        try container.encodeIfPresent(self.mentions, forKey: .mentions)
        if self.mentionsEveryone { try container.encode(true, forKey: .mentionsEveryone) }
        try container.encodeIfPresent(self.event, forKey: .event)
        try container.encodeIfPresent(self.member, forKey: .member)
    }

    /// Whether this entry is a post of its own (not a change to another, not a system entry).
    public var isPost: Bool { self.change == nil && self.event == nil }

    /// Whether this is a system entry (``event`` is set).
    public var isSystem: Bool { self.event != nil }

    /// A system entry in words, as apps show it: "ann added bob", "ann removed bob", "bob left";
    /// `nil` for other entries.
    public var systemText: String? {
        guard let event = self.event else { return nil }
        let member = self.member ?? "someone"
        switch event {
        case .added: return "\(self.author) added \(member)"
        case .removed: return "\(self.author) removed \(member)"
        case .left: return "\(member) left"
        }
    }
}

/// A circle in the list a user sees (`GET /v1/circles` and the `circles` request), with where
/// the user stands in it.
public struct CircleSummary: Sendable, Hashable, Codable {
    public var name: String
    public var owner: String
    public var `private`: Bool
    /// Creation time, milliseconds since 1970 (UTC).
    public var createdAt: Int64
    /// The newest entry's seq (0 for an empty circle).
    public var lastSeq: Int64
    /// The user's read marker: everything up to this seq is read (0: nothing).
    public var readSeq: Int64
    /// Posts above the read marker by others, not deleted, counted up to ``unreadCountLimit``.
    public var unread: Int64
    /// Entries above the read marker that mention the user (by name, `@here` or `@everyone`),
    /// posts not deleted since, counted up to ``unreadCountLimit``; cleared by the read marker.
    public var mentions: Int64
    /// A direct message: its members (2 to 9, sorted by bytes); `nil` for a circle. Apps list
    /// direct messages apart from circles and name them by their members.
    public var direct: [String]?
    /// The user's notification level here (their choice, or the default: `all` for a direct
    /// message, `mentions` for a circle).
    public var notify: NotificationLevel
    /// Members may not post here: only its owner, admins and apps (an admin's
    /// `PUT /v1/circles/{name}/read-only`); a member's post gets `read_only`.
    public var readOnly: Bool
    /// The server writes system entries here (member added, removed, left): on unless the owner,
    /// an admin or an API key with `manage` turned them off (`PUT /v1/circles/{name}/system-entries`).
    public var systemEntries: Bool

    /// Where servers stop counting `unread`: that value means "that many or more".
    public static let unreadCountLimit: Int64 = 1000

    /// The circle's start in words, as apps show it above its first entry once the history
    /// reaches it (PROTOCOL.md, "System entries"): "alice created team", or "alice started this
    /// direct message". Not an entry: a circle's first post stays `seq` 1.
    public var originText: String {
        self.direct == nil ? "\(self.owner) created \(self.name)" : "\(self.owner) started this direct message"
    }

    /// `unread` for people: "1000+" at the limit.
    public var unreadText: String {
        self.unread >= Self.unreadCountLimit ? "\(Self.unreadCountLimit)+" : "\(self.unread)"
    }

    public init(name: String, owner: String, private: Bool, createdAt: Int64, lastSeq: Int64, readSeq: Int64 = 0, unread: Int64 = 0, mentions: Int64 = 0,
        direct: [String]? = nil, notify: NotificationLevel? = nil, readOnly: Bool = false, systemEntries: Bool = true
    ) {
        self.systemEntries = systemEntries
        self.name = name
        self.owner = owner
        self.private = `private`
        self.createdAt = createdAt
        self.lastSeq = lastSeq
        self.readSeq = readSeq
        self.unread = unread
        self.mentions = mentions
        self.direct = direct
        self.notify = notify ?? NotificationLevel.defaultLevel(direct: direct != nil)
        self.readOnly = readOnly
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        self.name = try container.decode(String.self, forKey: .name)
        self.owner = try container.decode(String.self, forKey: .owner)
        self.private = try container.decode(Bool.self, forKey: .private)
        self.createdAt = try container.decode(Int64.self, forKey: .createdAt)
        self.lastSeq = try container.decode(Int64.self, forKey: .lastSeq)
        self.readSeq = try container.decodeIfPresent(Int64.self, forKey: .readSeq) ?? 0
        self.unread = try container.decodeIfPresent(Int64.self, forKey: .unread) ?? 0
        self.mentions = try container.decodeIfPresent(Int64.self, forKey: .mentions) ?? 0
        self.direct = try container.decodeIfPresent([String].self, forKey: .direct)
        // A level this client does not know yet reads as the default.
        let level = try container.decodeIfPresent(String.self, forKey: .notify).flatMap(NotificationLevel.init(rawValue:))
        self.notify = level ?? NotificationLevel.defaultLevel(direct: self.direct != nil)
        self.readOnly = try container.decodeIfPresent(Bool.self, forKey: .readOnly) ?? false
        self.systemEntries = try container.decodeIfPresent(Bool.self, forKey: .systemEntries) ?? true
    }
}

/// How much of a circle a person wants to be notified of (PROTOCOL.md, "Notification levels").
public enum NotificationLevel: String, Sendable, Hashable, Codable, CaseIterable {
    /// Every post.
    case all
    /// Posts that mention them (the default for circles).
    case mentions
    /// Nothing.
    case none

    /// The level of someone who chose none: `all` in a direct message, `mentions` in a circle.
    public static func defaultLevel(direct: Bool) -> NotificationLevel { direct ? .all : .mentions }
}

/// Everything a server sends: replies to requests and events of joined circles.
/// On the wire each is a JSON object whose `type` names the case.
public enum CircleServerMessage: Sendable, Hashable {
    /// A request succeeded. For `post`: the post's `seq` and commit `time` (`duplicate` when the
    /// id was already stored and this is the original ack). For `join`: `seq` is the circle's
    /// newest sequence number when the subscription began; replayed posts follow up to it.
    case ack(id: String, seq: Int64?, time: Int64?, duplicate: Bool)
    /// A request failed; `code` is one of ``CircleErrorCode``.
    case error(id: String?, code: CircleErrorCode, message: String)
    /// A post in a joined circle (replayed or live), in sequence order.
    case post(CirclePost)
    /// A page of stored posts, answering `history`; `more` tells whether further pages exist.
    /// `lastSeq` is the circle's newest entry `seq` when the page was read: the posts show every
    /// entry up to it (`nil` from servers older than this field).
    case history(id: String, circle: String, posts: [CirclePost], more: Bool, lastSeq: Int64?)
    /// Someone joined the circle.
    case joined(circle: String, user: String)
    /// Someone left the circle (or disconnected).
    case left(circle: String, user: String)
    /// Someone is typing.
    case typing(circle: String, user: String)
    /// Posts `from...to` cannot be replayed (no longer stored); the client should tell its user.
    case gap(circle: String, from: Int64, to: Int64)
    /// The user's read marker in `circle` moved to `seq` (sent to the user's other connections).
    case read(circle: String, seq: Int64)
    /// The user's notification level in `circle` is now `level` (sent to all their connections).
    case notify(circle: String, level: NotificationLevel)
    /// The circles the user sees, answering `circles`.
    case circles(id: String, circles: [CircleSummary])
    /// A page of search hits, answering `search` (the body of `GET /v1/search`).
    case search(id: String, results: HTTPAPI.SearchResults)
    /// A circle is now in the user's list: they were added to it, or someone started a direct
    /// message with them. The circle as their list shows it (sent to all their connections).
    case added(CircleSummary)
}

extension CircleServerMessage: Codable {
    private enum Kind: String, Codable {
        case ack, error, post, history, joined, left, typing, gap, read, notify, circles, search, added
    }

    private enum Keys: String, CodingKey {
        case type, id, seq, time, duplicate, code, message, circle, user, posts, more, from, to, circles, lastSeq, hits, next
        case author, text, attachment, level
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: Keys.self)
        switch try container.decode(Kind.self, forKey: .type) {
        case .ack:
            self = .ack(
                id: try container.decode(String.self, forKey: .id),
                seq: try container.decodeIfPresent(Int64.self, forKey: .seq),
                time: try container.decodeIfPresent(Int64.self, forKey: .time),
                duplicate: try container.decodeIfPresent(Bool.self, forKey: .duplicate) ?? false
            )
        case .error:
            self = .error(
                id: try container.decodeIfPresent(String.self, forKey: .id),
                code: try container.decode(CircleErrorCode.self, forKey: .code),
                message: try container.decodeIfPresent(String.self, forKey: .message) ?? ""
            )
        case .post:
            self = .post(try CirclePost(from: decoder))
        case .history:
            self = .history(
                id: try container.decode(String.self, forKey: .id),
                circle: try container.decode(String.self, forKey: .circle),
                posts: try container.decode([CirclePost].self, forKey: .posts),
                more: try container.decode(Bool.self, forKey: .more),
                lastSeq: try container.decodeIfPresent(Int64.self, forKey: .lastSeq)
            )
        case .joined:
            self = .joined(circle: try container.decode(String.self, forKey: .circle), user: try container.decode(String.self, forKey: .user))
        case .left:
            self = .left(circle: try container.decode(String.self, forKey: .circle), user: try container.decode(String.self, forKey: .user))
        case .typing:
            self = .typing(circle: try container.decode(String.self, forKey: .circle), user: try container.decode(String.self, forKey: .user))
        case .gap:
            self = .gap(
                circle: try container.decode(String.self, forKey: .circle),
                from: try container.decode(Int64.self, forKey: .from),
                to: try container.decode(Int64.self, forKey: .to)
            )
        case .read:
            self = .read(circle: try container.decode(String.self, forKey: .circle), seq: try container.decode(Int64.self, forKey: .seq))
        case .notify:
            self = .notify(circle: try container.decode(String.self, forKey: .circle), level: try container.decode(NotificationLevel.self, forKey: .level))
        case .circles:
            self = .circles(id: try container.decode(String.self, forKey: .id), circles: try container.decode([CircleSummary].self, forKey: .circles))
        case .search:
            self = .search(
                id: try container.decode(String.self, forKey: .id),
                results: HTTPAPI.SearchResults(
                    hits: try container.decode([HTTPAPI.SearchHit].self, forKey: .hits),
                    next: try container.decodeIfPresent(String.self, forKey: .next)
                )
            )
        case .added:
            self = .added(try container.decode(CircleSummary.self, forKey: .circle))
        }
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: Keys.self)
        switch self {
        case .ack(let id, let seq, let time, let duplicate):
            try container.encode(Kind.ack, forKey: .type)
            try container.encode(id, forKey: .id)
            try container.encodeIfPresent(seq, forKey: .seq)
            try container.encodeIfPresent(time, forKey: .time)
            if duplicate { try container.encode(true, forKey: .duplicate) }
        case .error(let id, let code, let message):
            try container.encode(Kind.error, forKey: .type)
            try container.encodeIfPresent(id, forKey: .id)
            try container.encode(code, forKey: .code)
            try container.encode(message, forKey: .message)
        case .post(let post):
            try container.encode(Kind.post, forKey: .type)
            try post.encode(to: encoder)
        case .history(let id, let circle, let posts, let more, let lastSeq):
            try container.encode(Kind.history, forKey: .type)
            try container.encode(id, forKey: .id)
            try container.encode(circle, forKey: .circle)
            try container.encode(posts, forKey: .posts)
            try container.encode(more, forKey: .more)
            try container.encodeIfPresent(lastSeq, forKey: .lastSeq)
        case .joined(let circle, let user):
            try container.encode(Kind.joined, forKey: .type)
            try container.encode(circle, forKey: .circle)
            try container.encode(user, forKey: .user)
        case .left(let circle, let user):
            try container.encode(Kind.left, forKey: .type)
            try container.encode(circle, forKey: .circle)
            try container.encode(user, forKey: .user)
        case .typing(let circle, let user):
            try container.encode(Kind.typing, forKey: .type)
            try container.encode(circle, forKey: .circle)
            try container.encode(user, forKey: .user)
        case .gap(let circle, let from, let to):
            try container.encode(Kind.gap, forKey: .type)
            try container.encode(circle, forKey: .circle)
            try container.encode(from, forKey: .from)
            try container.encode(to, forKey: .to)
        case .read(let circle, let seq):
            try container.encode(Kind.read, forKey: .type)
            try container.encode(circle, forKey: .circle)
            try container.encode(seq, forKey: .seq)
        case .notify(let circle, let level):
            try container.encode(Kind.notify, forKey: .type)
            try container.encode(circle, forKey: .circle)
            try container.encode(level, forKey: .level)
        case .circles(let id, let circles):
            try container.encode(Kind.circles, forKey: .type)
            try container.encode(id, forKey: .id)
            try container.encode(circles, forKey: .circles)
        case .search(let id, let results):
            try container.encode(Kind.search, forKey: .type)
            try container.encode(id, forKey: .id)
            try container.encode(results.hits, forKey: .hits)
            try container.encodeIfPresent(results.next, forKey: .next)
        case .added(let circle):
            try container.encode(Kind.added, forKey: .type)
            try container.encode(circle, forKey: .circle)
        }
    }

    /// The JSON text of this message the way `JSONEncoder` writes it (sorted keys, slashes as
    /// is): the reference ``encodedJSON()`` is tested against.
    package func encodedJSONWithEncoder() -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        // Encoding these value types cannot fail.
        let data = (try? encoder.encode(self)) ?? Data("{}".utf8)
        return String(decoding: data, as: UTF8.self)
    }

    /// Decodes a server message from a text frame.
    public static func decode(_ text: String) throws -> CircleServerMessage {
        try JSONDecoder().decode(CircleServerMessage.self, from: Data(text.utf8))
    }
}
