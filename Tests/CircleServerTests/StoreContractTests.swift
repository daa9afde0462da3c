import CircleTestSupport
import CircleWire
import Foundation
import Logging
import PostgresNIO
import Testing

@testable import CircleServer

/// The guarantees of ``CircleStore``, checked against every store: the embedded ``SQLiteStore``
/// (a fresh file per test) and ``PostgresStore`` (a fresh database per test on the PostgreSQL of
/// ``PostgresTestServer``, which scripts/test starts).
enum StoreKind: String, CaseIterable, Sendable, CustomTestStringConvertible {
    case sqlite
    case postgres
    var testDescription: String { self.rawValue }
}

/// Where a store keeps its data, so that a second store can be opened on it (a restart).
enum StoreLocation: Sendable {
    case sqlite(path: String)
    case postgres(url: String)
}

@Suite struct StoreContractTests {
    static let logger: Logger = {
        var logger = Logger(label: "circle.test.store")
        logger.logLevel = .warning
        return logger
    }()

    // MARK: Helpers

    func withLocation<T>(_ kind: StoreKind, _ body: (StoreLocation) async throws -> T) async throws -> T {
        switch kind {
        case .sqlite:
            let directory = FileManager.default.temporaryDirectory
                .appendingPathComponent("circle-store-\(UUID().uuidString)", isDirectory: true)
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
            defer { try? FileManager.default.removeItem(at: directory) }
            return try await body(.sqlite(path: directory.appendingPathComponent("circle.sqlite").path))
        case .postgres:
            return try await body(.postgres(url: try await PostgresTestServer.shared.freshDatabase()))
        }
    }

    /// Opens and migrates a store at `location`, runs `body`, and closes the store even when `body` throws.
    func withStore<T>(at location: StoreLocation, _ body: (any CircleStore) async throws -> T) async throws -> T {
        switch location {
        case .sqlite(let path):
            return try await SQLiteStoreTests().withStore(at: path) { try await body($0) }
        case .postgres(let url):
            let store = try PostgresStore(url: url, logger: Self.logger)
            let pool = Task { await store.run() }
            do {
                try await store.migrate()
                let result = try await body(store)
                pool.cancel()
                await pool.value
                return result
            } catch {
                pool.cancel()
                await pool.value
                throw error
            }
        }
    }

