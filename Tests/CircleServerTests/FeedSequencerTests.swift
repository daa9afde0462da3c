import CircleWire
import Testing

@testable import CircleServer

/// The per-circle ordering of posts from this node's commits and other nodes' signals, as a
/// value: events in, actions out.
@Suite struct FeedSequencerTests {
    static func post(_ seq: Int64, in circle: String = "general") -> CirclePost {
        CirclePost(circle: circle, seq: seq, author: "ann", text: "#\(seq)", attachment: nil, time: seq, id: "c\(seq)")
    }

    static func posts(_ seqs: ClosedRange<Int64>, in circle: String = "general") -> [CirclePost] {
        seqs.map { Self.post($0, in: circle) }
    }

    /// The seqs of every published post, in order.
    static func published(_ actions: [FeedSequencer.Action]) -> [Int64] {
        actions.flatMap { action -> [Int64] in
            if case .publish(let posts) = action { return posts.map(\.seq) }
            return []
        }
    }

    static func reads(_ actions: [FeedSequencer.Action]) -> [FeedSequencer.Action] {
        actions.filter { if case .read = $0 { return true } else { return false } }
    }

    @Test("a node's own commits in order are published at once, without reads")
    func ownCommits() {
        var sequencer = FeedSequencer()
        sequencer.follow("general")
        #expect(Self.published(sequencer.stored(Self.posts(1...3))) == [1, 2, 3])
        let next = sequencer.stored(Self.posts(4...4))
        #expect(Self.published(next) == [4])
        #expect(Self.reads(next).isEmpty)
        // Posts already published (another node's signal for them) are not published twice.
        #expect(sequencer.stored(Self.posts(3...4)).isEmpty)
    }

    @Test("posts past a hole are held until one read fills it, then published in order")
    func holeFilledByOneRead() {
        var sequencer = FeedSequencer()
        sequencer.follow("general")
        _ = sequencer.stored(Self.posts(1...2))
        // Node B stored 5 and 6 while the signal for A's 3 and 4 is on its way.
        let held = sequencer.stored(Self.posts(5...6))
        #expect(Self.published(held).isEmpty)
        #expect(held == [.read(circle: "general", after: 2)])
        // More news while the read runs asks for no second read.
        #expect(sequencer.advanced("general", first: 7, last: 7).isEmpty)
        // The read brings 3...6 (5 and 6 again): published once each, in order; 7 still missing.
        let filled = sequencer.read("general", after: 2, Self.posts(3...6))
        #expect(Self.published(filled) == [3, 4, 5, 6])
        #expect(Self.reads(filled) == [.read(circle: "general", after: 6)])
        #expect(Self.published(sequencer.read("general", after: 6, Self.posts(7...7))) == [7])
    }

    @Test("a wake-up without posts asks for a read; a stale one asks for nothing")
    func wakeUps() {
        var sequencer = FeedSequencer()
        sequencer.follow("general")
        _ = sequencer.stored(Self.posts(1...3))
        #expect(sequencer.advanced("general", first: 2, last: 3).isEmpty)
        #expect(sequencer.advanced("general", first: nil, last: 5) == [.read(circle: "general", after: 3)])
        #expect(Self.published(sequencer.read("general", after: 3, Self.posts(4...5))) == [4, 5])
        // Unfollowed circles (no subscriber here) are ignored.
        #expect(sequencer.advanced("other", first: nil, last: 9).isEmpty)
        #expect(sequencer.stored(Self.posts(1...2, in: "other")).isEmpty)
    }

    @Test("the first news of a circle starts just before it: nothing older is read")
    func firstNews() {
        var sequencer = FeedSequencer()
        sequencer.follow("general")
        // The poll says the circle is at 40; subscribers joined knowing the store's state.
        #expect(sequencer.advanced("general", first: nil, last: 40) == [.read(circle: "general", after: 39)])
        #expect(Self.published(sequencer.read("general", after: 39, Self.posts(40...40))) == [40])
        // An empty circle: the read finds nothing and the feed stands at 0.
        sequencer.follow("empty")
        #expect(sequencer.advanced("empty", first: nil, last: 0) == [.read(circle: "empty", after: 0)])
        #expect(sequencer.read("empty", after: 0, []).isEmpty)
        #expect(sequencer.feeds["empty"]?.published == 0)
        #expect(Self.published(sequencer.stored(Self.posts(1...1, in: "empty"))) == [1])
    }

