import CircleWire
import Foundation
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import SQLiteNIO
import VaporCSQLite

/// The connection that commits posts: a second handle on the store's database file, with its
/// statements prepared once, driven from a thread of its own.
///
/// A whole batch (`BEGIN IMMEDIATE`, the key probes, the `last_seq` reads, the inserts, the
/// updates, `COMMIT`) runs in one work item on that thread: one hop there and one back per
/// batch, instead of one per statement. The store's other connection (sqlite-nio) keeps serving
/// reads meanwhile: in WAL mode a reader sees the last committed state and does not wait for a
/// commit's fsync.
///
/// The handle comes from the same SQLite library sqlite-nio links (its vendored copy), so both
/// connections share SQLite's per-process file-lock bookkeeping.
final class SQLitePostWriter: @unchecked Sendable {
    // @unchecked: `handle` and `statements` are used only inside work items of `thread`, a pool
    // of exactly one thread, which runs its items one after the other; `open` and `close` run
    // there too.
    private var handle: OpaquePointer?
    private var statements: Statements?
    private let thread: NIOThreadPool
    private let started = NIOLockedValueBox(0)

    /// Batches that have begun on the writer's thread; for tests.
    var batchesStarted: Int { self.started.withLockedValue { $0 } }

    private init(thread: NIOThreadPool) {
        self.thread = thread
    }

    /// Opens a writer on the database at `path` (which ``SQLiteStore/open(path:threadPool:eventLoopGroup:logger:)``
    /// has opened and put in WAL mode). Statements are prepared by the first ``commit(_:)``, after
    /// the migrations have made the tables.
    static func open(path: String, busyTimeoutMilliseconds: Int) async throws -> SQLitePostWriter {
        let thread = NIOThreadPool(numberOfThreads: 1)
        thread.start()
        let writer = SQLitePostWriter(thread: thread)
        do {
            try await thread.runIfActive { try writer.openOnThread(path: path, busyTimeoutMilliseconds: busyTimeoutMilliseconds) }
        } catch {
            try? await thread.shutdownGracefully()
            throw error
        }
        return writer
    }

    /// Stores a batch in one transaction; see ``SQLiteStore/commit(_:)``.
    func commit(_ posts: [NewPost]) async throws -> [PostOutcome] {
        try await self.thread.runIfActive { try self.commitOnThread(posts) }
    }

    /// Finalizes the statements, closes the handle and stops the thread. Call once.
    func close() async throws {
        var failure: (any Error)?
        do {
            try await self.thread.runIfActive { try self.closeOnThread() }
        } catch {
            failure = error
        }
        try await self.thread.shutdownGracefully()
        if let failure { throw failure }
    }

    /// The integer value of a `PRAGMA` on the writer's connection (some are per connection); for tests.
    func pragma(_ name: String) async throws -> Int64? {
        try await self.thread.runIfActive {
            let statement = try self.prepare("PRAGMA \(name)", persistent: false)
            defer { sqlite_nio_sqlite3_finalize(statement) }
            guard try self.step(statement, "read a pragma") else { return nil }
            return sqlite_nio_sqlite3_column_int64(statement, 0)
        }
    }

    // MARK: - On the thread

    private func openOnThread(path: String, busyTimeoutMilliseconds: Int) throws {
        var handle: OpaquePointer?
        let flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX
        let status = sqlite_nio_sqlite3_open_v2(path, &handle, flags, nil)
        guard status == SQLITE_OK, let handle else {
            let message = handle.map { String(cString: sqlite_nio_sqlite3_errmsg($0)) } ?? "out of memory"
            sqlite_nio_sqlite3_close_v2(handle)
            throw StoreError(.unavailable, "SQLite store: open the post writer on \(path) failed: \(message)")
        }
        self.handle = handle
        sqlite_nio_sqlite3_busy_timeout(handle, Int32(busyTimeoutMilliseconds))
        do {
            // Per connection: an ack promises durability, so FULL syncs the WAL on every commit.
            for pragma in ["PRAGMA synchronous = FULL", "PRAGMA foreign_keys = ON"] {
                let statement = try self.prepare(pragma, persistent: false)
                defer { sqlite_nio_sqlite3_finalize(statement) }
                try self.run(statement, "configure")
            }
        } catch {
            sqlite_nio_sqlite3_close_v2(handle)
            self.handle = nil
            throw error
        }
    }

