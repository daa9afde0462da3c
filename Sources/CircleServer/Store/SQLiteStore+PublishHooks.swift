import Foundation
import SQLiteNIO

extension SQLiteStore {
    private static let publishHookColumns = "circle, url, secret, timeout_ms, on_failure, created_by, created_at"

    public func setPublishHook(_ hook: PublishHook) async throws {
        try await self.exclusive("set publish hook") { connection in
            _ = try await connection.query(
                """
                INSERT INTO publish_hooks (\(Self.publishHookColumns)) VALUES (?, ?, ?, ?, ?, ?, ?)
                ON CONFLICT (circle) DO UPDATE SET url = excluded.url, secret = excluded.secret, timeout_ms = excluded.timeout_ms,
                    on_failure = excluded.on_failure, created_by = excluded.created_by, created_at = excluded.created_at
                """,
                [
                    .text(hook.circle), .text(hook.url), .text(hook.secret), .integer(hook.timeoutMilliseconds), .text(hook.onFailure.rawValue),
                    .text(hook.createdBy), .integer(SQLiteInt64(hook.createdAt)),
                ]
            )
        }
    }

    public func publishHooks() async throws -> [PublishHook] {
        try await self.exclusive("list publish hooks") { connection in
            try await connection.query("SELECT \(Self.publishHookColumns) FROM publish_hooks ORDER BY circle").map { row in
                PublishHook(
                    circle: try Self.text(row, "circle"),
                    url: try Self.text(row, "url"),
                    secret: try Self.text(row, "secret"),
                    timeoutMilliseconds: Int(try Self.integer(row, "timeout_ms")),
                    onFailure: PublishHook.FailurePolicy(rawValue: try Self.text(row, "on_failure")) ?? .refuse,
                    createdBy: try Self.text(row, "created_by"),
                    createdAt: try Self.integer(row, "created_at")
                )
            }
        }
    }

    public func deletePublishHook(circle: String) async throws -> Bool {
        try await self.exclusive("delete publish hook") { connection in
            !(try await connection.query("DELETE FROM publish_hooks WHERE circle = ? RETURNING circle", [.text(circle)])).isEmpty
        }
    }
}

extension SQLiteStore {
    public func setReadOnly(_ circle: String, _ readOnly: Bool, by user: String, at time: Int64) async throws {
        try await self.exclusive("set read-only") { connection in
            if readOnly {
                _ = try await connection.query(
                    "INSERT INTO read_only_circles (circle, set_by, set_at) VALUES (?, ?, ?) ON CONFLICT (circle) DO NOTHING",
                    [.text(circle), .text(user), .integer(SQLiteInt64(time))]
                )
            } else {
                _ = try await connection.query("DELETE FROM read_only_circles WHERE circle = ?", [.text(circle)])
            }
        }
    }

    public func readOnlyCircles() async throws -> [String] {
        try await self.exclusive("list read-only circles") { connection in
            try await connection.query("SELECT circle FROM read_only_circles ORDER BY circle").map { try Self.text($0, "circle") }
        }
    }

    /// One node: its hub has closed the connections already.
    public func logDisconnect(of user: String, at time: Int64) async throws {}
}
