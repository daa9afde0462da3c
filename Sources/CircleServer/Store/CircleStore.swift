import CircleWire

/// A circle as stored.
public struct CircleInfo: Sendable, Hashable, Codable {
    public var name: String
    public var owner: String
    public var isPrivate: Bool
    /// Creation time, milliseconds since 1970.
    public var createdAt: Int64
    /// The newest entry's sequence number (0 for an empty circle).
    public var lastSeq: Int64
    /// Filled by ``CircleStore/circles(visibleTo:)`` for that user: their read marker (0: none).
    public var readSeq: Int64
    /// Filled by ``CircleStore/circles(visibleTo:)``: posts (not changes) above the read marker
    /// by other users, not deleted; counted up to ``StoreLimits/unreadCountLimit`` (that value
    /// means "that many or more").
    public var unread: Int64
    /// Filled by ``CircleStore/circles(visibleTo:)``: the user's mentions above the read marker
    /// (rows of the mentions table whose entry is above it, of posts not deleted), counted up to
    /// ``StoreLimits/unreadCountLimit``.
    public var mentions: Int64
    /// A direct message's members (sorted by bytes); `nil` for a circle.
    public var direct: [String]?
    /// Filled by ``CircleStore/circles(visibleTo:)``: the level the user chose here; `nil` for
    /// the default (``NotificationLevel/defaultLevel(direct:)``).
    public var notify: NotificationLevel?
    /// Filled by ``CircleStore/circles(visibleTo:)``: members may not post (only its owner,
    /// admins and apps; `PUT /v1/circles/{name}/read-only`).
    public var readOnly: Bool
    /// System entries (members added, removed, left) are written here: on unless turned off
    /// (``CircleStore/setSystemEntries(_:in:)``).
    public var systemEntries: Bool

    public init(
        name: String, owner: String, isPrivate: Bool, createdAt: Int64, lastSeq: Int64, readSeq: Int64 = 0, unread: Int64 = 0, mentions: Int64 = 0,
        direct: [String]? = nil, notify: NotificationLevel? = nil, readOnly: Bool = false, systemEntries: Bool = true
    ) {
        self.systemEntries = systemEntries
        self.name = name
        self.owner = owner
        self.isPrivate = isPrivate
        self.createdAt = createdAt
        self.lastSeq = lastSeq
        self.readSeq = readSeq
        self.unread = unread
        self.mentions = mentions
        self.direct = direct
        self.notify = notify
        self.readOnly = readOnly
    }

    /// The wire form (`GET /v1/circles`, the `circles` reply).
    public var summary: CircleSummary {
        CircleSummary(
            name: self.name,
            owner: self.owner,
            private: self.isPrivate,
            createdAt: self.createdAt,
            lastSeq: self.lastSeq,
            readSeq: self.readSeq,
            unread: self.unread,
            mentions: self.mentions,
            direct: self.direct,
            notify: self.notify,
            readOnly: self.readOnly,
            systemEntries: self.systemEntries
        )
    }
}

/// An entry on its way to the store: a post, (with `change`) a change to post `target`, or (with
/// `event`) a membership change and its system entry.
public struct NewPost: Sendable, Hashable {
    public var circle: String
    public var author: String
    /// The client's request id: with `circle` and `author`, the idempotency key.
    public var clientID: String
    /// A post's text, or an edit's new text.
    public var text: String?
    public var attachment: String?
    /// Server time at commit, milliseconds since 1970.
    public var time: Int64
    /// What the entry changes; `nil` for a post.
    public var change: CircleChange?
    /// The post a change applies to.
    public var target: Int64?
    /// `react`/`unreact`: the emoji (checked by the protocol layer).
    public var emoji: String?
    /// A reply: the post it answers.
    public var replyTo: Int64?
    /// `delete` by a moderator (an API key with `moderate`): any post of the circle.
    public var moderated: Bool
    /// Written with an API key (over HTTP): a read-only circle takes it from anyone.
    public var byAPIKey: Bool
    /// The author is an admin: their `@here`/`@everyone` mentions every member (as the circle
    /// owner's do); anyone else's mentions no one.
    public var mayMentionEveryone: Bool
    /// A membership change (``CircleSystemEvent``): the commit makes it (adds or removes
    /// `member`) and records it as a system entry when the circle has them on.
    public var event: CircleSystemEvent?
    /// The member an `event` adds or removes (`added`, `removed`, `left`).
    public var member: String?
    /// An `event` restored as it was (an import): stored as its entry without changing the
    /// membership or asking whether the circle has system entries on.
    public var recordOnly: Bool
    /// An entry restored from an export (`circle import`): it happened long ago elsewhere, so it
    /// sets off no webhook delivery and no push (its mentions are still recorded, for the
    /// mention counts above the read markers the import restores).
    public var restored: Bool

