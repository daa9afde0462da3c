/// The JSON shapes of API keys (docs/API.md, "API keys").
extension HTTPAPI.Path {
    public static let adminAPIKeys = "/v1/admin/api-keys"

    public static func adminAPIKey(_ id: String) -> String { Pattern.adminAPIKey.path(id) }
}

extension HTTPAPI {
    /// The scopes an API key may hold (docs/API.md, "API keys").
    public static let apiKeyScopes = ["post_as_bot", "post_as_user", "manage", "read", "moderate", "admin"]
    /// The furthest an API key's `expiresAt` may be: five years ahead.
    public static let maxAPIKeyLifetimeDays = 5 * 366

    /// `POST /v1/admin/api-keys`.
    public struct CreateAPIKey: Codable, Sendable, Hashable {
        /// What the key is for: 1–60 characters.
        public var name: String
        /// The bot account it acts as: an existing bot, or a new one made with the key.
        public var bot: String
        /// One or more of ``HTTPAPI/apiKeyScopes``.
        public var scopes: [String]
        /// When it stops working, milliseconds since 1970: in the future, at most
        /// ``HTTPAPI/maxAPIKeyLifetimeDays`` days ahead; absent: never.
        public var expiresAt: Int64?
        public init(name: String, bot: String, scopes: [String], expiresAt: Int64? = nil) {
            self.name = name
            self.bot = bot
            self.scopes = scopes
            self.expiresAt = expiresAt
        }
    }

    /// A key as the admin API shows it. `key` only in the answer that makes it: it is shown once.
    public struct APIKeyInfo: Codable, Sendable, Hashable {
        public var id: String
        public var name: String
        public var bot: String
        public var scopes: [String]
        public var createdBy: String
        public var createdAt: Int64
        /// The last request it authenticated (to the minute).
        public var lastUsedAt: Int64?
        public var revokedAt: Int64?
        public var expiresAt: Int64?
        public var key: String?
        public init(
            id: String, name: String, bot: String, scopes: [String], createdBy: String, createdAt: Int64, lastUsedAt: Int64?, revokedAt: Int64?,
            key: String? = nil, expiresAt: Int64? = nil
        ) {
            self.expiresAt = expiresAt
            self.id = id
            self.name = name
            self.bot = bot
            self.scopes = scopes
            self.createdBy = createdBy
            self.createdAt = createdAt
            self.lastUsedAt = lastUsedAt
            self.revokedAt = revokedAt
            self.key = key
        }
    }

    public struct APIKeyList: Codable, Sendable, Hashable {
        public var keys: [APIKeyInfo]
        public init(keys: [APIKeyInfo]) { self.keys = keys }
    }
}
