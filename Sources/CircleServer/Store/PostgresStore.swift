import CircleHTTPClient
import CircleWire
import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOSSL
import PostgresNIO

/// The shared durable store for several nodes: PostgreSQL through postgres-nio's connection pool.
///
/// ```swift
/// let store = try PostgresStore(url: "postgres://circle:secret@db:5432/circle", logger: logger)
/// try await withThrowingDiscardingTaskGroup { group in
///     group.addTask { await store.run() }      // the connection pool; until cancelled
///     try await store.migrate()
///     let outcomes = try await store.commit(batch)
///     group.cancelAll()
/// }
/// ```
///
/// ### Sequence numbers without gaps, across nodes
/// PostgreSQL sequences leave gaps (a rolled-back `nextval` is never handed out again), so each
/// circle's `last_seq` is a counter in its `circles` row. A commit first locks the rows of the
/// batch's circles (`SELECT … FOR UPDATE`, in name order so two batches cannot deadlock), then looks
/// up the batch's idempotency keys — after the lock, so a post another node committed for the same
/// key meanwhile is seen — and what its changes and replies name (their target posts, the
/// reactions on them), applies the entries in memory and numbers them from the locked `last_seq`s
/// (``CommitPlan``, shared with ``SQLiteStore``), inserts them with one `unnest` statement, writes
/// what the changes did to posts and reactions and updates the counters, all in one transaction.
/// A batch of posts alone takes four statements, whatever its size. Writers to different circles do not wait for
/// each other; writers to one circle are serialized by its row lock, which is what gapless
/// numbering in commit order means.
///
/// ### An answer only with the truth
/// When the connection fails during a commit, whether PostgreSQL committed is unknown. The commit
/// is then tried again (every ``commitRetryDelay`` until ``commitTruthDeadline``): being keyed by
/// idempotency keys, the retry stores what was not stored and answers `.duplicate` with the
/// original for what was, so the caller learns the truth instead of guessing "not stored". Only
/// when PostgreSQL stays unreachable past the deadline does `commit` throw
/// `StoreError(.unavailable)` saying that the outcome is unknown.
///
/// Post texts, authors and client ids are `bytea`: PostgreSQL's `text` cannot hold a NUL
/// character, which JSON (and so a post) may contain, and bytes compare as ``PostKey`` compares them.
public final class PostgresStore: CircleStore {
    let client: PostgresClient
    let logger: Logger
    public let configuration: Configuration
    /// How long a commit whose outcome is unknown keeps trying to learn it.
    let commitTruthDeadline: Duration
    let commitRetryDelay: Duration
    /// The longest one operation (or one commit attempt) may take, waiting for a connection included.
    let operationTimeout: Duration
    /// `true` once this node read that the search index holds every post (`search_backfill.done`);
    /// it never becomes false again.
    let searchIndexDone = NIOLockedValueBox(false)

    /// Connects lazily: nothing is opened until ``run()`` runs and a query needs a connection.
    ///
    /// - Parameters:
    ///   - url: `postgres://user:password@host:port/database?sslmode=…` (see ``Configuration``).
    ///   - maximumConnections: The pool's size on this node.
    public convenience init(url: String, maximumConnections: Int = 8, logger: Logger) throws {
        try self.init(configuration: Configuration(url: url), maximumConnections: maximumConnections, logger: logger)
    }

    public init(
        configuration: Configuration,
        maximumConnections: Int = 8,
        commitTruthDeadline: Duration = .seconds(30),
        commitRetryDelay: Duration = .milliseconds(250),
        operationTimeout: Duration = .seconds(10),
        logger: Logger
    ) throws {
        var clientConfiguration = PostgresClient.Configuration(
            host: configuration.host,
            port: configuration.port,
            username: configuration.user,
            password: configuration.password,
            database: configuration.database,
            tls: configuration.clientTLS()
        )
        clientConfiguration.options.maximumConnections = maximumConnections
        clientConfiguration.options.connectTimeout = .seconds(5)
        // The commit's statements are prepared once per connection (PostgresStore+Statements);
        // each execution is still planned for its own arrays. A generic plan, which PostgreSQL
        // would settle on after five executions, is made from the tables' statistics at that
        // moment. On a new database those are empty tables: the keys' lookup became a scan of
        // the whole index, slower as the table grew (more than twice the database's CPU per
        // post in nodes.py, docs/bench/nodes.md).
        clientConfiguration.options.additionalStartupParameters = [("plan_cache_mode", "force_custom_plan")]
        var logger = logger
        logger[metadataKey: "circle.store"] = "postgres"
        self.client = PostgresClient(configuration: clientConfiguration, backgroundLogger: logger)
        self.logger = logger
        self.configuration = configuration
        self.commitTruthDeadline = commitTruthDeadline
        self.commitRetryDelay = commitRetryDelay
        self.operationTimeout = operationTimeout
    }

    /// Runs the connection pool until the task is cancelled (or graceful shutdown, in a
    /// `ServiceGroup`). Queries wait for it.
    public func run() async {
        await self.client.run()
    }

    /// Throws unless PostgreSQL answers a query within the operation bound (a clear error at
    /// start beats a server whose every request fails).
    public func checkConnection() async throws {
        try await self.operation("connect") {
            _ = try await self.client.query("SELECT 1", logger: self.logger)
        }
    }

    // MARK: - Circles and members

