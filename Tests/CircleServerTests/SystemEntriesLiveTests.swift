import CircleServer
import CircleTestSupport
import CircleWire
import Foundation
import Testing

/// System entries over the wire: a member added or removed over HTTP is an entry of the stream,
/// delivered live, replayed by `since`, not a post to change; the per-circle switch.
@Suite("System entries on a live server", .serialized)
struct SystemEntriesLiveTests {
    /// The next post event `client` receives with a seq above `after` (bounded by the client's
    /// own read timeout).
    static func nextEntry(_ client: TestClient, after: Int64 = 0) async throws -> CirclePost {
        while true {
            guard let message = try await client.next() else { throw TestFailure("the connection ended before an entry came") }
            if let post = message.post, post.seq > after { return post }
        }
    }

    @Test("adding and removing a member over HTTP reaches a subscriber live, replays with since, and refuses changes")
    func addedAndRemovedLiveAndReplayed() async throws {
        let server = TestServer()
        defer { server.remove() }
        try await server.start()
        try await server.createCircle("team", owner: "ann", isPrivate: true)
        let annToken = try await server.token("ann")
        let ann = try await TestClient.connect(server, user: "ann")
        _ = try await ann.request { .join("team", id: $0) }
        let first = try await ann.request { .post("hello", to: "team", id: $0) }
        #expect(first.ackSeq == 1)

        let added = try await server.http("POST", "/v1/circles/team/members", token: annToken, json: #"{"user":"bo"}"#)
        #expect(added.status == 200)
        // Past ann's own post (its event comes too): the system entry.
        let entry = try await Self.nextEntry(ann, after: 1)
        #expect(entry.seq == 2)
        #expect(entry.event == .added)
        #expect(entry.member == "bo")
        #expect(entry.author == "ann")
        #expect(entry.systemText == "ann added bo")

        // Adding again changes nothing and writes no entry (the next entry is the removal, seq 3).
        #expect(try await server.http("POST", "/v1/circles/team/members", token: annToken, json: #"{"user":"bo"}"#).status == 200)
        #expect(try await server.http("DELETE", "/v1/circles/team/members/bo", token: annToken).status == 200)
        let removed = try await Self.nextEntry(ann, after: 2)
        #expect(removed.seq == 3)
        #expect(removed.event == .removed)
        #expect(removed.member == "bo")

        // A change to a system entry is refused as a change to no post is.
        #expect(try await ann.request { .edit(2, in: "team", text: "x", id: $0) }.errorCode == .noSuchPost)
        #expect(try await ann.request { .react("👍", to: 2, in: "team", id: $0) }.errorCode == .noSuchPost)
        let http = try await server.http("PATCH", "/v1/circles/team/messages/2", token: annToken, json: #"{"text":"x"}"#)
        #expect(http.status == 404)

        // Resuming from seq 1 replays both entries, in order.
        let later = try await TestClient.connect(server, user: "ann")
        _ = try await later.request { .join("team", id: $0, since: 1) }
        let replayed = [try await Self.nextEntry(later), try await Self.nextEntry(later)]
        #expect(replayed.map(\.seq) == [2, 3])
        #expect(replayed.map(\.event) == [.added, .removed])
        // And the history page has them between the posts.
        let page = try await server.http("GET", "/v1/circles/team/messages", token: annToken)
        #expect(page.status == 200)
        #expect(page.body.contains(#""event":"added""#) && page.body.contains(#""member":"bo""#))
        await ann.close()
        await later.close()
        await server.stop()
    }

    @Test("a member who removes themself writes left; the switch off writes no entry but changes the membership")
    func leftAndSwitch() async throws {
        let server = TestServer()
        defer { server.remove() }
        try await server.start()
        try await server.createCircle("club", owner: "ann")
        let annToken = try await server.token("ann")
        let boToken = try await server.token("bo")
        #expect(try await server.http("POST", "/v1/circles/club/members", token: annToken, json: #"{"user":"bo"}"#).status == 200)
        #expect(try await server.http("DELETE", "/v1/circles/club/members/bo", token: boToken).status == 200)
        let ann = try await TestClient.connect(server, user: "ann")
        _ = try await ann.request { .join("club", id: $0, since: 0) }
        let entries = [try await Self.nextEntry(ann), try await Self.nextEntry(ann)]
        #expect(entries.map(\.event) == [.added, .left])
        #expect(entries[1].systemText == "bo left")
        #expect(entries[1].author == "bo")

        // Only the owner (or an admin, or a manage key) turns them off; the circle shows the switch.
        let refused = try await server.http("PUT", "/v1/circles/club/system-entries", token: boToken, json: #"{"enabled":false}"#)
        #expect(refused.status == 403)
        let bad = try await server.http("PUT", "/v1/circles/club/system-entries", token: annToken, json: #"{"enabled":"no"}"#)
        #expect(bad.status == 400)
        let off = try await server.http("PUT", "/v1/circles/club/system-entries", token: annToken, json: #"{"enabled":false}"#)
        #expect(off.status == 200)
        #expect(off.body.contains(#""systemEntries":false"#))
        let listed = try await server.http("GET", "/v1/circles", token: annToken)
        #expect(listed.body.contains(#""systemEntries":false"#))
        #expect(try await server.http("POST", "/v1/circles/club/members", token: annToken, json: #"{"user":"cy"}"#).status == 200)
        let members = try await server.http("GET", "/v1/circles/club/members", token: annToken)
        #expect(members.body.contains(#""cy""#))
        // The next entry is the post, seq 3: the addition of cy wrote none.
        let post = try await ann.request { .post("after", to: "club", id: $0) }
        #expect(post.ackSeq == 3)
        #expect(try await Self.nextEntry(ann).seq == 3)
        await ann.close()
        await server.stop()
    }
}
