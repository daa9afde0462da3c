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
    /// in PostgreSQL: `excluded` makes the test of a column against it), 3 perWebhook, 4 queues, 5 perQueue.
    ///
    /// Its cost does not grow with the backlog (deliveries pile up behind a slow endpoint): the
    /// queues' heads are found by hopping through the pending index from one queue to the next
    /// (one index seek per queue), and each queue's run is bounded by its `perQueue`-th seq,
    /// another seek.
    static func claimCandidates(excluded: (_ column: String) -> String, parameter: (Int) -> String) -> String {
        """
        WITH RECURSIVE heads(webhook, circle, seq, due, lease_until) AS (
            SELECT webhook, circle, seq, next_attempt_at, lease_until FROM (
                SELECT webhook, circle, seq, next_attempt_at, lease_until FROM webhook_deliveries
                WHERE status = 'pending' ORDER BY webhook, circle, seq LIMIT 1
            ) AS first
            UNION ALL
            SELECT d.webhook, d.circle, d.seq, d.next_attempt_at, d.lease_until FROM heads h JOIN webhook_deliveries d ON d.id = coalesce((
                SELECT n.id FROM webhook_deliveries n
                WHERE n.status = 'pending' AND n.webhook = h.webhook AND n.circle > h.circle ORDER BY n.circle, n.seq LIMIT 1
            ), (
                SELECT n.id FROM webhook_deliveries n
                WHERE n.status = 'pending' AND n.webhook > h.webhook ORDER BY n.webhook, n.circle, n.seq LIMIT 1
            ))
        ), ready AS (
            SELECT webhook, circle, seq, due FROM (
                SELECT h.webhook, h.circle, h.seq, h.due, row_number() OVER (PARTITION BY h.webhook ORDER BY h.due, h.circle) AS n
                FROM heads h JOIN webhooks w ON w.id = h.webhook
                WHERE w.status = 'active' AND h.due <= \(parameter(1)) AND h.lease_until <= \(parameter(1))
                    AND NOT (\(excluded("h.webhook")))
            ) AS candidates WHERE n <= \(parameter(3)) ORDER BY due LIMIT \(parameter(4))
        )
        SELECT d.id FROM ready r
        JOIN webhook_deliveries d ON d.webhook = r.webhook AND d.circle = r.circle AND d.status = 'pending' AND d.seq >= r.seq
            AND d.seq <= coalesce((
                SELECT e.seq FROM webhook_deliveries e
                WHERE e.status = 'pending' AND e.webhook = r.webhook AND e.circle = r.circle
                ORDER BY e.seq LIMIT 1 OFFSET \(parameter(5)) - 1
            ), 9223372036854775807)
        """
    }

    public func claimDeliveries(node: String, now: Int64, lease: Int64, queues: Int, perWebhook: Int, perQueue: Int, excluding: [String]) async throws
        -> [WebhookDelivery]
    {
        try await self.exclusiveWithoutSync("claim deliveries") { connection in
            let excluded = try Self.jsonList(excluding)
            let candidates = Self.claimCandidates(excluded: { "\($0) IN (SELECT value FROM json_each(?2))" }) { "?\($0)" }
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
        try await self.exclusiveWithoutSync("renew leases") { connection in
            let list = try Self.jsonList(ids)
            _ = try await connection.query(
                "UPDATE webhook_deliveries SET lease_until = ? WHERE id IN (SELECT value FROM json_each(?)) AND claimed_by = ? AND status = 'pending'",
                [.integer(SQLiteInt64(until)), .text(list), .text(node)]
            )
        }
    }

    public func finishDeliveries(_ results: [(id: String, result: DeliveryResult?)], node: String, at now: Int64) async throws -> Int {
        guard !results.isEmpty else { return 0 }
        let record = DeliveryRecord(results, at: now)
        return try await self.exclusiveWithoutSync("finish deliveries") { connection in
            func write() async throws -> Int {
                if !record.released.isEmpty {
                    _ = try await connection.query(
                        "UPDATE webhook_deliveries SET claimed_by = NULL, lease_until = 0 WHERE id IN (SELECT value FROM json_each(?)) AND claimed_by = ? AND status = 'pending'",
                        [.text(try Self.jsonList(record.released)), .text(node)]
                    )
                }
                var recorded = 0
                for (attempt, ids) in record.attempts {
                    let rows = try await connection.query(
                        """
                        UPDATE webhook_deliveries
                        SET status = ?, attempts = attempts + 1, last_attempt_at = ?, last_status = ?, last_error = ?, next_attempt_at = ?,
                            claimed_by = NULL, lease_until = 0
                        WHERE id IN (SELECT value FROM json_each(?)) AND claimed_by = ? AND status = 'pending'
                        RETURNING webhook
                        """,
                        [
                            .text(attempt.status.rawValue), .integer(SQLiteInt64(now)), attempt.httpStatus.map { .integer($0) } ?? .null,
                            attempt.error.map { .text($0) } ?? .null, .integer(SQLiteInt64(attempt.next)), .text(try Self.jsonList(ids)), .text(node),
                        ]
                    )
                    recorded += rows.count
                    if let reason = attempt.disables, let row = rows.first {
                        _ = try await connection.query(
                            "UPDATE webhooks SET status = 'disabled', disabled_reason = ? WHERE id = ?",
                            [.text(reason), .text(try Self.text(row, "webhook"))]
                        )
                    }
                }
                return recorded
            }
            // The usual record (a run delivered) is one statement: no transaction around it.
            guard record.statements > 1 else { return try await write() }
            return try await Self.transaction(on: connection, logger: self.logger) { try await write() }
        }
    }

    private static func jsonList(_ values: [String]) throws -> String {
        String(decoding: try JSONEncoder().encode(values), as: UTF8.self)
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
