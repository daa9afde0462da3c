@testable import CircleClient
import Foundation
import Logging
import NIOCore
import NIOPosix
import SQLiteNIO
import Testing

private func cachedPost(_ seq: Int64, _ text: String) -> CirclePost {
    CirclePost(circle: "c", seq: seq, author: "ann", text: text, attachment: nil, time: seq, id: "id\(seq)")
}

@Suite("CircleClient state file: outbox entries of changes, old files, the offline cache")
struct ClientStateFileTests {
    @Test("a state file of the previous version opens: its outbox entries are posts, and new entries keep their fields")
    func oldStateFile() async throws {
        let path = temporaryStateFile("circle-state")
        defer { removeStateFile(path) }
        // The previous version's schema, with one queued post.
        let old = try await SQLiteConnection.open(storage: .file(path: path), threadPool: .singleton, on: MultiThreadedEventLoopGroup.singleton.any())
        _ = try await old.query("CREATE TABLE outbox (id TEXT PRIMARY KEY, ord INTEGER NOT NULL, circle TEXT NOT NULL, text TEXT, attachment TEXT, created_at INTEGER NOT NULL)")
        _ = try await old.query("CREATE TABLE cursors (circle TEXT PRIMARY KEY, seq INTEGER NOT NULL)")
        _ = try await old.query("INSERT INTO outbox VALUES ('old-1', 0, 'general', 'queued before the upgrade', NULL, 7)")
        _ = try await old.query("INSERT INTO cursors VALUES ('general', 12)")
        try await old.close()

        let store = try await SQLiteClientStateStore.open(path: path, logger: Logger(label: "test"))
        let (outbox, sent, cursors) = try await store.load()
        #expect(sent.isEmpty)  // entries of older files were never sent
        #expect(outbox == [OutboxEntry(id: "old-1", circle: "general", action: .post, text: "queued before the upgrade", createdAt: 7)])
        #expect(cursors == ["general": 12])
        let react = OutboxEntry(id: "r", circle: "general", action: .react, target: 3, emoji: "👍", createdAt: 8)
        let reply = OutboxEntry(id: "p", circle: "general", action: .post, text: "re", replyTo: 3, createdAt: 9)
        let edit = OutboxEntry(id: "e", circle: "general", action: .edit, text: "new", target: 3, createdAt: 10)
        for entry in [react, reply, edit] { try await store.enqueue(entry, sent: false) }
        try await store.replaceText(id: "e", text: "newer")
        await store.close()

        let reopened = try await SQLiteClientStateStore.open(path: path, logger: Logger(label: "test"))
        var edited = edit
        edited.text = "newer"
        #expect(try await reopened.load().outbox == [outbox[0], react, reply, edited])
        await reopened.close()
    }

    @Test("outbox entries of a state file without the sent column count as never sent: they can be replaced and cancelled")
    func stateFileWithoutSentColumn() async throws {
        let path = temporaryStateFile("circle-state")
        defer { removeStateFile(path) }
        // The previous version's outbox: changes and replies, but no `sent`.
        let old = try await SQLiteConnection.open(storage: .file(path: path), threadPool: .singleton, on: MultiThreadedEventLoopGroup.singleton.any())
        _ = try await old.query(
            """
            CREATE TABLE outbox (id TEXT PRIMARY KEY, ord INTEGER NOT NULL, circle TEXT NOT NULL, text TEXT, attachment TEXT,
            created_at INTEGER NOT NULL, action TEXT, target INTEGER, emoji TEXT, reply_to INTEGER)
            """
        )
        _ = try await old.query("INSERT INTO outbox (id, ord, circle, text, created_at, action) VALUES ('a', 0, 'notes', 'first', 1, 'post')")
        _ = try await old.query("INSERT INTO outbox (id, ord, circle, text, created_at, action, target) VALUES ('b', 1, 'notes', 'edit', 2, 'edit', 1)")
        try await old.close()

        let configuration = CircleClientConfiguration(servers: ["ws://127.0.0.1:1/v1/ws"], tokenProvider: { "" }, stateFile: path)
        let client = try await CircleClient(configuration: configuration)
        #expect(await client.outbox.map(\.id) == ["a", "b"])
        #expect(await client.replaceOutboxText("b", with: "edited offline"))
        #expect(await client.cancelOutboxEntry("a"))
        await client.shutdown()

        let store = try await SQLiteClientStateStore.open(path: path, logger: Logger(label: "test"))
        let (outbox, sent, _) = try await store.load()
        #expect(outbox.map(\.id) == ["b"])
        #expect(outbox.first?.text == "edited offline")
        #expect(sent.isEmpty)
        await store.close()
    }

