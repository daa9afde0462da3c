/// What an API key may do (docs/API.md, "API keys"). A key has one or more; every route that
/// takes keys names the scope it needs, and a route that names none refuses keys.
public enum APIKeyScope: String, Sendable, Hashable, Codable, CaseIterable, Comparable {
    /// Post, edit, delete and react as the key's bot.
    case postAsBot = "post_as_bot"
    /// Post, edit, delete and react as any user (`as`).
    case postAsUser = "post_as_user"
    /// Create circles (owned by the key's bot); add and remove members of any circle.
    case manage
    /// List circles and read history, as the key's bot sees them.
    case read
    /// Delete any post.
    case moderate
    /// The admin API (`/v1/admin/…`).
    case admin

    public static func < (lhs: Self, rhs: Self) -> Bool {
        Self.allCases.firstIndex(of: lhs)! < Self.allCases.firstIndex(of: rhs)!
    }

    /// Scopes as stored: names separated by spaces.
    static func stored(_ scopes: Set<APIKeyScope>) -> String { scopes.sorted().map(\.rawValue).joined(separator: " ") }
    static func scopes(stored text: String) -> Set<APIKeyScope> { Set(text.split(separator: " ").compactMap { Self(rawValue: String($0)) }) }
}

/// An API key: a secret an app's backend sends as `Authorization: Bearer circle_key_…`. Only its
/// SHA-256 is stored; the key itself is shown once, when it is made.
public struct APIKey: Sendable, Hashable {
    /// The public id (lists, revocation); also the part of the key before its `.`.
    public var id: String
    /// What the admin called it.
    public var name: String
    /// Lower-case hex SHA-256 of the whole key.
    public var secretHash: String
    /// The bot account the key acts as: the author of its posts (`post_as_bot`), the reader of
    /// its history (`read`), the owner of the circles it makes (`manage`).
    public var bot: String
    public var scopes: Set<APIKeyScope>
    public var createdBy: String
    /// Milliseconds since 1970.
    public var createdAt: Int64
    /// The last request it authenticated (written at most once a minute).
    public var lastUsedAt: Int64?
    /// When an admin revoked it; a revoked key authenticates nothing.
    public var revokedAt: Int64?
    /// When it stops working (milliseconds since 1970); `nil`: never. An expired key is
    /// answered `401 key_expired`.
    public var expiresAt: Int64?

    public init(
        id: String,
        name: String,
        secretHash: String,
        bot: String,
        scopes: Set<APIKeyScope>,
        createdBy: String,
        createdAt: Int64,
        lastUsedAt: Int64? = nil,
        revokedAt: Int64? = nil,
        expiresAt: Int64? = nil
    ) {
        self.id = id
        self.name = name
        self.secretHash = secretHash
        self.bot = bot
        self.scopes = scopes
        self.createdBy = createdBy
        self.createdAt = createdAt
        self.lastUsedAt = lastUsedAt
        self.revokedAt = revokedAt
        self.expiresAt = expiresAt
    }

    /// Every key starts with this (a personal or session credential never does: theirs have no `.`).
    public static let prefix = "circle_key_"

    /// The id in a presented key (`circle_key_<id>.<secret>`), or `nil` when it is not shaped like one.
    static func id(in key: String) -> String? {
        guard key.hasPrefix(Self.prefix), key.utf8.count <= 200 else { return nil }
        let rest = key.dropFirst(Self.prefix.count)
        guard let dot = rest.firstIndex(of: "."), dot != rest.startIndex, rest.index(after: dot) != rest.endIndex else { return nil }
        return String(rest[..<dot])
    }
}

/// API keys: the third part of a store's identity tables (StoreContractTests run it on both).
public protocol APIKeyStore: Sendable {
    /// `StoreError(.conflict)` when the id is taken.
    func createAPIKey(_ key: APIKey) async throws
    /// Every key, revoked ones too, oldest first.
    func apiKeys() async throws -> [APIKey]
    func apiKey(id: String) async throws -> APIKey?
    /// Marks the key revoked at `time` (a second revocation keeps the first time); `false` when
    /// there is no such key.
    func revokeAPIKey(id: String, at time: Int64) async throws -> Bool
    /// Records a use at `time` (never moves back).
    func touchAPIKey(id: String, at time: Int64) async throws
}
