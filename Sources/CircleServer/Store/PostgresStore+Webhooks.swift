import Foundation
import NIOCore
import PostgresNIO

extension PostgresStore {
    // MARK: - Subscriptions

    private typealias WebhookRow = (String, String, String?, String, String, String, String?, String?, String, Int64)

    public func createWebhook(_ webhook: Webhook) async throws {
        try await self.operation("create webhook") {
            _ = try await self.client.query(
                """
                INSERT INTO webhooks (id, url, circle, events, secrets, status, disabled_reason, bot, created_by, created_at)
                VALUES (\(webhook.id), \(webhook.url), \(webhook.circle), \(webhook.eventList), \(webhook.secrets.joined(separator: " ")),
                        \(webhook.status.rawValue), \(webhook.disabledReason), \(webhook.bot), \(webhook.createdBy), \(webhook.createdAt))
                """,
                logger: self.logger
            )
        }
    }

    public func webhooks() async throws -> [Webhook] {
        try await self.operation("list webhooks") {
            var webhooks: [Webhook] = []
            let rows = try await self.client.query(
                "SELECT id, url, circle, events, secrets, status, disabled_reason, bot, created_by, created_at FROM webhooks ORDER BY created_at, id",
                logger: self.logger
            )
            for try await row in rows.decode(WebhookRow.self) { webhooks.append(Self.webhook(row)) }
            return webhooks
        }
    }

    public func webhook(id: String) async throws -> Webhook? {
        try await self.operation("read webhook") {
            let rows = try await self.client.query(
                "SELECT id, url, circle, events, secrets, status, disabled_reason, bot, created_by, created_at FROM webhooks WHERE id = \(id)",
                logger: self.logger
            )
            for try await row in rows.decode(WebhookRow.self) { return Self.webhook(row) }
            return nil
        }
    }

    public func updateWebhook(_ webhook: Webhook) async throws -> Bool {
        try await self.operation("update webhook") {
            let rows = try await self.client.query(
                """
                UPDATE webhooks SET status = \(webhook.status.rawValue), disabled_reason = \(webhook.disabledReason),
                                    secrets = \(webhook.secrets.joined(separator: " "))
                WHERE id = \(webhook.id) RETURNING id
                """,
                logger: self.logger
            )
            for try await _ in rows.decode(String.self) { return true }
            return false
        }
    }

    public func deleteWebhook(id: String) async throws -> Bool {
        try await self.operation("delete webhook") {
            try await self.client.withTransaction(logger: self.logger) { connection in
                try await connection.query("DELETE FROM webhook_deliveries WHERE webhook = \(id)", logger: self.logger)
                for try await _ in try await connection.query("DELETE FROM webhooks WHERE id = \(id) RETURNING id", logger: self.logger).decode(String.self) {
                    return true
                }
                return false
            }
        }
    }

    private static func webhook(_ row: WebhookRow) -> Webhook {
        Webhook(
            id: row.0,
            url: row.1,
            circle: row.2,
            events: Webhook.events(from: row.3),
            secrets: row.4.split(separator: " ").map(String.init),
            status: WebhookStatus(rawValue: row.5) ?? .disabled,
            disabledReason: row.6,
            bot: row.7,
            createdBy: row.8,
            createdAt: row.9
        )
    }

    // MARK: - Deliveries

    private typealias DeliveryRow = (String, String, String, Int64, String, String, Int32, Int64, Int64, Int64?, Int32?, String?)

    public func deliveries(of webhook: String, limit: Int) async throws -> [WebhookDelivery] {
        try await self.operation("list deliveries") {
            let rows = try await self.client.query(
                """
                SELECT id, webhook, circle, seq, event, status, attempts, created_at, next_attempt_at, last_attempt_at, last_status, last_error
                FROM webhook_deliveries WHERE webhook = \(webhook) ORDER BY created_at DESC, seq DESC LIMIT \(limit)
                """,
                logger: self.logger
            )
            var deliveries: [WebhookDelivery] = []
            for try await row in rows.decode(DeliveryRow.self) { deliveries.append(Self.delivery(row)) }
            return deliveries
        }
    }