    /// Migrations may wait for another node's (they take turns on an advisory lock) and run DDL,
    /// so they get a longer bound than other operations: 2 minutes.
    public func migrate() async throws {
        try await self.operation("migrate", limit: .seconds(120)) {
            try await Self.applyMigrations(client: self.client, logger: self.logger)
        }
    }

    /// Migrates only up to schema `version`: a database as an older server left it; for tests.
    func migrate(upTo version: Int) async throws {
        try await self.operation("migrate", limit: .seconds(120)) {
            try await Self.applyMigrations(client: self.client, logger: self.logger, upTo: version)
        }
    }

    public func createCircle(name: String, owner: String, isPrivate: Bool, createdAt: Int64) async throws -> CircleInfo {
        try await self.operation("create circle") {
            do {
                try await self.client.withTransaction(logger: self.logger) { connection in
                    try await connection.query(
                        "INSERT INTO circles (name, owner, private, created_at) VALUES (\(name), \(owner), \(isPrivate), \(createdAt))",
                        logger: self.logger
                    )
                    try await connection.query(
                        "INSERT INTO members (circle, user_name) VALUES (\(name), \(owner))",
                        logger: self.logger
                    )
                }
            } catch let error where Self.sqlState(of: error) == Self.uniqueViolation {
                throw StoreError(.conflict, "circle \"\(name)\" exists")
            }
            return CircleInfo(name: name, owner: owner, isPrivate: isPrivate, createdAt: createdAt, lastSeq: 0)
        }
    }

    public func circle(named name: String) async throws -> CircleInfo? {
        try await self.operation("read circle") {
            let rows = try await self.client.query(
                "SELECT name, owner, private, created_at, last_seq, direct, system_entries FROM circles WHERE name = \(name)",
                logger: self.logger
            )
            for try await row in rows.decode((String, String, Bool, Int64, Int64, String?, Bool).self) {
                return CircleInfo(
                    name: row.0, owner: row.1, isPrivate: row.2, createdAt: row.3, lastSeq: row.4, direct: DirectMessageKey.members(fromColumn: row.5),
                    systemEntries: row.6
                )
            }
            return nil
        }
    }

    /// One transaction: insert the circle unless its name is taken (a concurrent start of the
    /// same one waits for the other's commit, then inserts nothing), then read it by its key.
    public func directMessage(_ members: DirectMessageKey, starter: String, createdAt: Int64) async throws -> CircleInfo {
        try await self.operation("start a direct message") {
            let name = members.circleName
            let key = members.key
            let found = try await self.client.withTransaction(logger: self.logger) { connection -> CircleInfo? in
                let inserted = try await connection.query(
                    """
                    INSERT INTO circles (name, owner, private, created_at, direct) VALUES (\(name), \(starter), true, \(createdAt), \(key))
                    ON CONFLICT DO NOTHING RETURNING name
                    """,
                    logger: self.logger
                )
                var made = false
                for try await _ in inserted.decode(String.self) { made = true }
                if made {
                    try await connection.query(
                        "INSERT INTO members (circle, user_name) SELECT \(name), unnest(\(members.members)::text[])",
                        logger: self.logger
                    )
                }
                let rows = try await connection.query(
                    "SELECT name, owner, private, created_at, last_seq FROM circles WHERE direct = \(key)",
                    logger: self.logger
                )
                for try await row in rows.decode((String, String, Bool, Int64, Int64).self) {
                    return CircleInfo(name: row.0, owner: row.1, isPrivate: row.2, createdAt: row.3, lastSeq: row.4, direct: members.members)
                }
                return nil
            }
            guard let found else { throw StoreError(.conflict, "circle \"\(name)\" exists") }
            return found
        }
    }

    public func setNotificationLevel(_ level: NotificationLevel?, of user: String, in circle: String) async throws {
        try await self.operation("set a notification level") {
            let rows = try await self.client.query("SELECT 1 FROM circles WHERE name = \(circle)", logger: self.logger)
            var exists = false
            for try await _ in rows.decode(Int32.self) { exists = true }
            guard exists else { throw StoreError.noSuchCircle(circle) }
            if let level {
                try await self.client.query(
                    """
                    INSERT INTO notification_levels (user_name, circle, level) VALUES (\(user), \(circle), \(level.rawValue))
                    ON CONFLICT (user_name, circle) DO UPDATE SET level = EXCLUDED.level
                    """,
                    logger: self.logger
                )
            } else {
                try await self.client.query("DELETE FROM notification_levels WHERE user_name = \(user) AND circle = \(circle)", logger: self.logger)
            }
        }
    }