    func withStore<T>(_ kind: StoreKind, _ body: (any CircleStore) async throws -> T) async throws -> T {
        try await self.withLocation(kind) { location in
            try await self.withStore(at: location, body)
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

    // MARK: Circles and members

    @Test(arguments: StoreKind.allCases) func createListAndVisibility(_ kind: StoreKind) async throws {
        try await self.withStore(kind) { store in
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

    @Test(arguments: StoreKind.allCases) func membership(_ kind: StoreKind) async throws {
        try await self.withStore(kind) { store in
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

    @Test(arguments: StoreKind.allCases) func sequenceNumbersPerCircle(_ kind: StoreKind) async throws {
        try await self.withStore(kind) { store in
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

    @Test(arguments: StoreKind.allCases) func duplicatesAcrossBatchesWithinABatchAndAcrossRestarts(_ kind: StoreKind) async throws {
        try await self.withLocation(kind) { location in
            let original = try await self.withStore(at: location) { store in
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

            // Restart: a new store on the same database still knows every key and the last sequence number.
            try await self.withStore(at: location) { store in
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

    @Test(arguments: StoreKind.allCases) func sameClientIDFromAnotherAuthorOrCircleIsNew(_ kind: StoreKind) async throws {
        try await self.withStore(kind) { store in
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

    @Test(arguments: StoreKind.allCases) func unknownCircleDoesNotBreakTheBatch(_ kind: StoreKind) async throws {
        try await self.withStore(kind) { store in
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

    @Test(arguments: StoreKind.allCases) func paging(_ kind: StoreKind) async throws {
        try await self.withStore(kind) { store in
            _ = try await store.createCircle(name: "lobby", owner: "alice", isPrivate: false, createdAt: 1)
            _ = try await store.createCircle(name: "other", owner: "alice", isPrivate: false, createdAt: 1)
            _ = try await store.commit((1...10).map { self.newPost("lobby", id: "p\($0)", time: Int64($0)) })
            _ = try await store.commit((1...3).map { self.newPost("other", id: "o\($0)") })

            #expect(try await store.posts(in: "lobby", after: 0, limit: 3).map(\.seq) == [1, 2, 3])
            #expect(try await store.posts(in: "lobby", after: 3, limit: 3).map(\.seq) == [4, 5, 6])
            #expect(try await store.posts(in: "lobby", after: 8, limit: 5).map(\.seq) == [9, 10])
            #expect(try await store.posts(in: "lobby", after: 10, limit: 5) == [])
            #expect(try await store.posts(in: "lobby", after: 0, limit: 0) == [])

            #expect(try await store.history(in: "lobby", before: nil, after: nil, limit: 3, viewer: "ann").map(\.seq) == [8, 9, 10])
            #expect(try await store.history(in: "lobby", before: 8, after: nil, limit: 3, viewer: "ann").map(\.seq) == [5, 6, 7])
            #expect(try await store.history(in: "lobby", before: 3, after: nil, limit: 5, viewer: "ann").map(\.seq) == [1, 2])
            #expect(try await store.history(in: "lobby", before: 1, after: nil, limit: 5, viewer: "ann") == [])
            #expect(try await store.history(in: "lobby", before: nil, after: nil, limit: 100, viewer: "ann").map(\.seq) == Array(1...10))
            #expect(try await store.history(in: "lobby", before: nil, after: nil, limit: 0, viewer: "ann") == [])
            #expect(try await store.history(in: "other", before: nil, after: nil, limit: 100, viewer: "ann").map(\.id) == ["o1", "o2", "o3"])

            let page = try await store.history(in: "lobby", before: 5, after: nil, limit: 1, viewer: "ann")
            #expect(page == [CirclePost(circle: "lobby", seq: 4, author: "alice", text: "hello", attachment: nil, time: 4, id: "p4", reactions: [])])
        }
    }

    @Test(arguments: StoreKind.allCases) func concurrentCommitsGetGaplessSequenceNumbers(_ kind: StoreKind) async throws {
        try await self.withStore(kind) { store in
            _ = try await store.createCircle(name: "busy", owner: "alice", isPrivate: false, createdAt: 1)
            let seqs = try await withThrowingTaskGroup(of: [Int64].self) { group in
                for task in 0..<16 {
                    group.addTask {
                        var seqs: [Int64] = []
                        for index in 0..<100 {
                            let outcomes = try await store.commit([self.newPost("busy", author: "user\(task)", id: "\(index)")])
                            // `.duplicate` of this very post: an attempt whose answer was lost (an
                            // attempt past its timeout on a loaded machine) had stored it, and the
                            // store's retry says so (PostgresStore, "An answer only with the truth").
                            switch outcomes.count == 1 ? outcomes.first : nil {
                            case .stored(let post)?:
                                seqs.append(post.seq)
                            case .duplicate(let post)? where post.author == "user\(task)" && post.id == "\(index)":
                                seqs.append(post.seq)
                            default:
                                Issue.record("expected this post stored, got \(outcomes)")
                            }
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

    @Test(arguments: StoreKind.allCases) func textRoundTrips(_ kind: StoreKind) async throws {
        let texts = [
            #"She said "hi" and 'bye' \ back\slash"#,
            "'); DROP TABLE posts; --",
            "héllo wörld — ✓ 漢字 עברית 👩‍👩‍👧‍👦 e\u{301}",
            "line one\nline two\ttabbed\r\n",
            "nul \u{0} inside",
            "",
        ]
        try await self.withStore(kind) { store in
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

    /// Both stores compare keys by bytes; canonically equivalent strings (equal as Swift `String`s)
    /// are different circles and different client ids, and a post to the unknown spelling must not
    /// fail the batch.
    @Test(arguments: StoreKind.allCases) func keysAreComparedByBytes(_ kind: StoreKind) async throws {
        let composed = "caf\u{E9}"
        let decomposed = "cafe\u{301}"
        #expect(composed == decomposed)  // as Swift sees them
        try await self.withStore(kind) { store in
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

    // MARK: Changes (edits, deletes, reactions, replies)

    func change(
        _ circle: String,
        _ change: CircleChange,
        _ target: Int64?,
        by author: String = "alice",
        id: String,
        text: String? = nil,
        emoji: String? = nil,
        time: Int64 = 1_700_000_000_000
    ) -> NewPost {
        NewPost(circle: circle, author: author, clientID: id, text: text, attachment: nil, time: time, change: change, target: target, emoji: emoji)
    }

    func reply(_ circle: String, to seq: Int64, by author: String = "alice", id: String, text: String = "re") -> NewPost {
        NewPost(circle: circle, author: author, clientID: id, text: text, attachment: nil, time: 1_700_000_000_000, replyTo: seq)
    }

    /// Commits one entry and returns its outcome.
    func commit(_ store: any CircleStore, _ post: NewPost) async throws -> PostOutcome {
        let outcomes = try await store.commit([post])
        #expect(outcomes.count == 1)
        return outcomes.first ?? .noSuchCircle
    }

    func rejection(_ outcome: PostOutcome) -> CircleErrorCode? {
        if case .rejected(let code, let message) = outcome {
            #expect(!message.isEmpty)
            return code
        }
        return nil
    }

    func storedSeq(_ outcome: PostOutcome) -> Int64? {
        if case .stored(let post) = outcome { return post.seq }
        return nil
    }

    @Test(arguments: StoreKind.allCases) func editRules(_ kind: StoreKind) async throws {
        try await self.withStore(kind) { store in
            _ = try await store.createCircle(name: "lobby", owner: "alice", isPrivate: false, createdAt: 1)
            _ = try await store.commit([
                self.newPost("lobby", author: "alice", id: "p1", text: "helo", time: 100),
                self.newPost("lobby", author: "bob", id: "p2", text: "bob's", time: 101),
            ])

            let edit = try await self.commit(store, self.change("lobby", .edit, 1, id: "e1", text: "hello", time: 200))
            #expect(edit == .stored(CirclePost(circle: "lobby", seq: 3, author: "alice", text: "hello", attachment: nil, time: 200, id: "e1", change: .edit, target: 1)))
            let second = try await self.commit(store, self.change("lobby", .edit, 1, id: "e2", text: "hello!", time: 300))
            #expect(self.storedSeq(second) == 4)
            let posts = try await store.posts(in: "lobby", after: 0, limit: 10)
            #expect(posts.first == CirclePost(circle: "lobby", seq: 1, author: "alice", text: "hello!", attachment: nil, time: 100, id: "p1", edited: 300))
            #expect(posts.map(\.change) == [nil, nil, .edit, .edit])
            #expect(posts.map(\.text) == ["hello!", "bob's", "hello", "hello!"])

            // Someone else's post, a post that is not there, a change entry, no target, no text.
            #expect(self.rejection(try await self.commit(store, self.change("lobby", .edit, 2, id: "x1", text: "mine now"))) == .notAuthor)
            #expect(self.rejection(try await self.commit(store, self.change("lobby", .edit, 99, id: "x2", text: "?"))) == .noSuchPost)
            #expect(self.rejection(try await self.commit(store, self.change("lobby", .edit, 3, id: "x3", text: "?"))) == .noSuchPost)
            #expect(self.rejection(try await self.commit(store, self.change("lobby", .edit, 0, id: "x4", text: "?"))) == .noSuchPost)
            #expect(self.rejection(try await self.commit(store, self.change("lobby", .edit, nil, id: "x5", text: "?"))) == .badRequest)
            #expect(self.rejection(try await self.commit(store, self.change("lobby", .edit, 1, id: "x6"))) == .badRequest)
            #expect(try await self.commit(store, self.change("nowhere", .edit, 1, id: "x7", text: "?")) == .noSuchCircle)

            // A deleted post cannot be edited; someone else trying gets not_author (authorship is checked first).
            #expect(self.storedSeq(try await self.commit(store, self.change("lobby", .delete, 1, id: "d1"))) == 5)
            #expect(self.rejection(try await self.commit(store, self.change("lobby", .edit, 1, id: "x8", text: "back"))) == .postDeleted)
            #expect(self.rejection(try await self.commit(store, self.change("lobby", .edit, 1, by: "carol", id: "x9", text: "?"))) == .notAuthor)

            // Rejected entries used no seq and stored nothing; rejected ids are free to use again.
            #expect(try await store.circle(named: "lobby")?.lastSeq == 5)
            #expect(try await store.posts(in: "lobby", after: 0, limit: 10).map(\.id) == ["p1", "p2", "e1", "e2", "d1"])
            #expect(self.storedSeq(try await self.commit(store, self.newPost("lobby", id: "x1", text: "fresh"))) == 6)
        }
    }

    @Test(arguments: StoreKind.allCases) func replies(_ kind: StoreKind) async throws {
        try await self.withStore(kind) { store in
            _ = try await store.createCircle(name: "lobby", owner: "alice", isPrivate: false, createdAt: 1)
            _ = try await store.commit([self.newPost("lobby", author: "bob", id: "p1"), self.change("lobby", .react, 1, id: "r1", emoji: "👍")])
            let reply = try await self.commit(store, self.reply("lobby", to: 1, id: "re1", text: "answer"))
            #expect(reply == .stored(CirclePost(circle: "lobby", seq: 3, author: "alice", text: "answer", attachment: nil, time: 1_700_000_000_000, id: "re1", replyTo: 1)))
            #expect(self.rejection(try await self.commit(store, self.reply("lobby", to: 2, id: "re2"))) == .noSuchPost)  // a change entry
            #expect(self.rejection(try await self.commit(store, self.reply("lobby", to: 50, id: "re3"))) == .noSuchPost)
            // A reply to a reply, and to a deleted post (a tombstone is still a post).
            #expect(self.storedSeq(try await self.commit(store, self.reply("lobby", to: 3, by: "bob", id: "re4"))) == 4)
            _ = try await store.commit([self.change("lobby", .delete, 1, by: "bob", id: "d1")])
            #expect(self.storedSeq(try await self.commit(store, self.reply("lobby", to: 1, id: "re5"))) == 6)
            let history = try await store.history(in: "lobby", before: nil, after: nil, limit: 10, viewer: "alice")
            #expect(history.map(\.seq) == [1, 3, 4, 6])
            #expect(history.map(\.replyTo) == [nil, 1, 3, 1])
            #expect(try await store.posts(in: "lobby", after: 2, limit: 10).map(\.replyTo) == [1, 3, nil, 1])
        }
    }

    @Test(arguments: StoreKind.allCases) func deleteRules(_ kind: StoreKind) async throws {
        try await self.withStore(kind) { store in
            _ = try await store.createCircle(name: "club", owner: "carol", isPrivate: true, createdAt: 1)
            _ = try await store.createCircle(name: "lobby", owner: "carol", isPrivate: false, createdAt: 1)
            try await store.addMember("alice", to: "club")
            try await store.addMember("bob", to: "club")
            _ = try await store.commit([
                self.newPost("club", author: "alice", id: "a1", text: "alice's"),
                self.newPost("club", author: "bob", id: "b1", text: "bob's"),
                self.newPost("lobby", author: "alice", id: "a2", text: "public"),
            ])

            // Own post: yes. Someone else's: only as the owner of a private circle.
            #expect(self.rejection(try await self.commit(store, self.change("club", .delete, 1, by: "bob", id: "x1"))) == .notAuthor)
            let byOwner = try await self.commit(store, self.change("club", .delete, 1, by: "carol", id: "c1"))
            #expect(byOwner == .stored(CirclePost(circle: "club", seq: 3, author: "carol", text: nil, attachment: nil, time: 1_700_000_000_000, id: "c1", change: .delete, target: 1)))
            #expect(self.storedSeq(try await self.commit(store, self.change("club", .delete, 2, by: "bob", id: "b2"))) == 4)
            #expect(self.rejection(try await self.commit(store, self.change("lobby", .delete, 1, by: "carol", id: "c2"))) == .notAuthor)
            #expect(self.rejection(try await self.commit(store, self.change("club", .delete, 2, by: "bob", id: "b3"))) == .postDeleted)
            #expect(self.rejection(try await self.commit(store, self.change("club", .delete, 3, by: "carol", id: "c3"))) == .noSuchPost)
            #expect(self.storedSeq(try await self.commit(store, self.change("lobby", .delete, 1, by: "alice", id: "a3"))) == 2)

            let club = try await store.posts(in: "club", after: 0, limit: 10)
            #expect(club.map(\.deleted) == [true, true, false, false])
            #expect(club.map(\.text) == [nil, nil, nil, nil])
            #expect(club.map(\.author) == ["alice", "bob", "carol", "bob"])
            #expect(try await store.history(in: "lobby", before: nil, after: nil, limit: 10, viewer: "carol").map(\.deleted) == [true])
        }
    }

    /// A deleted post's attachment is gone, so the post no longer lets readers of the circle fetch the media.
    @Test(arguments: StoreKind.allCases) func deletedPostGrantsNoMediaAccess(_ kind: StoreKind) async throws {
        try await self.withStore(kind) { store in
            _ = try await store.createCircle(name: "lobby", owner: "carol", isPrivate: false, createdAt: 1)
            try await store.createUpload(MediaUpload(id: "u1", owner: "alice", length: 3, contentType: "image/png", createdAt: 1))
            _ = try await store.completeUpload(id: "u1", media: MediaInfo(id: "m1", size: 3, contentType: "image/png", createdAt: 2), uploader: "alice")
            _ = try await store.commit([self.newPost("lobby", id: "p1", text: "look", attachment: "m1")])
            _ = try await store.commit([self.change("lobby", .edit, 1, id: "e1", text: "look again")])
            #expect(try await store.canRead(media: "m1", user: "bob"))
            #expect(try await store.posts(in: "lobby", after: 0, limit: 1).first?.attachment == "m1")  // an edit keeps it

            _ = try await store.commit([self.change("lobby", .delete, 1, id: "d1")])
            #expect(try await !store.canRead(media: "m1", user: "bob"))
            #expect(try await store.canRead(media: "m1", user: "alice"))  // the uploader still may
            let tombstone = try await store.posts(in: "lobby", after: 0, limit: 1).first
            #expect(tombstone?.attachment == nil)
            #expect(tombstone?.deleted == true)
        }
    }

    static let emoji = ["😀", "😁", "😂", "🤣", "😃", "😄", "😅", "😆", "😉", "😊", "😋", "😎", "😍", "😘", "🥰", "😗", "😙", "😚", "🙂", "🤗", "🤩", "🤔"]

    @Test(arguments: StoreKind.allCases) func reactions(_ kind: StoreKind) async throws {
        try await self.withStore(kind) { store in
            _ = try await store.createCircle(name: "lobby", owner: "alice", isPrivate: false, createdAt: 1)
            _ = try await store.commit([self.newPost("lobby", id: "p1")])
            let outcomes = try await store.commit([
                self.change("lobby", .react, 1, by: "bob", id: "r1", emoji: "👍"),
                self.change("lobby", .react, 1, by: "carol", id: "r2", emoji: "👍"),
                self.change("lobby", .react, 1, by: "bob", id: "r3", emoji: "👍"),  // again: stored, changes nothing
                self.change("lobby", .react, 1, by: "bob", id: "r4", emoji: "❤️"),
                self.change("lobby", .unreact, 1, by: "carol", id: "r5", emoji: "👍"),
                self.change("lobby", .unreact, 1, by: "dave", id: "r6", emoji: "👍"),  // never reacted: stored, changes nothing
                self.change("lobby", .react, 1, by: "dave", id: "r7", emoji: "👍"),
            ])
            #expect(self.storedSeqs(outcomes) == [2, 3, 4, 5, 6, 7, 8])
            #expect(outcomes.first == .stored(CirclePost(circle: "lobby", seq: 2, author: "bob", text: nil, attachment: nil, time: 1_700_000_000_000, id: "r1", change: .react, target: 1, emoji: "👍")))

            let asBob = try await store.history(in: "lobby", before: nil, after: nil, limit: 10, viewer: "bob")
            #expect(asBob.map(\.seq) == [1])
            #expect(asBob.first?.reactions == [
                CircleReaction(emoji: "👍", users: ["bob", "dave"], me: true),
                CircleReaction(emoji: "❤️", users: ["bob"], me: true),
            ])
            let asCarol = try await store.history(in: "lobby", before: nil, after: nil, limit: 10, viewer: "carol")
            #expect(asCarol.first?.reactions?.map(\.me) == [false, false])
            #expect(asCarol.first?.reactions?.map(\.count) == [2, 1])
            // Streamed posts carry no reactions; the entries do.
            let stream = try await store.posts(in: "lobby", after: 0, limit: 10)
            #expect(stream.allSatisfy { $0.reactions == nil })
            #expect(stream.map(\.emoji) == [nil, "👍", "👍", "👍", "❤️", "👍", "👍", "👍"])

            // The order of emoji is when each was first used among the reactions there now.
            _ = try await store.commit([
                self.change("lobby", .unreact, 1, by: "bob", id: "r8", emoji: "👍"),
                self.change("lobby", .unreact, 1, by: "dave", id: "r9", emoji: "👍"),
                self.change("lobby", .react, 1, by: "carol", id: "r10", emoji: "👍"),
            ])
            #expect(try await store.history(in: "lobby", before: nil, after: nil, limit: 10, viewer: "carol").first?.reactions == [
                CircleReaction(emoji: "❤️", users: ["bob"], me: false),
                CircleReaction(emoji: "👍", users: ["carol"], me: true),
            ])

            // Not on a change entry, not on a post that is not there, not without an emoji.
            #expect(self.rejection(try await self.commit(store, self.change("lobby", .react, 2, by: "bob", id: "x1", emoji: "👍"))) == .noSuchPost)
            #expect(self.rejection(try await self.commit(store, self.change("lobby", .react, 40, by: "bob", id: "x2", emoji: "👍"))) == .noSuchPost)
            #expect(self.rejection(try await self.commit(store, self.change("lobby", .react, 1, by: "bob", id: "x3"))) == .badRequest)

            // Deleting the post takes its reactions; nobody reacts to it any more.
            _ = try await store.commit([self.change("lobby", .delete, 1, id: "d1")])
            #expect(self.rejection(try await self.commit(store, self.change("lobby", .react, 1, by: "bob", id: "x4", emoji: "👍"))) == .postDeleted)
            #expect(self.rejection(try await self.commit(store, self.change("lobby", .unreact, 1, by: "bob", id: "x5", emoji: "❤️"))) == .postDeleted)
            let tombstone = try await store.history(in: "lobby", before: nil, after: nil, limit: 10, viewer: "bob")
            #expect(tombstone.first?.reactions == [])
            #expect(tombstone.first?.deleted == true)
        }
    }

    @Test(arguments: StoreKind.allCases) func distinctReactionLimit(_ kind: StoreKind) async throws {
        let limit = StoreLimits.maxReactionsPerPost
        #expect(Self.emoji.count > limit + 1)
        try await self.withStore(kind) { store in
            _ = try await store.createCircle(name: "lobby", owner: "alice", isPrivate: false, createdAt: 1)
            _ = try await store.commit([self.newPost("lobby", id: "p1"), self.newPost("lobby", id: "p2")])
            // 20 distinct emoji, some from several users.
            let first = try await store.commit((0..<limit).map { index in
                self.change("lobby", .react, 1, by: index % 2 == 0 ? "bob" : "carol", id: "r\(index)", emoji: Self.emoji[index])
            })
            #expect(first.allSatisfy { self.storedSeq($0) != nil })
            // The 21st distinct emoji is refused; an emoji already there is still accepted, from anyone.
            #expect(self.rejection(try await self.commit(store, self.change("lobby", .react, 1, by: "dave", id: "x1", emoji: Self.emoji[limit]))) == .tooManyReactions)
            #expect(self.storedSeq(try await self.commit(store, self.change("lobby", .react, 1, by: "dave", id: "x2", emoji: Self.emoji[0]))) != nil)
            // Another post has its own limit.
            #expect(self.storedSeq(try await self.commit(store, self.change("lobby", .react, 2, by: "dave", id: "x3", emoji: Self.emoji[limit]))) != nil)
            // When the last user of an emoji takes it back, a new one fits; within one batch, in order.
            let batch = try await store.commit([
                self.change("lobby", .react, 1, by: "dave", id: "x4", emoji: Self.emoji[limit]),
                self.change("lobby", .unreact, 1, by: "carol", id: "x5", emoji: Self.emoji[1]),
                self.change("lobby", .react, 1, by: "dave", id: "x6", emoji: Self.emoji[limit]),
                self.change("lobby", .react, 1, by: "erin", id: "x7", emoji: Self.emoji[limit + 1]),
            ])
            #expect(self.rejection(batch[0]) == .tooManyReactions)
            #expect(self.storedSeq(batch[1]) != nil)
            #expect(self.storedSeq(batch[2]) != nil)
            #expect(self.rejection(batch[3]) == .tooManyReactions)
            let reactions = try await store.history(in: "lobby", before: nil, after: 0, limit: 1, viewer: "dave").first?.reactions ?? []
            #expect(reactions.count == limit)
            #expect(reactions.first == CircleReaction(emoji: Self.emoji[0], users: ["bob", "dave"], me: true))
            #expect(reactions.last == CircleReaction(emoji: Self.emoji[limit], users: ["dave"], me: true))
            #expect(!reactions.contains { $0.emoji == Self.emoji[1] })
        }
    }

    /// Every kind of entry, retried with its id, is a duplicate — in a later batch, in the same
    /// batch, after a restart — and comes back as it is now; it uses no seq and changes nothing again.
    @Test(arguments: StoreKind.allCases) func idempotentChanges(_ kind: StoreKind) async throws {
        try await self.withLocation(kind) { location in
            let entries = [
                self.newPost("lobby", id: "p1", text: "one", time: 10),
                self.change("lobby", .edit, 1, id: "e1", text: "uno", time: 20),
                self.change("lobby", .react, 1, by: "bob", id: "r1", emoji: "👍", time: 30),
                self.change("lobby", .unreact, 1, by: "bob", id: "u1", emoji: "👍", time: 40),
                self.reply("lobby", to: 1, by: "bob", id: "re1"),
                self.change("lobby", .react, 1, by: "bob", id: "r2", emoji: "🎉", time: 50),
            ]
            let stored = try await self.withStore(at: location) { store in
                _ = try await store.createCircle(name: "lobby", owner: "alice", isPrivate: false, createdAt: 1)
                var stored: [CirclePost] = []
                for entry in entries {
                    let outcome = try await self.commit(store, entry)
                    #expect(self.storedSeq(outcome) == Int64(stored.count + 1))
                    stored += outcome.post.map { [$0] } ?? []
                }
                // Each retried in a batch of its own, then all in one batch twice over.
                for (entry, original) in zip(entries, stored) {
                    let retry = try await self.commit(store, entry)
                    guard case .duplicate(let post) = retry else {
                        Issue.record("expected .duplicate, got \(retry)")
                        continue
                    }
                    #expect(post.seq == original.seq)
                    #expect(post.change == original.change)
                }
                let again = try await store.commit(entries + entries)
                #expect(again.allSatisfy { if case .duplicate = $0 { true } else { false } })
                #expect(try await store.circle(named: "lobby")?.lastSeq == 6)
                // A retried react did not react again: 🎉 once, 👍 gone.
                #expect(try await store.history(in: "lobby", before: nil, after: nil, limit: 5, viewer: "bob").first?.reactions == [
                    CircleReaction(emoji: "🎉", users: ["bob"], me: true)
                ])
                return stored
            }
            try await self.withStore(at: location) { store in
                // After a restart; the delete comes first, so the retries see the post as it is now.
                let outcomes = try await store.commit([self.change("lobby", .delete, 1, id: "d1", time: 60)] + entries)
                #expect(self.storedSeq(outcomes[0]) == 7)
                var post = stored[0]
                post.text = nil
                post.edited = nil
                post.deleted = true
                #expect(outcomes[1] == .duplicate(post))
                var edit = stored[1]
                edit.text = nil
                #expect(outcomes[2] == .duplicate(edit))
                #expect(Array(outcomes[3...]) == stored[2...].map { PostOutcome.duplicate($0) })
                // A retried delete is a duplicate too, not post_deleted.
                #expect(try await self.commit(store, self.change("lobby", .delete, 1, id: "d1")) == .duplicate(outcomes[0].post!))
                #expect(try await store.circle(named: "lobby")?.lastSeq == 7)
            }
        }
    }

    /// Entries of one batch see the ones before them, and every outcome is the entry as the
    /// batch left it (what a read right after the commit returns).
    @Test(arguments: StoreKind.allCases) func changesInOneBatch(_ kind: StoreKind) async throws {
        try await self.withStore(kind) { store in
            _ = try await store.createCircle(name: "lobby", owner: "alice", isPrivate: false, createdAt: 1)
            let outcomes = try await store.commit([
                self.newPost("lobby", id: "p1", text: "draft", time: 10),
                self.change("lobby", .edit, 1, id: "e1", text: "final", time: 11),
                self.change("lobby", .react, 1, by: "bob", id: "r1", emoji: "👍", time: 12),
                self.reply("lobby", to: 1, by: "bob", id: "re1"),
                self.change("lobby", .react, 4, id: "r2", emoji: "👀", time: 13),
                self.change("lobby", .edit, 4, id: "x1", text: "not mine"),
                self.change("lobby", .delete, 1, id: "d1", time: 14),
                self.change("lobby", .react, 1, by: "carol", id: "x2", emoji: "👍"),
                self.newPost("lobby", id: "p1", text: "retry"),
                self.change("lobby", .edit, 2, id: "x3", text: "edit of an edit"),
            ])
            #expect(self.storedSeqs(outcomes) == [1, 2, 3, 4, 5, nil, 6, nil, nil, nil])
            #expect(outcomes.map(self.rejection) == [nil, nil, nil, nil, nil, .notAuthor, nil, .postDeleted, nil, .noSuchPost])
            let post = CirclePost(circle: "lobby", seq: 1, author: "alice", text: nil, attachment: nil, time: 10, id: "p1", deleted: true)
            #expect(outcomes[0] == .stored(post))
            #expect(outcomes[8] == .duplicate(post))
            #expect(outcomes[1].post?.text == nil)  // the edit of a post deleted since
            #expect(try await store.posts(in: "lobby", after: 0, limit: 10) == outcomes.prefix(7).compactMap { outcome -> CirclePost? in
                if case .stored(let post) = outcome { return post }
                return nil
            })
            let history = try await store.history(in: "lobby", before: nil, after: nil, limit: 10, viewer: "alice")
            #expect(history.map(\.seq) == [1, 4])
            #expect(history.map(\.reactions) == [[], [CircleReaction(emoji: "👀", users: ["alice"], me: true)]])
            #expect(try await store.circle(named: "lobby")?.lastSeq == 6)
        }
    }

    /// The state a reader builds by applying entries in seq order (docs/PROTOCOL.md, "Applying entries").
    struct ReaderState: Equatable {
        struct Post: Equatable {
            var text: String?
            var attachment: String?
            var edited: Int64?
            var deleted: Bool
            var replyTo: Int64?
            var reactions: [String: [String]]
        }
        var posts: [Int64: Post] = [:]
        var cursor: Int64 = 0

        mutating func apply(_ entries: [CirclePost]) {
            for entry in entries {
                #expect(entry.seq == self.cursor + 1)
                self.cursor = entry.seq
                guard let change = entry.change else {
                    self.posts[entry.seq] = Post(
                        text: entry.text, attachment: entry.attachment, edited: entry.edited, deleted: entry.deleted,
                        replyTo: entry.replyTo, reactions: self.posts[entry.seq]?.reactions ?? [:])
                    continue
                }
                guard let target = entry.target, var post = self.posts[target] else { continue }
                switch change {
                case .edit:
                    if !post.deleted {
                        post.text = entry.text ?? post.text
                        post.edited = entry.time
                    }
                case .delete:
                    post.deleted = true
                    post.text = nil
                    post.attachment = nil
                    post.edited = nil
                    post.reactions = [:]
                case .react:
                    if let emoji = entry.emoji, !(post.reactions[emoji] ?? []).contains(entry.author) {
                        post.reactions[emoji, default: []].append(entry.author)
                    }
                case .unreact:
                    if let emoji = entry.emoji {
                        post.reactions[emoji]?.removeAll { $0 == entry.author }
                        if post.reactions[emoji]?.isEmpty == true { post.reactions[emoji] = nil }
                    }
                }
                self.posts[target] = post
            }
        }

        init() {}

        init(history: [CirclePost]) {
            for post in history {
                self.posts[post.seq] = Post(
                    text: post.text, attachment: post.attachment, edited: post.edited, deleted: post.deleted, replyTo: post.replyTo,
                    reactions: Dictionary(uniqueKeysWithValues: (post.reactions ?? []).map { ($0.emoji, $0.users) }))
            }
        }
    }

    /// A reader that follows every batch and one that reads the whole stream at the end end in the
    /// same state, which is the history's; deleted text is nowhere in the stream.
    @Test(arguments: StoreKind.allCases) func replayShowsCurrentState(_ kind: StoreKind) async throws {
        try await self.withStore(kind) { store in
            _ = try await store.createCircle(name: "lobby", owner: "alice", isPrivate: false, createdAt: 1)
            let batches: [[NewPost]] = [
                [self.newPost("lobby", id: "p1", text: "secret one", time: 1), self.newPost("lobby", author: "bob", id: "p2", text: "keep", time: 2)],
                [self.change("lobby", .edit, 1, id: "e1", text: "secret two", time: 3), self.change("lobby", .react, 2, id: "r1", emoji: "👍", time: 4)],
                [self.change("lobby", .react, 1, by: "bob", id: "r2", emoji: "😮", time: 5), self.change("lobby", .edit, 1, id: "e2", text: "secret three", time: 6)],
                [self.reply("lobby", to: 1, by: "bob", id: "re1", text: "what?")],
                [self.change("lobby", .delete, 1, id: "d1", time: 7), self.change("lobby", .edit, 2, by: "bob", id: "e3", text: "kept", time: 8)],
                [self.change("lobby", .react, 2, by: "bob", id: "r3", emoji: "👍", time: 9), self.change("lobby", .unreact, 2, id: "u1", emoji: "👍", time: 10)],
            ]
            var follower = ReaderState()
            for batch in batches {
                _ = try await store.commit(batch)
                follower.apply(try await store.posts(in: "lobby", after: follower.cursor, limit: 100))
            }
            let stream = try await store.posts(in: "lobby", after: 0, limit: 100)
            var late = ReaderState()
            late.apply(stream)
            var resumed = ReaderState()
            resumed.apply(Array(stream.prefix(4)))
            resumed.apply(try await store.posts(in: "lobby", after: resumed.cursor, limit: 100))
            let history = ReaderState(history: try await store.history(in: "lobby", before: nil, after: nil, limit: 100, viewer: "alice"))

            #expect(late.posts == history.posts)
            #expect(resumed.posts == history.posts)
            #expect(follower.posts == history.posts)
            #expect(history.posts[1] == ReaderState.Post(text: nil, attachment: nil, edited: nil, deleted: true, replyTo: nil, reactions: [:]))
            #expect(history.posts[2] == ReaderState.Post(text: "kept", attachment: nil, edited: 8, deleted: false, replyTo: nil, reactions: ["👍": ["bob"]]))
            #expect(stream.count == 11)
            #expect(!stream.contains { $0.text?.contains("secret") == true })
            #expect(stream.filter { $0.change == .edit }.map(\.text) == [nil, nil, "kept"])
        }
    }

    @Test(arguments: StoreKind.allCases) func historyPages(_ kind: StoreKind) async throws {
        try await self.withStore(kind) { store in
            _ = try await store.createCircle(name: "lobby", owner: "alice", isPrivate: false, createdAt: 1)
            // Posts 1, 3, 5, 7, 9, 11 with a change after each: seq 2, 4, … are reactions and edits.
            for index in 0..<6 {
                let seq = Int64(index * 2 + 1)
                _ = try await store.commit([
                    self.newPost("lobby", id: "p\(seq)", text: "post \(seq)"),
                    index % 2 == 0
                        ? self.change("lobby", .react, seq, by: "bob", id: "r\(seq)", emoji: "👍")
                        : self.change("lobby", .edit, seq, id: "e\(seq)", text: "edited \(seq)", time: 5),
                ])
            }
            #expect(try await store.circle(named: "lobby")?.lastSeq == 12)
            func page(before: Int64? = nil, after: Int64? = nil, limit: Int, viewer: String = "bob") async throws -> [CirclePost] {
                try await store.history(in: "lobby", before: before, after: after, limit: limit, viewer: viewer)
            }
            #expect(try await page(limit: 100).map(\.seq) == [1, 3, 5, 7, 9, 11])
            #expect(try await page(limit: 2).map(\.seq) == [9, 11])
            #expect(try await page(before: 9, limit: 2).map(\.seq) == [5, 7])
            #expect(try await page(before: 4, limit: 5).map(\.seq) == [1, 3])
            #expect(try await page(before: 1, limit: 5) == [])
            #expect(try await page(after: 0, limit: 2).map(\.seq) == [1, 3])
            #expect(try await page(after: 3, limit: 3).map(\.seq) == [5, 7, 9])
            #expect(try await page(after: 4, limit: 1).map(\.seq) == [5])
            #expect(try await page(after: 11, limit: 5) == [])
            #expect(try await page(after: 0, limit: 0) == [])
            #expect(try await page(before: 12, after: 8, limit: 10).map(\.seq) == [9, 11])  // after wins

            let all = try await page(limit: 100)
            #expect(all.allSatisfy { $0.change == nil })
            #expect(all.map(\.text) == ["post 1", "edited 3", "post 5", "edited 7", "post 9", "edited 11"])
            #expect(all.map(\.edited) == [nil, 5, nil, 5, nil, 5])
            #expect(all.map { $0.reactions?.count } == [1, 0, 1, 0, 1, 0])  // `[]`, not nil, without reactions
            #expect(all[0].reactions == [CircleReaction(emoji: "👍", users: ["bob"], me: true)])
            #expect(try await page(limit: 100, viewer: "alice")[0].reactions == [CircleReaction(emoji: "👍", users: ["bob"], me: false)])
            #expect(try await store.history(in: "nowhere", before: nil, after: nil, limit: 10, viewer: "bob") == [])

            let (posts, more, lastSeq) = try await store.historyPage(in: "lobby", before: nil, after: nil, limit: 4, viewer: "bob")
            #expect(posts.map(\.seq) == [5, 7, 9, 11])
            #expect(more)
            #expect(lastSeq == 12)  // the page reflects every entry, the last change included
            let (rest, noMore, _) = try await store.historyPage(in: "lobby", before: 5, after: nil, limit: 4, viewer: "bob")
            #expect(rest.map(\.seq) == [1, 3])
            #expect(!noMore)
            // An empty page still says where the circle stands; an unknown circle stands at 0.
            #expect(try await store.historySnapshot(in: "lobby", before: 1, after: nil, limit: 4, viewer: "bob") == HistorySnapshot(posts: [], lastSeq: 12))
            #expect(try await store.historySnapshot(in: "nowhere", before: nil, after: nil, limit: 4, viewer: "bob") == HistorySnapshot(posts: [], lastSeq: 0))
        }
    }

    // MARK: Read markers

    @Test(arguments: StoreKind.allCases) func readMarkers(_ kind: StoreKind) async throws {
        try await self.withStore(kind) { store in
            _ = try await store.createCircle(name: "lobby", owner: "alice", isPrivate: false, createdAt: 1)
            _ = try await store.createCircle(name: "empty", owner: "alice", isPrivate: false, createdAt: 1)
            _ = try await store.commit((1...5).map { self.newPost("lobby", id: "p\($0)") })

            #expect(try await store.markRead("bob", in: "lobby", upTo: 3) == ReadMarker(seq: 3, moved: true))
            #expect(try await store.markRead("bob", in: "lobby", upTo: 2) == ReadMarker(seq: 3, moved: false))  // never back
            #expect(try await store.markRead("bob", in: "lobby", upTo: 3) == ReadMarker(seq: 3, moved: false))  // same place
            #expect(try await store.markRead("bob", in: "lobby", upTo: 4) == ReadMarker(seq: 4, moved: true))
            #expect(try await store.markRead("bob", in: "lobby", upTo: 99) == ReadMarker(seq: 5, moved: true))  // clamped to last_seq
            #expect(try await store.markRead("bob", in: "lobby", upTo: 99) == ReadMarker(seq: 5, moved: false))
            #expect(try await store.markRead("carol", in: "lobby", upTo: 99) == ReadMarker(seq: 5, moved: true))
            #expect(try await store.markRead("dave", in: "lobby", upTo: -4) == ReadMarker(seq: 0, moved: false))
            #expect(try await store.markRead("dave", in: "lobby", upTo: 0) == ReadMarker(seq: 0, moved: false))
            #expect(try await store.markRead("bob", in: "empty", upTo: 3) == ReadMarker(seq: 0, moved: false))
            let error = await #expect(throws: StoreError.self) { try await store.markRead("bob", in: "nowhere", upTo: 1) }
            #expect(error?.code == .notFound)

            // Per user and circle: later entries leave the marker where it is.
            _ = try await store.commit([self.newPost("lobby", id: "p6")])
            #expect(try await store.markRead("bob", in: "lobby", upTo: 1) == ReadMarker(seq: 5, moved: false))
            #expect(try await store.markRead("bob", in: "lobby", upTo: 6) == ReadMarker(seq: 6, moved: true))
            #expect(try await store.circles(visibleTo: "bob").map(\.readSeq) == [0, 6])
            #expect(try await store.circles(visibleTo: "carol").map(\.readSeq) == [0, 5])
        }
    }

    /// `unread`: posts above the marker, not changes, not deleted, not the user's own.
    @Test(arguments: StoreKind.allCases) func circleListUnreadCounts(_ kind: StoreKind) async throws {
        try await self.withStore(kind) { store in
            _ = try await store.createCircle(name: "lobby", owner: "alice", isPrivate: false, createdAt: 1)
            _ = try await store.createCircle(name: "club", owner: "carol", isPrivate: true, createdAt: 2)
            try await store.addMember("bob", to: "club")
            _ = try await store.commit([
                self.newPost("lobby", author: "alice", id: "1"),  // 1
                self.newPost("lobby", author: "bob", id: "2"),  // 2: bob's own
                self.newPost("lobby", author: "carol", id: "3"),  // 3
                self.change("lobby", .react, 1, by: "carol", id: "4", emoji: "👍"),  // 4: a change
                self.newPost("lobby", author: "carol", id: "5"),  // 5: deleted below
                self.change("lobby", .delete, 5, by: "carol", id: "6"),  // 6
                self.reply("lobby", to: 1, by: "alice", id: "7"),  // 7
                self.newPost("club", author: "carol", id: "c1"),
                self.newPost("club", author: "carol", id: "c2"),
            ])
            let bob = try await store.circles(visibleTo: "bob")
            #expect(bob.map(\.name) == ["club", "lobby"])
            #expect(bob.map(\.lastSeq) == [2, 7])
            #expect(bob.map(\.readSeq) == [0, 0])
            #expect(bob.map(\.unread) == [2, 3])
            #expect(bob[1] == CircleInfo(name: "lobby", owner: "alice", isPrivate: false, createdAt: 1, lastSeq: 7, readSeq: 0, unread: 3))
            #expect(bob[1].summary == CircleSummary(name: "lobby", owner: "alice", private: false, createdAt: 1, lastSeq: 7, readSeq: 0, unread: 3))

            _ = try await store.markRead("bob", in: "lobby", upTo: 3)
            _ = try await store.markRead("bob", in: "club", upTo: 2)
            #expect(try await store.circles(visibleTo: "bob").map(\.unread) == [0, 1])
            #expect(try await store.circles(visibleTo: "alice").map(\.unread) == [2])  // club is not visible to her
            #expect(try await store.circles(visibleTo: "carol").map(\.unread) == [0, 3])
            // One circle by name, as in the list; none when it is not visible or not there.
            #expect(try await store.circles(visibleTo: "bob", named: "lobby").map(\.unread) == [1])
            #expect(try await store.circles(visibleTo: "alice", named: "club").isEmpty)
            #expect(try await store.circles(visibleTo: "bob", named: "nowhere").isEmpty)
            // circle(named:) is not per user.
            #expect(try await store.circle(named: "lobby")?.unread == 0)
        }
    }

    /// Unread counts stop at `StoreLimits.unreadCountLimit`, so a list costs a bounded read.
    @Test(arguments: StoreKind.allCases) func unreadCountsStopAtTheLimit(_ kind: StoreKind) async throws {
        try await self.withStore(kind) { store in
            _ = try await store.createCircle(name: "busy", owner: "alice", isPrivate: false, createdAt: 1)
            let limit = Int(StoreLimits.unreadCountLimit)
            for start in stride(from: 1, through: limit + 5, by: 500) {
                _ = try await store.commit((start..<min(start + 500, limit + 6)).map { self.newPost("busy", author: "alice", id: "p\($0)") })
            }
            // limit + 5 unread, then limit + 1: both shown as the limit; then limit - 1, exactly.
            #expect(try await store.circles(visibleTo: "bob").map(\.unread) == [StoreLimits.unreadCountLimit])
            _ = try await store.markRead("bob", in: "busy", upTo: 4)
            #expect(try await store.circles(visibleTo: "bob").map(\.unread) == [StoreLimits.unreadCountLimit])
            _ = try await store.markRead("bob", in: "busy", upTo: 6)
            #expect(try await store.circles(visibleTo: "bob").map(\.unread) == [StoreLimits.unreadCountLimit - 1])
        }
    }

    // MARK: Migration

    /// The schema version before issue 15 (edits, deletes, reactions, replies, read markers).
    static let previousSchemaVersion = 2

    /// Leaves at `location` a database migrated only to `version` with `statements` run on it:
    /// what an older server left behind.
    func makeOldDatabase(at location: StoreLocation, version: Int, _ statements: [String]) async throws {
        switch location {
        case .sqlite(let path):
            let store = try await SQLiteStore.open(path: path, logger: Self.logger)
            do {
                try await store.migrate(upTo: version)
                for statement in statements { try await store.execute(statement) }
                try await store.close()
            } catch {
                try? await store.close()
                throw error
            }
        case .postgres(let url):
            let store = try PostgresStore(url: url, logger: Self.logger)
            let pool = Task { await store.run() }
            defer { pool.cancel() }
            try await store.migrate(upTo: version)
            for statement in statements {
                try await store.client.query(PostgresQuery(unsafeSQL: statement), logger: Self.logger)
            }
        }
    }

    /// A database made by the previous schema upgrades in place: its posts read as posts in their
    /// state, their keys still deduplicate, and changes, reactions and read markers work on them.
    @Test(arguments: StoreKind.allCases) func migrationFromThePreviousSchema(_ kind: StoreKind) async throws {
        try await self.withLocation(kind) { location in
            let statements: [String]
            switch location {
            case .sqlite:
                statements = [
                    "INSERT INTO circles (name, owner, private, created_at, last_seq) VALUES ('old', 'alice', 0, 1, 3)",
                    "INSERT INTO members (circle, user) VALUES ('old', 'alice')",
                    "INSERT INTO posts (circle, seq, author, client_id, text, attachment, time) VALUES ('old', 1, 'alice', 'o1', 'first', NULL, 10)",
                    "INSERT INTO posts (circle, seq, author, client_id, text, attachment, time) VALUES ('old', 2, 'bob', 'o2', 'second', NULL, 20)",
                    "INSERT INTO posts (circle, seq, author, client_id, text, attachment, time) VALUES ('old', 3, 'bob', 'o3', NULL, 'm1', 30)",
                ]
            case .postgres:
                statements = [
                    "INSERT INTO circles (name, owner, private, created_at, last_seq) VALUES ('old', 'alice', false, 1, 3)",
                    "INSERT INTO members (circle, user_name) VALUES ('old', 'alice')",
                    "INSERT INTO posts (circle, seq, author, client_id, text, attachment, time) VALUES ('old', 1, 'alice', 'o1', 'first', NULL, 10)",
                    "INSERT INTO posts (circle, seq, author, client_id, text, attachment, time) VALUES ('old', 2, 'bob', 'o2', 'second', NULL, 20)",
                    "INSERT INTO posts (circle, seq, author, client_id, text, attachment, time) VALUES ('old', 3, 'bob', 'o3', NULL, 'm1', 30)",
                ]
            }
            try await self.makeOldDatabase(at: location, version: Self.previousSchemaVersion, statements)

            try await self.withStore(at: location) { store in
                let old = [
                    CirclePost(circle: "old", seq: 1, author: "alice", text: "first", attachment: nil, time: 10, id: "o1"),
                    CirclePost(circle: "old", seq: 2, author: "bob", text: "second", attachment: nil, time: 20, id: "o2"),
                    CirclePost(circle: "old", seq: 3, author: "bob", text: nil, attachment: "m1", time: 30, id: "o3"),
                ]
                #expect(try await store.posts(in: "old", after: 0, limit: 10) == old)
                #expect(try await store.commit([self.newPost("old", id: "o1")]) == [.duplicate(old[0])])
                #expect(try await store.circles(visibleTo: "alice").map(\.unread) == [2])

                let outcomes = try await store.commit([
                    self.change("old", .edit, 1, id: "e1", text: "first!", time: 40),
                    self.change("old", .react, 2, id: "r1", emoji: "👍"),
                    self.change("old", .delete, 3, by: "bob", id: "d1"),
                    self.reply("old", to: 2, id: "re1"),
                ])
                #expect(self.storedSeqs(outcomes) == [4, 5, 6, 7])
                let history = try await store.history(in: "old", before: nil, after: nil, limit: 10, viewer: "bob")
                #expect(history.map(\.seq) == [1, 2, 3, 7])
                #expect(history[0].text == "first!")
                #expect(history[0].edited == 40)
                #expect(history[1].reactions == [CircleReaction(emoji: "👍", users: ["alice"], me: false)])
                #expect(history[2].deleted)
                #expect(history[2].attachment == nil)
                #expect(history[3].replyTo == 2)
                #expect(try await store.markRead("alice", in: "old", upTo: 2).seq == 2)
                #expect(try await store.circles(visibleTo: "alice").map(\.unread) == [0])
                #expect(try await store.circles(visibleTo: "bob").map(\.unread) == [2])
            }
            // Opening again migrates nothing more and keeps everything.
            try await self.withStore(at: location) { store in
                let circles = try await store.circles(visibleTo: "alice")
                #expect(circles.map(\.lastSeq) == [7])
                #expect(circles.map(\.readSeq) == [2])
            }
        }
    }

    // MARK: Media

    @Test(arguments: StoreKind.allCases) func mediaUploadsAndAccess(_ kind: StoreKind) async throws {
        try await self.withStore(kind) { store in
            _ = try await store.createCircle(name: "open", owner: "alice", isPrivate: false, createdAt: 1)
            _ = try await store.createCircle(name: "closed", owner: "alice", isPrivate: true, createdAt: 1)
            let first = MediaUpload(id: "u1", owner: "alice", length: 10, contentType: "image/png", createdAt: 100)
            let second = MediaUpload(id: "u2", owner: "alice", length: 10, contentType: "image/jpeg", createdAt: 200)
            try await store.createUpload(first)
            try await store.createUpload(second)
            #expect(try await store.upload(id: "u1") == first)
            #expect(try await store.upload(id: "nope") == nil)
            #expect(try await store.pendingUploadCount(owner: "alice") == 2)
            #expect(try await store.pendingUploadCount(owner: "bob") == 0)
            #expect(try await store.uploads(createdBefore: 150) == ["u1"])

            let media = MediaInfo(id: "m1", size: 10, contentType: "image/png", createdAt: 300)
            #expect(try await store.completeUpload(id: "u1", media: media, uploader: "alice") == media)
            // The same bytes again, declared as another type: the first type wins.
            let again = try await store.completeUpload(
                id: "u2", media: MediaInfo(id: "m1", size: 10, contentType: "image/jpeg", createdAt: 400), uploader: "alice")
            #expect(again == media)
            #expect(try await store.upload(id: "u1")?.media == "m1")
            #expect(try await store.pendingUploadCount(owner: "alice") == 0)
            #expect(try await store.media(id: "m1") == media)
            #expect(try await store.media(id: "m2") == nil)
            #expect(try await store.isUploader("alice", of: "m1"))
            #expect(try await !store.isUploader("bob", of: "m1"))

            // bob may read it once a post he can read has it as its attachment.
            #expect(try await store.canRead(media: "m1", user: "alice"))
            #expect(try await !store.canRead(media: "m1", user: "bob"))
            _ = try await store.commit([self.newPost("closed", id: "p1", attachment: "m1")])
            #expect(try await !store.canRead(media: "m1", user: "bob"))
            try await store.addMember("bob", to: "closed")
            #expect(try await store.canRead(media: "m1", user: "bob"))
            try await store.removeMember("bob", from: "closed")
            #expect(try await !store.canRead(media: "m1", user: "bob"))
            _ = try await store.commit([self.newPost("open", id: "p2", attachment: "m1")])
            #expect(try await store.canRead(media: "m1", user: "bob"))
            #expect(try await !store.canRead(media: "m9", user: "alice"))

            try await store.deleteUpload(id: "u2")
            try await store.deleteUpload(id: "u2")  // idempotent
            #expect(try await store.upload(id: "u2") == nil)
        }
    }
}
