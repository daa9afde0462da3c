import CircleWire
import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import SQLiteNIO

/// The embedded durable store: one SQLite database file in WAL mode with `synchronous=FULL`,
/// so a `commit` that returned is on disk.
///
/// ```swift
/// let store = try await SQLiteStore.open(path: "/var/lib/circle/circle.sqlite", logger: logger)
/// try await store.migrate()
/// let outcomes = try await store.commit(batch)
/// try await store.close()
/// ```
///
/// ### Concurrency
/// The store has two connections to the file. Posts are committed by a ``SQLitePostWriter``: its
/// own handle with prepared statements, on a thread of its own, a whole batch in one hop there.
/// Everything else (reads, membership, circles, media, migrations) goes through one
/// `SQLiteConnection` (sqlite-nio), and every such operation holds the store's gate (a FIFO async
/// lock) from its first statement to its last: sqlite-nio runs each statement as a separate hop
/// to the thread pool, so without the gate a second operation could run *inside* another's open
/// transaction on that connection. The gate does not cover the writer: in WAL mode a read sees the
/// last committed state and runs beside a commit's fsync instead of waiting behind it. Writes on
/// the two connections are serialized by SQLite's write lock (`BEGIN IMMEDIATE` and the busy
/// timeout).
///
/// Beside those two: a connection with `synchronous = NORMAL` and a gate of its own writes the
/// webhook deliveries' bookkeeping (``exclusiveWithoutSync(_:_:)``), and searches run on
/// read-only handles of their own (``SQLiteSearcher``), which a time bound may interrupt.
///
/// The class holds only `Sendable` values (the connection, the writer, an actor, a `Logger`), so
/// it is `Sendable` without `@unchecked`.
///
/// Call ``close()`` before the last reference goes away: sqlite-nio asserts that a connection is
/// closed when it is deinitialized.
public final class SQLiteStore: CircleStore {
    private let connection: SQLiteConnection
    private let writer: SQLitePostWriter
    /// Read-only handles for searches, which a timer may interrupt.
    let searcher: SQLiteSearcher
    private let gate = AsyncFIFOGate()
    private let bookkeeping: SQLiteConnection
    private let bookkeepingGate = AsyncFIFOGate()
    /// The threads that run the two sqlite-nio connections' statements, made by ``open(path:threadPool:eventLoopGroup:logger:)``
    /// when it is given no pool; shut down by ``close()``.
    private let ownThreadPool: NIOThreadPool?
    /// Whether the search index holds every post (`search_backfill.done`), once read: `true`
    /// stays true; `nil` means ask the database.
    let searchIndexDone = NIOLockedValueBox<Bool?>(nil)
    let logger: Logger

    /// How long a statement waits for a lock held by another process before failing.
    static let busyTimeoutMilliseconds = 5_000

    private init(
        connection: SQLiteConnection,
        writer: SQLitePostWriter,
        bookkeeping: SQLiteConnection,
        searcher: SQLiteSearcher,
        ownThreadPool: NIOThreadPool?,
        logger: Logger
    ) {
        self.ownThreadPool = ownThreadPool
        self.connection = connection
        self.writer = writer
        self.bookkeeping = bookkeeping
        self.searcher = searcher
        self.logger = logger
    }

