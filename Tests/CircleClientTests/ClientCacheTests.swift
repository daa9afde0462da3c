@testable import CircleClient
import Foundation
import Testing

private func post(_ seq: Int64, _ text: String = "p", by author: String = "ann", replyTo: Int64? = nil) -> CirclePost {
    CirclePost(circle: "c", seq: seq, author: author, text: text, attachment: nil, time: 1000 + seq, id: "id\(seq)", replyTo: replyTo)
}

private func change(_ seq: Int64, _ kind: CircleChange, target: Int64, by author: String = "ann", text: String? = nil, emoji: String? = nil) -> CirclePost {
    CirclePost(circle: "c", seq: seq, author: author, text: text, attachment: nil, time: 1000 + seq, id: "id\(seq)", change: kind, target: target, emoji: emoji)
}

@Suite("CircleClient offline cache: the apply rules as the SDK uses them, the limit, pages")
struct ClientCacheTests {
    @Test("an edit replaces the text and sets edited; a delete makes a tombstone without reactions")
    func editAndDelete() {
        var timeline = CircleTimeline()
        timeline.apply(post(1, "helo"), keepingNewest: 10)
        timeline.apply(change(2, .edit, target: 1, text: "hello"), keepingNewest: 10)
        #expect(timeline.post(1)?.text == "hello")
        #expect(timeline.post(1)?.edited == 1002)
        timeline.apply(change(3, .react, target: 1, by: "bob", emoji: "👍"), keepingNewest: 10)
        timeline.apply(change(4, .delete, target: 1), keepingNewest: 10)
        let deleted = timeline.post(1)
        #expect(deleted?.deleted == true)
        #expect(deleted?.text == nil)
        #expect(deleted?.reactions?.isEmpty ?? true)
        // An edit of a deleted post changes nothing.
        timeline.apply(change(5, .edit, target: 1, text: "again"), keepingNewest: 10)
        #expect(timeline.post(1) == deleted)
        #expect(timeline.posts.count == 1)
        #expect(timeline.lastSeq == 5)
    }