    @Test("a circle's cache is saved and loaded with the seq it goes with")
    func cacheRoundTrip() async throws {
        let path = temporaryStateFile("circle-state")
        defer { removeStateFile(path) }
        let store = try await SQLiteClientStateStore.open(path: path, logger: Logger(label: "test"))
        var post = cachedPost(2, "two")
        post.reactions = [CircleReaction(emoji: "👍", users: ["bob"], me: false)]
        try await store.saveCache([cachedPost(1, "one"), post], upTo: 4, for: "c")
        try await store.saveCache([cachedPost(1, "one"), post, cachedPost(5, "five")], upTo: 5, for: "c")
        await store.close()
        let reopened = try await SQLiteClientStateStore.open(path: path, logger: Logger(label: "test"))
        #expect(try await reopened.loadCaches() == ["c": CachedCircle(upTo: 5, posts: [cachedPost(1, "one"), post, cachedPost(5, "five")])])
        await reopened.close()
    }

    @Test("a cache save writes only the posts added or changed, deletes the trimmed ones, and skips an unchanged seq")
    func cacheWritesOnlyChanges() async throws {
        let path = temporaryStateFile("circle-state")
        defer { removeStateFile(path) }
        let store = try await SQLiteClientStateStore.open(path: path, logger: Logger(label: "test"))
        #expect(try await store.loadCaches().isEmpty)
        let first = (1...3).map { cachedPost(Int64($0), "p\($0)") }
        try await store.saveCache(first, upTo: 3, for: "c")
        var changes = try await store.totalChanges()

        func written() async throws -> Int {
            let now = try await store.totalChanges()
            defer { changes = now }
            return now - changes
        }
        // One new post: its row and the circle's up_to.
        try await store.saveCache(first + [cachedPost(4, "p4")], upTo: 4, for: "c")
        #expect(try await written() == 2)
        // One post edited, nothing else: its row and up_to.
        let edited = [first[0], cachedPost(2, "p2, edited"), first[2], cachedPost(4, "p4")]
        try await store.saveCache(edited, upTo: 5, for: "c")
        #expect(try await written() == 2)
        // The same posts, the same seq: nothing.
        try await store.saveCache(edited, upTo: 5, for: "c")
        #expect(try await written() == 0)
        // One more post, and the cache trimmed to the newest three: posts 1 and 2 deleted, 6
        // added, and up_to.
        let kept = [edited[2], edited[3], cachedPost(6, "p6")]
        try await store.saveCache(kept, upTo: 6, for: "c")
        #expect(try await written() == 4)
        await store.close()

        let reopened = try await SQLiteClientStateStore.open(path: path, logger: Logger(label: "test"))
        #expect(try await reopened.loadCaches() == ["c": CachedCircle(upTo: 6, posts: kept)])
        await reopened.close()

        // A store that did not load the caches first does not know the file: a save rewrites the circle.
        let unloaded = try await SQLiteClientStateStore.open(path: path, logger: Logger(label: "test"))
        try await unloaded.saveCache([cachedPost(7, "p7")], upTo: 7, for: "c")
        #expect(try await unloaded.loadCaches() == ["c": CachedCircle(upTo: 7, posts: [cachedPost(7, "p7")])])
        await unloaded.close()
    }