    public init(
        circle: String,
        author: String,
        clientID: String,
        text: String?,
        attachment: String?,
        time: Int64,
        change: CircleChange? = nil,
        target: Int64? = nil,
        emoji: String? = nil,
        replyTo: Int64? = nil,
        moderated: Bool = false,
        byAPIKey: Bool = false,
        mayMentionEveryone: Bool = false,
        event: CircleSystemEvent? = nil,
        member: String? = nil,
        recordOnly: Bool = false,
        restored: Bool = false
    ) {
        self.restored = restored
        self.event = event
        self.member = member
        self.recordOnly = recordOnly
        self.circle = circle
        self.author = author
        self.clientID = clientID
        self.text = text
        self.attachment = attachment
        self.time = time
        self.change = change
        self.target = target
        self.emoji = emoji
        self.replyTo = replyTo
        self.moderated = moderated
        self.byAPIKey = byAPIKey
        self.mayMentionEveryone = mayMentionEveryone
    }
}

/// Limits every store enforces on changes.
public enum StoreLimits {
    /// Distinct reaction emoji one post can carry; a `react` with a new emoji beyond it is
    /// rejected with `too_many_reactions`.
    public static let maxReactionsPerPost = 20
    /// Where unread counts stop: a circle list costs at most this many index entries per circle,
    /// however far behind its reader is. Apps show it as "999+".
    public static let unreadCountLimit: Int64 = CircleSummary.unreadCountLimit
    /// Members one `@here`/`@everyone` notifies at most (the first ones by name); the entry still
    /// says `mentionsEveryone`, so every member's client highlights it.
    public static let maxEveryoneMentions = 10_000
}

/// A read marker after a `read`: where it stands, and whether this request moved it.
public struct ReadMarker: Sendable, Hashable {
    public var seq: Int64
    public var moved: Bool

    public init(seq: Int64, moved: Bool) {
        self.seq = seq
        self.moved = moved
    }
}

/// What became of one post of a committed batch.
public enum PostOutcome: Sendable, Hashable {
    /// Newly stored with the next sequence number of its circle.
    case stored(CirclePost)
    /// A post with the same circle, author and client id was stored before: the original.
    case duplicate(CirclePost)
    /// The circle does not exist.
    case noSuchCircle
    /// A change (or reply) the rules refuse; nothing was stored and no `seq` was used:
    /// `no_such_post`, `post_deleted`, `not_author` or `too_many_reactions`.
    case rejected(CircleErrorCode, String)
    /// A membership change (``NewPost/event``) that stored no entry: there was nothing to change
    /// (adding a member, removing a non-member), or the circle has system entries off (the
    /// membership changed all the same).
    case applied

    public var post: CirclePost? {
        switch self {
        case .stored(let post), .duplicate(let post): return post
        case .noSuchCircle, .rejected, .applied: return nil
        }
    }
}

/// Errors a store reports with a code the protocol layer maps to ``CircleErrorCode``.
public struct StoreError: Error, Sendable, Hashable, CustomStringConvertible {
    public enum Code: Sendable, Hashable {
        case conflict
        case notFound
        case unavailable
    }
    public var code: Code
    public var message: String

    public init(_ code: Code, _ message: String) {
        self.code = code
        self.message = message
    }

    public var description: String { self.message }
}

/// Durable storage of circles, members and posts. The protocol layer talks only to this, so
/// the embedded SQLite store and a PostgreSQL store are interchangeable.
///
/// Guarantees every implementation keeps:
/// - `commit` is atomic and durable before it returns: an acked post survives a crash.
/// - Per circle, stored posts get sequence numbers 1, 2, 3, … in commit order, without gaps.
/// - (circle, author, clientID) is unique: committing it again yields `.duplicate` with the
///   original post, also within one batch and across restarts.
public protocol CircleStore: IdentityStore, WebhookStore, APIKeyStore, PublishHookStore, ModerationStore, PushStore, ErasureStore, RetentionStore {
    /// Creates the schema or migrates it to the current version.
    func migrate() async throws

