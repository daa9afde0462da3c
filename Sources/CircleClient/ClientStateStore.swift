import CircleWire
import Foundation
import Logging
import NIOCore
import NIOPosix
import SQLiteNIO

/// Where a client keeps its outbox and its per-circle cursors.
protocol ClientStateStore: Sendable {
    /// The outbox in order, the ids of its entries that may have reached the server
    /// (``markSent(_:)``), and the cursors.
    func load() async throws -> (outbox: [OutboxEntry], sent: Set<String>, cursors: [String: Int64])
    /// Appends an entry to the outbox; `sent` marks it as one that may reach the server (it is
    /// about to be written to an open connection).
    func enqueue(_ entry: OutboxEntry, sent: Bool) async throws
    /// Marks entries as ones that may have reached the server: they are about to be written to
    /// a connection for the first time.
    func markSent(_ ids: [String]) async throws
    func remove(id: String) async throws
    func setCursor(_ seq: Int64, for circle: String) async throws
    /// Photo posts whose upload has not been handed to the outbox yet.
    func loadPhotoJobs() async throws -> [PhotoJob]
    /// Inserts or updates a photo job (its upload id and media id as they become known).
    func savePhotoJob(_ job: PhotoJob) async throws
    func removePhotoJob(id: String) async throws
    /// Replaces the text of an outbox entry.
    func replaceText(id: String, text: String) async throws
    /// The offline caches by circle.
    func loadCaches() async throws -> [String: CachedCircle]
    /// Saves a circle's cache: its posts in current state (these replace what was saved), and
    /// the seq they reflect. The SQLite store writes only what differs from its last save.
    func saveCache(_ posts: [CirclePost], upTo: Int64, for circle: String) async throws
    func close() async
}

extension ClientStateStore {
    func replaceText(id: String, text: String) async throws {}
    func loadCaches() async throws -> [String: CachedCircle] { [:] }
    func saveCache(_ posts: [CirclePost], upTo: Int64, for circle: String) async throws {}
}

/// A circle's offline cache as saved: the posts, and the last seq applied to them (the cursor
/// they go with).
struct CachedCircle: Sendable, Hashable, Codable {
    var upTo: Int64
    var posts: [CirclePost]
}

/// A queued photo post: the file to upload, then the post to make with its media id.
struct PhotoJob: Sendable, Hashable {
    /// Also the post's id, so a post made again after a restart is stored once.
    var id: String
    var circle: String
    var caption: String?
    var path: String
    var contentType: String
    var size: Int64
    /// The resumable upload on the server, once created.
    var uploadID: String?
    /// The media id, once the upload completed.
    var mediaID: String?
    var createdAt: Int64
    /// The file belongs to the client (a copy in its spool directory) and is deleted after use.
    var ownsFile: Bool
}

/// Nothing survives the process; the default.
actor MemoryClientStateStore: ClientStateStore {
    func load() async throws -> (outbox: [OutboxEntry], sent: Set<String>, cursors: [String: Int64]) { ([], [], [:]) }
    func enqueue(_ entry: OutboxEntry, sent: Bool) async throws {}
    func markSent(_ ids: [String]) async throws {}
    func remove(id: String) async throws {}
    func setCursor(_ seq: Int64, for circle: String) async throws {}
    func loadPhotoJobs() async throws -> [PhotoJob] { [] }
    func savePhotoJob(_ job: PhotoJob) async throws {}
    func removePhotoJob(id: String) async throws {}
    func close() async {}
}

