import Foundation
import PostgresNIO

extension PostgresStore {
    public func serverKey(_ name: String, candidate: String) async throws -> String {
        try await self.operation("read a server key") {
            try await self.client.withTransaction(logger: self.logger) { connection in
                // Nodes starting at once: the first insert wins, every node reads the winner.
                try await connection.query("INSERT INTO server_keys (name, value) VALUES (\(name), \(candidate)) ON CONFLICT (name) DO NOTHING", logger: self.logger)
                for try await value in try await connection.query("SELECT value FROM server_keys WHERE name = \(name)", logger: self.logger).decode(String.self) {
                    return value
                }
                throw StoreError(.unavailable, "PostgreSQL returned no server key")
            }
        }
    }

    public func putPushSubscription(_ subscription: PushSubscription, maxPerUser: Int) async throws {
        try await self.operation("store a push subscription") {
            try await self.client.withTransaction(logger: self.logger) { connection in
                // One user's subscriptions change one at a time (the count below holds).
                try await connection.query("SELECT pg_advisory_xact_lock(hashtext(\("push:" + subscription.user)))", logger: self.logger)
                try await connection.query(
                    "DELETE FROM pushes WHERE endpoint = \(subscription.endpoint) AND user_name <> \(subscription.user)",
                    logger: self.logger
                )
                try await connection.query(
                    """
                    INSERT INTO push_subscriptions (endpoint, user_name, p256dh, auth, created_at)
                    VALUES (\(subscription.endpoint), \(subscription.user), \(subscription.p256dh), \(subscription.auth), \(subscription.createdAt))
                    ON CONFLICT (endpoint) DO UPDATE SET user_name = EXCLUDED.user_name, p256dh = EXCLUDED.p256dh, auth = EXCLUDED.auth,
                        created_at = EXCLUDED.created_at
                    """,
                    logger: self.logger
                )
                var excess: [String] = []
                let rows = try await connection.query(
                    "SELECT endpoint FROM push_subscriptions WHERE user_name = \(subscription.user) ORDER BY created_at DESC, endpoint OFFSET \(maxPerUser)",
                    logger: self.logger
                )
                for try await endpoint in rows.decode(String.self) { excess.append(endpoint) }
                if !excess.isEmpty {
                    try await connection.query("DELETE FROM pushes WHERE endpoint = ANY(\(excess))", logger: self.logger)
                    try await connection.query("DELETE FROM push_subscriptions WHERE endpoint = ANY(\(excess))", logger: self.logger)
                }
            }
        }
    }

    public func pushSubscriptions(of user: String) async throws -> [PushSubscription] {
        try await self.operation("list push subscriptions") {
            var subscriptions: [PushSubscription] = []
            let rows = try await self.client.query(
                "SELECT endpoint, user_name, p256dh, auth, created_at FROM push_subscriptions WHERE user_name = \(user) ORDER BY created_at, endpoint",
                logger: self.logger
            )
            for try await (endpoint, user, p256dh, auth, createdAt) in rows.decode((String, String, String, String, Int64).self) {
                subscriptions.append(PushSubscription(user: user, endpoint: endpoint, p256dh: p256dh, auth: auth, createdAt: createdAt))
            }
            return subscriptions
        }
    }

    public func deletePushSubscription(endpoint: String, of user: String) async throws -> Bool {
        try await self.operation("delete a push subscription") {
            try await self.client.withTransaction(logger: self.logger) { connection in
                var gone = false
                let rows = try await connection.query(
                    "DELETE FROM push_subscriptions WHERE endpoint = \(endpoint) AND user_name = \(user) RETURNING endpoint",
                    logger: self.logger
                )
                for try await _ in rows.decode(String.self) { gone = true }
                if gone {
                    try await connection.query("DELETE FROM pushes WHERE endpoint = \(endpoint)", logger: self.logger)
                }
                return gone
            }
        }
    }

    @discardableResult
    public func deletePushSubscriptions(user: String) async throws -> Int {
        try await self.operation("delete a user's push subscriptions") {
            try await self.client.withTransaction(logger: self.logger) { connection in
                try await connection.query("DELETE FROM pushes WHERE user_name = \(user)", logger: self.logger)
                var count = 0
                let rows = try await connection.query("DELETE FROM push_subscriptions WHERE user_name = \(user) RETURNING endpoint", logger: self.logger)
                for try await _ in rows.decode(String.self) { count += 1 }
                return count
            }
        }
    }