    @Test("a failed read is retried by the next news; news during a read triggers another")
    func failedRead() {
        var sequencer = FeedSequencer()
        sequencer.follow("general")
        _ = sequencer.stored(Self.posts(1...1))
        #expect(sequencer.advanced("general", first: 2, last: 2) == [.read(circle: "general", after: 1)])
        #expect(sequencer.read("general", after: 1, nil).isEmpty)
        #expect(sequencer.advanced("general", first: nil, last: 2) == [.read(circle: "general", after: 1)])
        // News of 3 arrives while the read (which saw only 2) runs: a second read follows.
        #expect(sequencer.advanced("general", first: 3, last: 3).isEmpty)
        let first = sequencer.read("general", after: 1, Self.posts(2...2))
        #expect(Self.published(first) == [2])
        #expect(Self.reads(first) == [.read(circle: "general", after: 2)])
    }

    @Test("a hole the store cannot fill is handed on rather than held forever")
    func unfillableHole() {
        var sequencer = FeedSequencer()
        sequencer.follow("general")
        _ = sequencer.stored(Self.posts(1...1))
        #expect(sequencer.stored(Self.posts(3...3)) == [.read(circle: "general", after: 1)])
        // The read finds nothing new (it cannot happen with a truthful store): 3 goes out, and
        // subscribers, who never skip, read 2 themselves.
        #expect(Self.published(sequencer.read("general", after: 1, [])) == [3])
        #expect(sequencer.feeds["general"]?.held == [])
    }

    @Test("held posts are bounded per circle")
    func holdLimit() {
        var sequencer = FeedSequencer(holdLimit: 3)
        sequencer.follow("general")
        _ = sequencer.stored(Self.posts(1...1))
        _ = sequencer.stored(Self.posts(5...9))
        #expect(sequencer.feeds["general"]?.held.map(\.seq) == [7, 8, 9])
        // The read brings 2...9; everything is published once, in order.
        #expect(Self.published(sequencer.read("general", after: 1, Self.posts(2...9))) == Array(2...9))
    }
}

/// The signals nodes send each other, as text.
@Suite struct NodeSignalTests {
    @Test("every kind goes through its text form unchanged")
    func roundTrip() throws {
        let kinds: [NodeSignal.Kind] = [
            .posts(circle: "general", first: 3, last: 4, posts: FeedSequencerTests.posts(3...4)),
            .posts(circle: "general", first: 3, last: 4, posts: nil),
            .ephemeral(circle: "general", json: #"{"type":"typing","circle":"general","user":"ann"}"#, limit: 50),
            .ephemeral(circle: "general", json: "{}", limit: nil),
            .revoke(circle: "lab", user: "bob"),
        ]
        for node in ["n1", #"a "quoted" / ü node"#] {
            let prefix = try #require(NodeSignal.prefix(of: node))
            for kind in kinds {
                let signal = NodeSignal(node: node, kind: kind)
                let text = try #require(signal.encoded())
                #expect(NodeSignal(notification: text) == signal)
                // A node tells its own signals by their start, without decoding them.
                #expect(text.utf8.starts(with: prefix.utf8), "\(text)")
            }
        }
        let other = try #require(NodeSignal(node: "n2", kind: .revoke(circle: "lab", user: "bob")).encoded())
        #expect(!other.utf8.starts(with: try #require(NodeSignal.prefix(of: "n1")).utf8))
        // nor is a node whose id merely begins like another's taken for it
        #expect(!other.utf8.starts(with: try #require(NodeSignal.prefix(of: "n")).utf8))
        #expect(NodeSignal(notification: "not json") == nil)
        #expect(NodeSignal(notification: #"{"n":"x","k":"z","c":"c"}"#) == nil)
    }

    @Test("posts too large for one notification go without their posts")
    func tooLarge() throws {
        let big = (1...40).map { seq in
            CirclePost(circle: "general", seq: Int64(seq), author: "ann", text: String(repeating: "x", count: 400), attachment: nil, time: 1, id: "c\(seq)")
        }
        let text = try #require(NodeSignal(node: "n1", kind: .posts(circle: "general", first: 1, last: 40, posts: big)).encoded())
        #expect(text.utf8.count <= NodeSignal.maximumSize)
        #expect(NodeSignal(notification: text)?.kind == .posts(circle: "general", first: 1, last: 40, posts: nil))
        // An ephemeral event that does not fit is not sent at all.
        #expect(NodeSignal(node: "n1", kind: .ephemeral(circle: "c", json: String(repeating: "y", count: 9000), limit: nil)).encoded() == nil)
    }
}