    /// Opens (creating if needed) the database at `path` and configures the connection:
    /// `journal_mode=WAL`, `synchronous=FULL`, `foreign_keys=ON` and a busy timeout; then opens
    /// the post writer's connection with the same settings.
    ///
    /// Call ``migrate()`` before using the store.
    ///
    /// - Parameters:
    ///   - path: The database file; prefer an absolute path. Not `":memory:"`: the store's two
    ///     connections must open the same database.
    ///   - threadPool: The pool that runs the blocking SQLite calls. By default (`nil`) the store
    ///     makes a pool of its own with a thread for each of its two sqlite-nio connections: a
    ///     statement waiting for SQLite's write lock (up to the busy timeout) holds its thread, and
    ///     in a shared pool (`NIOThreadPool.singleton` has one thread per core) such waits, with a
    ///     password hash or a DNS lookup beside them, could leave the statement that would release
    ///     the lock without a thread until the timeout.
    ///   - eventLoopGroup: The group the connection takes its event loop from.
    ///   - logger: The logger for the store's own messages; gets `circle.store.path` metadata.
    /// - Throws: `StoreError(.unavailable)` with SQLite's message when the file cannot be opened.
    public static func open(
        path: String,
        threadPool: NIOThreadPool? = nil,
        eventLoopGroup: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton,
        logger: Logger
    ) async throws -> SQLiteStore {
        var logger = logger
        logger[metadataKey: "circle.store.path"] = "\(path)"
        guard path != ":memory:" else {
            throw StoreError(.unavailable, "SQLite store: an in-memory database (\":memory:\") is not supported; give a file path")
        }
        let ownThreadPool: NIOThreadPool?
        if threadPool == nil {
            let pool = NIOThreadPool(numberOfThreads: 2)
            pool.start()
            ownThreadPool = pool
        } else {
            ownThreadPool = nil
        }
        do {
            return try await Self.open(path: path, threadPool: threadPool ?? ownThreadPool!, ownThreadPool: ownThreadPool, eventLoopGroup: eventLoopGroup, logger: logger)
        } catch {
            try? await ownThreadPool?.shutdownGracefully()
            throw error
        }
    }

    private static func open(
        path: String,
        threadPool: NIOThreadPool,
        ownThreadPool: NIOThreadPool?,
        eventLoopGroup: any EventLoopGroup,
        logger: Logger
    ) async throws -> SQLiteStore {

        Self.makePrivate(path)
        func openConnection() async throws -> SQLiteConnection {
            do {
                return try await SQLiteConnection.open(storage: .file(path: path), threadPool: threadPool, logger: logger, on: eventLoopGroup.any())
            } catch {
                throw Self.storeError(error, "open \(path)")
            }
        }
        let connection = try await openConnection()
        let writer: SQLitePostWriter
        do {
            try await Self.configure(connection, path: path, logger: logger)
            writer = try await SQLitePostWriter.open(path: path, busyTimeoutMilliseconds: Self.busyTimeoutMilliseconds)
        } catch {
            try? await connection.close()
            throw Self.storeError(error, "configure \(path)")
        }
        let bookkeeping: SQLiteConnection
        do {
            bookkeeping = try await openConnection()
            do {
                try await Self.configure(bookkeeping, path: path, logger: logger, synchronous: "NORMAL")
            } catch {
                try? await bookkeeping.close()
                throw error
            }
        } catch {
            try? await connection.close()
            try? await writer.close()
            throw Self.storeError(error, "configure \(path)")
        }
        Self.makePrivate(path)
        logger.debug("opened the SQLite store", metadata: ["circle.store.sqlite_version": "\(SQLiteConnection.libraryVersionString())"])
        let searcher = SQLiteSearcher(path: path, eventLoop: eventLoopGroup.any())
        return SQLiteStore(
            connection: connection,
            writer: writer,
            bookkeeping: bookkeeping,
            searcher: searcher,
            ownThreadPool: ownThreadPool,
            logger: logger
        )
    }

