import CircleWire
import Foundation
import Logging
import SQLiteNIO
import Testing

@testable import CircleServer

/// `SQLiteStore` against real database files in a fresh temporary directory per test.
@Suite struct SQLiteStoreTests {
    static let logger: Logger = {
        var logger = Logger(label: "circle.test.sqlite-store")
        logger.logLevel = .warning
        return logger
    }()

    // MARK: Helpers

    /// A fresh directory under the temporary directory, removed afterwards; passes the database path.
    func withDatabasePath<T>(_ body: (String) async throws -> T) async throws -> T {
        let directory = FileManager.default.temporaryDirectory
            .appendingPathComponent("circle-sqlite-\(UUID().uuidString)", isDirectory: true)
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        return try await body(directory.appendingPathComponent("circle.sqlite").path)
    }

    /// Opens and migrates the store at `path`, runs `body`, and closes the store even when `body` throws.
    func withStore<T>(at path: String, _ body: (SQLiteStore) async throws -> T) async throws -> T {
        let store = try await SQLiteStore.open(path: path, logger: Self.logger)
        do {
            try await store.migrate()
            let result = try await body(store)
            try await store.close()
            return result
        } catch {
            try? await store.close()
            throw error
        }
    }

    func withStore<T>(_ body: (SQLiteStore) async throws -> T) async throws -> T {
        try await self.withDatabasePath { path in
            try await self.withStore(at: path, body)
        }
    }

    func newPost(
        _ circle: String,
        author: String = "alice",
        id: String,
        text: String? = "hello",
        attachment: String? = nil,
        time: Int64 = 1_700_000_000_000
    ) -> NewPost {
        NewPost(circle: circle, author: author, clientID: id, text: text, attachment: attachment, time: time)
    }

    func storedSeqs(_ outcomes: [PostOutcome]) -> [Int64?] {
        outcomes.map { outcome in
            if case .stored(let post) = outcome { return post.seq }
            return nil
        }
    }

    // MARK: Schema

    @Test func migrateTwiceAndPragmas() async throws {
        try await self.withDatabasePath { path in
            try await self.withStore(at: path) { store in
                try await store.migrate()
                try await store.migrate()
                let userVersion = try await store.pragma("user_version")
                let journalMode = try await store.pragma("journal_mode")
                let synchronous = try await store.pragma("synchronous")
                let foreignKeys = try await store.pragma("foreign_keys")
                let busyTimeout = try await store.pragma("busy_timeout")
                #expect(userVersion == SQLiteData.integer(SQLiteInt64(SQLiteStore.schemaVersion)))
                #expect(journalMode == SQLiteData.text("wal"))
                #expect(synchronous == SQLiteData.integer(2))  // FULL
                #expect(foreignKeys == SQLiteData.integer(1))
                #expect(busyTimeout == SQLiteData.integer(5_000))
                // The post writer's own connection: durable commits, foreign keys, and its own busy
                // handler in place of busy_timeout (which reads 0 once a handler is set).
                #expect(try await store.writerPragma("synchronous") == 2)
                #expect(try await store.writerPragma("foreign_keys") == 1)
                #expect(try await store.writerPragma("busy_timeout") == 0)
                _ = try await store.createCircle(name: "lobby", owner: "alice", isPrivate: false, createdAt: 1)
            }
            // Reopening an up-to-date database migrates nothing and keeps the data.
            try await self.withStore(at: path) { store in
                let userVersion = try await store.pragma("user_version")
                #expect(userVersion == SQLiteData.integer(SQLiteInt64(SQLiteStore.schemaVersion)))
                #expect(try await store.circle(named: "lobby")?.owner == "alice")
            }
        }
    }

    @Test("a post waits for another connection's write transaction, however long within the limit, and is stored")
    func postWaitsForAnotherWriter() async throws {
        try await self.withDatabasePath { path in
            try await self.withStore(at: path) { store in
                _ = try await store.createCircle(name: "lobby", owner: "alice", isPrivate: false, createdAt: 1)
                let other = try await SQLiteConnection.open(storage: .file(path: path), logger: Self.logger)
                _ = try await other.query("BEGIN IMMEDIATE")
                _ = try await other.query("INSERT INTO sign_in_failures (key, count, last) VALUES ('x', 1, 1)")
                let post = Task {
                    try await store.commit([NewPost(circle: "lobby", author: "alice", clientID: "p1", text: "hi", attachment: nil, time: 1)])
                }
                // Holds the write lock for 300 ms: the writer's busy handler keeps trying.
                try await Task.sleep(for: .milliseconds(300))
                _ = try await other.query("COMMIT")
                try await other.close()
                let outcomes = try await post.value
                guard case .stored(let stored) = outcomes.first else {
                    Issue.record("the post was not stored: \(outcomes)")
                    return
                }
                #expect(stored.seq == 1)
            }
        }
    }

