import CircleWire
import Logging
import NIOCore
import PostgresNIO

// The statements every group commit runs, and the signal that follows it, as prepared
// statements: postgres-nio prepares each once per pooled connection and then only binds and
// executes it. Sent as plain queries, PostgreSQL parsed, analysed and planned every one of them
// on every commit: parsing, analysis and planning were about a third of its CPU, with 16 writers
// on one node (`perf`; nodes.py, docs/bench/nodes.md). Prepared, they are parsed and analysed once; they are
// still planned at every execution, for the arrays at hand (`plan_cache_mode`, set in
// `PostgresStore.init`). The statements of rarer paths (edits, replies, reactions, deletions)
// stay plain queries.
extension PostgresStore {
    /// Locks the circles a batch names, in name order (a fixed order: no deadlocks).
    struct LockCircles: PostgresPreparedStatement {
        static let sql = "SELECT name, last_seq, owner, private, direct, system_entries FROM circles WHERE name = ANY($1) ORDER BY name FOR UPDATE"
        typealias Row = (String, Int64, String, Bool, String?, Bool)

        var names: [String]

        func makeBindings() -> PostgresBindings {
            var bindings = PostgresBindings(capacity: 1)
            bindings.append(self.names)
            return bindings
        }

        func decodeRow(_ row: PostgresRow) throws -> Row { try row.decode(Row.self) }
    }

    /// The stored entries with a batch's idempotency keys.
    struct StoredEntries: PostgresPreparedStatement {
        static let sql = """
            SELECT \(PostgresStore.postColumns) FROM posts
            JOIN unnest($1::text[], $2::bytea[], $3::bytea[]) AS k(key_circle, key_author, key_client_id)
              ON posts.circle = k.key_circle AND posts.author = k.key_author AND posts.client_id = k.key_client_id
            """
        typealias Row = PostgresStore.PostRow

        var keys: [PostKey]

        func makeBindings() -> PostgresBindings {
            var bindings = PostgresBindings(capacity: 3)
            bindings.append(self.keys.map(\.circle.string))
            bindings.append(self.keys.map { ByteBuffer(string: $0.author.string) })
            bindings.append(self.keys.map { ByteBuffer(string: $0.clientID.string) })
            return bindings
        }

        func decodeRow(_ row: PostgresRow) throws -> Row { try row.decode(Row.self) }
    }

    /// Inserts entries with one `unnest` statement (a column's `NULL`s travel as a flag array:
    /// postgres-nio's arrays have no optional elements).
    struct InsertEntries: PostgresPreparedStatement {
        static let sql = """
            INSERT INTO posts (circle, seq, author, client_id, text, attachment, time, change, target, emoji, reply_to, edited_at, deleted,
                               mentions, mentions_everyone, event, member)
            SELECT circle, seq, author, client_id,
                   CASE WHEN has_text THEN text END, CASE WHEN has_attachment THEN attachment END, time,
                   NULLIF(change, ''), CASE WHEN has_target THEN target END, CASE WHEN has_emoji THEN emoji END,
                   CASE WHEN has_reply_to THEN reply_to END, CASE WHEN has_edited THEN edited_at END, deleted,
                   CASE WHEN has_mentions THEN mentions END, mentions_everyone, NULLIF(event, ''), NULLIF(member, '')
            FROM unnest($1::text[], $2::int8[], $3::bytea[], $4::bytea[], $5::bytea[], $6::bool[], $7::text[], $8::bool[],
                        $9::int8[], $10::text[], $11::int8[], $12::bool[], $13::bytea[], $14::bool[], $15::int8[], $16::bool[],
                        $17::int8[], $18::bool[], $19::bool[], $20::bytea[], $21::bool[], $22::bool[], $23::text[], $24::text[])
              AS v(circle, seq, author, client_id, text, has_text, attachment, has_attachment, time, change,
                   target, has_target, emoji, has_emoji, reply_to, has_reply_to, edited_at, has_edited, deleted,
                   mentions, has_mentions, mentions_everyone, event, member)
            """
        typealias Row = ()

        var entries: [CirclePost]