    public func claimPushes(node: String, now: Int64, lease: Int64, limit: Int) async throws -> [PendingPush] {
        try await self.operation("claim pushes") {
            try await self.client.withTransaction(logger: self.logger) { connection in
                // SKIP LOCKED: two nodes claiming at once take different rows; a lease taken and
                // committed by another node is seen in `lease_until`.
                let rows = try await connection.query(
                    """
                    UPDATE pushes p SET lease_node = \(node), lease_until = \(now + lease)
                    FROM (
                        SELECT id FROM pushes WHERE next_attempt_at <= \(now) AND (lease_until IS NULL OR lease_until < \(now))
                        ORDER BY next_attempt_at, id LIMIT \(limit) FOR UPDATE SKIP LOCKED
                    ) AS due
                    WHERE p.id = due.id
                    RETURNING p.id, p.endpoint, p.user_name, p.circle, p.seq, p.kind, p.attempts, p.created_at
                    """,
                    logger: self.logger
                )
                var queued: [(Int64, String, String, String, Int64, String, Int32, Int64)] = []
                for try await row in rows.decode((Int64, String, String, String, Int64, String, Int32, Int64).self) { queued.append(row) }
                guard !queued.isEmpty else { return [] }
                var subscriptions: [String: PushSubscription] = [:]
                let found = try await connection.query(
                    "SELECT endpoint, user_name, p256dh, auth, created_at FROM push_subscriptions WHERE endpoint = ANY(\(queued.map(\.1)))",
                    logger: self.logger
                )
                for try await (endpoint, user, p256dh, auth, createdAt) in found.decode((String, String, String, String, Int64).self) {
                    subscriptions[endpoint] = PushSubscription(user: user, endpoint: endpoint, p256dh: p256dh, auth: auth, createdAt: createdAt)
                }
                var claimed: [PendingPush] = []
                var orphans: [Int64] = []
                for (id, endpoint, user, circle, seq, kind, attempts, createdAt) in queued {
                    guard let subscription = subscriptions[endpoint], subscription.user == user else {
                        orphans.append(id)
                        continue
                    }
                    claimed.append(
                        PendingPush(
                            id: id, subscription: subscription, circle: circle, seq: seq, kind: PushKind(rawValue: kind) ?? .mention,
                            attempts: Int(attempts), createdAt: createdAt
                        )
                    )
                }
                if !orphans.isEmpty {
                    try await connection.query("DELETE FROM pushes WHERE id = ANY(\(orphans))", logger: self.logger)
                }
                return claimed.sorted { $0.id < $1.id }
            }
        }
    }

    public func finishPushes(_ results: [(push: PendingPush, result: PushResult)], node: String) async throws {
        guard !results.isEmpty else { return }
        try await self.operation("record pushes") {
            try await self.client.withTransaction(logger: self.logger) { connection in
                for (push, result) in results {
                    switch result {
                    case .delivered, .dropped, .present, .folded:
                        try await connection.query("DELETE FROM pushes WHERE id = \(push.id) AND lease_node = \(node)", logger: self.logger)
                    case .gone:
                        try await connection.query("DELETE FROM pushes WHERE endpoint = \(push.subscription.endpoint)", logger: self.logger)
                        try await connection.query("DELETE FROM push_subscriptions WHERE endpoint = \(push.subscription.endpoint)", logger: self.logger)
                    case .retry(let at):
                        try await connection.query(
                            """
                            UPDATE pushes SET attempts = attempts + 1, next_attempt_at = \(at), lease_node = NULL, lease_until = NULL
                            WHERE id = \(push.id) AND lease_node = \(node)
                            """,
                            logger: self.logger
                        )
                    case .deferred(let until):
                        try await connection.query(
                            "UPDATE pushes SET next_attempt_at = \(until), lease_node = NULL, lease_until = NULL WHERE id = \(push.id) AND lease_node = \(node)",
                            logger: self.logger
                        )
                    case .released:
                        try await connection.query(
                            "UPDATE pushes SET lease_node = NULL, lease_until = NULL WHERE id = \(push.id) AND lease_node = \(node)",
                            logger: self.logger
                        )
                    }
                }
            }
        }
    }