    /// One query: the visible circles with the user's marker, and per circle a count over the
    /// posts above it (the primary key's range `(circle, seq > marker)`), stopped at
    /// ``StoreLimits/unreadCountLimit`` rows.
    public func circles(visibleTo user: String, named name: String?) async throws -> [CircleInfo] {
        try await self.operation("list circles") {
            let rows = try await self.client.query(
                """
                SELECT c.name, c.owner, c.private, c.created_at, c.last_seq, COALESCE(m.seq, 0), c.direct, n.level,
                    (SELECT count(*) FROM (SELECT 1 FROM posts p
                     WHERE p.circle = c.name AND p.seq > COALESCE(m.seq, 0) AND p.change IS NULL AND p.event IS NULL AND NOT p.deleted
                       AND p.author <> \(ByteBuffer(string: user))
                     LIMIT \(StoreLimits.unreadCountLimit)) AS u),
                    (SELECT count(*) FROM (SELECT 1 FROM mentions mm JOIN posts mp ON mp.circle = mm.circle AND mp.seq = mm.post
                     WHERE mm.user_name = \(user) AND mm.circle = c.name AND mm.seq > COALESCE(m.seq, 0) AND NOT mp.deleted
                     LIMIT \(StoreLimits.unreadCountLimit)) AS mn),
                    EXISTS (SELECT 1 FROM read_only_circles r WHERE r.circle = c.name), c.system_entries
                FROM circles c LEFT JOIN read_markers m ON m.circle = c.name AND m.user_name = \(user)
                    LEFT JOIN notification_levels n ON n.circle = c.name AND n.user_name = \(user)
                WHERE (\(name)::text IS NULL OR c.name = \(name))
                    AND (NOT c.private OR EXISTS (SELECT 1 FROM members WHERE members.circle = c.name AND members.user_name = \(user)))
                ORDER BY c.name
                """,
                logger: self.logger
            )
            var circles: [CircleInfo] = []
            for try await row in rows.decode((String, String, Bool, Int64, Int64, Int64, String?, String?, Int64, Int64, Bool, Bool).self) {
                circles.append(
                    CircleInfo(
                        name: row.0, owner: row.1, isPrivate: row.2, createdAt: row.3, lastSeq: row.4, readSeq: row.5, unread: row.8, mentions: row.9,
                        direct: DirectMessageKey.members(fromColumn: row.6), notify: row.7.flatMap(NotificationLevel.init(rawValue:)), readOnly: row.10,
                        systemEntries: row.11
                    )
                )
            }
            return circles
        }
    }

    /// One upsert that reads the circle's `last_seq` for the clamp and keeps the larger marker.
    public func markRead(_ user: String, in circle: String, upTo seq: Int64) async throws -> ReadMarker {
        try await self.operation("mark read") {
            // A row comes back only when the marker was made or moved forward.
            let rows = try await self.client.query(
                """
                INSERT INTO read_markers (user_name, circle, seq)
                SELECT \(user), name, LEAST(GREATEST(\(seq), 0), last_seq) FROM circles WHERE name = \(circle)
                ON CONFLICT (user_name, circle) DO UPDATE SET seq = EXCLUDED.seq WHERE read_markers.seq < EXCLUDED.seq
                RETURNING seq
                """,
                logger: self.logger
            )
            for try await marker in rows.decode(Int64.self) {
                return ReadMarker(seq: marker, moved: marker > 0)
            }
            // It stayed: where it stands (no row for an unknown circle).
            let current = try await self.client.query(
                """
                SELECT COALESCE((SELECT seq FROM read_markers WHERE user_name = \(user) AND circle = \(circle)), 0)
                FROM circles WHERE name = \(circle)
                """,
                logger: self.logger
            )
            for try await marker in current.decode(Int64.self) {
                return ReadMarker(seq: marker, moved: false)
            }
            throw StoreError.noSuchCircle(circle)
        }
    }

    public func addMember(_ user: String, to circle: String) async throws {
        try await self.operation("add member") {
            do {
                try await self.client.query(
                    "INSERT INTO members (circle, user_name) VALUES (\(circle), \(user)) ON CONFLICT DO NOTHING",
                    logger: self.logger
                )
            } catch let error where Self.sqlState(of: error) == Self.foreignKeyViolation {
                throw StoreError.noSuchCircle(circle)
            }
        }
    }

    /// Removes a member and, when they were one of a private circle, logs the removal
    /// (``revocations(after:)``) in the same transaction, so every node takes the user's
    /// connections out of the circle even when the signal saying so is lost. (Removal from a
    /// public circle takes no connection out of it, on one node or several.)
    public func removeMember(_ user: String, from circle: String) async throws {
        try await self.operation("remove member") {
            try await self.client.withTransaction(logger: self.logger) { connection in
                _ = try await connection.query(
                    """
                    WITH removed AS (DELETE FROM members WHERE circle = \(circle) AND user_name = \(user) RETURNING circle, user_name)
                    INSERT INTO member_removals (circle, user_name, removed_at)
                    SELECT r.circle, r.user_name, \(Int64(Date().timeIntervalSince1970 * 1000))
                    FROM removed r JOIN circles c ON c.name = r.circle WHERE c.private
                    """,
                    logger: self.logger
                )
            }
        }
    }

    public func setSystemEntries(_ enabled: Bool, in circle: String) async throws {
        try await self.operation("set system entries") {
            let rows = try await self.client.query(
                "UPDATE circles SET system_entries = \(enabled) WHERE name = \(circle) RETURNING name",
                logger: self.logger
            )
            for try await _ in rows { return }
            throw StoreError.noSuchCircle(circle)
        }
    }

    public func isMember(_ user: String, of circle: String) async throws -> Bool {
        try await self.operation("check membership") {
            let rows = try await self.client.query(
                "SELECT 1 FROM members WHERE circle = \(circle) AND user_name = \(user)",
                logger: self.logger
            )
            for try await _ in rows { return true }
            return false
        }
    }

    public func members(of circle: String) async throws -> [String] {
        try await self.operation("list members") {
            let rows = try await self.client.query(
                "SELECT user_name FROM members WHERE circle = \(circle) ORDER BY user_name",
                logger: self.logger
            )
            var members: [String] = []
            for try await name in rows.decode(String.self) { members.append(name) }
            return members
        }
    }

    // MARK: - Posts

