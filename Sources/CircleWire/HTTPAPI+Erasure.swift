/// The JSON shapes of erasing a person and the audit log (docs/API.md, "Erasing a person").
extension HTTPAPI.Path {
    public static let adminAudit = "/v1/admin/audit"

    /// `POST`: erase a person's data.
    public static func adminUserErase(_ name: String) -> String { Pattern.adminUserErase.path(name) }
}

extension HTTPAPI {
    /// What erasing a person did (`POST /v1/admin/users/{name}/erase`).
    public struct Erased: Codable, Sendable, Hashable {
        public var user: String
        /// Their posts that became tombstones.
        public var posts: Int
        /// Their reactions taken back (as `unreact` entries).
        public var reactions: Int
        /// Circles they were removed from.
        public var memberships: Int
        /// Media files removed (uploaded by them, attached to no other post).
        public var media: Int
        /// Uploads removed (pending or completed).
        public var uploads: Int
        /// `anonymised` or `removed`.
        public var account: String

        public init(user: String, posts: Int, reactions: Int, memberships: Int, media: Int, uploads: Int, account: String) {
            self.user = user
            self.posts = posts
            self.reactions = reactions
            self.memberships = memberships
            self.media = media
            self.uploads = uploads
            self.account = account
        }
    }

    /// One line of the audit log.
    public struct AuditEntryInfo: Codable, Sendable, Hashable {
        public var id: Int64
        /// Milliseconds since 1970.
        public var time: Int64
        public var actor: String
        /// `erase-user`.
        public var action: String
        public var subject: String
        public var detail: String

        public init(id: Int64, time: Int64, actor: String, action: String, subject: String, detail: String) {
            self.id = id
            self.time = time
            self.actor = actor
            self.action = action
            self.subject = subject
            self.detail = detail
        }
    }

    /// `GET /v1/admin/audit`: newest first; `next` is the `before` of the next page.
    public struct AuditLog: Codable, Sendable, Hashable {
        public var entries: [AuditEntryInfo]
        public var next: Int64?

        public init(entries: [AuditEntryInfo], next: Int64?) {
            self.entries = entries
            self.next = next
        }
    }
}