    /// Creates a circle; the owner becomes its first member. Throws `StoreError(.conflict)` when it exists.
    func createCircle(name: String, owner: String, isPrivate: Bool, createdAt: Int64) async throws -> CircleInfo
    func circle(named name: String) async throws -> CircleInfo?
    /// Public circles and the private circles `user` is a member of, by name, each with the
    /// user's read marker (`readSeq`) and unread count (`unread`); only the one called `name`
    /// when it is given.
    func circles(visibleTo user: String, named name: String?) async throws -> [CircleInfo]
    /// Moves `user`'s read marker in `circle` forward to `seq` (clamped to the circle's
    /// `lastSeq`; a marker never moves back) and returns the marker as stored afterwards, and
    /// whether it moved. Throws `StoreError(.notFound)` for an unknown circle.
    func markRead(_ user: String, in circle: String, upTo seq: Int64) async throws -> ReadMarker

    /// The direct message among `members` (a ``DirectMessageKey``), created when there is none:
    /// a private circle named ``DirectMessageKey/circleName``, owned by `starter`, whose members
    /// are the key's. Starting it again, by any of them, finds the same one.
    func directMessage(_ members: DirectMessageKey, starter: String, createdAt: Int64) async throws -> CircleInfo
    /// Records `user`'s notification level in `circle` (`nil`: back to the default). Throws
    /// `StoreError(.notFound)` for an unknown circle.
    func setNotificationLevel(_ level: NotificationLevel?, of user: String, in circle: String) async throws

    /// Turns a circle's system entries on or off (``CircleInfo/systemEntries``). Throws
    /// `StoreError(.notFound)` for an unknown circle.
    func setSystemEntries(_ enabled: Bool, in circle: String) async throws

    /// Adds a member (idempotent) without a system entry (imports, tests; the API commits a
    /// ``NewPost`` with `event` instead). Throws `StoreError(.notFound)` for an unknown circle.
    func addMember(_ user: String, to circle: String) async throws
    /// Removes a member (idempotent).
    func removeMember(_ user: String, from circle: String) async throws
    func isMember(_ user: String, of circle: String) async throws -> Bool
    func members(of circle: String) async throws -> [String]

    /// Stores a batch of entries in one durable transaction (group commit); outcomes in input
    /// order. Entries are applied one after another, each seeing the ones before it:
    /// - the idempotency key comes first: a stored (circle, author, clientID) is `.duplicate`
    ///   with the entry as it is now;
    /// - a reply's `replyTo`, and a change's `target`, must be a post (not a change) of the
    ///   circle, else `.rejected(.noSuchPost)`;
    /// - `edit`: only the author (`.notAuthor`), not of a deleted post (`.postDeleted`); sets the
    ///   post's text and its edit time;
    /// - `delete`: the author, the owner of a private circle, or a moderator (`moderated`)
    ///   (else `.notAuthor`); not twice
    ///   (`.postDeleted`); clears the post's text and attachment, the text of the edits made to
    ///   it, and its reactions;
    /// - `react`: not on a deleted post; a new emoji beyond ``StoreLimits/maxReactionsPerPost``
    ///   distinct ones is `.tooManyReactions`; reacting again with the same emoji changes nothing
    ///   but is still stored as an entry; `unreact` likewise removes one if present;
    /// - an `event` (a membership change) adds (`added`) or removes (`removed`, `left`) its
    ///   `member` in the same transaction and is stored as a system entry when the circle has
    ///   them on; one that would change nothing, or whose circle has them off, stores no entry
    ///   (`.applied`); a `recordOnly` one (an import) is stored and changes no membership. No
    ///   change or reply may target a system entry (`.rejected(.noSuchPost)`).
    /// A rejected entry stores nothing and uses no `seq`.
    func commit(_ posts: [NewPost]) async throws -> [PostOutcome]
    /// Where the commit loop should run (its task's executor preference): a store that commits
    /// on a thread of its own names it, so that ``commit(_:)`` needs no hop there and back.
    /// `nil`: Swift's default executor.
    var commitExecutor: (any TaskExecutor)? { get }
    /// Entries (posts and changes) with `seq > after`, oldest first, at most `limit`: the
    /// stream a join replays. Posts come in their current state (edited text, `edited`,
    /// tombstones) without `reactions`; edits of a deleted post without text.
    func posts(in circle: String, after: Int64, limit: Int) async throws -> [CirclePost]
    /// A history page, read in one snapshot: posts only (no change entries), in their current
    /// state with `reactions` (`me` for `viewer`), and the circle's `lastSeq` in that snapshot
    /// (the newest entry the posts reflect; 0 for an unknown circle). With `after`: posts above
    /// it, oldest first, at most `limit`. Otherwise posts below `before` (all when `nil`), the
    /// newest `limit` of them, returned oldest first.
    func historySnapshot(in circle: String, before: Int64?, after: Int64?, limit: Int, viewer: String) async throws -> HistorySnapshot