    public func commit(_ posts: [NewPost]) async throws -> [PostOutcome] {
        guard !posts.isEmpty else { return [] }
        let clock = ContinuousClock()
        let deadline = clock.now + self.commitTruthDeadline
        var attempt = 0
        while true {
            attempt += 1
            do {
                return try await self.withTimeout("commit") {
                    try await self.client.withTransaction(logger: self.logger) { connection in
                        try await Self.commit(posts, on: connection, logger: self.logger)
                    }
                }
            } catch let error where Self.outcomeIsUnknown(error) {
                // No answer from the server: the connection failed or hung, perhaps after COMMIT was
                // sent. Committing again is safe (idempotency keys) and tells what happened.
                guard clock.now < deadline, !Task.isCancelled else {
                    throw StoreError(
                        .unavailable,
                        "PostgreSQL was unreachable during a commit and has not come back within \(self.commitTruthDeadline): whether the posts were stored is unknown; retry them with the same ids"
                    )
                }
                self.logger.warning(
                    "a commit lost its connection; committing again to learn the outcome",
                    metadata: ["circle.store.attempt": "\(attempt)", "circle.store.error": "\(String(reflecting: error))"]
                )
                try? await Task.sleep(for: self.commitRetryDelay)
            } catch {
                // PostgreSQL answered with an error, so the transaction was rolled back: nothing stored.
                throw Self.storeError(error, "commit")
            }
        }
    }

    /// Whether a failed commit should be tried again: PostgreSQL did not answer (the connection
    /// failed or hung), so it may even have committed. An error PostgreSQL answered with means
    /// the transaction was rolled back.
    static func outcomeIsUnknown(_ error: any Error) -> Bool {
        if error is TimedOut { return true }
        return Self.postgresErrors(in: error).contains { $0.serverInfo == nil }
    }

    /// The errors postgres-nio reports, unwrapped from a ``PostgresTransactionError``.
    static func postgresErrors(in error: any Error) -> [PSQLError] {
        switch error {
        case let error as PSQLError:
            return [error]
        case let error as PostgresTransactionError:
            return [error.beginError, error.closureError, error.commitError, error.rollbackError]
                .compactMap { $0 }
                .flatMap { Self.postgresErrors(in: $0) }
        default:
            return []
        }
    }

    /// The SQLSTATE PostgreSQL answered with, if it did.
    static func sqlState(of error: any Error) -> String? {
        Self.postgresErrors(in: error).lazy.compactMap { $0.serverInfo?[.sqlState] }.first
    }

