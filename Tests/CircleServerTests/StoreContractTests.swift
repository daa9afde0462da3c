import CircleTestSupport
import CircleWire
import Foundation
import Logging
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
            #expect(page == [CirclePost(circle: "lobby", seq: 4, author: "alice", text: "hello", attachment: nil, time: 4, id: "p4")])
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
