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

    // MARK: Circles and members

    @Test func createListAndVisibility() async throws {
        try await self.withStore { store in
            let lobby = try await store.createCircle(name: "lobby", owner: "alice", isPrivate: false, createdAt: 10)
            #expect(lobby == CircleInfo(name: "lobby", owner: "alice", isPrivate: false, createdAt: 10, lastSeq: 0))
            _ = try await store.createCircle(name: "secret", owner: "bob", isPrivate: true, createdAt: 20)
            _ = try await store.createCircle(name: "attic", owner: "carol", isPrivate: false, createdAt: 30)

            #expect(try await store.circle(named: "secret") == CircleInfo(name: "secret", owner: "bob", isPrivate: true, createdAt: 20, lastSeq: 0))
            #expect(try await store.circle(named: "nowhere") == nil)

            #expect(try await store.circles(visibleTo: "dave").map(\.name) == ["attic", "lobby"])
            #expect(try await store.circles(visibleTo: "bob").map(\.name) == ["attic", "lobby", "secret"])
            try await store.addMember("dave", to: "secret")
            #expect(try await store.circles(visibleTo: "dave").map(\.name) == ["attic", "lobby", "secret"])
            try await store.removeMember("dave", from: "secret")
            #expect(try await store.circles(visibleTo: "dave").map(\.name) == ["attic", "lobby"])

            let error = await #expect(throws: StoreError.self) {
                try await store.createCircle(name: "lobby", owner: "mallory", isPrivate: true, createdAt: 99)
            }
            #expect(error == StoreError(.conflict, "circle \"lobby\" exists"))
            // The failed create changed nothing.
            #expect(try await store.circle(named: "lobby") == lobby)
            #expect(try await store.members(of: "lobby") == ["alice"])
        }
    }

    @Test func membership() async throws {
        try await self.withStore { store in
            _ = try await store.createCircle(name: "club", owner: "carol", isPrivate: true, createdAt: 1)
            #expect(try await store.members(of: "club") == ["carol"])
            #expect(try await store.isMember("carol", of: "club"))
            #expect(try await !store.isMember("alice", of: "club"))

            try await store.addMember("bob", to: "club")
            try await store.addMember("alice", to: "club")
            try await store.addMember("alice", to: "club")  // idempotent
            #expect(try await store.members(of: "club") == ["alice", "bob", "carol"])
            #expect(try await store.isMember("alice", of: "club"))

            try await store.removeMember("bob", from: "club")
            try await store.removeMember("bob", from: "club")  // idempotent
            try await store.removeMember("bob", from: "nowhere")
            #expect(try await store.members(of: "club") == ["alice", "carol"])
            #expect(try await !store.isMember("bob", of: "club"))
            #expect(try await store.members(of: "nowhere") == [])

            let error = await #expect(throws: StoreError.self) { try await store.addMember("bob", to: "nowhere") }
            #expect(error?.code == .notFound)
            #expect(try await !store.isMember("bob", of: "nowhere"))
        }
    }

    // MARK: Commit

    @Test func sequenceNumbersPerCircle() async throws {
        try await self.withStore { store in
            _ = try await store.createCircle(name: "a", owner: "alice", isPrivate: false, createdAt: 1)
            _ = try await store.createCircle(name: "b", owner: "alice", isPrivate: false, createdAt: 1)

            let first = try await store.commit([
                self.newPost("a", id: "1"), self.newPost("b", id: "2"), self.newPost("a", id: "3"),
                self.newPost("a", id: "4"), self.newPost("b", id: "5"),
            ])
            #expect(self.storedSeqs(first) == [1, 1, 2, 3, 2])
            #expect(first.map(\.post?.circle) == ["a", "b", "a", "a", "b"])
            #expect(first.map(\.post?.id) == ["1", "2", "3", "4", "5"])

            let second = try await store.commit([self.newPost("b", id: "6")])
            #expect(self.storedSeqs(second) == [3])
            #expect(try await store.circle(named: "a")?.lastSeq == 3)
            #expect(try await store.circle(named: "b")?.lastSeq == 3)
            #expect(try await store.posts(in: "a", after: 0, limit: 10).map(\.id) == ["1", "3", "4"])
            #expect(try await store.posts(in: "b", after: 0, limit: 10).map(\.id) == ["2", "5", "6"])
            #expect(try await store.commit([]) == [])
        }
    }

    @Test func duplicatesAcrossBatchesWithinABatchAndAcrossRestarts() async throws {
        try await self.withDatabasePath { path in
            let original = try await self.withStore(at: path) { store in
                _ = try await store.createCircle(name: "lobby", owner: "alice", isPrivate: false, createdAt: 1)
                let stored = try await store.commit([self.newPost("lobby", id: "r1", text: "first", time: 100)])
                guard case .stored(let original) = stored.first else {
                    Issue.record("expected .stored, got \(stored)")
                    return CirclePost(circle: "", seq: 0, author: "", text: nil, attachment: nil, time: 0, id: "")
                }
                #expect(original == CirclePost(circle: "lobby", seq: 1, author: "alice", text: "first", attachment: nil, time: 100, id: "r1"))

                // Retried later with another text and time: the original comes back.
                let retry = try await store.commit([self.newPost("lobby", id: "r1", text: "retry", time: 200)])
                #expect(retry == [.duplicate(original)])

                // Twice in one batch, between new posts: the first one is stored, the second is its duplicate.
                let batch = try await store.commit([
                    self.newPost("lobby", id: "r2", text: "second", time: 300),
                    self.newPost("lobby", id: "r1", time: 301),
                    self.newPost("lobby", id: "r2", text: "second again", time: 302),
                    self.newPost("lobby", id: "r3", text: "third", time: 303),
                ])
                let second = CirclePost(circle: "lobby", seq: 2, author: "alice", text: "second", attachment: nil, time: 300, id: "r2")
                let third = CirclePost(circle: "lobby", seq: 3, author: "alice", text: "third", attachment: nil, time: 303, id: "r3")
                #expect(batch == [.stored(second), .duplicate(original), .duplicate(second), .stored(third)])
                #expect(try await store.posts(in: "lobby", after: 0, limit: 10) == [original, second, third])
                return original
            }

            // Restart: a new store on the same file still knows every key and the last sequence number.
            try await self.withStore(at: path) { store in
                let retry = try await store.commit([
                    self.newPost("lobby", id: "r1", text: "after restart", time: 900),
                    self.newPost("lobby", id: "r4", text: "fourth", time: 901),
                ])
                #expect(retry.first == .duplicate(original))
                #expect(self.storedSeqs(retry) == [nil, 4])
                #expect(try await store.posts(in: "lobby", after: 0, limit: 10).map(\.seq) == [1, 2, 3, 4])
                #expect(try await store.circle(named: "lobby")?.lastSeq == 4)
            }
        }
    }

    @Test func sameClientIDFromAnotherAuthorOrCircleIsNew() async throws {
        try await self.withStore { store in
            _ = try await store.createCircle(name: "a", owner: "alice", isPrivate: false, createdAt: 1)
            _ = try await store.createCircle(name: "b", owner: "alice", isPrivate: false, createdAt: 1)
            let outcomes = try await store.commit([
                self.newPost("a", author: "alice", id: "same"),
                self.newPost("a", author: "bob", id: "same"),
                self.newPost("b", author: "alice", id: "same"),
            ])
            #expect(self.storedSeqs(outcomes) == [1, 2, 1])
            let again = try await store.commit([
                self.newPost("b", author: "bob", id: "same"),
                self.newPost("a", author: "bob", id: "same"),
            ])
            #expect(self.storedSeqs(again) == [2, nil])
            #expect(again.last == .duplicate(outcomes[1].post!))
        }
    }

    @Test func unknownCircleDoesNotBreakTheBatch() async throws {
        try await self.withStore { store in
            _ = try await store.createCircle(name: "lobby", owner: "alice", isPrivate: false, createdAt: 1)
            let outcomes = try await store.commit([
                self.newPost("lobby", id: "1"),
                self.newPost("nowhere", id: "2"),
                self.newPost("lobby", id: "3"),
                self.newPost("nowhere", id: "2"),
            ])
            #expect(self.storedSeqs(outcomes) == [1, nil, 2, nil])
            #expect(outcomes[1] == .noSuchCircle)
            #expect(outcomes[3] == .noSuchCircle)
            #expect(try await store.posts(in: "lobby", after: 0, limit: 10).map(\.id) == ["1", "3"])
            #expect(try await store.posts(in: "nowhere", after: 0, limit: 10) == [])
            #expect(try await store.circle(named: "nowhere") == nil)
        }
    }

    @Test func paging() async throws {
        try await self.withStore { store in
            _ = try await store.createCircle(name: "lobby", owner: "alice", isPrivate: false, createdAt: 1)
            _ = try await store.createCircle(name: "other", owner: "alice", isPrivate: false, createdAt: 1)
            _ = try await store.commit((1...10).map { self.newPost("lobby", id: "p\($0)", time: Int64($0)) })
            _ = try await store.commit((1...3).map { self.newPost("other", id: "o\($0)") })

            #expect(try await store.posts(in: "lobby", after: 0, limit: 3).map(\.seq) == [1, 2, 3])
            #expect(try await store.posts(in: "lobby", after: 3, limit: 3).map(\.seq) == [4, 5, 6])
            #expect(try await store.posts(in: "lobby", after: 8, limit: 5).map(\.seq) == [9, 10])
            #expect(try await store.posts(in: "lobby", after: 10, limit: 5) == [])
            #expect(try await store.posts(in: "lobby", after: 0, limit: 0) == [])

            #expect(try await store.posts(in: "lobby", before: nil, limit: 3).map(\.seq) == [8, 9, 10])
            #expect(try await store.posts(in: "lobby", before: 8, limit: 3).map(\.seq) == [5, 6, 7])
            #expect(try await store.posts(in: "lobby", before: 3, limit: 5).map(\.seq) == [1, 2])
            #expect(try await store.posts(in: "lobby", before: 1, limit: 5) == [])
            #expect(try await store.posts(in: "lobby", before: nil, limit: 100).map(\.seq) == Array(1...10))
            #expect(try await store.posts(in: "lobby", before: nil, limit: 0) == [])
            #expect(try await store.posts(in: "other", before: nil, limit: 100).map(\.id) == ["o1", "o2", "o3"])

            let page = try await store.posts(in: "lobby", before: 5, limit: 1)
            #expect(page == [CirclePost(circle: "lobby", seq: 4, author: "alice", text: "hello", attachment: nil, time: 4, id: "p4")])
        }
    }

    @Test func concurrentCommitsGetGaplessSequenceNumbers() async throws {
        try await self.withStore { store in
            _ = try await store.createCircle(name: "busy", owner: "alice", isPrivate: false, createdAt: 1)
            let seqs = try await withThrowingTaskGroup(of: [Int64].self) { group in
                for task in 0..<16 {
                    group.addTask {
                        var seqs: [Int64] = []
                        for index in 0..<100 {
                            let outcomes = try await store.commit([self.newPost("busy", author: "user\(task)", id: "\(index)")])
                            guard case .stored(let post) = outcomes.first, outcomes.count == 1 else {
                                Issue.record("expected one .stored, got \(outcomes)")
                                continue
                            }
                            seqs.append(post.seq)
                        }
                        // Each task's own posts come back in increasing order.
                        #expect(seqs == seqs.sorted())
                        return seqs
                    }
                }
                return try await group.reduce(into: [Int64]()) { $0 += $1 }
            }
            #expect(seqs.sorted() == Array(1...1600))
            let stored = try await store.posts(in: "busy", after: 0, limit: 2_000)
            #expect(stored.map(\.seq) == Array(1...1600))
            #expect(Set(stored.map { "\($0.author)/\($0.id)" }).count == 1600)
            #expect(try await store.circle(named: "busy")?.lastSeq == 1600)
        }
    }

    @Test func textRoundTrips() async throws {
        let texts = [
            #"She said "hi" and 'bye' \ back\slash"#,
            "'); DROP TABLE posts; --",
            "héllo wörld — ✓ 漢字 עברית 👩‍👩‍👧‍👦 e\u{301}",
            "line one\nline two\ttabbed\r\n",
            "nul \u{0} inside",
            "",
        ]
        try await self.withStore { store in
            let circle = "café \"quoted\" 🎉"
            _ = try await store.createCircle(name: circle, owner: "zoë", isPrivate: false, createdAt: 1)
            let outcomes = try await store.commit(texts.enumerated().map { index, text in
                self.newPost(circle, author: "zoë", id: "id-\(index)-'\"", text: text, attachment: index == 0 ? "media/ph\"oto 1.jpg" : nil)
            } + [self.newPost(circle, author: "zoë", id: "no-text", text: nil, attachment: "a.png")])
            let stored = try await store.posts(in: circle, after: 0, limit: 100)
            #expect(stored == outcomes.compactMap(\.post))
            #expect(stored.map(\.text) == texts + [nil])
            #expect(stored.map(\.attachment) == ["media/ph\"oto 1.jpg", nil, nil, nil, nil, nil, "a.png"])
            #expect(stored.allSatisfy { $0.circle == circle && $0.author == "zoë" })
            #expect(try await store.circles(visibleTo: "anyone").map(\.name) == [circle])

            // A retry of a key with quotes and unicode still finds its original.
            let retry = try await store.commit([self.newPost(circle, author: "zoë", id: "id-2-'\"", text: "changed")])
            #expect(retry == [.duplicate(stored[2])])
        }
    }

    /// SQLite compares TEXT by bytes; canonically equivalent strings (equal as Swift `String`s) are
    /// different circles and different client ids, and a post to the unknown spelling must not fail
    /// the batch.
    @Test func keysAreComparedByBytes() async throws {
        let composed = "caf\u{E9}"
        let decomposed = "cafe\u{301}"
        #expect(composed == decomposed)  // as Swift sees them
        try await self.withStore { store in
            _ = try await store.createCircle(name: composed, owner: "alice", isPrivate: false, createdAt: 1)
            let outcomes = try await store.commit([
                self.newPost(decomposed, id: "1"),
                self.newPost(composed, id: composed),
                self.newPost(composed, id: decomposed),
                self.newPost(composed, id: composed),
            ])
            #expect(self.storedSeqs(outcomes) == [nil, 1, 2, nil])
            #expect(outcomes[0] == .noSuchCircle)
            #expect(outcomes[3] == .duplicate(outcomes[1].post!))
            let stored = try await store.posts(in: composed, after: 0, limit: 10)
            #expect(stored.map { Array($0.id.utf8) } == [Array(composed.utf8), Array(decomposed.utf8)])
            #expect(stored.allSatisfy { Array($0.circle.utf8) == Array(composed.utf8) })
            #expect(try await store.posts(in: decomposed, after: 0, limit: 10) == [])

            // A client id with a NUL is read back whole, so its retry is recognized.
            let first = try await store.commit([self.newPost(composed, author: "a\u{0}b", id: "x\u{0}y")])
            #expect(first.first?.post?.id == "x\u{0}y")
            #expect(first.first?.post?.author == "a\u{0}b")
            let retry = try await store.commit([self.newPost(composed, author: "a\u{0}b", id: "x\u{0}y")])
            #expect(retry == [.duplicate(first[0].post!)])
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

    // MARK: Planning without SQLite

    @Test func commitPlan() {
        let original = CirclePost(circle: "a", seq: 7, author: "alice", text: "old", attachment: nil, time: 1, id: "x")
        let plan = CommitPlan(
            posts: [
                self.newPost("a", id: "x"), self.newPost("a", id: "y"), self.newPost("zz", id: "y"),
                self.newPost("b", id: "y"), self.newPost("a", id: "y"), self.newPost("a", id: "z"),
            ],
            existing: [PostKey(circle: "a", author: "alice", clientID: "x"): original],
            lastSeqs: [BinaryText("a"): 7, BinaryText("b"): 0]
        )
        #expect(plan.outcomes.first == .duplicate(original))
        #expect(self.storedSeqs(plan.outcomes) == [nil, 8, nil, 1, nil, 9])
        #expect(plan.outcomes[2] == .noSuchCircle)
        #expect(plan.outcomes[4] == .duplicate(plan.inserts[0]))
        #expect(plan.inserts.map(\.seq) == [8, 1, 9])
        #expect(plan.newLastSeqs.map(\.circle) == ["a", "b"])
        #expect(plan.newLastSeqs.map(\.lastSeq) == [9, 1])
    }
}