/// The outbox and cursors in an SQLite file (WAL): unsent posts are sent after a restart, in
/// their original order, and subscriptions resume from the last delivered sequence number.
///
/// Every operation holds the store's gate from its first statement to its last: sqlite-nio runs
/// each statement as its own hop to the thread pool and the actor is reentrant, so without the
/// gate a queued post's `INSERT` could land inside a cache save's open transaction (and be
/// rolled back with it, or wait for its commit to be durable).
actor SQLiteClientStateStore: ClientStateStore {
    private let connection: SQLiteConnection
    private let logger: Logger
    private var nextOrder: Int64 = 0
    /// Each circle's cached posts as they are in the file, by seq: a save writes only the posts
    /// that differ and deletes the ones gone. No entry: unknown (the next save rewrites the
    /// circle). The posts share their text with the client's cache.
    private var savedCaches: [String: [Int64: CirclePost]] = [:]
    private let gate = AsyncFIFOGate()

    static func open(path: String, logger: Logger) async throws -> SQLiteClientStateStore {
        let connection = try await SQLiteConnection.open(
            storage: .file(path: path),
            threadPool: .singleton,
            logger: logger,
            on: MultiThreadedEventLoopGroup.singleton.any()
        )
        _ = try await connection.query("PRAGMA journal_mode = WAL")
        // An enqueued post must survive a crash: the app was told it is queued.
        _ = try await connection.query("PRAGMA synchronous = FULL")
        _ = try await connection.query(
            "CREATE TABLE IF NOT EXISTS outbox (id TEXT PRIMARY KEY, ord INTEGER NOT NULL, circle TEXT NOT NULL, text TEXT, attachment TEXT, created_at INTEGER NOT NULL)"
        )
        // Outbox entries of older versions are posts (the columns of changes are added empty) that
        // were never sent (`sent` 0: they can still be cancelled).
        let columns = Set(try await connection.query("PRAGMA table_info(outbox)").compactMap { $0.column("name")?.string })
        let added = [("action", "TEXT"), ("target", "INTEGER"), ("emoji", "TEXT"), ("reply_to", "INTEGER"), ("sent", "INTEGER NOT NULL DEFAULT 0")]
        for (column, type) in added where !columns.contains(column) {
            _ = try await connection.query("ALTER TABLE outbox ADD COLUMN \(column) \(type)")
        }
        _ = try await connection.query("CREATE TABLE IF NOT EXISTS cursors (circle TEXT PRIMARY KEY, seq INTEGER NOT NULL)")
        // The offline cache: a row per post (its JSON), so a save writes what changed, and per
        // circle the seq the posts go with.
        _ = try await connection.query(
            "CREATE TABLE IF NOT EXISTS cached_posts (circle TEXT NOT NULL, seq INTEGER NOT NULL, post BLOB NOT NULL, PRIMARY KEY (circle, seq)) WITHOUT ROWID"
        )
        _ = try await connection.query("CREATE TABLE IF NOT EXISTS cached_circles (circle TEXT PRIMARY KEY, up_to INTEGER NOT NULL)")
        try await Self.migratePostCache(connection, logger: logger)
        _ = try await connection.query(
            """
            CREATE TABLE IF NOT EXISTS photo_jobs (id TEXT PRIMARY KEY, circle TEXT NOT NULL, caption TEXT, path TEXT NOT NULL,
            content_type TEXT NOT NULL, size INTEGER NOT NULL, upload_id TEXT, media_id TEXT, created_at INTEGER NOT NULL, owns_file INTEGER NOT NULL)
            """
        )
        return SQLiteClientStateStore(connection: connection, logger: logger)
    }

    private init(connection: SQLiteConnection, logger: Logger) {
        self.connection = connection
        self.logger = logger
    }

    /// Moves the caches of older versions (table `post_cache`: a circle's posts as one JSON
    /// array) to a row per post, once: the old table is dropped in the same transaction.
    private static func migratePostCache(_ connection: SQLiteConnection, logger: Logger) async throws {
        let exists = try await connection.query("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'post_cache'")
        guard !exists.isEmpty else { return }
        try await Self.transaction(on: connection, logger: logger) {
            let decoder = JSONDecoder()
            for row in try await connection.query("SELECT circle, up_to, posts FROM post_cache") {
                guard let circle = row.column("circle")?.string, let upTo = row.column("up_to")?.integer,
                    let blob = row.column("posts")?.blob,
                    let posts = try? decoder.decode([CirclePost].self, from: Data(buffer: blob))
                else { continue }  // unreadable, as before: the circle is read from the server again
                for post in posts { try await Self.writePost(post, of: circle, on: connection) }
                try await Self.writeUpTo(Int64(upTo), of: circle, on: connection)
            }
            _ = try await connection.query("DROP TABLE post_cache")
        }
    }

    // MARK: Gate

    /// Runs `body` alone on the connection (see the type's documentation), first come, first
    /// served. The gate is never closed: the store's `close` runs through it too.
    private func exclusively<T>(_ body: () async throws -> T) async rethrows -> T {
        _ = await self.gate.enter()
        do {
            let result = try await body()
            await self.gate.leave()
            return result
        } catch {
            await self.gate.leave()
            throw error
        }
    }

    /// One statement, through the gate.
    @discardableResult
    private func query(_ sql: String, _ binds: [SQLiteData] = []) async throws -> [SQLiteRow] {
        try await self.exclusively { try await self.connection.query(sql, binds) }
    }

    /// Runs `body` in `BEGIN IMMEDIATE … COMMIT`, rolling back on any error. The caller holds
    /// the gate (or has the connection to itself, while opening).
    private static func transaction(on connection: SQLiteConnection, logger: Logger, _ body: () async throws -> Void) async throws {
        _ = try await connection.query("BEGIN IMMEDIATE")
        do {
            try await body()
            _ = try await connection.query("COMMIT")
        } catch {
            do {
                _ = try await connection.query("ROLLBACK")
            } catch let rollbackError {
                // SQLite may already have rolled back (some I/O errors do): nothing is left to undo.
                logger.debug("ROLLBACK failed", metadata: ["error": "\(rollbackError)"])
            }
            throw error
        }
    }

    func load() async throws -> (outbox: [OutboxEntry], sent: Set<String>, cursors: [String: Int64]) {
        let rows = try await self.query(
            "SELECT id, ord, circle, action, text, attachment, target, emoji, reply_to, created_at, sent FROM outbox ORDER BY ord"
        )
        var outbox: [OutboxEntry] = []
        var sent: Set<String> = []
        for row in rows {
            guard let id = row.column("id")?.string, let circle = row.column("circle")?.string else { continue }
            if (row.column("sent")?.integer ?? 0) != 0 { sent.insert(id) }
            outbox.append(
                OutboxEntry(
                    id: id,
                    circle: circle,
                    action: row.column("action")?.string.flatMap(OutboxAction.init(rawValue:)) ?? .post,
                    text: row.column("text")?.string,
                    attachment: row.column("attachment")?.string,
                    target: row.column("target")?.integer.map(Int64.init),
                    emoji: row.column("emoji")?.string,
                    replyTo: row.column("reply_to")?.integer.map(Int64.init),
                    createdAt: Int64(row.column("created_at")?.integer ?? 0)
                )
            )
            self.nextOrder = max(self.nextOrder, Int64(row.column("ord")?.integer ?? 0) + 1)
        }
        var cursors: [String: Int64] = [:]
        for row in try await self.query("SELECT circle, seq FROM cursors") {
            if let circle = row.column("circle")?.string, let seq = row.column("seq")?.integer { cursors[circle] = Int64(seq) }
        }
        return (outbox, sent, cursors)
    }

    func enqueue(_ entry: OutboxEntry, sent: Bool) async throws {
        let order = self.nextOrder
        self.nextOrder += 1
        _ = try await self.query(
            """
            INSERT OR IGNORE INTO outbox (id, ord, circle, action, text, attachment, target, emoji, reply_to, created_at, sent)
            VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
            """,
            [
                .text(entry.id), .integer(Int(order)), .text(entry.circle), .text(entry.action.rawValue), entry.text.map { .text($0) } ?? .null,
                entry.attachment.map { .text($0) } ?? .null, entry.target.map { .integer(Int($0)) } ?? .null,
                entry.emoji.map { .text($0) } ?? .null, entry.replyTo.map { .integer(Int($0)) } ?? .null, .integer(Int(entry.createdAt)),
                .integer(sent ? 1 : 0),
            ]
        )
    }

    func markSent(_ ids: [String]) async throws {
        // One statement for any number of ids (a list of `?` would meet SQLite's limit on binds).
        let list = String(decoding: try JSONEncoder().encode(ids), as: UTF8.self)
        _ = try await self.query("UPDATE outbox SET sent = 1 WHERE id IN (SELECT value FROM json_each(?))", [.text(list)])
    }

    func replaceText(id: String, text: String) async throws {
        _ = try await self.query("UPDATE outbox SET text = ? WHERE id = ?", [.text(text), .text(id)])
    }

    func loadCaches() async throws -> [String: CachedCircle] {
        try await self.exclusively {
            var upTo: [String: Int64] = [:]
            for row in try await self.connection.query("SELECT circle, up_to FROM cached_circles") {
                if let circle = row.column("circle")?.string, let seq = row.column("up_to")?.integer { upTo[circle] = Int64(seq) }
            }
            var posts: [String: [CirclePost]] = [:]
            var unreadable: Set<String> = []
            let decoder = JSONDecoder()
            for row in try await self.connection.query("SELECT circle, post FROM cached_posts ORDER BY circle, seq") {
                guard let circle = row.column("circle")?.string, upTo[circle] != nil else { continue }
                guard let blob = row.column("post")?.blob, let post = try? decoder.decode(CirclePost.self, from: Data(buffer: blob)) else {
                    unreadable.insert(circle)
                    continue
                }
                posts[circle, default: []].append(post)
            }
            var caches: [String: CachedCircle] = [:]
            for (circle, seq) in upTo {
                let cached = posts[circle] ?? []
                caches[circle] = CachedCircle(upTo: seq, posts: cached)
                // With a row that could not be read, the file is not known: the next save rewrites the circle.
                self.savedCaches[circle] = unreadable.contains(circle) ? nil : Dictionary(cached.map { ($0.seq, $0) }, uniquingKeysWith: { $1 })
            }
            return caches
        }
    }

    /// Writes the posts that differ from the saved ones, deletes those no longer cached, and
    /// the seq they go with, in one transaction.
    func saveCache(_ posts: [CirclePost], upTo: Int64, for circle: String) async throws {
        try await self.exclusively {
            let saved = self.savedCaches[circle]
            let current = Dictionary(posts.map { ($0.seq, $0) }, uniquingKeysWith: { $1 })
            let changed = posts.filter { saved?[$0.seq] != $0 }
            let gone = saved.map { Array(Set($0.keys).subtracting(current.keys)) } ?? []
            let connection = self.connection
            try await Self.transaction(on: connection, logger: self.logger) {
                if saved == nil {
                    _ = try await connection.query("DELETE FROM cached_posts WHERE circle = ?", [.text(circle)])
                } else if !gone.isEmpty {
                    let list = String(decoding: try JSONEncoder().encode(gone), as: UTF8.self)
                    _ = try await connection.query(
                        "DELETE FROM cached_posts WHERE circle = ? AND seq IN (SELECT value FROM json_each(?))",
                        [.text(circle), .text(list)]
                    )
                }
                for post in changed { try await Self.writePost(post, of: circle, on: connection) }
                try await Self.writeUpTo(upTo, of: circle, on: connection)
            }
            self.savedCaches[circle] = current
        }
    }

    private static func writePost(_ post: CirclePost, of circle: String, on connection: SQLiteConnection) async throws {
        _ = try await connection.query(
            "INSERT INTO cached_posts (circle, seq, post) VALUES (?, ?, ?) ON CONFLICT(circle, seq) DO UPDATE SET post = excluded.post",
            [.text(circle), .integer(Int(post.seq)), .blob(ByteBuffer(bytes: try JSONEncoder().encode(post)))]
        )
    }

    private static func writeUpTo(_ upTo: Int64, of circle: String, on connection: SQLiteConnection) async throws {
        _ = try await connection.query(
            "INSERT INTO cached_circles (circle, up_to) VALUES (?, ?) ON CONFLICT(circle) DO UPDATE SET up_to = excluded.up_to WHERE up_to != excluded.up_to",
            [.text(circle), .integer(Int(upTo))]
        )
    }

    /// Rows inserted, updated or deleted on this connection since it opened (SQLite's
    /// `total_changes()`): tests count a save's writes with it.
    func totalChanges() async throws -> Int {
        try await self.query("SELECT total_changes() AS n").first?.column("n")?.integer ?? 0
    }

    func remove(id: String) async throws {
        _ = try await self.query("DELETE FROM outbox WHERE id = ?", [.text(id)])
    }

    func setCursor(_ seq: Int64, for circle: String) async throws {
        _ = try await self.query(
            "INSERT INTO cursors (circle, seq) VALUES (?, ?) ON CONFLICT(circle) DO UPDATE SET seq = excluded.seq WHERE excluded.seq > cursors.seq",
            [.text(circle), .integer(Int(seq))]
        )
    }

    func loadPhotoJobs() async throws -> [PhotoJob] {
        let rows = try await self.query(
            "SELECT id, circle, caption, path, content_type, size, upload_id, media_id, created_at, owns_file FROM photo_jobs ORDER BY created_at, rowid"
        )
        return rows.compactMap { row in
            guard let id = row.column("id")?.string, let circle = row.column("circle")?.string, let path = row.column("path")?.string,
                let contentType = row.column("content_type")?.string, let size = row.column("size")?.integer
            else { return nil }
            return PhotoJob(
                id: id,
                circle: circle,
                caption: row.column("caption")?.string,
                path: path,
                contentType: contentType,
                size: Int64(size),
                uploadID: row.column("upload_id")?.string,
                mediaID: row.column("media_id")?.string,
                createdAt: Int64(row.column("created_at")?.integer ?? 0),
                ownsFile: (row.column("owns_file")?.integer ?? 0) != 0
            )
        }
    }

    func savePhotoJob(_ job: PhotoJob) async throws {
        _ = try await self.query(
            """
            INSERT INTO photo_jobs (id, circle, caption, path, content_type, size, upload_id, media_id, created_at, owns_file)
            VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
            ON CONFLICT(id) DO UPDATE SET upload_id = excluded.upload_id, media_id = excluded.media_id
            """,
            [
                .text(job.id), .text(job.circle), job.caption.map { .text($0) } ?? .null, .text(job.path), .text(job.contentType),
                .integer(Int(job.size)), job.uploadID.map { .text($0) } ?? .null, job.mediaID.map { .text($0) } ?? .null,
                .integer(Int(job.createdAt)), .integer(job.ownsFile ? 1 : 0),
            ]
        )
    }

    func removePhotoJob(id: String) async throws {
        _ = try await self.query("DELETE FROM photo_jobs WHERE id = ?", [.text(id)])
    }

    func close() async {
        await self.exclusively { try? await self.connection.close() }
    }
}
