import Foundation
import NIOCore
import SQLiteNIO

extension SQLiteStore {
    // MARK: - Subscriptions

    private static let webhookColumns = "id, url, circle, events, secrets, status, disabled_reason, bot, created_by, created_at"

    public func createWebhook(_ webhook: Webhook) async throws {
        try await self.exclusive("create webhook") { connection in
            _ = try await connection.query(
                "INSERT INTO webhooks (\(Self.webhookColumns)) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    .text(webhook.id), .text(webhook.url), webhook.circle.map { .text($0) } ?? .null, .text(webhook.eventList),
                    .text(webhook.secrets.joined(separator: " ")), .text(webhook.status.rawValue), webhook.disabledReason.map { .text($0) } ?? .null,
                    webhook.bot.map { .text($0) } ?? .null, .text(webhook.createdBy), .integer(SQLiteInt64(webhook.createdAt)),
                ]
            )
        }
    }

    public func webhooks() async throws -> [Webhook] {
        try await self.exclusive("list webhooks") { connection in
            try await connection.query("SELECT \(Self.webhookColumns) FROM webhooks ORDER BY created_at, id").map(Self.webhook)
        }
    }

    public func webhook(id: String) async throws -> Webhook? {
        try await self.exclusive("read webhook") { connection in
            try await connection.query("SELECT \(Self.webhookColumns) FROM webhooks WHERE id = ?", [.text(id)]).first.map(Self.webhook)
        }
    }

    public func updateWebhook(_ webhook: Webhook) async throws -> Bool {
        try await self.exclusive("update webhook") { connection in
            let rows = try await connection.query(
                "UPDATE webhooks SET status = ?, disabled_reason = ?, secrets = ? WHERE id = ? RETURNING id",
                [
                    .text(webhook.status.rawValue), webhook.disabledReason.map { .text($0) } ?? .null, .text(webhook.secrets.joined(separator: " ")),
                    .text(webhook.id),
                ]
            )
            return !rows.isEmpty
        }
    }

    public func deleteWebhook(id: String) async throws -> Bool {
        try await self.exclusive("delete webhook") { connection in
            try await Self.transaction(on: connection, logger: self.logger) {
                _ = try await connection.query("DELETE FROM webhook_deliveries WHERE webhook = ?", [.text(id)])
                return !(try await connection.query("DELETE FROM webhooks WHERE id = ? RETURNING id", [.text(id)])).isEmpty
            }
        }
    }

    private static func webhook(_ row: SQLiteRow) throws -> Webhook {
        Webhook(
            id: try Self.text(row, "id"),
            url: try Self.text(row, "url"),
            circle: row.column("circle")?.string,
            events: Webhook.events(from: try Self.text(row, "events")),
            secrets: try Self.text(row, "secrets").split(separator: " ").map(String.init),
            status: WebhookStatus(rawValue: try Self.text(row, "status")) ?? .disabled,
            disabledReason: row.column("disabled_reason")?.string,
            bot: row.column("bot")?.string,
            createdBy: try Self.text(row, "created_by"),
            createdAt: try Self.integer(row, "created_at")
        )
    }

    // MARK: - Deliveries

    private static let deliveryColumns =
        "id, webhook, circle, seq, event, status, attempts, created_at, next_attempt_at, last_attempt_at, last_status, last_error"

    public func deliveries(of webhook: String, limit: Int) async throws -> [WebhookDelivery] {
        try await self.exclusive("list deliveries") { connection in
            try await connection.query(
                "SELECT \(Self.deliveryColumns) FROM webhook_deliveries WHERE webhook = ? ORDER BY created_at DESC, seq DESC LIMIT ?",
                [.text(webhook), .integer(limit)]
            ).map(Self.delivery)
        }
    }

    public func deliveryCounts(of webhook: String) async throws -> [WebhookDeliveryStatus: Int] {
        try await self.exclusive("count deliveries") { connection in
            var counts: [WebhookDeliveryStatus: Int] = [:]
            for row in try await connection.query("SELECT status, count(*) AS n FROM webhook_deliveries WHERE webhook = ? GROUP BY status", [.text(webhook)]) {
                if let status = WebhookDeliveryStatus(rawValue: try Self.text(row, "status")) {
                    counts[status] = Int(try Self.integer(row, "n"))
                }
            }
            return counts
        }
    }

    /// The deliveries a claim takes (SQLite and PostgreSQL alike): the first `perQueue` pending
    /// of each queue that is due, at most `perWebhook` queues of one subscription and `queues`
    /// in all. Parameters: 1 now, 2 the excluded subscriptions (a JSON array in SQLite, an array
    /// in PostgreSQL, see `excludedClause`), 3 perWebhook, 4 queues, 5 perQueue.
    static func claimCandidates(excludedClause: String, parameter: (Int) -> String) -> String {
        """
        WITH heads AS (
            SELECT webhook, circle, min(seq) AS seq FROM webhook_deliveries
            WHERE status = 'pending' AND NOT (\(excludedClause))
            GROUP BY webhook, circle
        ), ready AS (
            SELECT webhook, circle, due FROM (
                SELECT h.webhook, h.circle, d.next_attempt_at AS due,
                       row_number() OVER (PARTITION BY h.webhook ORDER BY d.next_attempt_at, h.circle) AS n
                FROM heads h
                JOIN webhook_deliveries d ON d.webhook = h.webhook AND d.circle = h.circle AND d.seq = h.seq
                JOIN webhooks w ON w.id = h.webhook
                WHERE w.status = 'active' AND d.next_attempt_at <= \(parameter(1)) AND d.lease_until <= \(parameter(1))
            ) AS candidates WHERE n <= \(parameter(3)) ORDER BY due LIMIT \(parameter(4))
        )
        SELECT id FROM (
            SELECT d.id, row_number() OVER (PARTITION BY d.webhook, d.circle ORDER BY d.seq) AS rank
            FROM webhook_deliveries d JOIN ready r ON d.webhook = r.webhook AND d.circle = r.circle
            WHERE d.status = 'pending'
        ) AS queued WHERE rank <= \(parameter(5))
        """
    }

    public func claimDeliveries(node: String, now: Int64, lease: Int64, queues: Int, perWebhook: Int, perQueue: Int, excluding: [String]) async throws
        -> [WebhookDelivery]
    {
        try await self.exclusive("claim deliveries") { connection in
            let excluded = String(decoding: try JSONEncoder().encode(excluding), as: UTF8.self)
            let candidates = Self.claimCandidates(excludedClause: "webhook IN (SELECT value FROM json_each(?2))") { "?\($0)" }
            return try await connection.query(
                "UPDATE webhook_deliveries SET claimed_by = ?6, lease_until = ?7 WHERE id IN (\(candidates)) RETURNING \(Self.deliveryColumns)",
                [
                    .integer(SQLiteInt64(now)), .text(excluded), .integer(perWebhook), .integer(queues), .integer(perQueue), .text(node),
                    .integer(SQLiteInt64(now + lease)),
                ]
            ).map(Self.delivery).sorted { ($0.webhook, $0.circle, $0.seq) < ($1.webhook, $1.circle, $1.seq) }
        }
    }

    public func renewLeases(_ ids: [String], node: String, until: Int64) async throws {
        guard !ids.isEmpty else { return }
        try await self.exclusive("renew leases") { connection in
            let list = String(decoding: try JSONEncoder().encode(ids), as: UTF8.self)
            _ = try await connection.query(
                "UPDATE webhook_deliveries SET lease_until = ? WHERE id IN (SELECT value FROM json_each(?)) AND claimed_by = ? AND status = 'pending'",
                [.integer(SQLiteInt64(until)), .text(list), .text(node)]
            )
        }
    }

    public func finishDeliveries(_ results: [(id: String, result: DeliveryResult?)], node: String, at now: Int64) async throws -> Int {
        guard !results.isEmpty else { return 0 }
        return try await self.exclusive("finish deliveries") { connection in
            try await Self.transaction(on: connection, logger: self.logger) {
                var recorded = 0
                for (id, result) in results {
                    guard let result else {
                        _ = try await connection.query(
                            "UPDATE webhook_deliveries SET claimed_by = NULL, lease_until = 0 WHERE id = ? AND claimed_by = ? AND status = 'pending'",
                            [.text(id), .text(node)]
                        )
                        continue
                    }
                    let attempt = DeliveryAttempt(result, at: now)
                    let rows = try await connection.query(
                        """
                        UPDATE webhook_deliveries
                        SET status = ?, attempts = attempts + 1, last_attempt_at = ?, last_status = ?, last_error = ?, next_attempt_at = ?,
                            claimed_by = NULL, lease_until = 0
                        WHERE id = ? AND claimed_by = ? AND status = 'pending'
                        RETURNING webhook
                        """,
                        [
                            .text(attempt.status.rawValue), .integer(SQLiteInt64(now)), attempt.httpStatus.map { .integer($0) } ?? .null,
                            attempt.error.map { .text($0) } ?? .null, .integer(SQLiteInt64(attempt.next)), .text(id), .text(node),
                        ]
                    )
                    guard let row = rows.first else { continue }
                    recorded += 1
                    if let reason = attempt.disables {
                        _ = try await connection.query(
                            "UPDATE webhooks SET status = 'disabled', disabled_reason = ? WHERE id = ?",
                            [.text(reason), .text(try Self.text(row, "webhook"))]
                        )
                    }
                }
                return recorded
            }
        }
    }

    public func retryDelivery(_ id: String, of webhook: String, now: Int64) async throws -> Bool {
        try await self.exclusive("retry delivery") { connection in
            let rows = try await connection.query(
                """
                UPDATE webhook_deliveries SET status = 'pending', next_attempt_at = ?, created_at = ?, claimed_by = NULL, lease_until = 0
                WHERE id = ? AND webhook = ? AND status = 'failed' RETURNING id
                """,
                [.integer(SQLiteInt64(now)), .integer(SQLiteInt64(now)), .text(id), .text(webhook)]
            )
            return !rows.isEmpty
        }
    }

    public func pruneDeliveries(deliveredBefore time: Int64) async throws -> Int {
        try await self.exclusive("prune deliveries") { connection in
            try await connection.query(
                "DELETE FROM webhook_deliveries WHERE status = 'delivered' AND last_attempt_at < ? RETURNING id",
                [.integer(SQLiteInt64(time))]
            ).count
        }
    }

    private static func delivery(_ row: SQLiteRow) throws -> WebhookDelivery {
        WebhookDelivery(
            id: try Self.text(row, "id"),
            webhook: try Self.text(row, "webhook"),
            circle: try Self.text(row, "circle"),
            seq: try Self.integer(row, "seq"),
            event: WebhookEvent(rawValue: try Self.text(row, "event")) ?? .post,
            status: WebhookDeliveryStatus(rawValue: try Self.text(row, "status")) ?? .pending,
            attempts: Int(try Self.integer(row, "attempts")),
            createdAt: try Self.integer(row, "created_at"),
            nextAttemptAt: try Self.integer(row, "next_attempt_at"),
            lastAttemptAt: row.column("last_attempt_at")?.integer.map(Int64.init),
            lastStatus: row.column("last_status")?.integer,
            lastError: row.column("last_error")?.string
        )
    }
}