    /// A request cancelled midway (its client went away) must not leave the connection inside
    /// its transaction: sqlite-nio refuses to run statements for a cancelled task, ROLLBACK too.
    @Test("a transaction whose task is cancelled midway is rolled back; the lock is free and the connection begins the next")
    func cancelledTransactionIsRolledBack() async throws {
        try await self.withDatabasePath { path in
            try await self.withStore(at: path) { _ in
                let connection = try await SQLiteConnection.open(storage: .file(path: path), logger: Self.logger)
                let other = try await SQLiteConnection.open(storage: .file(path: path), logger: Self.logger)
                do {
                    let cancelled = Task {
                        try await SQLiteStore.transaction(on: connection, logger: Self.logger) {
                            _ = try await connection.query("INSERT INTO sign_in_failures (key, count, last) VALUES ('x', 1, 1)")
                            withUnsafeCurrentTask { $0?.cancel() }
                            // Not run: the task is cancelled.
                            _ = try await connection.query("INSERT INTO sign_in_failures (key, count, last) VALUES ('y', 1, 1)")
                        }
                    }
                    await #expect(throws: CancellationError.self) { try await cancelled.value }
                    // Another connection takes the write lock at once (no busy wait: the timeout is 0).
                    _ = try await other.query("PRAGMA busy_timeout = 0")
                    _ = try await other.query("BEGIN IMMEDIATE")
                    _ = try await other.query("ROLLBACK")
                    // The first connection is outside any transaction, and the row went with the rollback.
                    try await SQLiteStore.transaction(on: connection, logger: Self.logger) {
                        let rows = try await connection.query("SELECT count(*) AS n FROM sign_in_failures")
                        #expect(rows.first?.column("n")?.integer == 0)
                    }
                } catch {
                    Issue.record("\(error)")
                }
                try await other.close()
                try await connection.close()
            }
        }
    }

    @Test func newerSchemaIsRefused() async throws {
        try await self.withDatabasePath { path in
            try await self.withStore(at: path) { _ in }
            let connection = try await SQLiteConnection.open(storage: .file(path: path), logger: Self.logger)
            _ = try await connection.query("PRAGMA user_version = \(SQLiteStore.schemaVersion + 1)")
            try await connection.close()

            let store = try await SQLiteStore.open(path: path, logger: Self.logger)
            let error = await #expect(throws: StoreError.self) { try await store.migrate() }
            #expect(error?.code == .unavailable)
            #expect(error?.message.contains("newer") == true)
            try await store.close()
        }
    }

    @Test func closedStoreThrowsUnavailable() async throws {
        try await self.withDatabasePath { path in
            let store = try await SQLiteStore.open(path: path, logger: Self.logger)
            try await store.migrate()
            try await store.close()
            try await store.close()  // closing again is fine
            let error = await #expect(throws: StoreError.self) { try await store.circle(named: "lobby") }
            #expect(error?.code == .unavailable)
        }
    }

