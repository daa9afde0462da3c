import CircleWire
import Testing

@Suite("CircleTimeline: applying stream entries")
struct CircleTimelineTests {
    static func post(_ seq: Int64, _ author: String = "ann", _ text: String? = nil, replyTo: Int64? = nil) -> CirclePost {
        CirclePost(circle: "c", seq: seq, author: author, text: text ?? "post \(seq)", attachment: nil, time: seq * 10, id: "p\(seq)", replyTo: replyTo)
    }

    static func change(_ seq: Int64, _ change: CircleChange, _ target: Int64, by author: String = "ann", text: String? = nil, emoji: String? = nil) -> CirclePost {
        CirclePost(circle: "c", seq: seq, author: author, text: text, attachment: nil, time: seq * 10, id: "x\(seq)", change: change, target: target, emoji: emoji)
    }

    /// A stream with every kind of entry.
    static let stream: [CirclePost] = [
        post(1), post(2, "bo", replyTo: 1), post(3),
        change(4, .edit, 1, text: "first, fixed"),
        change(5, .react, 1, by: "bo", emoji: "👍"),
        change(6, .react, 1, by: "ann", emoji: "👍"),
        change(7, .react, 1, by: "bo", emoji: "🎉"),
        change(8, .unreact, 1, by: "bo", emoji: "👍"),
        change(9, .react, 3, by: "bo", emoji: "👍"),
        change(10, .delete, 3),
        change(11, .edit, 1, text: "first, fixed twice"),
        post(12, "bo"),
    ]

    @Test func keepsSystemEntriesInOrderAndNeverChangesThem() {
        var timeline = CircleTimeline(viewer: "ann")
        let added = CirclePost(circle: "c", seq: 2, author: "ann", text: nil, attachment: nil, time: 20, id: "s2", event: .added, member: "bo")
        for entry in [Self.post(3), added, Self.post(1)] { timeline.apply(entry) }
        #expect(timeline.posts.map(\.seq) == [1, 2, 3])
        #expect(timeline.posts[1].isSystem && !timeline.posts[1].isPost)
        #expect(timeline.posts[1].systemText == "ann added bo")
        #expect(timeline.apply(Self.change(4, .edit, 2, text: "x")) == .none)
        #expect(timeline.apply(Self.change(5, .delete, 2)) == .none)
        #expect(timeline.post(2) == added)
        #expect(timeline.apply(added) == .none)
    }

    @Test func aCirclesStartInWords() {
        let team = CircleSummary(name: "team", owner: "ann", private: false, createdAt: 1, lastSeq: 0)
        #expect(team.originText == "ann created team")
        let direct = CircleSummary(name: "dm.5e2c", owner: "ann", private: true, createdAt: 1, lastSeq: 0, direct: ["ann", "bo"])
        #expect(direct.originText == "ann started this direct message")
    }

    @Test func appliesEveryChange() {
        var timeline = CircleTimeline(viewer: "ann")
        for entry in Self.stream { timeline.apply(entry) }
        #expect(timeline.posts.map(\.seq) == [1, 2, 3, 12])
        #expect(timeline.lastSeq == 12)
        let first = timeline.post(1)
        #expect(first?.text == "first, fixed twice")
        #expect(first?.edited == 110)
        #expect(first?.reactions == [CircleReaction(emoji: "👍", users: ["ann"], me: true), CircleReaction(emoji: "🎉", users: ["bo"], me: false)])
        #expect(timeline.post(2)?.replyTo == 1)
        #expect(timeline.post(3)?.deleted == true)
        #expect(timeline.post(3)?.text == nil)
        #expect(timeline.post(3)?.reactions == [])
    }

    @Test func everyEntryTwiceChangesNothing() {
        var once = CircleTimeline(viewer: "ann")
        for entry in Self.stream { once.apply(entry) }
        // A reader that replays from any cursor after having applied everything up to it.
        for cursor in 0..<Self.stream.count {
            var twice = CircleTimeline(viewer: "ann")
            for entry in Self.stream[..<cursor] { twice.apply(entry) }
            for entry in Self.stream[max(0, cursor - 3)...] { twice.apply(entry) }
            #expect(twice == once, "replay from \(cursor)")
        }
        #expect(once.apply(Self.stream[5]) == .none)
    }