    private func closeOnThread() throws {
        self.statements?.finalize()
        self.statements = nil
        if let handle = self.handle {
            self.handle = nil
            let status = sqlite_nio_sqlite3_close_v2(handle)
            guard status == SQLITE_OK else {
                throw StoreError(.unavailable, "SQLite store: closing the post writer failed (\(status))")
            }
        }
    }

    private func commitOnThread(_ posts: [NewPost]) throws -> [PostOutcome] {
        guard self.handle != nil else {
            throw StoreError(.unavailable, "the SQLite store is closed")
        }
        let statements = try self.preparedStatements()
        self.started.withLockedValue { $0 += 1 }
        try self.run(statements.begin, "begin")
        do {
            var keys: [PostKey] = []
            var seen = Set<PostKey>()
            var existing: [PostKey: CirclePost] = [:]
            for post in posts {
                let key = PostKey(post)
                guard seen.insert(key).inserted else { continue }
                keys.append(key)
                if let original = try self.storedPost(post, statements.findKey) {
                    existing[key] = original
                }
            }
            var lastSeqs: [BinaryText: Int64] = [:]
            var looked = Set<BinaryText>()
            for key in keys where existing[key] == nil && looked.insert(key.circle).inserted {
                if let lastSeq = try self.lastSeq(of: key.circle.string, statements.lastSeq) {
                    lastSeqs[key.circle] = lastSeq
                }
            }
            let plan = CommitPlan(posts: posts, existing: existing, lastSeqs: lastSeqs)
            for post in plan.inserts {
                let insert = statements.insert
                defer { self.reset(insert) }
                try self.bind(insert, 1, post.circle)
                try self.bind(insert, 2, post.seq)
                try self.bind(insert, 3, post.author)
                try self.bind(insert, 4, post.id)
                try self.bind(insert, 5, post.text)
                try self.bind(insert, 6, post.attachment)
                try self.bind(insert, 7, post.time)
                try self.run(insert, "insert a post")
            }
            for entry in plan.newLastSeqs {
                let update = statements.updateLastSeq
                defer { self.reset(update) }
                try self.bind(update, 1, entry.circle)
                try self.bind(update, 2, entry.lastSeq)
                try self.run(update, "update last_seq")
            }
            try self.run(statements.commit, "commit")
            return plan.outcomes
        } catch {
            // SQLite may already have rolled back (some I/O errors do); then this fails harmlessly.
            _ = try? self.run(statements.rollback, "rollback")
            throw error
        }
    }

    /// The stored post with `post`'s idempotency key, if any.
    private func storedPost(_ post: NewPost, _ statement: OpaquePointer) throws -> CirclePost? {
        defer { self.reset(statement) }
        try self.bind(statement, 1, post.circle)
        try self.bind(statement, 2, post.author)
        try self.bind(statement, 3, post.clientID)
        guard try self.step(statement, "look up a post key") else { return nil }
        return CirclePost(
            circle: self.columnText(statement, 0) ?? "",
            seq: sqlite_nio_sqlite3_column_int64(statement, 1),
            author: self.columnText(statement, 2) ?? "",
            text: self.columnText(statement, 4),
            attachment: self.columnText(statement, 5),
            time: sqlite_nio_sqlite3_column_int64(statement, 6),
            id: self.columnText(statement, 3) ?? ""
        )
    }

    private func lastSeq(of circle: String, _ statement: OpaquePointer) throws -> Int64? {
        defer { self.reset(statement) }
        try self.bind(statement, 1, circle)
        guard try self.step(statement, "read last_seq") else { return nil }
        return sqlite_nio_sqlite3_column_int64(statement, 0)
    }

    // MARK: - Statements

    private struct Statements {
        var begin: OpaquePointer
        var commit: OpaquePointer
        var rollback: OpaquePointer
        var findKey: OpaquePointer
        var lastSeq: OpaquePointer
        var insert: OpaquePointer
        var updateLastSeq: OpaquePointer

        func finalize() {
            for statement in [self.begin, self.commit, self.rollback, self.findKey, self.lastSeq, self.insert, self.updateLastSeq] {
                sqlite_nio_sqlite3_finalize(statement)
            }
        }
    }

