import Foundation
import SQLiteNIO

extension SQLiteStore {
    public func serverKey(_ name: String, candidate: String) async throws -> String {
        try await self.exclusive("read a server key") { connection in
            _ = try await connection.query("INSERT INTO server_keys (name, value) VALUES (?, ?) ON CONFLICT (name) DO NOTHING", [.text(name), .text(candidate)])
            return try Self.text(try await connection.query("SELECT value FROM server_keys WHERE name = ?", [.text(name)]).first.unwrap(), "value")
        }
    }

    public func putPushSubscription(_ subscription: PushSubscription, maxPerUser: Int) async throws {
        try await self.exclusive("store a push subscription") { connection in
            try await Self.transaction(on: connection, logger: self.logger) {
                // A subscription that moves to another user takes none of its pushes along.
                _ = try await connection.query("DELETE FROM pushes WHERE endpoint = ? AND user <> ?", [.text(subscription.endpoint), .text(subscription.user)])
                _ = try await connection.query(
                    """
                    INSERT INTO push_subscriptions (endpoint, user, p256dh, auth, created_at) VALUES (?, ?, ?, ?, ?)
                    ON CONFLICT (endpoint) DO UPDATE SET user = excluded.user, p256dh = excluded.p256dh, auth = excluded.auth, created_at = excluded.created_at
                    """,
                    [.text(subscription.endpoint), .text(subscription.user), .text(subscription.p256dh), .text(subscription.auth), .integer(Int(subscription.createdAt))]
                )
                let excess = try await connection.query(
                    "SELECT endpoint FROM push_subscriptions WHERE user = ? ORDER BY created_at DESC, endpoint LIMIT -1 OFFSET ?",
                    [.text(subscription.user), .integer(maxPerUser)]
                )
                for row in excess {
                    let endpoint = try Self.text(row, "endpoint")
                    _ = try await connection.query("DELETE FROM pushes WHERE endpoint = ?", [.text(endpoint)])
                    _ = try await connection.query("DELETE FROM push_subscriptions WHERE endpoint = ?", [.text(endpoint)])
                }
            }
        }
    }

    public func pushSubscriptions(of user: String) async throws -> [PushSubscription] {
        try await self.exclusive("list push subscriptions") { connection in
            try await connection.query(
                "SELECT endpoint, user, p256dh, auth, created_at FROM push_subscriptions WHERE user = ? ORDER BY created_at, endpoint",
                [.text(user)]
            ).map(Self.pushSubscription)
        }
    }

    public func deletePushSubscription(endpoint: String, of user: String) async throws -> Bool {
        try await self.exclusive("delete a push subscription") { connection in
            try await Self.transaction(on: connection, logger: self.logger) {
                let gone = try await connection.query("DELETE FROM push_subscriptions WHERE endpoint = ? AND user = ? RETURNING endpoint", [.text(endpoint), .text(user)])
                guard !gone.isEmpty else { return false }
                _ = try await connection.query("DELETE FROM pushes WHERE endpoint = ?", [.text(endpoint)])
                return true
            }
        }
    }

    @discardableResult
    public func deletePushSubscriptions(user: String) async throws -> Int {
        try await self.exclusive("delete a user's push subscriptions") { connection in
            try await Self.transaction(on: connection, logger: self.logger) {
                _ = try await connection.query("DELETE FROM pushes WHERE user = ?", [.text(user)])
                return try await connection.query("DELETE FROM push_subscriptions WHERE user = ? RETURNING endpoint", [.text(user)]).count
            }
        }
    }

