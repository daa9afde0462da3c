/// What erasing a person needs from a store (docs/OPERATIONS.md, "Erasing a person"), and the
/// audit log that records who erased whom.
public protocol ErasureStore: Sendable {
    /// Up to `limit` posts of `author` that are not deleted (not change entries), as
    /// (circle, seq), oldest first per circle: what ``Erasure`` turns into tombstones.
    func livePosts(by author: String, limit: Int) async throws -> [EntryRef]
    /// Up to `limit` reactions of `user` standing on posts: what ``Erasure`` takes back.
    func reactions(by user: String, limit: Int) async throws -> [ReactionRef]
    /// In one transaction: removes `user`'s read markers, notification levels, rows in the
    /// mentions table, pending and completed uploads, media uploader records, and the media they
    /// uploaded that no post has as its attachment any more (their ids are returned, with the
    /// upload ids, so that the files go too); anonymises the account (display name and photo
    /// cleared, password removed, deactivated) or removes it; appends `audit` to the audit log.
    func eraseAccountData(of user: String, removeAccount: Bool, audit: AuditEntry) async throws -> ErasedFiles
    /// The audit log, newest first: at most `limit` entries with an id below `before`.
    func auditLog(before: Int64?, limit: Int) async throws -> [AuditEntry]
}

/// An entry, by circle and seq.
public struct EntryRef: Sendable, Hashable {
    public var circle: String
    public var seq: Int64

    public init(circle: String, seq: Int64) {
        self.circle = circle
        self.seq = seq
    }
}

/// A reaction of one person on a post.
public struct ReactionRef: Sendable, Hashable {
    public var circle: String
    public var post: Int64
    public var emoji: String

    public init(circle: String, post: Int64, emoji: String) {
        self.circle = circle
        self.post = post
        self.emoji = emoji
    }
}

/// What ``ErasureStore/eraseAccountData(of:removeAccount:audit:)`` removed whose bytes are files.
public struct ErasedFiles: Sendable, Hashable {
    public var media: [String]
    public var uploads: [String]

    public init(media: [String], uploads: [String]) {
        self.media = media
        self.uploads = uploads
    }
}

/// One line of the audit log (`GET /v1/admin/audit`).
public struct AuditEntry: Sendable, Hashable, Codable {
    /// Increasing; 0 before it is stored.
    public var id: Int64
    /// Milliseconds since 1970.
    public var time: Int64
    /// Who did it (an admin's name).
    public var actor: String
    /// `erase-user`.
    public var action: String
    /// Whom or what it was done to.
    public var subject: String
    /// What was done, in numbers and words (`posts=12 reactions=3 account=anonymised`).
    public var detail: String

    public init(id: Int64 = 0, time: Int64, actor: String, action: String, subject: String, detail: String) {
        self.id = id
        self.time = time
        self.actor = actor
        self.action = action
        self.subject = subject
        self.detail = detail
    }
}