        func makeBindings() -> PostgresBindings {
            let entries = self.entries
            var bindings = PostgresBindings(capacity: 24)
            bindings.append(entries.map(\.circle))
            bindings.append(entries.map(\.seq))
            bindings.append(entries.map { ByteBuffer(string: $0.author) })
            bindings.append(entries.map { ByteBuffer(string: $0.id) })
            bindings.append(entries.map { ByteBuffer(string: $0.text ?? "") })
            bindings.append(entries.map { $0.text != nil })
            bindings.append(entries.map { $0.attachment ?? "" })
            bindings.append(entries.map { $0.attachment != nil })
            bindings.append(entries.map(\.time))
            bindings.append(entries.map { $0.change?.rawValue ?? "" })
            bindings.append(entries.map { $0.target ?? 0 })
            bindings.append(entries.map { $0.target != nil })
            bindings.append(entries.map { ByteBuffer(string: $0.emoji ?? "") })
            bindings.append(entries.map { $0.emoji != nil })
            bindings.append(entries.map { $0.replyTo ?? 0 })
            bindings.append(entries.map { $0.replyTo != nil })
            bindings.append(entries.map { $0.edited ?? 0 })
            bindings.append(entries.map { $0.edited != nil })
            bindings.append(entries.map(\.deleted))
            bindings.append(entries.map { ByteBuffer(string: CommitPlan.mentionsColumn($0) ?? "") })
            bindings.append(entries.map { CommitPlan.mentionsColumn($0) != nil })
            bindings.append(entries.map(\.mentionsEveryone))
            bindings.append(entries.map { $0.event?.rawValue ?? "" })
            bindings.append(entries.map { $0.member ?? "" })
            return bindings
        }

        func decodeRow(_ row: PostgresRow) throws {}
    }

    /// Moves the circles' counters to their last new seq.
    struct SetLastSeqs: PostgresPreparedStatement {
        static let sql = """
            UPDATE circles SET last_seq = v.last_seq
            FROM unnest($1::text[], $2::int8[]) AS v(name, last_seq)
            WHERE circles.name = v.name
            """
        typealias Row = ()

        var counters: [(circle: String, lastSeq: Int64)]

        func makeBindings() -> PostgresBindings {
            var bindings = PostgresBindings(capacity: 2)
            bindings.append(self.counters.map(\.circle))
            bindings.append(self.counters.map(\.lastSeq))
            return bindings
        }

        func decodeRow(_ row: PostgresRow) throws {}
    }

    /// The webhook subscriptions a commit delivers to.
    struct ActiveWebhooks: PostgresPreparedStatement {
        static let sql = "SELECT id, circle, events, bot FROM webhooks WHERE status = 'active'"
        typealias Row = (String, String?, String, String?)

        func makeBindings() -> PostgresBindings { PostgresBindings() }

        func decodeRow(_ row: PostgresRow) throws -> Row { try row.decode(Row.self) }
    }

    /// Records a commit's webhook deliveries (``CommitPlan/webhookDeliveries(_:now:)``).
    struct InsertDeliveries: PostgresPreparedStatement {
        static let sql = """
            INSERT INTO webhook_deliveries (id, webhook, circle, seq, event, status, created_at, next_attempt_at)
            SELECT id, webhook, circle, seq, event, 'pending', created_at, next_attempt_at
            FROM unnest($1::text[], $2::text[], $3::text[], $4::int8[], $5::text[], $6::int8[], $7::int8[])
              AS v(id, webhook, circle, seq, event, created_at, next_attempt_at)
            ON CONFLICT (id) DO NOTHING
            """
        typealias Row = ()

        var deliveries: [WebhookDelivery]

        func makeBindings() -> PostgresBindings {
            var bindings = PostgresBindings(capacity: 7)
            bindings.append(self.deliveries.map(\.id))
            bindings.append(self.deliveries.map(\.webhook))
            bindings.append(self.deliveries.map(\.circle))
            bindings.append(self.deliveries.map(\.seq))
            bindings.append(self.deliveries.map(\.event.rawValue))
            bindings.append(self.deliveries.map(\.createdAt))
            bindings.append(self.deliveries.map(\.nextAttemptAt))
            return bindings
        }

        func decodeRow(_ row: PostgresRow) throws {}
    }

    /// Sends notifications on ``signalChannel``, in order.
    struct NotifyNodes: PostgresPreparedStatement {
        static let sql = "SELECT pg_notify($1, n) FROM unnest($2::text[]) WITH ORDINALITY AS s(n, i) ORDER BY i"
        typealias Row = ()

        var notifications: [String]

        func makeBindings() -> PostgresBindings {
            var bindings = PostgresBindings(capacity: 2)
            bindings.append(PostgresStore.signalChannel)
            bindings.append(self.notifications)
            return bindings
        }

        func decodeRow(_ row: PostgresRow) throws {}
    }
}

extension PostgresConnection {
    /// Executes a prepared statement that returns no rows worth reading, to its end.
    func run<Statement: PostgresPreparedStatement>(_ statement: Statement, logger: Logger) async throws where Statement.Row == () {
        for try await _ in try await self.execute(statement, logger: logger) {}
    }
}