    /// Posts matching `query` that `reader` may read — in public circles, or in private ones they
    /// are a member of, decided inside the store's query (a private circle they are not in adds
    /// nothing, not even to a count) —, in their current text only: never a deleted post, an
    /// edit entry, nor text an edit replaced. A page of at most ``SearchOptions/limit`` hits in
    /// ``SearchOptions/order``, each with a snippet whose matched words are marked with
    /// ``SearchHit/markStart`` and ``SearchHit/markEnd``; ``SearchPage/next`` goes on.
    ///
    /// Throws ``SearchError`` (`.timedOut` past ``SearchOptions/timeLimit``, `.badCursor`); a
    /// query is always searched as plain text, so its content never makes the store fail.
    func search(_ query: SearchQuery, reader: String, options: SearchOptions) async throws -> SearchPage

    /// Indexes for search the next `batchSize` entries of a database upgraded from before the
    /// index (in `(circle, seq)` order, from where the last batch stopped), in one write
    /// transaction, and returns the progress; `done` (and nothing written) once every post is
    /// indexed. Until then ``search(_:reader:options:)`` throws `SearchError.stillIndexing`.
    /// With several nodes, batches run one at a time across them. See ``SearchBackfill``.
    func backfillSearchIndex(batchSize: Int) async throws -> SearchBackfillProgress

    /// Records a resumable upload that was just created (its bytes live in the data directory).
    func createUpload(_ upload: MediaUpload) async throws
    /// An upload, or `nil` when there is none with that id (deleted, never made).
    func upload(id: String) async throws -> MediaUpload?
    /// Forgets a pending upload (idempotent).
    func deleteUpload(id: String) async throws
    /// Ids of uploads created before `createdBefore` (ms since 1970), completed or not.
    func uploads(createdBefore: Int64) async throws -> [String]
    /// Uploads of `owner` that have not completed.
    func pendingUploadCount(owner: String) async throws -> Int
    /// Turns a pending upload into media in one transaction: records `media` unless media with
    /// the same id (content hash) exists, records `uploader` as one of its uploaders and marks
    /// the upload completed with that media id. Returns the stored media (the first upload's content type wins).
    func completeUpload(id: String, media: MediaInfo, uploader: String) async throws -> MediaInfo
    /// Stored media by id.
    func media(id: String) async throws -> MediaInfo?
    /// Whether `user` uploaded the media `id` (what a post's attachment must be).
    func isUploader(_ user: String, of media: String) async throws -> Bool
    /// Whether `user` may fetch media `id`: they uploaded it, or a post in a circle they can read
    /// (public, or private with them as a member) has it as its attachment.
    func canRead(media id: String, user: String) async throws -> Bool

    /// Releases the store's resources.
    func close() async throws
}