    @Test("reactions are sets of users per emoji, in the order first used; me is the viewer's")
    func reactions() {
        var timeline = CircleTimeline(viewer: "bob")
        timeline.apply(post(1))
        timeline.apply(change(2, .react, target: 1, by: "ann", emoji: "👍"))
        timeline.apply(change(3, .react, target: 1, by: "bob", emoji: "👍"))
        timeline.apply(change(4, .react, target: 1, by: "bob", emoji: "👍"))
        timeline.apply(change(5, .react, target: 1, by: "ann", emoji: "🎉"))
        #expect(timeline.post(1)?.reactions == [
            CircleReaction(emoji: "👍", users: ["ann", "bob"], me: true),
            CircleReaction(emoji: "🎉", users: ["ann"], me: false),
        ])
        timeline.apply(change(6, .unreact, target: 1, by: "bob", emoji: "👍"))
        timeline.apply(change(7, .unreact, target: 1, by: "ann", emoji: "🎉"))
        #expect(timeline.post(1)?.reactions == [CircleReaction(emoji: "👍", users: ["ann"], me: false)])
    }

    @Test("applying the same entries again (a replay overlap) changes nothing")
    func idempotent() {
        let entries = [
            post(1, "a"), post(2, "b", by: "bob", replyTo: 1), change(3, .edit, target: 1, text: "A"),
            change(4, .react, target: 2, by: "ann", emoji: "👍"), change(5, .delete, target: 1),
            change(6, .unreact, target: 2, by: "cid", emoji: "👍"), post(7, "c"),
        ]
        var once = CircleTimeline()
        for entry in entries { once.apply(entry, keepingNewest: 10) }
        var twice = CircleTimeline()
        for entry in entries.prefix(5) { twice.apply(entry, keepingNewest: 10) }
        for entry in entries.dropFirst(2) { twice.apply(entry, keepingNewest: 10) }
        #expect(once == twice)
        #expect(once.post(2)?.replyTo == 1)
        #expect(once.post(2)?.reactions?.first?.users == ["ann"])
    }

    @Test("a post served again keeps the known reactions; a history page replaces them")
    func reactionsSnapshot() {
        var timeline = CircleTimeline()
        timeline.apply(post(1))
        timeline.apply(change(2, .react, target: 1, by: "bob", emoji: "👍"))
        timeline.apply(post(1))
        #expect(timeline.post(1)?.reactions?.first?.users == ["bob"])
        var page = post(1)
        page.reactions = [CircleReaction(emoji: "🎉", users: ["cid"], me: false)]
        timeline.merge([page])
        #expect(timeline.post(1)?.reactions == [CircleReaction(emoji: "🎉", users: ["cid"], me: false)])
    }

    @Test("the cache keeps the newest posts; changes to posts it dropped are ignored; pages both ways")
    func limit() {
        var timeline = CircleTimeline()
        for seq in 1...5 { timeline.apply(post(Int64(seq)), keepingNewest: 3) }
        #expect(timeline.posts.map(\.seq) == [3, 4, 5])
        timeline.apply(change(6, .edit, target: 1, text: "x"), keepingNewest: 3)
        timeline.apply(post(2), keepingNewest: 3)
        #expect(timeline.posts.map(\.seq) == [3, 4, 5])
        #expect(timeline.posts.allSatisfy { $0.text == "p" })
        #expect(timeline.page(before: 5, limit: 1).posts.map(\.seq) == [4])
        #expect(timeline.page(before: 5, limit: 1).more)
        #expect(timeline.page(before: nil, limit: 5).posts.map(\.seq) == [3, 4, 5])
        #expect(!timeline.page(before: nil, limit: 5).more)
        #expect(timeline.page(after: 3, limit: 1).posts.map(\.seq) == [4])
        #expect(timeline.page(after: 3, limit: 1).more)
        #expect(!timeline.page(after: 4, limit: 5).more)
    }

    @Test("pages at the ends of the seq and count ranges do not trap, in the timeline and offline through the client")
    func extremePages() async throws {
        var timeline = CircleTimeline()
        for seq in 1...3 { timeline.apply(post(Int64(seq)), keepingNewest: 10) }
        let pastTheEnd = timeline.page(after: .max, limit: 10)
        #expect(pastTheEnd.posts.isEmpty && !pastTheEnd.more)
        #expect(timeline.page(after: .min, limit: .max).posts.map(\.seq) == [1, 2, 3])
        let rest = timeline.page(after: 1, limit: .max)
        #expect(rest.posts.map(\.seq) == [2, 3] && !rest.more)
        let none = timeline.page(after: 0, limit: -1)
        #expect(none.posts.isEmpty && none.more)
        let beforeAll = timeline.page(before: .min, limit: .max)
        #expect(beforeAll.posts.isEmpty && !beforeAll.more)
        #expect(timeline.page(before: .max, limit: .max).posts.map(\.seq) == [1, 2, 3])

        let configuration = CircleClientConfiguration(servers: ["ws://127.0.0.1:1/v1/ws"], tokenProvider: { "" }, stateFile: "/unused")
        let core = ClientCore(
            configuration: configuration, store: MemoryClientStateStore(), outbox: [], cursors: [:],
            caches: ["c": CachedCircle(upTo: 3, posts: timeline.posts)]
        )
        let offline = try await core.history("c", before: nil, after: .max, limit: .max)
        #expect(offline.posts.isEmpty && !offline.more)
        #expect(try await core.history("c", before: nil, after: 2, limit: .max).posts.map(\.seq) == [3])
    }

    @Test("a history page is taken into the cache (replacing and adding, then trimmed) only when it is at least as new as the cache")
    func takePage() {
        var timeline = CircleTimeline()
        timeline.apply(post(5, "five"), keepingNewest: 3)
        timeline.apply(change(6, .edit, target: 5, text: "FIVE"), keepingNewest: 3)
        timeline.follow(from: 10)  // a join's ack: entries up to 10 count as applied
        let before = timeline
        // Read before the edit (and the ack): it would take the edit back and add posts without
        // the changes up to 10.
        let stale = timeline.takePage([post(3, "three"), post(5, "five")], asOf: 8, keepingNewest: 3)
        #expect(!stale)
        #expect(timeline == before)

        var reacted = post(5, "FIVE")
        reacted.reactions = [CircleReaction(emoji: "👍", users: ["bob"], me: false)]
        let taken = timeline.takePage([post(2), post(3, "three"), post(4), reacted], asOf: 10, keepingNewest: 3)
        #expect(taken)
        #expect(timeline.posts.map(\.seq) == [3, 4, 5])  // added, then the newest 3 kept
        #expect(timeline.post(5) == reacted)
        #expect(timeline.lastSeq == 10)
    }

    @Test("outbox entries of older state files decode as posts")
    func oldOutboxEntry() throws {
        let old = #"{"id":"x","circle":"c","text":"hi","createdAt":5}"#
        let entry = try JSONDecoder().decode(OutboxEntry.self, from: Data(old.utf8))
        #expect(entry.action == .post)
        #expect(entry.target == nil)
        let react = OutboxEntry(id: "y", circle: "c", action: .react, target: 3, emoji: "👍", createdAt: 1)
        #expect(react.request.action == .react)
        #expect(react.request.target == 3)
        #expect(react.request.emoji == "👍")
        #expect(try JSONDecoder().decode(OutboxEntry.self, from: JSONEncoder().encode(react)) == react)
    }

    @Test("the user is read from the token's sub claim")
    func subject() {
        let payload = Data(#"{"sub":"ann","exp":1}"#.utf8).base64EncodedString()
            .replacingOccurrences(of: "=", with: "").replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
        #expect(ClientCore.subject(of: "eyJhbGciOiJIUzI1NiJ9.\(payload).sig") == "ann")
        #expect(ClientCore.subject(of: "not a token") == nil)
    }
}