    static func commit(_ posts: [NewPost], on connection: PostgresConnection, logger: Logger) async throws -> [PostOutcome] {
        // 1. Lock the circles the batch names, in name order (a fixed order: no deadlocks).
        var known = CommitPlan.Known()
        for try await (name, lastSeq, owner, isPrivate, direct, systemEntries) in try await connection.execute(
            LockCircles(names: CommitPlan.circleNames(posts)), logger: logger)
        {
            known.circles[BinaryText(name)] = CommitPlan.Circle(
                lastSeq: lastSeq, owner: owner, isPrivate: isPrivate, direct: DirectMessageKey.members(fromColumn: direct), systemEntries: systemEntries
            )
        }
        // The memberships the system entries change (the circles' locks keep them as read).
        let memberships = CommitPlan.membersToRead(posts)
        if !memberships.isEmpty {
            let rows = try await connection.query(
                """
                SELECT k.circle, k.user_name FROM unnest(\(memberships.map(\.circle))::text[], \(memberships.map(\.user))::text[]) AS k(circle, user_name)
                WHERE EXISTS (SELECT 1 FROM members WHERE members.circle = k.circle AND members.user_name = k.user_name)
                """,
                logger: logger
            )
            for try await (circle, user) in rows.decode((String, String).self) {
                known.members.insert(MemberKey(circle: circle, user: user))
            }
        }

        // 2. The batch's keys that are stored already (by any node), now that no one else can add
        // any; then what its changes and replies name. Every writer to these circles holds their
        // row locks, so nothing read here changes before the commit.
        for try await row in try await connection.execute(StoredEntries(keys: CommitPlan.keys(posts)), logger: logger) {
            let entry = try Self.post(row)
            known.entries[EntryKey(entry)] = entry
        }
        let targets = CommitPlan.targetsToRead(posts, known: known)
        if !targets.isEmpty {
            let rows = try await connection.query(
                """
                SELECT \(unescaped: Self.postColumns) FROM posts
                JOIN unnest(\(targets.map(\.circle.string))::text[], \(targets.map(\.seq))::int8[]) AS t(target_circle, target_seq)
                  ON posts.circle = t.target_circle AND posts.seq = t.target_seq
                """,
                logger: logger
            )
            for try await row in rows.decode(PostRow.self) {
                let entry = try Self.post(row)
                known.entries[EntryKey(entry)] = entry
            }
        }
        let reactions = CommitPlan.reactionsToRead(posts, known: known)
        if !reactions.posts.isEmpty {
            for post in reactions.posts {
                known.reactionCounts[post] = [:]
            }
            let counts = try await connection.query(
                """
                SELECT r.circle, r.post, r.emoji, count(*), min(r.first_seq) FROM reactions r
                JOIN unnest(\(reactions.posts.map(\.circle.string))::text[], \(reactions.posts.map(\.seq))::int8[]) AS t(target_circle, target_seq)
                  ON r.circle = t.target_circle AND r.post = t.target_seq
                GROUP BY r.circle, r.post, r.emoji
                """,
                logger: logger
            )
            for try await (circle, post, emoji, count, firstSeq) in counts.decode((String, Int64, ByteBuffer, Int64, Int64).self) {
                let key = EntryKey(circle: circle, seq: post)
                known.reactionCounts[key, default: [:]][BinaryText(String(buffer: emoji))] = Int(count)
                known.emojiFirstSeqs[key, default: [:]][BinaryText(String(buffer: emoji))] = firstSeq
            }
            let wanted = reactions.reactions
            let found = try await connection.query(
                """
                SELECT r.circle, r.post, r.emoji, r.user_name FROM reactions r
                JOIN unnest(\(wanted.map(\.post.circle.string))::text[], \(wanted.map(\.post.seq))::int8[],
                            \(wanted.map { ByteBuffer(string: $0.emoji.string) })::bytea[], \(wanted.map { ByteBuffer(string: $0.user.string) })::bytea[])
                  AS w(circle, post, emoji, user_name)
                  ON r.circle = w.circle AND r.post = w.post AND r.emoji = w.emoji AND r.user_name = w.user_name
                """,
                logger: logger
            )
            for try await (circle, post, emoji, user) in found.decode((String, Int64, ByteBuffer, ByteBuffer).self) {
                known.reactions.insert(ReactionKey(post: EntryKey(circle: circle, seq: post), emoji: String(buffer: emoji), user: String(buffer: user)))
            }
        }

        // Who the texts' mentions can name.
        let authors = CommitPlan.adminsToRead(posts, known: known)
        if !authors.isEmpty {
            let rows = try await connection.query(
                "SELECT name FROM accounts WHERE name = ANY(\(authors)) AND role = 'admin' AND status = 'active'",
                logger: logger
            )
            for try await (name) in rows.decode(String.self) { known.admins.insert(BinaryText(name)) }
        }
        let mentions = CommitPlan.mentionsToRead(posts, known: known)
        if !mentions.candidates.isEmpty {
            let candidates = mentions.candidates
            let rows = try await connection.query(
                """
                SELECT k.circle, k.user_name FROM unnest(\(candidates.map(\.circle))::text[], \(candidates.map(\.user))::text[]) AS k(circle, user_name)
                JOIN circles c ON c.name = k.circle
                WHERE EXISTS (SELECT 1 FROM members WHERE members.circle = k.circle AND members.user_name = k.user_name)
                   OR (NOT c.private AND NOT EXISTS (SELECT 1 FROM accounts WHERE accounts.name = k.user_name AND accounts.status = 'banned')
                       AND (EXISTS (SELECT 1 FROM accounts WHERE accounts.name = k.user_name)
                            OR EXISTS (SELECT 1 FROM posts WHERE posts.circle = k.circle AND posts.author = convert_to(k.user_name, 'UTF8'))))
                """,
                logger: logger
            )
            for try await (circle, user) in rows.decode((String, String).self) {
                known.mentionable.insert(MemberKey(circle: circle, user: user))
            }
        }
        for circle in mentions.everyone {
            let rows = try await connection.query(
                "SELECT user_name FROM members WHERE circle = \(circle) ORDER BY user_name LIMIT \(StoreLimits.maxEveryoneMentions)",
                logger: logger
            )
            var names: [String] = []
            for try await (user) in rows.decode(String.self) { names.append(user) }
            known.everyone[BinaryText(circle)] = names
        }

        // 3. Plan, then write: the entries, the posts they changed, what deletes clear, the
        // reactions, the counters.
        let plan = CommitPlan(posts: posts, known: known)
        if !plan.inserts.isEmpty {
            try await connection.run(InsertEntries(entries: plan.inserts), logger: logger)
        }
        for write in plan.memberWrites {
            if write.add {
                try await connection.query(
                    "INSERT INTO members (circle, user_name) VALUES (\(write.circle), \(write.user)) ON CONFLICT DO NOTHING",
                    logger: logger
                )
            } else {
                // As ``removeMember(_:from:)``: a removal from a private circle is logged for every node.
                try await connection.query(
                    """
                    WITH removed AS (DELETE FROM members WHERE circle = \(write.circle) AND user_name = \(write.user) RETURNING circle, user_name)
                    INSERT INTO member_removals (circle, user_name, removed_at)
                    SELECT r.circle, r.user_name, \(Int64(Date().timeIntervalSince1970 * 1000))
                    FROM removed r JOIN circles c ON c.name = r.circle WHERE c.private
                    """,
                    logger: logger
                )
            }
        }
        if !plan.postUpdates.isEmpty {
            let updates = plan.postUpdates
            try await connection.query(
                """
                UPDATE posts SET text = CASE WHEN v.has_text THEN v.text END,
                                 attachment = CASE WHEN v.has_attachment THEN v.attachment END,
                                 edited_at = CASE WHEN v.has_edited THEN v.edited_at END,
                                 deleted = v.deleted,
                                 mentions = CASE WHEN v.has_mentions THEN v.mentions END,
                                 mentions_everyone = v.mentions_everyone
                FROM unnest(\(updates.map(\.circle))::text[], \(updates.map(\.seq))::int8[],
                            \(updates.map { ByteBuffer(string: $0.text ?? "") })::bytea[], \(updates.map { $0.text != nil })::bool[],
                            \(updates.map { $0.attachment ?? "" })::text[], \(updates.map { $0.attachment != nil })::bool[],
                            \(updates.map { $0.edited ?? 0 })::int8[], \(updates.map { $0.edited != nil })::bool[],
                            \(updates.map(\.deleted))::bool[],
                            \(updates.map { ByteBuffer(string: CommitPlan.mentionsColumn($0) ?? "") })::bytea[],
                            \(updates.map { CommitPlan.mentionsColumn($0) != nil })::bool[],
                            \(updates.map(\.mentionsEveryone))::bool[])
                  AS v(circle, seq, text, has_text, attachment, has_attachment, edited_at, has_edited, deleted, mentions, has_mentions, mentions_everyone)
                WHERE posts.circle = v.circle AND posts.seq = v.seq
                """,
                logger: logger
            )
        }
        if !plan.deletedPosts.isEmpty {
            let circles = plan.deletedPosts.map(\.circle.string)
            let seqs = plan.deletedPosts.map(\.seq)
            try await connection.query(
                """
                UPDATE posts SET text = NULL, mentions = NULL, mentions_everyone = false FROM unnest(\(circles)::text[], \(seqs)::int8[]) AS d(circle, seq)
                WHERE posts.circle = d.circle AND posts.target = d.seq AND posts.change = 'edit'
                """,
                logger: logger
            )
            try await connection.query(
                """
                DELETE FROM reactions USING unnest(\(circles)::text[], \(seqs)::int8[]) AS d(circle, seq)
                WHERE reactions.circle = d.circle AND reactions.post = d.seq
                """,
                logger: logger
            )
        }
        let removed = plan.reactionWrites.filter { $0.seq == nil }.map(\.reaction)
        if !removed.isEmpty {
            try await connection.query(
                """
                DELETE FROM reactions
                USING unnest(\(removed.map(\.post.circle.string))::text[], \(removed.map(\.post.seq))::int8[],
                             \(removed.map { ByteBuffer(string: $0.emoji.string) })::bytea[], \(removed.map { ByteBuffer(string: $0.user.string) })::bytea[])
                  AS d(circle, post, emoji, user_name)
                WHERE reactions.circle = d.circle AND reactions.post = d.post AND reactions.emoji = d.emoji AND reactions.user_name = d.user_name
                """,
                logger: logger
            )
        }
        let added = plan.reactionWrites.compactMap { write in write.seq.map { (write.reaction, $0, write.firstSeq ?? $0) } }
        if !added.isEmpty {
            try await connection.query(
                """
                INSERT INTO reactions (circle, post, emoji, user_name, seq, first_seq)
                SELECT * FROM unnest(\(added.map(\.0.post.circle.string))::text[], \(added.map(\.0.post.seq))::int8[],
                                     \(added.map { ByteBuffer(string: $0.0.emoji.string) })::bytea[], \(added.map { ByteBuffer(string: $0.0.user.string) })::bytea[],
                                     \(added.map(\.1))::int8[], \(added.map(\.2))::int8[])
                ON CONFLICT (circle, post, emoji, user_name) DO UPDATE SET seq = EXCLUDED.seq, first_seq = EXCLUDED.first_seq
                """,
                logger: logger
            )
        }
        if !plan.mentionWrites.isEmpty {
            let writes = plan.mentionWrites
            try await connection.query(
                """
                INSERT INTO mentions (circle, post, user_name, seq)
                SELECT * FROM unnest(\(writes.map(\.circle))::text[], \(writes.map(\.post))::int8[], \(writes.map(\.user))::text[], \(writes.map(\.seq))::int8[])
                ON CONFLICT (circle, post, user_name) DO NOTHING
                """,
                logger: logger
            )
        }
        if !plan.newLastSeqs.isEmpty {
            try await connection.run(SetLastSeqs(counters: plan.newLastSeqs), logger: logger)
        }
        // 4. What the commit sets off, in the same transaction: webhook deliveries.
        if !plan.inserts.isEmpty {
            var webhooks: [Webhook] = []
            for try await (id, circle, events, bot) in try await connection.execute(ActiveWebhooks(), logger: logger) {
                webhooks.append(Webhook(id: id, url: "", circle: circle, events: Webhook.events(from: events), secrets: [], bot: bot, createdBy: "", createdAt: 0))
            }
            let deliveries = plan.webhookDeliveries(webhooks, now: Int64(Date().timeIntervalSince1970 * 1000))
            if !deliveries.isEmpty {
                try await connection.run(InsertDeliveries(deliveries: deliveries), logger: logger)
            }
        }
        // … and pushes (CommitPlan+Push): who wants every post of the circles posted in, then
        // who of the candidates has a subscription, at what level.
        var everyPost: [String: [String]] = [:]
        let circles = plan.circlesForEveryPost().map(\.circle)
        if !circles.isEmpty {
            let rows = try await connection.query(
                """
                SELECT n.circle, n.user_name FROM notification_levels n JOIN circles c ON c.name = n.circle
                WHERE n.circle = ANY(\(circles)::text[]) AND n.level = 'all'
                  AND EXISTS (SELECT 1 FROM push_subscriptions s WHERE s.user_name = n.user_name)
                  AND (NOT c.private OR EXISTS (SELECT 1 FROM members m WHERE m.circle = n.circle AND m.user_name = n.user_name))
                """,
                logger: logger
            )
            for try await (circle, user) in rows.decode((String, String).self) { everyPost[circle, default: []].append(user) }
        }
        let candidates = plan.pushCandidates(everyPost: everyPost)
        if !candidates.isEmpty {
            var subscribers: [MemberKey: CommitPlan.PushTarget] = [:]
            let rows = try await connection.query(
                """
                SELECT c.circle, s.user_name, s.endpoint, n.level
                FROM unnest(\(candidates.map(\.circle))::text[], \(candidates.map(\.user))::text[]) AS c(circle, user_name)
                JOIN push_subscriptions s ON s.user_name = c.user_name
                LEFT JOIN notification_levels n ON n.circle = c.circle AND n.user_name = c.user_name
                """,
                logger: logger
            )
            for try await (circle, user, endpoint, level) in rows.decode((String, String, String, String?).self) {
                let key = MemberKey(circle: circle, user: user)
                var target = subscribers[key] ?? CommitPlan.PushTarget(level: nil, endpoints: [])
                target.endpoints.append(endpoint)
                target.level = level.flatMap(NotificationLevel.init(rawValue:))
                subscribers[key] = target
            }
            let pushes = plan.pushWrites(subscribers: subscribers, everyPost: everyPost)
            if !pushes.isEmpty {
                let now = Int64(Date().timeIntervalSince1970 * 1000)
                try await connection.query(
                    """
                    INSERT INTO pushes (endpoint, user_name, circle, seq, kind, created_at, next_attempt_at)
                    SELECT e, u, c, s, k, \(now), \(now)
                    FROM unnest(\(pushes.map(\.endpoint))::text[], \(pushes.map(\.user))::text[], \(pushes.map(\.circle))::text[],
                                \(pushes.map(\.seq))::int8[], \(pushes.map(\.kind.rawValue))::text[]) AS p(e, u, c, s, k)
                    """,
                    logger: logger
                )
            }
        }
        return plan.outcomes
    }