    public func markConnections(node: String, counts: [String: Int], now: Int64) async throws {
        guard !counts.isEmpty else { return }
        let users = Array(counts.keys).sorted()
        let connections = users.map { counts[$0] ?? 0 }
        try await self.operation("record connections") {
            _ = try await self.client.query(
                """
                INSERT INTO user_connections (user_name, node, connections, seen_at)
                SELECT u, \(node), c, \(now) FROM unnest(\(users)::text[], \(connections)::bigint[]) AS t(u, c)
                ON CONFLICT (user_name, node) DO UPDATE SET connections = EXCLUDED.connections,
                    seen_at = GREATEST(user_connections.seen_at, EXCLUDED.seen_at)
                """,
                logger: self.logger
            )
        }
    }

    public func refreshConnections(node: String, now: Int64, forgetBefore: Int64) async throws {
        try await self.operation("refresh connections") {
            try await self.client.withTransaction(logger: self.logger) { connection in
                try await connection.query(
                    "UPDATE user_connections SET seen_at = GREATEST(seen_at, \(now)) WHERE node = \(node) AND connections > 0", logger: self.logger
                )
                try await connection.query("DELETE FROM user_connections WHERE seen_at < \(forgetBefore)", logger: self.logger)
            }
        }
    }

    public func connectionMarks(users: [String]) async throws -> [String: [ConnectionMark]] {
        guard !users.isEmpty else { return [:] }
        return try await self.operation("read connections") {
            var marks: [String: [ConnectionMark]] = [:]
            let rows = try await self.client.query(
                "SELECT user_name, node, connections, seen_at FROM user_connections WHERE user_name = ANY(\(Array(Set(users))))",
                logger: self.logger
            )
            for try await (user, node, connections, seenAt) in rows.decode((String, String, Int32, Int64).self) {
                marks[user, default: []].append(ConnectionMark(node: node, connections: Int(connections), seenAt: seenAt))
            }
            return marks
        }
    }

    public func lastPushesSent(_ keys: [PushBurstKey]) async throws -> [PushBurstKey: Int64] {
        guard !keys.isEmpty else { return [:] }
        let unique = Array(Set(keys))
        return try await self.operation("read pushes sent") {
            var sent: [PushBurstKey: Int64] = [:]
            let rows = try await self.client.query(
                """
                SELECT s.endpoint, s.circle, s.sent_at FROM push_sent s
                JOIN unnest(\(unique.map(\.endpoint))::text[], \(unique.map(\.circle))::text[]) AS k(endpoint, circle)
                    ON s.endpoint = k.endpoint AND s.circle = k.circle
                """,
                logger: self.logger
            )
            for try await (endpoint, circle, at) in rows.decode((String, String, Int64).self) {
                sent[PushBurstKey(endpoint: endpoint, circle: circle)] = at
            }
            return sent
        }
    }

    public func recordPushesSent(_ keys: [PushBurstKey], at: Int64, forgetBefore: Int64) async throws {
        let unique = Array(Set(keys)).sorted { ($0.endpoint, $0.circle) < ($1.endpoint, $1.circle) }
        try await self.operation("record pushes sent") {
            try await self.client.withTransaction(logger: self.logger) { connection in
                if !unique.isEmpty {
                    try await connection.query(
                        """
                        INSERT INTO push_sent (endpoint, circle, sent_at)
                        SELECT e, c, \(at) FROM unnest(\(unique.map(\.endpoint))::text[], \(unique.map(\.circle))::text[]) AS k(e, c)
                        ON CONFLICT (endpoint, circle) DO UPDATE SET sent_at = GREATEST(push_sent.sent_at, EXCLUDED.sent_at)
                        """,
                        logger: self.logger
                    )
                }
                try await connection.query("DELETE FROM push_sent WHERE sent_at < \(forgetBefore)", logger: self.logger)
            }
        }
    }

    public func queuedPushes() async throws -> Int {
        try await self.operation("count pushes") {
            for try await count in try await self.client.query("SELECT count(*) FROM pushes", logger: self.logger).decode(Int64.self) {
                return Int(count)
            }
            return 0
        }
    }
}