    public func deliveryCounts(of webhook: String) async throws -> [WebhookDeliveryStatus: Int] {
        try await self.operation("count deliveries") {
            var counts: [WebhookDeliveryStatus: Int] = [:]
            let rows = try await self.client.query(
                "SELECT status, count(*) FROM webhook_deliveries WHERE webhook = \(webhook) GROUP BY status",
                logger: self.logger
            )
            for try await (status, count) in rows.decode((String, Int64).self) {
                if let status = WebhookDeliveryStatus(rawValue: status) { counts[status] = Int(count) }
            }
            return counts
        }
    }

    public func claimDeliveries(node: String, now: Int64, lease: Int64, queues: Int, perWebhook: Int, perQueue: Int, excluding: [String]) async throws
        -> [WebhookDelivery]
    {
        try await self.operation("claim deliveries") {
            try await self.client.withTransaction(logger: self.logger) { connection in
                // 1. The candidates, as in SQLite. (FOR UPDATE cannot go with a window function,
                // so the rows are locked in a second step.)
                var bindings = PostgresBindings(capacity: 5)
                bindings.append(now)
                bindings.append(excluding)
                bindings.append(perWebhook)
                bindings.append(queues)
                bindings.append(perQueue)
                let candidatesSQL = SQLiteStore.claimCandidates(excludedClause: "webhook = ANY($2::text[])") { "$\($0)" }
                var candidates: [String] = []
                for try await id in try await connection.query(PostgresQuery(unsafeSQL: candidatesSQL, binds: bindings), logger: self.logger).decode(String.self) {
                    candidates.append(id)
                }
                guard !candidates.isEmpty else { return [] }
                // 2. Lock them, skipping rows another node's claim holds; a committed lease fails
                // the re-checked condition. Rows may exist as a candidate here and be locked by a
                // claim that saw fewer pending rows: a queue is taken only from its head on, with
                // no gap, so no two nodes ever send parts of one queue.
                var locked: [WebhookDelivery] = []
                let rows = try await connection.query(
                    """
                    SELECT id, webhook, circle, seq, event, status, attempts, created_at, next_attempt_at, last_attempt_at, last_status, last_error
                    FROM webhook_deliveries
                    WHERE id = ANY(\(candidates)::text[]) AND status = 'pending' AND lease_until <= \(now)
                    ORDER BY webhook, circle, seq
                    FOR UPDATE SKIP LOCKED
                    """,
                    logger: self.logger
                )
                for try await row in rows.decode(DeliveryRow.self) { locked.append(Self.delivery(row)) }
                var accepted: [WebhookDelivery] = []
                for (_, queue) in Dictionary(grouping: locked, by: { "\($0.webhook)\u{0}\($0.circle)" }) {
                    let mine = queue.sorted { $0.seq < $1.seq }
                    // Taken only from the queue's head on, with no gap: the longest run of the
                    // queue's pending deliveries, in order, that this claim locked.
                    let pending = try await connection.query(
                        """
                        SELECT seq FROM webhook_deliveries
                        WHERE webhook = \(mine[0].webhook) AND circle = \(mine[0].circle) AND status = 'pending'
                        ORDER BY seq LIMIT \(mine.count)
                        """,
                        logger: self.logger
                    )
                    var index = 0
                    for try await seq in pending.decode(Int64.self) {
                        guard index < mine.count, mine[index].seq == seq else { break }
                        index += 1
                    }
                    accepted += mine.prefix(index)
                }
                guard !accepted.isEmpty else { return [] }
                let ids = accepted.map(\.id)
                try await connection.query(
                    """
                    UPDATE webhook_deliveries SET claimed_by = \(node), lease_until = \(now + lease)
                    WHERE id = ANY(\(ids)::text[])
                    """,
                    logger: self.logger
                )
                return accepted.sorted { ($0.webhook, $0.circle, $0.seq) < ($1.webhook, $1.circle, $1.seq) }
            }
        }
    }