    public func posts(in circle: String, after: Int64, limit: Int) async throws -> [CirclePost] {
        guard limit > 0 else { return [] }
        return try await self.operation("read posts") {
            var posts: [CirclePost] = []
            let rows = try await self.client.query(
                "SELECT \(unescaped: Self.postColumns) FROM posts WHERE circle = \(circle) AND seq > \(after) ORDER BY seq LIMIT \(limit)",
                logger: self.logger
            )
            for try await row in rows.decode(PostRow.self) {
                posts.append(try Self.post(row))
            }
            return posts
        }
    }

    public func storedEntry(circle: String, author: String, clientID: String) async throws -> CirclePost? {
        try await self.operation("read entry by key") {
            let rows = try await self.client.query(
                """
                SELECT \(unescaped: Self.postColumns) FROM posts
                WHERE circle = \(circle) AND author = \(ByteBuffer(string: author)) AND client_id = \(ByteBuffer(string: clientID))
                """,
                logger: self.logger
            )
            for try await row in rows.decode(PostRow.self) { return try Self.post(row) }
            return nil
        }
    }

    /// One query (one snapshot): the page of posts, each with its reactions aggregated by their
    /// emoji's place (`first_seq`), then in the order they were added, through the reactions' primary key `(circle, post, …)`, and the
    /// circle's `last_seq` on every row. An empty page reads `last_seq` on its own: with no post
    /// there is nothing it could be older than.
    public func historySnapshot(in circle: String, before: Int64?, after: Int64?, limit: Int, viewer: String) async throws -> HistorySnapshot {
        guard limit > 0 else { return HistorySnapshot(posts: [], lastSeq: try await self.lastSeq(of: circle)) }
        let reactions = """
            LEFT JOIN LATERAL (
                SELECT array_agg(emoji ORDER BY first_seq, seq) AS emojis, array_agg(user_name ORDER BY first_seq, seq) AS users FROM reactions
                WHERE reactions.circle = page.circle AND reactions.post = page.seq
            ) AS r ON true
            ORDER BY page.seq
            """
        let query: PostgresQuery
        if let after {
            query = """
                SELECT \(unescaped: Self.postColumns), r.emojis, r.users, (SELECT last_seq FROM circles WHERE name = \(circle)) FROM (
                    SELECT * FROM posts WHERE circle = \(circle) AND seq > \(after) AND change IS NULL ORDER BY seq LIMIT \(limit)
                ) AS page \(unescaped: reactions)
                """
        } else {
            query = """
                SELECT \(unescaped: Self.postColumns), r.emojis, r.users, (SELECT last_seq FROM circles WHERE name = \(circle)) FROM (
                    SELECT * FROM posts WHERE circle = \(circle) AND seq < \(before ?? .max) AND change IS NULL ORDER BY seq DESC LIMIT \(limit)
                ) AS page \(unescaped: reactions)
                """
        }
        let page = try await self.operation("read history") { () async throws -> HistorySnapshot in
            var posts: [CirclePost] = []
            var lastSeq: Int64 = 0
            let rows = try await self.client.query(query, logger: self.logger)
            for try await row in rows.decode(HistoryRow.self) {
                lastSeq = row.19 ?? 0
                var post = try Self.post((row.0, row.1, row.2, row.3, row.4, row.5, row.6, row.7, row.8, row.9, row.10, row.11, row.12, row.13, row.14, row.15, row.16))
                var grouping = ReactionGrouping(viewer: viewer)
                for (emoji, user) in zip(row.17 ?? [], row.18 ?? []) {
                    grouping.add(post: post.seq, emoji: String(buffer: emoji), user: String(buffer: user))
                }
                post.reactions = grouping.reactions(of: post.seq)
                posts.append(post)
            }
            return HistorySnapshot(posts: posts, lastSeq: lastSeq)
        }
        if page.posts.isEmpty { return HistorySnapshot(posts: [], lastSeq: try await self.lastSeq(of: circle)) }
        return page
    }