    @Test func openFailureIsUnavailable() async throws {
        try await self.withDatabasePath { path in
            let error = await #expect(throws: StoreError.self) {
                _ = try await SQLiteStore.open(path: path + "/missing-directory/circle.sqlite", logger: Self.logger)
            }
            #expect(error?.code == .unavailable)
        }
    }

    @Test func inMemoryIsRefused() async throws {
        let error = await #expect(throws: StoreError.self) {
            _ = try await SQLiteStore.open(path: ":memory:", logger: Self.logger)
        }
        #expect(error?.code == .unavailable)
        #expect(error?.message.contains("file path") == true)
    }

    /// A read runs while a commit waits for the write lock (held here by another connection):
    /// reads are not queued behind commits.
    @Test func readsDoNotWaitForACommit() async throws {
        try await self.withDatabasePath { path in
            try await self.withStore(at: path) { store in
                _ = try await store.createCircle(name: "lobby", owner: "alice", isPrivate: false, createdAt: 1)
                #expect(self.storedSeqs(try await store.commit([self.newPost("lobby", id: "p1")])) == [1])
                let blocker = try await SQLiteConnection.open(storage: .file(path: path), logger: Self.logger)
                _ = try await blocker.query("BEGIN IMMEDIATE")
                let second = self.newPost("lobby", id: "p2")
                let commit = Task { try await store.commit([second]) }
                // The writer has begun the batch and now waits for the lock (its busy timeout is 5 s).
                let deadline = ContinuousClock.now + .seconds(4)
                while store.postBatchesStarted < 2 && ContinuousClock.now < deadline {
                    try await Task.sleep(for: .milliseconds(1))
                }
                #expect(store.postBatchesStarted == 2)
                let posts = try await store.posts(in: "lobby", after: 0, limit: 10)
                let circle = try await store.circle(named: "lobby")
                _ = try await blocker.query("ROLLBACK")
                try await blocker.close()
                #expect(posts.map(\.seq) == [1])
                #expect(circle?.lastSeq == 1)
                #expect(self.storedSeqs(try await commit.value) == [2])
                #expect(try await store.posts(in: "lobby", after: 0, limit: 10).map(\.id) == ["p1", "p2"])
            }
        }
    }

    // MARK: Planning without SQLite

    @Test func commitPlan() {
        let original = CirclePost(circle: "a", seq: 7, author: "alice", text: "old", attachment: nil, time: 1, id: "x")
        var known = CommitPlan.Known()
        known.circles = [
            BinaryText("a"): CommitPlan.Circle(lastSeq: 7, owner: "alice", isPrivate: false),
            BinaryText("b"): CommitPlan.Circle(lastSeq: 0, owner: "bob", isPrivate: false),
        ]
        known.entries = [EntryKey(original): original]
        let plan = CommitPlan(
            posts: [
                self.newPost("a", id: "x"), self.newPost("a", id: "y"), self.newPost("zz", id: "y"),
                self.newPost("b", id: "y"), self.newPost("a", id: "y"), self.newPost("a", id: "z"),
            ],
            known: known
        )
        #expect(plan.outcomes.first == .duplicate(original))
        #expect(self.storedSeqs(plan.outcomes) == [nil, 8, nil, 1, nil, 9])
        #expect(plan.outcomes[2] == .noSuchCircle)
        #expect(plan.outcomes[4] == .duplicate(plan.inserts[0]))
        #expect(plan.inserts.map(\.seq) == [8, 1, 9])
        #expect(plan.newLastSeqs.map(\.circle) == ["a", "b"])
        #expect(plan.newLastSeqs.map(\.lastSeq) == [9, 1])
        #expect(plan.postUpdates.isEmpty && plan.deletedPosts.isEmpty && plan.reactionWrites.isEmpty)
    }

    /// An import of a circle whose retention policy removed a post keeps the changes and replies
    /// that name it as records that change nothing; the same entries posted live are refused.
    @Test func commitPlanKeepsRestoredChangesOfRemovedPosts() {
        var known = CommitPlan.Known()
        known.circles = [BinaryText("a"): CommitPlan.Circle(lastSeq: 9, owner: "alice", isPrivate: false)]
        known.mentionable = [MemberKey(circle: "a", user: "bob")]
        func batch(restored: Bool) -> [NewPost] {
            [
                NewPost(circle: "a", author: "alice", clientID: "e", text: "hi @bob", attachment: nil, time: 1, change: .edit, target: 3, restored: restored),
                NewPost(circle: "a", author: "bob", clientID: "r", text: nil, attachment: nil, time: 2, change: .react, target: 3, emoji: "👍", restored: restored),
                NewPost(circle: "a", author: "bob", clientID: "q", text: "re", attachment: nil, time: 3, replyTo: 3, restored: restored),
                NewPost(circle: "a", author: "alice", clientID: "d", text: nil, attachment: nil, time: 4, change: .delete, target: 3, restored: restored),
            ]
        }
        let restored = CommitPlan(posts: batch(restored: true), known: known)
        #expect(self.storedSeqs(restored.outcomes) == [10, 11, 12, 13])
        #expect(restored.inserts.map(\.target) == [3, 3, nil, 3])
        #expect(restored.inserts[0].mentions == ["bob"] && restored.inserts[1].emoji == "👍" && restored.inserts[2].replyTo == 3)
        #expect(restored.postUpdates.isEmpty && restored.deletedPosts.isEmpty && restored.reactionWrites.isEmpty)
        let live = CommitPlan(posts: batch(restored: false), known: known)
        #expect(self.storedSeqs(live.outcomes) == [nil, nil, nil, nil])
        #expect(live.inserts.isEmpty)
    }

    /// What the plan asks the store to read, and what it tells the store to write, for changes.
    @Test func commitPlanForChanges() {
        let post = CirclePost(circle: "a", seq: 2, author: "alice", text: "hi", attachment: "m1", time: 1, id: "p")
        let edit = CirclePost(circle: "a", seq: 3, author: "alice", text: "hi!", attachment: nil, time: 2, id: "e", change: .edit, target: 2)
        let batch = [
            NewPost(circle: "a", author: "alice", clientID: "e", text: "again", attachment: nil, time: 9, change: .edit, target: 2),
            NewPost(circle: "a", author: "bob", clientID: "r1", text: nil, attachment: nil, time: 10, change: .react, target: 2, emoji: "👍"),
            NewPost(circle: "a", author: "carol", clientID: "r2", text: nil, attachment: nil, time: 10, change: .unreact, target: 2, emoji: "👍"),
            NewPost(circle: "a", author: "bob", clientID: "r3", text: nil, attachment: nil, time: 10, change: .react, target: 5, emoji: "👍"),
            NewPost(circle: "a", author: "bob", clientID: "q", text: "re", attachment: nil, time: 11, replyTo: 4),
            NewPost(circle: "a", author: "dave", clientID: "r4", text: nil, attachment: nil, time: 12, change: .react, target: 1, emoji: "🎉"),
            NewPost(circle: "a", author: "alice", clientID: "d", text: nil, attachment: nil, time: 13, change: .delete, target: 2),
            NewPost(circle: "a", author: "dave", clientID: "r5", text: nil, attachment: nil, time: 14, change: .unreact, target: 1, emoji: "🎉"),
        ]
        var known = CommitPlan.Known()
        known.circles = [BinaryText("a"): CommitPlan.Circle(lastSeq: 4, owner: "alice", isPrivate: false)]
        known.entries = [EntryKey(edit): edit]
        #expect(CommitPlan.circleNames(batch) == ["a"])
        #expect(CommitPlan.keys(batch).count == 8)
        // Targets the store has to read: only seqs that can exist (5 is beyond last_seq 4).
        #expect(CommitPlan.targetsToRead(batch, known: known) == [EntryKey(circle: "a", seq: 2), EntryKey(circle: "a", seq: 4), EntryKey(circle: "a", seq: 1)])
        known.entries[EntryKey(post)] = post
        known.entries[EntryKey(circle: "a", seq: 1)] = CirclePost(circle: "a", seq: 1, author: "bob", text: "x", attachment: nil, time: 0, id: "o")
        known.entries[EntryKey(circle: "a", seq: 4)] = CirclePost(circle: "a", seq: 4, author: "bob", text: "y", attachment: nil, time: 0, id: "o2")
        let reads = CommitPlan.reactionsToRead(batch, known: known)
        #expect(reads.posts == [EntryKey(circle: "a", seq: 2), EntryKey(circle: "a", seq: 1)])
        #expect(reads.reactions.count == 3)
        known.reactionCounts = [EntryKey(circle: "a", seq: 2): [BinaryText("👍"): 1], EntryKey(circle: "a", seq: 1): [:]]
        known.reactions = [ReactionKey(post: EntryKey(circle: "a", seq: 2), emoji: "👍", user: "carol")]

        let plan = CommitPlan(posts: batch, known: known)
        // The edit with a stored key is a duplicate: as it is at the end of the batch, its text cleared by the delete.
        var cleared = edit
        cleared.text = nil
        #expect(plan.outcomes[0] == .duplicate(cleared))
        #expect(self.storedSeqs(plan.outcomes) == [nil, 5, 6, nil, 7, 8, 9, 10])
        // Seq 5 is known by then, but it is a change entry.
        if case .rejected(let code, _) = plan.outcomes[3] { #expect(code == .noSuchPost) } else { Issue.record("expected .rejected, got \(plan.outcomes[3])") }
        #expect(plan.postUpdates == [CirclePost(circle: "a", seq: 2, author: "alice", text: nil, attachment: nil, time: 1, id: "p", deleted: true)])
        #expect(plan.deletedPosts == [EntryKey(circle: "a", seq: 2)])
        // Post 2's reactions went with it; on post 1 dave's 🎉 came and went.
        #expect(plan.reactionWrites.map(\.reaction) == [ReactionKey(post: EntryKey(circle: "a", seq: 1), emoji: "🎉", user: "dave")])
        #expect(plan.reactionWrites.map(\.seq) == [nil])
        #expect(plan.newLastSeqs.map(\.lastSeq) == [10])
    }
}
