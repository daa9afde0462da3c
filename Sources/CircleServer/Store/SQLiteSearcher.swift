import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import VaporCSQLite

/// Runs searches on read-only handles and threads of their own, so that a search can be stopped
/// and never holds up the store's other reads.
///
/// The bundled SQLite is built with `SQLITE_OMIT_PROGRESS_CALLBACK`, so there is no progress
/// handler; a search is bounded instead by `sqlite3_interrupt` from a timer, which SQLite allows
/// from another thread. Each search takes an idle handle (or opens one) and runs its one
/// statement on one of the searcher's ``threads`` threads (searches beyond them wait their turn:
/// the store's reads on the shared thread pool do not wait behind them); the timer starts when
/// the statement starts, so time spent waiting does not count against it, and it interrupts only
/// while that statement runs (``Handle/running``, checked under a lock the search also takes to
/// finish), so it can never stop a later search on the same handle. The store's other
/// connections are never interrupted, and in WAL mode a search neither waits for a commit nor
/// holds one up.
final class SQLiteSearcher: Sendable {
    /// One read-only connection.
    final class Handle: @unchecked Sendable {
        // @unchecked: `pointer` is used by one search at a time (a handle is either idle in the
        // pool or taken by one search); the timer only calls `sqlite3_interrupt`, which SQLite
        // documents as safe from any thread, and only while `running` (under its lock) says the
        // search's statement is running.
        let pointer: OpaquePointer
        let running = NIOLockedValueBox(false)

        init(pointer: OpaquePointer) {
            self.pointer = pointer
        }
    }

    private let path: String
    private let threadPool: NIOThreadPool
    private let eventLoop: any EventLoop
    private let idle = NIOLockedValueBox<(handles: [Handle], closed: Bool)>(([], false))
    /// How many searches run at once (each on a thread of the searcher's own pool); also how
    /// many idle handles are kept.
    static let threads = 2

    /// Starts the searcher's threads; ``close()`` stops them.
    init(path: String, eventLoop: any EventLoop) {
        self.path = path
        self.threadPool = NIOThreadPool(numberOfThreads: Self.threads)
        self.eventLoop = eventLoop
        self.threadPool.start()
    }

    /// Runs `statement` with the time bound of `options` and returns its rows.
    func search(_ statement: SQLiteSearchStatement, options: SearchOptions) async throws -> [SearchHit] {
        let handle = try self.take()
        let milliseconds = options.timeLimitMilliseconds
        let eventLoop = self.eventLoop
        do {
            let hits = try await self.threadPool.runIfActive {
                try Self.run(statement, on: handle, milliseconds: milliseconds, eventLoop: eventLoop)
            }
            self.giveBack(handle)
            return hits
        } catch {
            self.giveBack(handle)
            throw error
        }
    }

    /// Lets the searches that run end, then closes the handles and stops the threads.
    func close() async throws {
        self.idle.withLockedValue { $0.closed = true }
        try await self.threadPool.shutdownGracefully()
        let handles = self.idle.withLockedValue { idle in
            defer { idle.handles = [] }
            return idle.handles
        }
        for handle in handles { sqlite_nio_sqlite3_close_v2(handle.pointer) }
    }

    private func take() throws -> Handle {
        let taken = try self.idle.withLockedValue { idle -> Handle? in
            guard !idle.closed else { throw StoreError(.unavailable, "the SQLite store is closed") }
            return idle.handles.popLast()
        }
        if let taken { return taken }
        var pointer: OpaquePointer?
        let status = sqlite_nio_sqlite3_open_v2(self.path, &pointer, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX, nil)
        guard status == SQLITE_OK, let pointer else {
            let message = pointer.map { String(cString: sqlite_nio_sqlite3_errmsg($0)) } ?? "out of memory"
            sqlite_nio_sqlite3_close_v2(pointer)
            throw StoreError(.unavailable, "SQLite store: opening a search connection failed: \(message)")
        }
        sqlite_nio_sqlite3_busy_timeout(pointer, Int32(SQLiteStore.busyTimeoutMilliseconds))
        return Handle(pointer: pointer)
    }