    public func claimPushes(node: String, now: Int64, lease: Int64, limit: Int) async throws -> [PendingPush] {
        try await self.exclusiveWithoutSync("claim pushes") { connection in
            // A look without the write lock first: a dispatcher polling an empty outbox must not
            // keep the database's one writer's lock from the commits and everyone else's writes.
            let due = try await connection.query(
                "SELECT 1 FROM pushes WHERE next_attempt_at <= ?1 AND (lease_until IS NULL OR lease_until < ?1) LIMIT 1", [.integer(Int(now))]
            )
            if due.isEmpty { return [] }
            return try await Self.transaction(on: connection, logger: self.logger) {
                let rows = try await connection.query(
                    """
                    UPDATE pushes SET lease_node = ?1, lease_until = ?2
                    WHERE id IN (
                        SELECT id FROM pushes WHERE next_attempt_at <= ?3 AND (lease_until IS NULL OR lease_until < ?3)
                        ORDER BY next_attempt_at, id LIMIT ?4
                    )
                    RETURNING id, endpoint, user, circle, seq, kind, attempts, created_at
                    """,
                    [.text(node), .integer(Int(now + lease)), .integer(Int(now)), .integer(limit)]
                )
                var claimed: [PendingPush] = []
                for row in rows {
                    let endpoint = try Self.text(row, "endpoint")
                    guard let subscription = try await connection.query(
                        "SELECT endpoint, user, p256dh, auth, created_at FROM push_subscriptions WHERE endpoint = ?",
                        [.text(endpoint)]
                    ).first.map(Self.pushSubscription), subscription.user == (try Self.text(row, "user"))
                    else {
                        // The subscription went (or moved to someone else) since the push was queued.
                        _ = try await connection.query("DELETE FROM pushes WHERE id = ?", [.integer(Int(try Self.integer(row, "id")))])
                        continue
                    }
                    claimed.append(
                        PendingPush(
                            id: try Self.integer(row, "id"),
                            subscription: subscription,
                            circle: try Self.text(row, "circle"),
                            seq: try Self.integer(row, "seq"),
                            kind: PushKind(rawValue: try Self.text(row, "kind")) ?? .mention,
                            attempts: Int(try Self.integer(row, "attempts")),
                            createdAt: try Self.integer(row, "created_at")
                        )
                    )
                }
                return claimed.sorted { $0.id < $1.id }
            }
        }
    }

    public func finishPushes(_ results: [(push: PendingPush, result: PushResult)], node: String) async throws {
        guard !results.isEmpty else { return }
        try await self.exclusiveWithoutSync("record pushes") { connection in
            try await Self.transaction(on: connection, logger: self.logger) {
                for (push, result) in results {
                    let id = SQLiteData.integer(Int(push.id))
                    switch result {
                    case .delivered, .dropped, .present, .folded:
                        _ = try await connection.query("DELETE FROM pushes WHERE id = ? AND lease_node = ?", [id, .text(node)])
                    case .gone:
                        _ = try await connection.query("DELETE FROM pushes WHERE endpoint = ?", [.text(push.subscription.endpoint)])
                        _ = try await connection.query("DELETE FROM push_subscriptions WHERE endpoint = ?", [.text(push.subscription.endpoint)])
                    case .retry(let at):
                        _ = try await connection.query(
                            "UPDATE pushes SET attempts = attempts + 1, next_attempt_at = ?, lease_node = NULL, lease_until = NULL WHERE id = ? AND lease_node = ?",
                            [.integer(Int(at)), id, .text(node)]
                        )
                    case .deferred(let until):
                        _ = try await connection.query(
                            "UPDATE pushes SET next_attempt_at = ?, lease_node = NULL, lease_until = NULL WHERE id = ? AND lease_node = ?",
                            [.integer(Int(until)), id, .text(node)]
                        )
                    case .released:
                        _ = try await connection.query("UPDATE pushes SET lease_node = NULL, lease_until = NULL WHERE id = ? AND lease_node = ?", [id, .text(node)])
                    }
                }
            }
        }
    }

    public func queuedPushes() async throws -> Int {
        try await self.exclusive("count pushes") { connection in
            Int(try Self.integer(try await connection.query("SELECT count(*) AS n FROM pushes").first.unwrap(), "n"))
        }
    }