    /// The circle's newest entry `seq`; 0 for an unknown circle.
    private func lastSeq(of circle: String) async throws -> Int64 {
        try await self.operation("read a circle's last seq") {
            let rows = try await self.client.query("SELECT last_seq FROM circles WHERE name = \(circle)", logger: self.logger)
            for try await (seq) in rows.decode(Int64.self) { return seq }
            return 0
        }
    }

    /// The columns ``post(_:)`` reads, in its order.
    static let postColumns =
        "circle, seq, author, client_id, text, attachment, time, change, target, emoji, reply_to, edited_at, deleted, mentions, mentions_everyone, event, member"

    /// The pool is stopped by cancelling ``run()``; closing has nothing more to release.
    public func close() async throws {}

    // MARK: - Helpers

    typealias PostRow = (
        String, Int64, ByteBuffer, ByteBuffer, ByteBuffer?, String?, Int64, String?, Int64?, ByteBuffer?, Int64?, Int64?, Bool, ByteBuffer?, Bool, String?, String?
    )

    /// A post with its reactions' emoji and users, oldest first (`NULL` when it has none).
    typealias HistoryRow = (
        String, Int64, ByteBuffer, ByteBuffer, ByteBuffer?, String?, Int64, String?, Int64?, ByteBuffer?, Int64?, Int64?, Bool, ByteBuffer?, Bool,
        String?, String?, [ByteBuffer]?, [ByteBuffer]?, Int64?
    )