/// A store that several Circle nodes share (``PostgresStore``). Besides what it stores, it
/// carries what nodes tell each other — that a circle advanced, typing and presence, a removed
/// member — and answers the poll that makes good what was lost on the way. The store stays the
/// truth: a node reads posts from it by `(circle, seq)`, never trusts a signal for their order.
public protocol SharedCircleStore: CircleStore {
    /// Sends notification texts to every listening node (this one included), in order. Best
    /// effort, and never inside a transaction that stores posts.
    func notify(_ notifications: [String]) async throws
    /// Until cancelled: passes every notification to `receive`, reconnecting when the
    /// connection drops; runs `connected` after each (re)connection, since notifications sent
    /// while it was down are lost.
    func listen(connected: @escaping @Sendable () async -> Void, receive: @escaping @Sendable (String) -> Void) async
    /// The newest `seq` of each of `circles` that exists.
    func lastSeqs(of circles: [String]) async throws -> [String: Int64]
    /// Members removed from private circles (``removeMember(_:from:)``) with a log id above `after`,
    /// oldest first, and the newest log id (with `after == nil`: none, and the newest id).
    func revocations(after: Int64?) async throws -> (revoked: [(circle: String, user: String)], newest: Int64)
    /// Ends of sessions and accounts (``IdentityStore/updateAccount(_:_:)``,
    /// ``IdentityStore/deleteSessions(of:id:kind:)``) with a log id above `after`, oldest first,
    /// and the newest log id (with `after == nil`: none, and the newest id).
    func accountEvents(after: Int64?) async throws -> (events: [AccountEvent], newest: Int64)
}

/// Stored media: content-addressed bytes in the data directory.
public struct MediaInfo: Sendable, Hashable, Codable {
    /// The lower-case hex SHA-256 of the bytes; also the file name under `media/`.
    public var id: String
    /// Bytes.
    public var size: Int64
    /// One of the accepted types (`image/jpeg`, …), checked against the bytes.
    public var contentType: String
    /// Milliseconds since 1970.
    public var createdAt: Int64

    public init(id: String, size: Int64, contentType: String, createdAt: Int64) {
        self.id = id
        self.size = size
        self.contentType = contentType
        self.createdAt = createdAt
    }
}

/// A resumable upload. How many bytes it has is the size of its
/// file, not a column, so a crash can never make the two disagree.
public struct MediaUpload: Sendable, Hashable {
    /// `u` and 32 hex digits, made by the server.
    public var id: String
    /// The user who created it; only they may see, continue or delete it.
    public var owner: String
    /// The total length announced when it was created.
    public var length: Int64
    /// The declared content type, checked against the bytes at completion.
    public var contentType: String
    /// Milliseconds since 1970.
    public var createdAt: Int64
    /// The media id once the upload completed.
    public var media: String?

    public init(id: String, owner: String, length: Int64, contentType: String, createdAt: Int64, media: String? = nil) {
        self.id = id
        self.owner = owner
        self.length = length
        self.contentType = contentType
        self.createdAt = createdAt
        self.media = media
    }
}

/// Posts of a history page and the circle's newest entry `seq`, read in one snapshot.
public struct HistorySnapshot: Sendable, Hashable {
    public var posts: [CirclePost]
    public var lastSeq: Int64

    public init(posts: [CirclePost], lastSeq: Int64) {
        self.posts = posts
        self.lastSeq = lastSeq
    }
}

extension CircleStore {
    public var commitExecutor: (any TaskExecutor)? { nil }

    /// Every circle `user` sees; see ``circles(visibleTo:named:)``.
    func circles(visibleTo user: String) async throws -> [CircleInfo] {
        try await self.circles(visibleTo: user, named: nil)
    }

    /// The posts of ``historySnapshot(in:before:after:limit:viewer:)``.
    func history(in circle: String, before: Int64?, after: Int64?, limit: Int, viewer: String) async throws -> [CirclePost] {
        try await self.historySnapshot(in: circle, before: before, after: after, limit: limit, viewer: viewer).posts
    }

    /// One page of history as the `history` request and `GET /v1/circles/{name}/messages`
    /// answer it: at most `limit` posts, whether more exist in the direction read, and the
    /// circle's `lastSeq` the page reflects.
    func historyPage(in circle: String, before: Int64?, after: Int64?, limit: Int, viewer: String) async throws -> (posts: [CirclePost], more: Bool, lastSeq: Int64) {
        let page = try await self.historySnapshot(in: circle, before: before, after: after, limit: limit + 1, viewer: viewer)
        if after != nil { return (Array(page.posts.prefix(limit)), page.posts.count > limit, page.lastSeq) }
        return (Array(page.posts.suffix(limit)), page.posts.count > limit, page.lastSeq)
    }
}
