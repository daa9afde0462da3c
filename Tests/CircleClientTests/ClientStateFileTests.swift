@testable import CircleClient
import Foundation
import Logging
import NIOPosix
import SQLiteNIO
import Testing

private func temporaryPath() -> String {
    FileManager.default.temporaryDirectory.appendingPathComponent("circle-state-\(UUID().uuidString).sqlite").path
}

private func removeFile(_ path: String) {
    for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: path + suffix) }
}

private func cachedPost(_ seq: Int64, _ text: String) -> CirclePost {
    CirclePost(circle: "c", seq: seq, author: "ann", text: text, attachment: nil, time: seq, id: "id\(seq)")
}

@Suite("CircleClient state file: outbox entries of changes, old files, the offline cache")
struct ClientStateFileTests {
    @Test("a state file of the previous version opens: its outbox entries are posts, and new entries keep their fields")
    func oldStateFile() async throws {
        let path = temporaryPath()
        defer { removeFile(path) }
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
        let path = temporaryPath()
        defer { removeFile(path) }
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
        let path = temporaryPath()
        defer { removeFile(path) }
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