    static func post(_ row: PostRow) throws -> CirclePost {
        return CirclePost(
            circle: row.0,
            seq: row.1,
            author: String(buffer: row.2),
            text: row.4.map { String(buffer: $0) },
            attachment: row.5,
            time: row.6,
            id: String(buffer: row.3),
            change: try StoredPostColumns.change(row.7, store: "PostgreSQL"),
            target: row.8,
            emoji: row.9.map { String(buffer: $0) },
            replyTo: row.10,
            edited: row.11,
            deleted: row.12,
            mentions: CommitPlan.mentions(fromColumn: row.13.map { String(buffer: $0) }),
            mentionsEveryone: row.14,
            event: try StoredPostColumns.event(row.15, store: "PostgreSQL"),
            member: row.16
        )
    }

    static let uniqueViolation = "23505"
    static let foreignKeyViolation = "23503"

    /// Runs one store operation within ``operationTimeout``, mapping what postgres-nio throws to
    /// ``StoreError``. Without the bound, a request would wait for a connection for as long as
    /// PostgreSQL is unreachable.
    func operation<T: Sendable>(
        _ name: String,
        limit: Duration? = nil,
        _ body: @escaping @Sendable () async throws -> T
    ) async throws -> T {
        do {
            return try await self.withTimeout(name, limit: limit, body)
        } catch {
            let storeError = Self.storeError(error, name)
            if storeError.code == .unavailable {
                self.logger.debug("PostgreSQL store operation failed", metadata: ["circle.store.error": "\(String(reflecting: error))"])
            }
            throw storeError
        }
    }

    /// What ``withTimeout(_:_:)`` throws when the time is up.
    struct TimedOut: Error {
        var operation: String
        var limit: Duration
    }

    /// Runs `body`, but answers after `operationTimeout` at the latest, with ``TimedOut``.
    ///
    /// `body` runs in a task of its own that is cancelled on timeout but not waited for: a query on
    /// a connection PostgreSQL dropped without closing can stay pending, and a task group would wait
    /// for it. An abandoned commit attempt is harmless: commits are keyed by idempotency keys.
    func withTimeout<T: Sendable>(
        _ name: String,
        limit: Duration? = nil,
        _ body: @escaping @Sendable () async throws -> T
    ) async throws -> T {
        let limit = limit ?? self.operationTimeout
        let outcome: Result<T, any Error> = await withDeadline(
            limit,
            timedOut: { .failure(TimedOut(operation: name, limit: limit)) },
            cancelled: { .failure(CancellationError()) },
            {
                do {
                    return .success(try await body())
                } catch {
                    return .failure(error)
                }
            }
        )
        return try outcome.get()
    }

    static func storeError(_ error: any Error, _ operation: String) -> StoreError {
        // A rule of the operation (a name taken, an invite used up) said no inside its transaction.
        if let transaction = error as? PostgresTransactionError, let refusal = transaction.closureError as? StoreError {
            return refusal
        }
        switch error {
        case let error as StoreError:
            return error
        case let error as TimedOut:
            return StoreError(.unavailable, "PostgreSQL store: \(operation) took over \(error.limit): PostgreSQL is unreachable or overloaded")
        case let error where !Self.postgresErrors(in: error).isEmpty:
            let errors = Self.postgresErrors(in: error)
            if let info = errors.lazy.compactMap(\.serverInfo).first {
                let state = info[.sqlState] ?? "?"
                let message = info[.message] ?? "no message"
                return StoreError(.unavailable, "PostgreSQL store: \(operation) failed: \(message) (SQLSTATE \(state))")
            }
            return StoreError(.unavailable, "PostgreSQL store: \(operation) failed: PostgreSQL is unreachable (\(errors[0].code))")
        default:
            return StoreError(.unavailable, "PostgreSQL store: \(operation) failed: \(error)")
        }
    }
}