    public func renewLeases(_ ids: [String], node: String, until: Int64) async throws {
        guard !ids.isEmpty else { return }
        try await self.operation("renew leases") {
            _ = try await self.client.query(
                "UPDATE webhook_deliveries SET lease_until = \(until) WHERE id = ANY(\(ids)::text[]) AND claimed_by = \(node) AND status = 'pending'",
                logger: self.logger
            )
        }
    }

    public func finishDeliveries(_ results: [(id: String, result: DeliveryResult?)], node: String, at now: Int64) async throws -> Int {
        guard !results.isEmpty else { return 0 }
        return try await self.operation("finish deliveries") {
            try await self.client.withTransaction(logger: self.logger) { connection in
                var recorded = 0
                for (id, result) in results {
                    guard let result else {
                        try await connection.query(
                            "UPDATE webhook_deliveries SET claimed_by = NULL, lease_until = 0 WHERE id = \(id) AND claimed_by = \(node) AND status = 'pending'",
                            logger: self.logger
                        )
                        continue
                    }
                    let attempt = DeliveryAttempt(result, at: now)
                    let code = attempt.httpStatus.map { Int32(clamping: $0) }
                    let rows = try await connection.query(
                        """
                        UPDATE webhook_deliveries
                        SET status = \(attempt.status.rawValue), attempts = attempts + 1, last_attempt_at = \(now), last_status = \(code),
                            last_error = \(attempt.error), next_attempt_at = \(attempt.next), claimed_by = NULL, lease_until = 0
                        WHERE id = \(id) AND claimed_by = \(node) AND status = 'pending'
                        RETURNING webhook
                        """,
                        logger: self.logger
                    )
                    var webhook: String?
                    for try await found in rows.decode(String.self) { webhook = found }
                    guard let webhook else { continue }
                    recorded += 1
                    if let reason = attempt.disables {
                        try await connection.query("UPDATE webhooks SET status = 'disabled', disabled_reason = \(reason) WHERE id = \(webhook)", logger: self.logger)
                    }
                }
                return recorded
            }
        }
    }

    public func retryDelivery(_ id: String, of webhook: String, now: Int64) async throws -> Bool {
        try await self.operation("retry delivery") {
            let rows = try await self.client.query(
                """
                UPDATE webhook_deliveries SET status = 'pending', next_attempt_at = \(now), created_at = \(now), claimed_by = NULL, lease_until = 0
                WHERE id = \(id) AND webhook = \(webhook) AND status = 'failed' RETURNING id
                """,
                logger: self.logger
            )
            for try await _ in rows.decode(String.self) { return true }
            return false
        }
    }

    public func pruneDeliveries(deliveredBefore time: Int64) async throws -> Int {
        try await self.operation("prune deliveries") {
            var count = 0
            let rows = try await self.client.query(
                "DELETE FROM webhook_deliveries WHERE status = 'delivered' AND last_attempt_at < \(time) RETURNING id",
                logger: self.logger
            )
            for try await _ in rows.decode(String.self) { count += 1 }
            return count
        }
    }

    private static func delivery(_ row: DeliveryRow) -> WebhookDelivery {
        WebhookDelivery(
            id: row.0,
            webhook: row.1,
            circle: row.2,
            seq: row.3,
            event: WebhookEvent(rawValue: row.4) ?? .post,
            status: WebhookDeliveryStatus(rawValue: row.5) ?? .pending,
            attempts: Int(row.6),
            createdAt: row.7,
            nextAttemptAt: row.8,
            lastAttemptAt: row.9,
            lastStatus: row.10.map(Int.init),
            lastError: row.11
        )
    }
}