    private func preparedStatements() throws -> Statements {
        if let statements = self.statements { return statements }
        var prepared: [OpaquePointer] = []
        do {
            for sql in [
                "BEGIN IMMEDIATE",
                "COMMIT",
                "ROLLBACK",
                """
                SELECT circle, seq, author, client_id, text, attachment, time FROM posts
                WHERE circle = ?1 AND author = ?2 AND client_id = ?3
                """,
                "SELECT last_seq FROM circles WHERE name = ?1",
                "INSERT INTO posts (circle, seq, author, client_id, text, attachment, time) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                "UPDATE circles SET last_seq = ?2 WHERE name = ?1",
            ] {
                prepared.append(try self.prepare(sql, persistent: true))
            }
        } catch {
            for statement in prepared { sqlite_nio_sqlite3_finalize(statement) }
            throw error
        }
        let statements = Statements(
            begin: prepared[0],
            commit: prepared[1],
            rollback: prepared[2],
            findKey: prepared[3],
            lastSeq: prepared[4],
            insert: prepared[5],
            updateLastSeq: prepared[6]
        )
        self.statements = statements
        return statements
    }

    private func prepare(_ sql: String, persistent: Bool) throws -> OpaquePointer {
        var statement: OpaquePointer?
        let flags = persistent ? UInt32(SQLITE_PREPARE_PERSISTENT) : 0
        let status = sqlite_nio_sqlite3_prepare_v3(self.handle, sql, -1, flags, &statement, nil)
        guard status == SQLITE_OK, let statement else {
            throw self.error(status, "prepare \"\(sql)\"")
        }
        return statement
    }

    /// Steps `statement` once: `true` for a row, `false` when done.
    private func step(_ statement: OpaquePointer, _ operation: String) throws -> Bool {
        switch sqlite_nio_sqlite3_step(statement) {
        case SQLITE_ROW:
            return true
        case SQLITE_DONE:
            return false
        case let status:
            throw self.error(status, operation)
        }
    }

    /// Runs a statement that returns no rows, then resets it.
    private func run(_ statement: OpaquePointer, _ operation: String) throws {
        defer { self.reset(statement) }
        _ = try self.step(statement, operation)
    }

    private func reset(_ statement: OpaquePointer) {
        sqlite_nio_sqlite3_reset(statement)
        sqlite_nio_sqlite3_clear_bindings(statement)
    }

    private func bind(_ statement: OpaquePointer, _ index: Int32, _ value: String?) throws {
        let status: Int32
        if var value {
            // With its byte count, so a string with an embedded NUL is stored whole.
            status = value.withUTF8 { bytes -> Int32 in
                guard let base = bytes.baseAddress, !bytes.isEmpty else {
                    return sqlite_nio_sqlite3_bind_text64(statement, index, "", 0, transientDestructor, UInt8(SQLITE_UTF8))
                }
                return base.withMemoryRebound(to: CChar.self, capacity: bytes.count) { text in
                    sqlite_nio_sqlite3_bind_text64(statement, index, text, UInt64(bytes.count), transientDestructor, UInt8(SQLITE_UTF8))
                }
            }
        } else {
            status = sqlite_nio_sqlite3_bind_null(statement, index)
        }
        guard status == SQLITE_OK else { throw self.error(status, "bind") }
    }

    private func bind(_ statement: OpaquePointer, _ index: Int32, _ value: Int64) throws {
        let status = sqlite_nio_sqlite3_bind_int64(statement, index, value)
        guard status == SQLITE_OK else { throw self.error(status, "bind") }
    }

    /// A TEXT column as a string with all its bytes (an embedded NUL included); `nil` for NULL.
    private func columnText(_ statement: OpaquePointer, _ column: Int32) -> String? {
        guard sqlite_nio_sqlite3_column_type(statement, column) != SQLITE_NULL else { return nil }
        // text before bytes: the count is that of the UTF-8 form just produced.
        guard let text = sqlite_nio_sqlite3_column_text(statement, column) else { return "" }
        let count = Int(sqlite_nio_sqlite3_column_bytes(statement, column))
        return String(decoding: UnsafeBufferPointer(start: text, count: count), as: UTF8.self)
    }

    private func error(_ status: Int32, _ operation: String) -> StoreError {
        let message = self.handle.map { String(cString: sqlite_nio_sqlite3_errmsg($0)) } ?? "no connection"
        return StoreError(.unavailable, "SQLite store: \(operation) failed: \(message) (\(status))")
    }
}

/// SQLite's "copy the bound value now" destructor, which the C macro `SQLITE_TRANSIENT` spells as -1.
private let transientDestructor = unsafeBitCast(-1, to: sqlite3_destructor_type.self)