    /// The database holds private circles: it, its WAL and its shared-memory file are readable
    /// by the server's user only (0600), whatever the umask, also when an older version made them
    /// with looser permissions. SQLite gives the WAL and -shm files the database file's mode.
    private static func makePrivate(_ path: String) {
        let fd = Foundation.open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0o600)
        if fd >= 0 { _ = Foundation.close(fd) }
        for file in [path, path + "-wal", path + "-shm"] { _ = chmod(file, 0o600) }
    }

    private static func configure(_ connection: SQLiteConnection, path: String, logger: Logger, synchronous: String = "FULL") async throws {
        let mode = try await connection.query("PRAGMA journal_mode = WAL").first?.column("journal_mode")?.string
        if mode?.lowercased() != "wal" {
            // Still durable with synchronous=FULL, just slower and without concurrent readers.
            logger.warning("SQLite did not switch to WAL journal mode", metadata: ["circle.store.journal_mode": "\(mode ?? "none")"])
        }
        // An ack promises durability: FULL syncs the WAL on every commit. (NORMAL only for
        // the bookkeeping connection, see `exclusiveWithoutSync`.)
        _ = try await connection.query("PRAGMA synchronous = \(synchronous)")
        _ = try await connection.query("PRAGMA foreign_keys = ON")
        // Replaces sqlite-nio's busy handler, which retries forever.
        _ = try await connection.query("PRAGMA busy_timeout = \(Self.busyTimeoutMilliseconds)")
    }

    // MARK: - CircleStore

    public func migrate() async throws {
        try await self.exclusive("migrate") { connection in
            try await Self.applyMigrations(on: connection, logger: self.logger)
        }
    }

    /// Migrates only up to schema `version`: a database as an older server left it; for tests.
    func migrate(upTo version: Int) async throws {
        try await self.exclusive("migrate") { connection in
            try await Self.applyMigrations(on: connection, logger: self.logger, upTo: version)
        }
    }

    /// Runs one statement on the store's connection; for tests that write rows as an older
    /// server did.
    func execute(_ sql: String, _ binds: [SQLiteData] = []) async throws {
        try await self.exclusive("execute") { connection in
            _ = try await connection.query(sql, binds)
        }
    }

    public func createCircle(name: String, owner: String, isPrivate: Bool, createdAt: Int64) async throws -> CircleInfo {
        try await self.exclusive("create circle") { connection in
            try await Self.transaction(on: connection, logger: self.logger) {
                let inserted = try await connection.query(
                    """
                    INSERT INTO circles (name, owner, private, created_at) VALUES (?, ?, ?, ?)
                    ON CONFLICT (name) DO NOTHING RETURNING name
                    """,
                    [.text(name), .text(owner), .integer(isPrivate ? 1 : 0), .integer(SQLiteInt64(createdAt))]
                )
                guard !inserted.isEmpty else {
                    throw StoreError(.conflict, "circle \"\(name)\" exists")
                }
                _ = try await connection.query("INSERT INTO members (circle, user) VALUES (?, ?)", [.text(name), .text(owner)])
                return CircleInfo(name: name, owner: owner, isPrivate: isPrivate, createdAt: createdAt, lastSeq: 0)
            }
        }
    }

    public func circle(named name: String) async throws -> CircleInfo? {
        try await self.exclusive("read circle") { connection in
            let rows = try await connection.query(
                "SELECT name, owner, private, created_at, last_seq, direct, system_entries FROM circles WHERE name = ?",
                [.text(name)]
            )
            return try rows.first.map(Self.circleInfo)
        }
    }

    /// One query: the visible circles with the user's marker, and per circle a count over the
    /// posts above it (the primary key's range `(circle, seq > marker)`), stopped at
    /// ``StoreLimits/unreadCountLimit`` rows.
    public func circles(visibleTo user: String, named name: String?) async throws -> [CircleInfo] {
        try await self.exclusive("list circles") { connection in
            let rows = try await connection.query(
                """
                SELECT c.name, c.owner, c.private, c.created_at, c.last_seq, ifnull(m.seq, 0) AS read_seq, c.direct AS direct, n.level AS notify,
                    c.system_entries AS system_entries,
                    (SELECT count(*) FROM (SELECT 1 FROM posts p
                     WHERE p.circle = c.name AND p.seq > ifnull(m.seq, 0) AND p.change IS NULL AND p.event IS NULL AND p.deleted = 0 AND p.author != ?1
                     LIMIT ?3)
                    ) AS unread,
                    (SELECT count(*) FROM (SELECT 1 FROM mentions mm JOIN posts mp ON mp.circle = mm.circle AND mp.seq = mm.post
                     WHERE mm.user = ?1 AND mm.circle = c.name AND mm.seq > ifnull(m.seq, 0) AND mp.deleted = 0
                     LIMIT ?3)
                    ) AS mentions,
                    EXISTS (SELECT 1 FROM read_only_circles r WHERE r.circle = c.name) AS read_only
                FROM circles c LEFT JOIN read_markers m ON m.circle = c.name AND m.user = ?1
                    LEFT JOIN notification_levels n ON n.circle = c.name AND n.user = ?1
                WHERE (?2 IS NULL OR c.name = ?2)
                    AND (c.private = 0 OR EXISTS (SELECT 1 FROM members WHERE members.circle = c.name AND members.user = ?1))
                ORDER BY c.name
                """,
                [.text(user), name.map { .text($0) } ?? .null, .integer(SQLiteInt64(StoreLimits.unreadCountLimit))]
            )
            return try rows.map(Self.circleInfo)
        }
    }

    /// One upsert that reads the circle's `last_seq` for the clamp and keeps the larger marker.
    public func markRead(_ user: String, in circle: String, upTo seq: Int64) async throws -> ReadMarker {
        try await self.exclusive("mark read") { connection in
            // A row comes back only when the marker was made or moved forward.
            let rows = try await connection.query(
                """
                INSERT INTO read_markers (user, circle, seq)
                SELECT ?1, name, min(max(?3, 0), last_seq) FROM circles WHERE name = ?2
                ON CONFLICT (user, circle) DO UPDATE SET seq = excluded.seq WHERE excluded.seq > read_markers.seq
                RETURNING seq
                """,
                [.text(user), .text(circle), .integer(SQLiteInt64(seq))]
            )
            if let row = rows.first {
                let stored = try Self.integer(row, "seq")
                return ReadMarker(seq: stored, moved: stored > 0)
            }
            // It stayed: where it stands (no row for an unknown circle).
            let current = try await connection.query(
                "SELECT ifnull((SELECT seq FROM read_markers WHERE user = ?1 AND circle = ?2), 0) AS seq FROM circles WHERE name = ?2",
                [.text(user), .text(circle)]
            )
            guard let row = current.first else {
                throw StoreError.noSuchCircle(circle)
            }
            return ReadMarker(seq: try Self.integer(row, "seq"), moved: false)
        }
    }

    /// One transaction on the store's connection (the only one that makes circles): the circle
    /// with the key, else a new one with its members.
    public func directMessage(_ members: DirectMessageKey, starter: String, createdAt: Int64) async throws -> CircleInfo {
        try await self.exclusive("start a direct message") { connection in
            try await Self.transaction(on: connection, logger: self.logger) {
                let found = try await connection.query(
                    "SELECT name, owner, private, created_at, last_seq, direct FROM circles WHERE direct = ?",
                    [.text(members.key)]
                )
                if let row = found.first { return try Self.circleInfo(row) }
                let name = members.circleName
                let inserted = try await connection.query(
                    """
                    INSERT INTO circles (name, owner, private, created_at, direct) VALUES (?, ?, 1, ?, ?)
                    ON CONFLICT (name) DO NOTHING RETURNING name
                    """,
                    [.text(name), .text(starter), .integer(SQLiteInt64(createdAt)), .text(members.key)]
                )
                guard !inserted.isEmpty else {
                    throw StoreError(.conflict, "circle \"\(name)\" exists")
                }
                for member in members.members {
                    _ = try await connection.query("INSERT INTO members (circle, user) VALUES (?, ?)", [.text(name), .text(member)])
                }
                return CircleInfo(name: name, owner: starter, isPrivate: true, createdAt: createdAt, lastSeq: 0, direct: members.members)
            }
        }
    }

    public func setNotificationLevel(_ level: NotificationLevel?, of user: String, in circle: String) async throws {
        try await self.exclusive("set a notification level") { connection in
            guard try await !connection.query("SELECT 1 FROM circles WHERE name = ?", [.text(circle)]).isEmpty else {
                throw StoreError.noSuchCircle(circle)
            }
            if let level {
                _ = try await connection.query(
                    """
                    INSERT INTO notification_levels (user, circle, level) VALUES (?1, ?2, ?3)
                    ON CONFLICT (user, circle) DO UPDATE SET level = excluded.level
                    """,
                    [.text(user), .text(circle), .text(level.rawValue)]
                )
            } else {
                _ = try await connection.query("DELETE FROM notification_levels WHERE user = ? AND circle = ?", [.text(user), .text(circle)])
            }
        }
    }

    public func addMember(_ user: String, to circle: String) async throws {
        try await self.exclusive("add member") { connection in
            do {
                _ = try await connection.query(
                    "INSERT INTO members (circle, user) VALUES (?, ?) ON CONFLICT DO NOTHING",
                    [.text(circle), .text(user)]
                )
            } catch let error as SQLiteError where error.reason == .constraintForeignKeyFailed {
                // The foreign key to circles: one statement, no window between a check and the insert.
                throw StoreError.noSuchCircle(circle)
            }
        }
    }

    public func removeMember(_ user: String, from circle: String) async throws {
        try await self.exclusive("remove member") { connection in
            _ = try await connection.query("DELETE FROM members WHERE circle = ? AND user = ?", [.text(circle), .text(user)])
        }
    }

    public func setSystemEntries(_ enabled: Bool, in circle: String) async throws {
        try await self.exclusive("set system entries") { connection in
            let rows = try await connection.query(
                "UPDATE circles SET system_entries = ? WHERE name = ? RETURNING name",
                [.integer(enabled ? 1 : 0), .text(circle)]
            )
            guard !rows.isEmpty else { throw StoreError.noSuchCircle(circle) }
        }
    }

    public func isMember(_ user: String, of circle: String) async throws -> Bool {
        try await self.exclusive("check member") { connection in
            let rows = try await connection.query(
                "SELECT 1 AS found FROM members WHERE circle = ? AND user = ?",
                [.text(circle), .text(user)]
            )
            return !rows.isEmpty
        }
    }

    public func members(of circle: String) async throws -> [String] {
        try await self.exclusive("list members") { connection in
            let rows = try await connection.query("SELECT user FROM members WHERE circle = ? ORDER BY user", [.text(circle)])
            return try rows.map { try Self.text($0, "user") }
        }
    }

    /// Stores a batch in one `BEGIN IMMEDIATE … COMMIT` transaction on the post writer's
    /// connection, in one hop to its thread, with statements prepared once: per circle one read
    /// of its row, per distinct idempotency key one probe of `posts_by_client_id`; for changes and
    /// replies one primary-key lookup per target, and for reactions the target's counts per emoji
    /// and one lookup per reaction; then the writes. ``CommitPlan`` applies the entries in order
    /// and assigns sequence numbers from the `last_seq` read inside the transaction. Reads do not
    /// wait for it.
    /// The post writer's thread: the commit loop runs there, so a batch is committed where it
    /// was taken, without a hop.
    public var commitExecutor: (any TaskExecutor)? { self.writer.executor }

    public func commit(_ posts: [NewPost]) async throws -> [PostOutcome] {
        guard !posts.isEmpty else {
            return []
        }
        do {
            return try await self.writer.commit(posts)
        } catch {
            let storeError = Self.storeError(error, "commit")
            self.logger.debug("SQLite store operation failed", metadata: ["circle.store.error": "\(storeError.message)"])
            throw storeError
        }
    }

    public func posts(in circle: String, after: Int64, limit: Int) async throws -> [CirclePost] {
        guard limit > 0 else {
            return []
        }
        return try await self.exclusive("read posts") { connection in
            let rows = try await connection.query(
                "\(Self.selectPosts) WHERE circle = ? AND seq > ? ORDER BY seq LIMIT ?",
                [.text(circle), .integer(SQLiteInt64(after)), .integer(limit)]
            )
            return try rows.map(Self.post)
        }
    }

    public func storedEntry(circle: String, author: String, clientID: String) async throws -> CirclePost? {
        try await self.exclusive("read entry by key") { connection in
            try await connection.query(
                "\(Self.selectPosts) WHERE circle = ? AND author = ? AND client_id = ?",
                [.text(circle), .text(author), .text(clientID)]
            ).first.map(Self.post)
        }
    }

    /// Three reads in one read transaction (one snapshot): the circle's `last_seq`, the page of
    /// posts, then the reactions of its posts through the reactions' primary key `(circle, post, …)`.
    public func historySnapshot(in circle: String, before: Int64?, after: Int64?, limit: Int, viewer: String) async throws -> HistorySnapshot {
        try await self.exclusive("read history") { connection in
            try await Self.readTransaction(on: connection, logger: self.logger) {
                let lastSeq = try await connection.query("SELECT last_seq FROM circles WHERE name = ?", [.text(circle)])
                    .first.map { try Self.integer($0, "last_seq") } ?? 0
                guard limit > 0 else {
                    return HistorySnapshot(posts: [], lastSeq: lastSeq)
                }
                var posts: [CirclePost]
                if let after {
                    posts = try await connection.query(
                        "\(Self.selectPosts) WHERE circle = ? AND seq > ? AND change IS NULL ORDER BY seq LIMIT ?",
                        [.text(circle), .integer(SQLiteInt64(after)), .integer(limit)]
                    ).map(Self.post)
                } else {
                    posts = try await connection.query(
                        "\(Self.selectPosts) WHERE circle = ? AND seq < ? AND change IS NULL ORDER BY seq DESC LIMIT ?",
                        [.text(circle), .integer(SQLiteInt64(before ?? .max)), .integer(limit)]
                    ).reversed().map(Self.post)
                }
                guard let first = posts.first?.seq, let last = posts.last?.seq else {
                    return HistorySnapshot(posts: posts, lastSeq: lastSeq)
                }
                let rows = try await connection.query(
                    """
                    SELECT post, CAST(emoji AS BLOB) AS emoji, CAST(user AS BLOB) AS user FROM reactions
                    WHERE circle = ? AND post BETWEEN ? AND ? ORDER BY post, first_seq, seq
                    """,
                    [.text(circle), .integer(SQLiteInt64(first)), .integer(SQLiteInt64(last))]
                )
                var reactions = ReactionGrouping(viewer: viewer)
                for row in rows {
                    reactions.add(post: try Self.integer(row, "post"), emoji: try Self.blobText(row, "emoji"), user: try Self.blobText(row, "user"))
                }
                for index in posts.indices {
                    posts[index].reactions = reactions.reactions(of: posts[index].seq)
                }
                return HistorySnapshot(posts: posts, lastSeq: lastSeq)
            }
        }
    }

    /// Closes the connection. Operations after this throw `StoreError(.unavailable)`; closing
    /// again does nothing.
    public func close() async throws {
        guard await self.gate.enter() else { return }  // already closed
        do {
            try await self.searcher.close()
            try await self.connection.close()
            try await self.writer.close()
            await self.gate.leave(closing: true)
        } catch {
            await self.gate.leave(closing: false)
            throw Self.storeError(error, "close")
        }
        guard await self.bookkeepingGate.enter() else { return }
        do {
            try await self.bookkeeping.close()
            await self.bookkeepingGate.leave(closing: true)
        } catch {
            await self.bookkeepingGate.leave(closing: false)
            throw Self.storeError(error, "close")
        }
        try? await self.ownThreadPool?.shutdownGracefully()
    }

    /// The integer value of a `PRAGMA` on the post writer's connection; for tests.
    func writerPragma(_ name: String) async throws -> Int64? {
        try await self.writer.pragma(name)
    }

    /// Batches the post writer has begun; for tests.
    var postBatchesStarted: Int { self.writer.batchesStarted }

    /// The value of a `PRAGMA` on the store's connection (some are per connection); for tests.
    func pragma(_ name: String) async throws -> SQLiteData? {
        try await self.exclusive("read pragma") { connection in
            try await connection.query("PRAGMA \(name)").first?.columns.first?.data
        }
    }

    // MARK: - Reading posts

    /// The columns ``post(_:)`` reads, of the posts table aliased `table`. Strings are read as
    /// blobs: sqlite-nio reads TEXT with `String(cString:)`, which cuts a string at an embedded
    /// NUL (and a client id cut short would no longer match its key).
    private static let selectPosts = "SELECT \(SQLiteEntryRow.blobList("posts")) FROM posts"

    // MARK: - Plumbing

    /// Runs `body` holding the gate, turning every error into a ``StoreError``.
    func exclusive<T: Sendable>(
        _ operation: String,
        _ body: (SQLiteConnection) async throws -> T
    ) async throws -> T {
        try await self.holding(self.gate, self.connection, operation, body)
    }

    /// ``exclusive(_:_:)`` on the bookkeeping connection, whose commits have
    /// `synchronous = NORMAL`: in WAL mode they survive the process crashing, and only a power
    /// loss can take back the last of them (the next `FULL` commit, a post's, makes them
    /// durable too). For bookkeeping whose loss only repeats work that may be repeated — a
    /// webhook delivery's lease and its recorded attempt: a delivery sent again keeps its
    /// `webhook-id` — and so need not wait for an fsync of its own (two per run of deliveries,
    /// the dispatcher's largest cost before). Its gate is its own: bookkeeping never waits
    /// behind the store's reads.
    func exclusiveWithoutSync<T: Sendable>(
        _ operation: String,
        _ body: (SQLiteConnection) async throws -> T
    ) async throws -> T {
        try await self.holding(self.bookkeepingGate, self.bookkeeping, operation, body)
    }

    private func holding<T: Sendable>(
        _ gate: AsyncFIFOGate,
        _ connection: SQLiteConnection,
        _ operation: String,
        _ body: (SQLiteConnection) async throws -> T
    ) async throws -> T {
        guard await gate.enter() else { throw StoreError(.unavailable, "the SQLite store is closed") }
        do {
            let result = try await body(connection)
            await gate.leave(closing: false)
            return result
        } catch {
            await gate.leave(closing: false)
            let storeError = Self.storeError(error, operation)
            if storeError.code == .unavailable {
                self.logger.debug("SQLite store operation failed", metadata: ["circle.store.error": "\(storeError.message)"])
            }
            throw storeError
        }
    }

    /// Runs `body` in `BEGIN IMMEDIATE … COMMIT` (taking the write lock up front, so the
    /// `last_seq` read inside is the one the writes build on), rolling back on any error.
    static func transaction<T>(
        on connection: SQLiteConnection,
        logger: Logger,
        _ body: () async throws -> T
    ) async throws -> T {
        try await Self.run("BEGIN IMMEDIATE", on: connection, logger: logger, body)
    }

    /// Runs `body` in a read transaction (`BEGIN … COMMIT`): its reads see one snapshot.
    static func readTransaction<T>(
        on connection: SQLiteConnection,
        logger: Logger,
        _ body: () async throws -> T
    ) async throws -> T {
        try await Self.run("BEGIN", on: connection, logger: logger, body)
    }

    /// A transaction, once begun, is ended whatever happens to the task: sqlite-nio's async
    /// `query` does not run a statement for a cancelled task (NIOThreadPool drops the work with a
    /// `CancellationError`), so `COMMIT` and `ROLLBACK` go through ``finish(_:on:logger:)``. A
    /// cancelled request (its client went away) would otherwise leave the connection inside the
    /// transaction, holding the write lock: every later write on the database would wait for it
    /// and fail with "database is locked", and the next `BEGIN` on the connection with "cannot
    /// start a transaction within a transaction".
    private static func run<T>(
        _ begin: String,
        on connection: SQLiteConnection,
        logger: Logger,
        _ body: () async throws -> T
    ) async throws -> T {
        _ = try await connection.query(begin)
        do {
            let result = try await body()
            try await Self.finish("COMMIT", on: connection, logger: logger)
            return result
        } catch {
            do {
                try await Self.finish("ROLLBACK", on: connection, logger: logger)
            } catch let rollbackError {
                // SQLite may already have rolled back (some I/O errors do); nothing is left to undo.
                logger.debug("ROLLBACK failed", metadata: ["circle.store.error": "\(rollbackError)"])
            }
            throw error
        }
    }

    /// Runs `COMMIT` or `ROLLBACK` even when the task is cancelled: sqlite-nio's future-returning
    /// `query` submits the statement to the pool without watching the task, and waiting for the
    /// future does not throw on cancellation either.
    static func finish(_ statement: String, on connection: SQLiteConnection, logger: Logger) async throws {
        try await connection.query(statement, [], logger: logger) { _ in }.get()
    }

    static func storeError(_ error: any Error, _ operation: String) -> StoreError {
        switch error {
        case let error as StoreError:
            return error
        case let error as SQLiteError:
            return StoreError(.unavailable, "SQLite store: \(operation) failed: \(error.message) (\(error.reason))")
        default:
            return StoreError(.unavailable, "SQLite store: \(operation) failed: \(error)")
        }
    }

    // MARK: - Rows

    /// A circle row; `read_seq` and `unread` when the query has them.
    private static func circleInfo(_ row: SQLiteRow) throws -> CircleInfo {
        CircleInfo(
            name: try Self.text(row, "name"),
            owner: try Self.text(row, "owner"),
            isPrivate: try Self.integer(row, "private") != 0,
            createdAt: try Self.integer(row, "created_at"),
            lastSeq: try Self.integer(row, "last_seq"),
            readSeq: row.column("read_seq") == nil ? 0 : try Self.integer(row, "read_seq"),
            unread: row.column("unread") == nil ? 0 : try Self.integer(row, "unread"),
            mentions: row.column("mentions") == nil ? 0 : try Self.integer(row, "mentions"),
            direct: DirectMessageKey.members(fromColumn: row.column("direct")?.string),
            notify: row.column("notify")?.string.flatMap(NotificationLevel.init(rawValue:)),
            readOnly: row.column("read_only")?.integer.map { $0 != 0 } ?? false,
            systemEntries: row.column("system_entries")?.integer.map { $0 != 0 } ?? true
        )
    }

    private static func post(_ row: SQLiteRow) throws -> CirclePost {
        try SQLiteEntryRow.post(EntryReader(row: row))
    }

    /// A sqlite-nio row of ``SQLiteEntryRow/blobList(_:)``: the text columns arrive as blobs.
    private struct EntryReader: SQLiteEntryRow.Reader {
        let row: SQLiteRow

        func text(_ index: Int) throws -> String? {
            switch self.row.column(SQLiteEntryRow.columns[index]) {
            case .null: nil
            case .blob(let buffer): String(buffer: buffer)
            case .text(let text): text
            default: throw SQLiteEntryRow.damaged(index, "is not text")
            }
        }

        func integer(_ index: Int) throws -> Int64? {
            switch self.row.column(SQLiteEntryRow.columns[index]) {
            case .null: nil
            case .integer(let value): Int64(value)
            default: throw SQLiteEntryRow.damaged(index, "is not an integer")
            }
        }
    }

    static func text(_ row: SQLiteRow, _ column: String) throws -> String {
        guard case .text(let value) = row.column(column) else {
            throw StoreError(.unavailable, "SQLite store: column \(column) is not text in \(row)")
        }
        return value
    }

    static func integer(_ row: SQLiteRow, _ column: String) throws -> Int64 {
        guard case .integer(let value) = row.column(column) else {
            throw StoreError(.unavailable, "SQLite store: column \(column) is not an integer in \(row)")
        }
        return Int64(value)
    }

    static func optionalInteger(_ row: SQLiteRow, _ column: String) throws -> Int64? {
        switch row.column(column) {
        case .null:
            return nil
        case .integer(let value):
            return Int64(value)
        default:
            throw StoreError(.unavailable, "SQLite store: column \(column) is not an integer in \(row)")
        }
    }

    private static func blobText(_ row: SQLiteRow, _ column: String) throws -> String {
        guard case .blob(let buffer) = row.column(column) else {
            throw StoreError(.unavailable, "SQLite store: column \(column) is not a blob in \(row)")
        }
        return String(buffer: buffer)
    }
}
