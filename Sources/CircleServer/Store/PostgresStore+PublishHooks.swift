import Foundation
import PostgresNIO

extension PostgresStore {
    public func setPublishHook(_ hook: PublishHook) async throws {
        try await self.operation("set publish hook") {
            _ = try await self.client.query(
                """
                INSERT INTO publish_hooks (circle, url, secret, timeout_ms, on_failure, created_by, created_at)
                VALUES (\(hook.circle), \(hook.url), \(hook.secret), \(hook.timeoutMilliseconds), \(hook.onFailure.rawValue), \(hook.createdBy),
                        \(hook.createdAt))
                ON CONFLICT (circle) DO UPDATE SET url = excluded.url, secret = excluded.secret, timeout_ms = excluded.timeout_ms,
                    on_failure = excluded.on_failure, created_by = excluded.created_by, created_at = excluded.created_at
                """,
                logger: self.logger
            )
        }
    }

    public func publishHooks() async throws -> [PublishHook] {
        try await self.operation("list publish hooks") {
            let rows = try await self.client.query(
                "SELECT circle, url, secret, timeout_ms, on_failure, created_by, created_at FROM publish_hooks ORDER BY circle",
                logger: self.logger
            )
            var hooks: [PublishHook] = []
            for try await row in rows.decode((String, String, String, Int, String, String, Int64).self) {
                hooks.append(
                    PublishHook(
                        circle: row.0, url: row.1, secret: row.2, timeoutMilliseconds: row.3, onFailure: PublishHook.FailurePolicy(rawValue: row.4) ?? .refuse,
                        createdBy: row.5, createdAt: row.6
                    )
                )
            }
            return hooks
        }
    }

    public func deletePublishHook(circle: String) async throws -> Bool {
        try await self.operation("delete publish hook") {
            let rows = try await self.client.query("DELETE FROM publish_hooks WHERE circle = \(circle) RETURNING circle", logger: self.logger)
            for try await _ in rows.decode(String.self) { return true }
            return false
        }
    }
}

extension PostgresStore {
    public func setReadOnly(_ circle: String, _ readOnly: Bool, by user: String, at time: Int64) async throws {
        try await self.operation("set read-only") {
            if readOnly {
                _ = try await self.client.query(
                    "INSERT INTO read_only_circles (circle, set_by, set_at) VALUES (\(circle), \(user), \(time)) ON CONFLICT (circle) DO NOTHING",
                    logger: self.logger
                )
            } else {
                _ = try await self.client.query("DELETE FROM read_only_circles WHERE circle = \(circle)", logger: self.logger)
            }
        }
    }

    public func readOnlyCircles() async throws -> [String] {
        try await self.operation("list read-only circles") {
            var circles: [String] = []
            for try await circle in try await self.client.query("SELECT circle FROM read_only_circles ORDER BY circle", logger: self.logger).decode(String.self) {
                circles.append(circle)
            }
            return circles
        }
    }

    public func logDisconnect(of user: String, at time: Int64) async throws {
        try await self.operation("log disconnect") {
            _ = try await self.client.query("INSERT INTO account_events (user_name, session, at) VALUES (\(user), NULL, \(time))", logger: self.logger)
        }
    }
}
