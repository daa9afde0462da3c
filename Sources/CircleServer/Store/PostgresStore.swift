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
/// key meanwhile is seen — numbers the new posts in memory from the locked `last_seq`s
/// (``CommitPlan``, shared with ``SQLiteStore``), inserts them with one `unnest` statement and
/// updates the counters, all in one transaction. Writers to different circles do not wait for
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
                "SELECT name, owner, private, created_at, last_seq FROM circles WHERE name = \(name)",
                logger: self.logger
            )
            for try await row in rows.decode((String, String, Bool, Int64, Int64).self) {
                return CircleInfo(name: row.0, owner: row.1, isPrivate: row.2, createdAt: row.3, lastSeq: row.4)
            }
            return nil
        }
    }

    public func circles(visibleTo user: String) async throws -> [CircleInfo] {
        try await self.operation("list circles") {
            let rows = try await self.client.query(
                """
                SELECT name, owner, private, created_at, last_seq FROM circles
                WHERE NOT private OR EXISTS (SELECT 1 FROM members WHERE members.circle = circles.name AND members.user_name = \(user))
                ORDER BY name
                """,
                logger: self.logger
            )
            var circles: [CircleInfo] = []
            for try await row in rows.decode((String, String, Bool, Int64, Int64).self) {
                circles.append(CircleInfo(name: row.0, owner: row.1, isPrivate: row.2, createdAt: row.3, lastSeq: row.4))
            }
            return circles
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
                throw StoreError(.notFound, "no circle \"\(circle)\"")
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
        var names: [String] = []
        var seenNames = Set<BinaryText>()
        for post in posts where seenNames.insert(BinaryText(post.circle)).inserted {
            names.append(post.circle)
        }
        var lastSeqs: [BinaryText: Int64] = [:]
        let locked = try await connection.query(
            "SELECT name, last_seq FROM circles WHERE name = ANY(\(names)) ORDER BY name FOR UPDATE",
            logger: logger
        )
        for try await (name, lastSeq) in locked.decode((String, Int64).self) {
            lastSeqs[BinaryText(name)] = lastSeq
        }

        // 2. The batch's keys that are stored already (by any node), now that no one else can add any.
        var circles: [String] = []
        var authors: [ByteBuffer] = []
        var clientIDs: [ByteBuffer] = []
        var seenKeys = Set<PostKey>()
        for post in posts where seenKeys.insert(PostKey(post)).inserted {
            circles.append(post.circle)
            authors.append(ByteBuffer(string: post.author))
            clientIDs.append(ByteBuffer(string: post.clientID))
        }
        var existing: [PostKey: CirclePost] = [:]
        let stored = try await connection.query(
            """
            SELECT \(unescaped: Self.postColumns) FROM posts JOIN unnest(\(circles)::text[], \(authors)::bytea[], \(clientIDs)::bytea[]) AS k(key_circle, key_author, key_client_id)
              ON posts.circle = k.key_circle AND posts.author = k.key_author AND posts.client_id = k.key_client_id
            """,
            logger: logger
        )
        for try await row in stored.decode(PostRow.self) {
            let post = Self.post(row)
            existing[PostKey(post)] = post
        }

        // 3. Number, insert, advance the counters.
        let plan = CommitPlan(posts: posts, existing: existing, lastSeqs: lastSeqs)
        if !plan.inserts.isEmpty {
            let inserts = plan.inserts
            let texts = inserts.map { ByteBuffer(string: $0.text ?? "") }
            let hasText = inserts.map { $0.text != nil }
            let attachments = inserts.map { $0.attachment ?? "" }
            let hasAttachment = inserts.map { $0.attachment != nil }
            try await connection.query(
                """
                INSERT INTO posts (circle, seq, author, client_id, text, attachment, time)
                SELECT circle, seq, author, client_id,
                       CASE WHEN has_text THEN text END, CASE WHEN has_attachment THEN attachment END, time
                FROM unnest(\(inserts.map(\.circle))::text[], \(inserts.map(\.seq))::int8[], \(inserts.map { ByteBuffer(string: $0.author) })::bytea[],
                            \(inserts.map { ByteBuffer(string: $0.id) })::bytea[], \(texts)::bytea[], \(hasText)::bool[],
                            \(attachments)::text[], \(hasAttachment)::bool[], \(inserts.map(\.time))::int8[])
                  AS v(circle, seq, author, client_id, text, has_text, attachment, has_attachment, time)
                """,
                logger: logger
            )
            let counters = plan.newLastSeqs
            try await connection.query(
                """
                UPDATE circles SET last_seq = v.last_seq
                FROM unnest(\(counters.map(\.circle))::text[], \(counters.map(\.lastSeq))::int8[]) AS v(name, last_seq)
                WHERE circles.name = v.name
                """,
                logger: logger
            )
        }
        return plan.outcomes
    }

    public func posts(in circle: String, after: Int64, limit: Int) async throws -> [CirclePost] {
        guard limit > 0 else { return [] }
        return try await self.readPosts(
            "SELECT \(unescaped: Self.postColumns) FROM posts WHERE circle = \(circle) AND seq > \(after) ORDER BY seq LIMIT \(limit)"
        )
    }

    public func posts(in circle: String, before: Int64?, limit: Int) async throws -> [CirclePost] {
        guard limit > 0 else { return [] }
        let newestFirst = try await self.readPosts(
            "SELECT \(unescaped: Self.postColumns) FROM posts WHERE circle = \(circle) AND seq < \(before ?? .max) ORDER BY seq DESC LIMIT \(limit)"
        )
        return newestFirst.reversed()
    }

    /// The columns ``post(_:)`` reads, in its order.
    static let postColumns = "circle, seq, author, client_id, text, attachment, time"

    private func readPosts(_ query: PostgresQuery) async throws -> [CirclePost] {
        try await self.operation("read posts") {
            var posts: [CirclePost] = []
            for try await row in try await self.client.query(query, logger: self.logger).decode(PostRow.self) {
                posts.append(Self.post(row))
            }
            return posts
        }
    }

    /// The pool is stopped by cancelling ``run()``; closing has nothing more to release.
    public func close() async throws {}

    // MARK: - Helpers

    typealias PostRow = (String, Int64, ByteBuffer, ByteBuffer, ByteBuffer?, String?, Int64)

    static func post(_ row: PostRow) -> CirclePost {
        CirclePost(
            circle: row.0,
            seq: row.1,
            author: String(buffer: row.2),
            text: row.4.map { String(buffer: $0) },
            attachment: row.5,
            time: row.6,
            id: String(buffer: row.3)
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
        let answer = NIOLockedValueBox<CheckedContinuation<T, any Error>?>(nil)
        let tasks = NIOLockedValueBox<(work: Task<Void, Never>?, timer: Task<Void, Never>?)>((nil, nil))
        @Sendable func resolve(_ result: Result<T, any Error>) {
            guard let continuation = answer.withLockedValue({ value -> CheckedContinuation<T, any Error>? in
                defer { value = nil }
                return value
            }) else { return }
            let (work, timer) = tasks.withLockedValue { $0 }
            timer?.cancel()
            if case .failure(let error) = result, error is TimedOut { work?.cancel() }
            continuation.resume(with: result)
        }
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<T, any Error>) in
                answer.withLockedValue { $0 = continuation }
                let work = Task {
                    do {
                        resolve(.success(try await body()))
                    } catch {
                        resolve(.failure(error))
                    }
                }
                let timer = Task {
                    guard (try? await Task.sleep(for: limit)) != nil else { return }
                    resolve(.failure(TimedOut(operation: name, limit: limit)))
                }
                tasks.withLockedValue { $0 = (work, timer) }
            }
        } onCancel: {
            let (work, _) = tasks.withLockedValue { $0 }
            work?.cancel()
        }
    }

    static func storeError(_ error: any Error, _ operation: String) -> StoreError {
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

// PROVISIONAL (replaced by the store work of issue 15 before landing).
extension PostgresStore {
    public func markRead(_ user: String, in circle: String, upTo seq: Int64) async throws -> Int64 {
        throw StoreError(.unavailable, "read markers are not implemented yet")
    }

    public func history(in circle: String, before: Int64?, after: Int64?, limit: Int, viewer: String) async throws -> [CirclePost] {
        if let after { return try await self.posts(in: circle, after: after, limit: limit) }
        return try await self.posts(in: circle, before: before, limit: limit)
    }
}