    private func giveBack(_ handle: Handle) {
        let keep = self.idle.withLockedValue { idle -> Bool in
            guard !idle.closed, idle.handles.count < Self.threads else { return false }
            idle.handles.append(handle)
            return true
        }
        if !keep { sqlite_nio_sqlite3_close_v2(handle.pointer) }
    }

    /// Prepares, binds and steps the statement on the calling (pool) thread.
    private static func run(_ search: SQLiteSearchStatement, on handle: Handle, milliseconds: Int64, eventLoop: any EventLoop) throws -> [SearchHit] {
        let db = handle.pointer
        var statement: OpaquePointer?
        var status = sqlite_nio_sqlite3_prepare_v3(db, search.sql, -1, 0, &statement, nil)
        guard status == SQLITE_OK, let statement else {
            throw Self.error(db, status, "prepare a search")
        }
        defer { sqlite_nio_sqlite3_finalize(statement) }
        for (index, value) in search.values.enumerated() {
            let position = Int32(index + 1)
            switch value {
            case .integer(let integer):
                status = sqlite_nio_sqlite3_bind_int64(statement, position, integer)
            case .text(var text):
                status = text.withUTF8 { bytes -> Int32 in
                    guard let base = bytes.baseAddress, !bytes.isEmpty else {
                        return sqlite_nio_sqlite3_bind_text64(statement, position, "", 0, searchTransient, UInt8(SQLITE_UTF8))
                    }
                    return base.withMemoryRebound(to: CChar.self, capacity: bytes.count) {
                        sqlite_nio_sqlite3_bind_text64(statement, position, $0, UInt64(bytes.count), searchTransient, UInt8(SQLITE_UTF8))
                    }
                }
            }
            guard status == SQLITE_OK else { throw Self.error(db, status, "bind a search value") }
        }

        handle.running.withLockedValue { $0 = true }
        let timer = eventLoop.scheduleTask(in: .milliseconds(milliseconds)) {
            handle.running.withLockedValue { running in
                if running { sqlite_nio_sqlite3_interrupt(handle.pointer) }
            }
        }
        defer { timer.cancel() }
        var hits: [SearchHit] = []
        var done = false
        while !done {
            status = sqlite_nio_sqlite3_step(statement)
            switch status {
            case SQLITE_ROW:
                hits.append(
                    SearchHit(
                        circle: Self.text(statement, 0),
                        seq: sqlite_nio_sqlite3_column_int64(statement, 1),
                        author: Self.text(statement, 2),
                        time: sqlite_nio_sqlite3_column_int64(statement, 3),
                        snippet: Self.text(statement, 4)
                    )
                )
            case SQLITE_DONE:
                done = true
            default:
                done = true
            }
        }
        // Ends the statement's run before the timer may no longer interrupt: reset, then clear `running`.
        sqlite_nio_sqlite3_reset(statement)
        handle.running.withLockedValue { $0 = false }
        if status == SQLITE_INTERRUPT {
            throw SearchError(.timedOut, "the search took longer than \(milliseconds) ms and was stopped; narrow it (a circle, an author, a date)")
        }
        guard status == SQLITE_DONE else { throw Self.error(db, status, "run a search") }
        return hits
    }

    private static func text(_ statement: OpaquePointer, _ column: Int32) -> String {
        guard let text = sqlite_nio_sqlite3_column_text(statement, column) else { return "" }
        let count = Int(sqlite_nio_sqlite3_column_bytes(statement, column))
        return String(decoding: UnsafeBufferPointer(start: text, count: count), as: UTF8.self)
    }

    private static func error(_ db: OpaquePointer, _ status: Int32, _ operation: String) -> StoreError {
        StoreError(.unavailable, "SQLite store: \(operation) failed: \(String(cString: sqlite_nio_sqlite3_errmsg(db))) (\(status))")
    }
}

/// SQLite's "copy the bound value now" destructor (`SQLITE_TRANSIENT`).
private let searchTransient = unsafeBitCast(-1, to: sqlite3_destructor_type.self)
