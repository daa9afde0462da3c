import Foundation
import SQLiteNIO

extension SQLiteStore {
    private static let apiKeyColumns = "id, name, secret_hash, bot, scopes, created_by, created_at, last_used_at, revoked_at, expires_at"

    public func createAPIKey(_ key: APIKey) async throws {
        try await self.exclusive("create API key") { connection in
            try await Self.transaction(on: connection, logger: self.logger) {
                guard try await connection.query("SELECT id FROM api_keys WHERE id = ?", [.text(key.id)]).isEmpty else {
                    throw StoreError(.conflict, "an API key with the id \(key.id) exists")
                }
                _ = try await connection.query(
                    "INSERT INTO api_keys (\(Self.apiKeyColumns)) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    [
                        .text(key.id), .text(key.name), .text(key.secretHash), .text(key.bot), .text(APIKeyScope.stored(key.scopes)),
                        .text(key.createdBy), .integer(SQLiteInt64(key.createdAt)), key.lastUsedAt.map { .integer(SQLiteInt64($0)) } ?? .null,
                        key.revokedAt.map { .integer(SQLiteInt64($0)) } ?? .null, key.expiresAt.map { .integer(SQLiteInt64($0)) } ?? .null,
                    ]
                )
            }
        }
    }

    public func apiKeys() async throws -> [APIKey] {
        try await self.exclusive("list API keys") { connection in
            try await connection.query("SELECT \(Self.apiKeyColumns) FROM api_keys ORDER BY created_at, id").map(Self.apiKey)
        }
    }

    public func apiKey(id: String) async throws -> APIKey? {
        try await self.exclusive("read API key") { connection in
            try await connection.query("SELECT \(Self.apiKeyColumns) FROM api_keys WHERE id = ?", [.text(id)]).first.map(Self.apiKey)
        }
    }

    public func revokeAPIKey(id: String, at time: Int64) async throws -> Bool {
        try await self.exclusive("revoke API key") { connection in
            !(try await connection.query(
                "UPDATE api_keys SET revoked_at = coalesce(revoked_at, ?) WHERE id = ? RETURNING id",
                [.integer(SQLiteInt64(time)), .text(id)]
            )).isEmpty
        }
    }

    public func touchAPIKey(id: String, at time: Int64) async throws {
        try await self.exclusive("touch API key") { connection in
            _ = try await connection.query(
                "UPDATE api_keys SET last_used_at = ? WHERE id = ? AND (last_used_at IS NULL OR last_used_at < ?)",
                [.integer(SQLiteInt64(time)), .text(id), .integer(SQLiteInt64(time))]
            )
        }
    }

    private static func apiKey(_ row: SQLiteRow) throws -> APIKey {
        func optional(_ column: String) -> Int64? {
            if case .integer(let value)? = row.column(column) { return Int64(value) }
            return nil
        }
        return APIKey(
            id: try Self.text(row, "id"),
            name: try Self.text(row, "name"),
            secretHash: try Self.text(row, "secret_hash"),
            bot: try Self.text(row, "bot"),
            scopes: APIKeyScope.scopes(stored: try Self.text(row, "scopes")),
            createdBy: try Self.text(row, "created_by"),
            createdAt: try Self.integer(row, "created_at"),
            lastUsedAt: optional("last_used_at"),
            revokedAt: optional("revoked_at"),
            expiresAt: optional("expires_at")
        )
    }
}
