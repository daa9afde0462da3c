import CircleTestSupport
import CircleWire
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import Testing

@testable import CircleServer

/// A session as the hub sees it, writing what reaches it (on its event loop) to a stream.
private final class StreamSink: HubSubscriberSink {
    let name: String
    let entries: AsyncStream<String>.Continuation
    init(name: String, entries: AsyncStream<String>.Continuation) {
        self.name = name
        self.entries = entries
    }
    func receive(_ event: HubEvent) {
        switch event {
        case .answered(let id, .success(.stored(let post))): self.entries.yield("\(self.name) ack \(id) seq \(post.seq)")
        case .answered(let id, .success(.duplicate(let post))): self.entries.yield("\(self.name) ack \(id) seq \(post.seq) duplicate")
        case .answered(let id, .failure(let error as StoreError)): self.entries.yield("\(self.name) error \(id) \(error.code)")
        case .answered(let id, let other): self.entries.yield("\(self.name) answer \(id) \(other)")
        case .post(_, let seq, _): self.entries.yield("\(self.name) post \(seq)")
        case .posts(_, let run): self.entries.yield("\(self.name) posts \(run.firstSeq)-\(run.lastSeq)")
        default: self.entries.yield("\(self.name) other")
        }
    }
    func flushDeliveries() { self.entries.yield("\(self.name) flush") }
    func shutDown() {}
}

/// The commit loop against a real SQLite store and a real event loop: how a session's post is
/// answered (``PostCommitter/submit(_:answering:)``).
@Suite("PostCommitter")
struct PostCommitterTests {
    private static let logger: Logger = {
        var logger = Logger(label: "circle.test.committer")
        logger.logLevel = .warning
        return logger
    }()

    private static func post(_ id: String, by author: String = "alice") -> NewPost {
        NewPost(circle: "general", author: author, clientID: id, text: "text of \(id)", attachment: nil, time: 0)
    }

    /// Runs `body` with a committer over a fresh store with the public circle "general", a
    /// stream of what the sessions `alice` and `bob` (subscribed to it, on one event loop) were
    /// handed, and the committer's loop not yet started (`start` starts it).
    private func withCommitter(
        _ body: (PostCommitter, _ alice: HubSubscriber, _ entries: AsyncStream<String>, _ start: () -> Void) async throws -> Void
    ) async throws {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        defer { group.shutdownGracefully { _ in } }
        try await SQLiteStoreTests().withStore { store in
            _ = try await store.createCircle(name: "general", owner: "alice", isPrivate: false, createdAt: 0)
            let hub = Hub()
            let committer = PostCommitter(store: store, hub: hub, metrics: ServerMetrics(), logger: Self.logger)
            let (entries, continuation) = AsyncStream.makeStream(of: String.self)
            let loop = group.next()
            // A subscriber is made on its loop (its sink is bound to it).
            func subscriber(_ name: String) async throws -> HubSubscriber {
                try await loop.submit { HubSubscriber(eventLoop: loop, user: name, sink: StreamSink(name: name, entries: continuation)) }.get()
            }
            let alice = try await subscriber("alice")
            let bob = try await subscriber("bob")
            hub.subscribe(alice, to: "general")
            hub.subscribe(bob, to: "general")
            let running = NIOLockedValueBox<Task<Void, Never>?>(nil)
            try await body(committer, alice, entries) {
                running.withLockedValue { $0 = Task { await committer.run() } }
            }
            await committer.finish()
            await running.withLockedValue { $0 }?.value
        }
    }

    @Test("a session's acks reach it as hub deliveries before its batch's posts, and leave with them in one flush")
    func acksBeforeTheBatchsPosts() async throws {
        try await self.withCommitter { committer, alice, entries, start in
            // Queued before the loop runs: one batch.
            for id in ["p1", "p2", "p3"] { committer.submit(Self.post(id), answering: alice) }
            start()
            let seen = await collect(entries, timeout: .seconds(30)) { seen in
                seen.filter { $0.hasPrefix("bob flush") }.count >= 1 && seen.filter { $0.hasPrefix("alice flush") }.count >= 2
            }
            let writes = seen.prefix { !$0.hasSuffix("flush") }
            #expect(Array(writes.prefix(3)) == ["alice ack p1 seq 1", "alice ack p2 seq 2", "alice ack p3 seq 3"], "\(seen)")
            // (The hub hands a post to a circle's subscribers in no particular order.)
            #expect(Set(writes.dropFirst(3)) == ["alice posts 1-3", "bob posts 1-3"] && writes.count == 5, "\(seen)")
            #expect(seen.dropFirst(writes.count).allSatisfy { $0.hasSuffix("flush") }, "no write after the first flush: \(seen)")
        }
    }

    @Test("a post sent again is answered as a duplicate through the hub, with no post delivered")
    func duplicateAnsweredOnce() async throws {
        try await self.withCommitter { committer, alice, entries, start in
            start()
            committer.submit(Self.post("p1"), answering: alice)
            // Alice is flushed after her ack's hand-over and after the post's.
            let first = await collect(entries, timeout: .seconds(30)) { $0.contains("bob flush") && $0.filter { $0 == "alice flush" }.count == 2 }
            #expect(first.contains("alice ack p1 seq 1") && first.contains("bob post 1"), "\(first)")
            committer.submit(Self.post("p1"), answering: alice)
            let again = await collect(entries, timeout: .seconds(30)) { $0.contains("alice flush") }
            #expect(again == ["alice ack p1 seq 1 duplicate", "alice flush"])
        }
    }

    @Test("a post queued after the committer finished is answered unavailable, through the hub")
    func afterFinishUnavailable() async throws {
        try await self.withCommitter { committer, alice, entries, _ in
            await committer.finish()
            committer.submit(Self.post("late"), answering: alice)
            let seen = await collect(entries, timeout: .seconds(30)) { $0.contains("alice flush") }
            #expect(seen == ["alice error late unavailable", "alice flush"])
        }
    }
}
