import Foundation
import PostgresNIO

extension PostgresStore {
    private typealias APIKeyRow = (String, String, String, String, String, String, Int64, Int64?, Int64?, Int64?)

    public func createAPIKey(_ key: APIKey) async throws {
        try await self.operation("create API key") {
            do {
                _ = try await self.client.query(
                    """
                    INSERT INTO api_keys (id, name, secret_hash, bot, scopes, created_by, created_at, last_used_at, revoked_at, expires_at)
                    VALUES (\(key.id), \(key.name), \(key.secretHash), \(key.bot), \(APIKeyScope.stored(key.scopes)), \(key.createdBy),
                            \(key.createdAt), \(key.lastUsedAt), \(key.revokedAt), \(key.expiresAt))
                    """,
                    logger: self.logger
                )
            } catch let error where Self.sqlState(of: error) == Self.uniqueViolation {
                throw StoreError(.conflict, "an API key with the id \(key.id) exists")
            }
        }
    }

    public func apiKeys() async throws -> [APIKey] {
        try await self.operation("list API keys") {
            let rows = try await self.client.query(
                """
                SELECT id, name, secret_hash, bot, scopes, created_by, created_at, last_used_at, revoked_at, expires_at
                FROM api_keys ORDER BY created_at, id
                """,
                logger: self.logger
            )
            var keys: [APIKey] = []
            for try await row in rows.decode(APIKeyRow.self) { keys.append(Self.apiKey(row)) }
            return keys
        }
    }

    public func apiKey(id: String) async throws -> APIKey? {
        try await self.operation("read API key") {
            let rows = try await self.client.query(
                """
                SELECT id, name, secret_hash, bot, scopes, created_by, created_at, last_used_at, revoked_at, expires_at
                FROM api_keys WHERE id = \(id)
                """,
                logger: self.logger
            )
            for try await row in rows.decode(APIKeyRow.self) { return Self.apiKey(row) }
            return nil
        }
    }

    public func revokeAPIKey(id: String, at time: Int64) async throws -> Bool {
        try await self.operation("revoke API key") {
            let rows = try await self.client.query(
                "UPDATE api_keys SET revoked_at = coalesce(revoked_at, \(time)) WHERE id = \(id) RETURNING id",
                logger: self.logger
            )
            for try await _ in rows.decode(String.self) { return true }
            return false
        }
    }

    public func touchAPIKey(id: String, at time: Int64) async throws {
        try await self.operation("touch API key") {
            _ = try await self.client.query(
                "UPDATE api_keys SET last_used_at = \(time) WHERE id = \(id) AND (last_used_at IS NULL OR last_used_at < \(time))",
                logger: self.logger
            )
        }
    }

    private static func apiKey(_ row: APIKeyRow) -> APIKey {
        APIKey(
            id: row.0,
            name: row.1,
            secretHash: row.2,
            bot: row.3,
            scopes: APIKeyScope.scopes(stored: row.4),
            createdBy: row.5,
            createdAt: row.6,
            lastUsedAt: row.7,
            revokedAt: row.8,
            expiresAt: row.9
        )
    }
}