    @Test("caches of the previous version (one JSON row per circle) are moved to a row per post, once")
    func cacheMigration() async throws {
        let path = temporaryStateFile("circle-state")
        defer { removeStateFile(path) }
        var reacted = cachedPost(2, "two")
        reacted.reactions = [CircleReaction(emoji: "👍", users: ["bob"], me: false)]
        let posts = [cachedPost(1, "one"), reacted]
        let old = try await SQLiteConnection.open(storage: .file(path: path), threadPool: .singleton, on: MultiThreadedEventLoopGroup.singleton.any())
        _ = try await old.query("CREATE TABLE post_cache (circle TEXT PRIMARY KEY, up_to INTEGER NOT NULL, posts BLOB NOT NULL)")
        _ = try await old.query(
            "INSERT INTO post_cache VALUES ('c', 9, ?), ('d', 4, ?)",
            [.blob(ByteBuffer(bytes: try JSONEncoder().encode(posts))), .blob(ByteBuffer(bytes: try JSONEncoder().encode([cachedPost(4, "four")])))]
        )
        try await old.close()

        let store = try await SQLiteClientStateStore.open(path: path, logger: Logger(label: "test"))
        let expected = ["c": CachedCircle(upTo: 9, posts: posts), "d": CachedCircle(upTo: 4, posts: [cachedPost(4, "four")])]
        #expect(try await store.loadCaches() == expected)
        // Migrated rows are known: a save of one more post writes that post and up_to.
        let before = try await store.totalChanges()
        try await store.saveCache(posts + [cachedPost(10, "ten")], upTo: 10, for: "c")
        #expect(try await store.totalChanges() - before == 2)
        await store.close()

        let check = try await SQLiteConnection.open(storage: .file(path: path), threadPool: .singleton, on: MultiThreadedEventLoopGroup.singleton.any())
        #expect(try await check.query("SELECT name FROM sqlite_master WHERE name = 'post_cache'").isEmpty)
        let rows = try await check.query("SELECT circle, seq FROM cached_posts ORDER BY circle, seq")
        #expect(rows.map { "\($0.column("circle")?.string ?? "")\($0.column("seq")?.integer ?? 0)" } == ["c1", "c2", "c10", "d4"])
        try await check.close()
        let reopened = try await SQLiteClientStateStore.open(path: path, logger: Logger(label: "test"))
        #expect(try await reopened.loadCaches()["c"]?.posts.map(\.seq) == [1, 2, 10])
        await reopened.close()
    }

    @Test("a client resumes from the seq its saved cache goes with, and serves the cache as its current state")
    func resumeFromCache() async throws {
        let configuration = CircleClientConfiguration(servers: ["ws://127.0.0.1:1/v1/ws"], tokenProvider: { "" }, stateFile: "/unused", cacheLimit: 2)
        // The cursor write made it, the cache write of the same pass did not (a crash between).
        let core = ClientCore(
            configuration: configuration,
            store: MemoryClientStateStore(),
            outbox: [],
            cursors: ["c": 9],
            caches: ["c": CachedCircle(upTo: 7, posts: [cachedPost(5, "five"), cachedPost(6, "six"), cachedPost(7, "seven")])]
        )
        #expect(await core.cursor(of: "c") == 7)
        // Loaded through the limit: the newest two.
        #expect(await core.cachedPosts(in: "c").map(\.seq) == [6, 7])
        let page = try await core.history("c", before: nil, after: nil, limit: 1)
        #expect(page.posts.map(\.seq) == [7])
        #expect(page.more)

        var noCache = configuration
        noCache.cacheLimit = 0
        let plain = ClientCore(configuration: noCache, store: MemoryClientStateStore(), outbox: [], cursors: ["c": 9], caches: [:])
        #expect(await plain.cursor(of: "c") == 9)
        #expect(await plain.cachedPosts(in: "c").isEmpty)
        await #expect(throws: CircleClientError.self) { try await plain.history("c", before: nil, after: nil, limit: 1) }
    }
}