    public func markConnections(node: String, counts: [String: Int], now: Int64) async throws {
        guard !counts.isEmpty else { return }
        try await self.exclusiveWithoutSync("record connections") { connection in
            try await Self.transaction(on: connection, logger: self.logger) {
                for (user, count) in counts {
                    _ = try await connection.query(
                        """
                        INSERT INTO user_connections (user, node, connections, seen_at) VALUES (?, ?, ?, ?)
                        ON CONFLICT (user, node) DO UPDATE SET connections = excluded.connections, seen_at = max(seen_at, excluded.seen_at)
                        """,
                        [.text(user), .text(node), .integer(count), .integer(Int(now))]
                    )
                }
            }
        }
    }

    public func refreshConnections(node: String, now: Int64, forgetBefore: Int64) async throws {
        try await self.exclusiveWithoutSync("refresh connections") { connection in
            try await Self.transaction(on: connection, logger: self.logger) {
                _ = try await connection.query(
                    "UPDATE user_connections SET seen_at = max(seen_at, ?) WHERE node = ? AND connections > 0", [.integer(Int(now)), .text(node)]
                )
                _ = try await connection.query("DELETE FROM user_connections WHERE seen_at < ?", [.integer(Int(forgetBefore))])
            }
        }
    }

    public func connectionMarks(users: [String]) async throws -> [String: [ConnectionMark]] {
        guard !users.isEmpty else { return [:] }
        return try await self.exclusiveWithoutSync("read connections") { connection in
            var marks: [String: [ConnectionMark]] = [:]
            for user in Set(users) {
                for row in try await connection.query("SELECT node, connections, seen_at FROM user_connections WHERE user = ?", [.text(user)]) {
                    marks[user, default: []].append(
                        ConnectionMark(node: try Self.text(row, "node"), connections: Int(try Self.integer(row, "connections")), seenAt: try Self.integer(row, "seen_at"))
                    )
                }
            }
            return marks
        }
    }

    public func lastPushesSent(_ keys: [PushBurstKey]) async throws -> [PushBurstKey: Int64] {
        guard !keys.isEmpty else { return [:] }
        return try await self.exclusiveWithoutSync("read pushes sent") { connection in
            var sent: [PushBurstKey: Int64] = [:]
            for key in Set(keys) {
                if let row = try await connection.query(
                    "SELECT sent_at FROM push_sent WHERE endpoint = ? AND circle = ?", [.text(key.endpoint), .text(key.circle)]
                ).first {
                    sent[key] = try Self.integer(row, "sent_at")
                }
            }
            return sent
        }
    }

    public func recordPushesSent(_ keys: [PushBurstKey], at: Int64, forgetBefore: Int64) async throws {
        try await self.exclusiveWithoutSync("record pushes sent") { connection in
            try await Self.transaction(on: connection, logger: self.logger) {
                for key in Set(keys) {
                    _ = try await connection.query(
                        """
                        INSERT INTO push_sent (endpoint, circle, sent_at) VALUES (?, ?, ?)
                        ON CONFLICT (endpoint, circle) DO UPDATE SET sent_at = max(sent_at, excluded.sent_at)
                        """,
                        [.text(key.endpoint), .text(key.circle), .integer(Int(at))]
                    )
                }
                _ = try await connection.query("DELETE FROM push_sent WHERE sent_at < ?", [.integer(Int(forgetBefore))])
            }
        }
    }

    private static func pushSubscription(_ row: SQLiteRow) throws -> PushSubscription {
        PushSubscription(
            user: try Self.text(row, "user"),
            endpoint: try Self.text(row, "endpoint"),
            p256dh: try Self.text(row, "p256dh"),
            auth: try Self.text(row, "auth"),
            createdAt: try Self.integer(row, "created_at")
        )
    }
}

extension Optional {
    /// The value, or a store error (a query that always returns a row returned none).
    fileprivate func unwrap() throws -> Wrapped {
        guard let self else { throw StoreError(.unavailable, "SQLite returned no row") }
        return self
    }
}