    @Test func changesToUnknownPostsAndEditsOfTombstonesAreIgnored() {
        var timeline = CircleTimeline(viewer: "ann")
        #expect(timeline.apply(Self.change(4, .edit, 1, text: "x")) == .none)
        timeline.apply(Self.post(5))
        timeline.apply(Self.change(6, .delete, 5))
        #expect(timeline.apply(Self.change(7, .edit, 5, text: "back")) == .none)
        #expect(timeline.apply(Self.change(8, .react, 5, by: "bo", emoji: "👍")) == .none)
        #expect(timeline.post(5)?.text == nil)
    }

    @Test func historyPagesReplaceReactionsAndStreamedPostsKeepThem() {
        var timeline = CircleTimeline(viewer: "ann")
        var snapshot = Self.post(1)
        snapshot.reactions = [CircleReaction(emoji: "👍", users: ["bo", "ann"], me: true)]
        timeline.merge([Self.post(2), snapshot])
        #expect(timeline.posts.map(\.seq) == [1, 2])
        var streamed = Self.post(1)
        streamed.text = "edited"
        #expect(timeline.apply(streamed) == .updated(CirclePost(circle: "c", seq: 1, author: "ann", text: "edited", attachment: nil, time: 10, id: "p1", reactions: snapshot.reactions)))
        timeline.apply(Self.change(3, .unreact, 1, by: "ann", emoji: "👍"))
        #expect(timeline.post(1)?.reactions == [CircleReaction(emoji: "👍", users: ["bo"], me: false)])
        timeline.trim(keepingNewest: 1)
        #expect(timeline.posts.map(\.seq) == [2])
    }

    @Test("a page older than what was applied keeps the held posts, adds the others and says so; one as new replaces")
    func pagesAsOf() {
        var timeline = CircleTimeline(viewer: "ann")
        for entry in Self.stream[..<4] { timeline.apply(entry) }  // #1 edited by #4
        var stale = Self.post(1)  // #1 as a page read at #3 shows it, before the edit
        stale.reactions = []
        let older = Self.post(0)
        let taken1 = timeline.merge([older, stale], asOf: 3)
        #expect(taken1 == false)
        #expect(timeline.post(1)?.text == "first, fixed")  // the edit stays
        #expect(timeline.post(0) != nil)  // a post not held is added
        var current = Self.post(1, "ann", "first, fixed")
        current.edited = 40
        current.reactions = [CircleReaction(emoji: "👍", users: ["bo"], me: false)]
        let taken2 = timeline.merge([current], asOf: 5)
        #expect(taken2)
        #expect(timeline.post(1)?.reactions == current.reactions)
        // A join's ack: the stream is followed from #9 on, so a page read at #8 is older.
        timeline.follow(from: 9)
        #expect(timeline.lastSeq == 9)
        let taken3 = timeline.merge([Self.post(3)], asOf: 8)
        #expect(taken3 == false)
        let taken4 = timeline.merge([Self.post(3)], asOf: 9)
        #expect(taken4)
        let taken5 = timeline.merge([Self.post(3)])
        #expect(taken5)  // no asOf (a cache): taken as it is
    }

    @Test("setting the viewer recomputes me on every held post; pages take me for the timeline's viewer")
    func viewerRecomputesMe() {
        var timeline = CircleTimeline()
        var page = Self.post(1)
        page.reactions = [CircleReaction(emoji: "👍", users: ["ann", "bo"], me: false)]
        timeline.merge([page], asOf: 1)
        timeline.apply(Self.change(2, .react, 1, by: "bo", emoji: "🎉"))
        #expect(timeline.post(1)?.reactions?.map(\.me) == [false, false])
        timeline.viewer = "bo"
        #expect(timeline.post(1)?.reactions?.map(\.me) == [true, true])
        timeline.viewer = "ann"
        #expect(timeline.post(1)?.reactions?.map(\.me) == [true, false])
        var asBo = Self.post(1)
        asBo.reactions = [CircleReaction(emoji: "👍", users: ["ann", "bo"], me: true)]  // me for the asker, bo
        timeline.merge([asBo], asOf: 2)
        #expect(timeline.post(1)?.reactions?.map(\.me) == [true])  // ann's view of the page
    }
}
