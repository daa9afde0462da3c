import CircleServer
import CircleTestSupport
import CircleWire
import Foundation
import Testing

/// Issue 15 over the wire: edits, deletes, reactions, replies and read markers, across
/// reconnects and a server restart.
@Suite("Chat features on a live server", .serialized)
struct ChatFeaturesLiveTests {
    /// Reads post events until one with `seq >= last` was applied to `timeline`; returns the others.
    static func follow(_ client: TestClient, into timeline: inout CircleTimeline, until last: Int64) async throws -> [CircleServerMessage] {
        var others: [CircleServerMessage] = []
        while timeline.lastSeq < last {
            guard let message = try await client.next() else { throw TestFailure("the connection ended at \(timeline.lastSeq) of \(last)") }
            if let post = message.post {
                #expect(post.seq == timeline.lastSeq + 1, "entries arrive in order, each once")
                timeline.apply(post)
            } else {
                others.append(message)
            }
        }
        return others
    }

    /// Sends a request and waits for its reply, applying the entries that arrive meanwhile.
    static func request(_ client: TestClient, applyingTo timeline: inout CircleTimeline, _ make: (String) -> CircleRequest) async throws -> CircleServerMessage {
        let request = make(client.nextID())
        try await client.send(request)
        let (reply, others) = try await client.reply(to: request.id)
        for post in others.compactMap(\.post) {
            #expect(post.seq == timeline.lastSeq + 1, "entries arrive in order, each once")
            timeline.apply(post)
        }
        return reply
    }

    static func seq(_ reply: CircleServerMessage) throws -> Int64 {
        guard let seq = reply.ackSeq else { throw TestFailure("expected an ack, got \(reply)") }
        return seq
    }

    static func historyPosts(_ client: TestClient, _ circle: String) async throws -> [CirclePost] {
        let reply = try await client.request { .history(of: circle, id: $0, limit: 200) }
        guard case .history(_, _, let posts, _, _) = reply else { throw TestFailure("expected history, got \(reply)") }
        return posts
    }

    @Test("every change type; a reader away across a restart ends equal to one that followed, and to history")
    func changesAcrossRestart() async throws {
        let server = TestServer()
        defer { server.remove() }
        try await server.start()
        try await server.createCircle("general", owner: "ann")
        var ann = try await TestClient.connect(server, user: "ann")
        var bo = try await TestClient.connect(server, user: "bo")
        var follower = try await TestClient.connect(server, user: "cy")
        var away = try await TestClient.connect(server, user: "di")
        for client in [ann, bo, follower, away] { _ = try await client.request { .join("general", id: $0, since: 0) } }
        var followed = CircleTimeline(viewer: "cy")
        var awayTimeline = CircleTimeline(viewer: "di")

        let first = try Self.seq(try await ann.request { .post("helo", to: "general", id: $0) })
        let second = try Self.seq(try await ann.request { .post("secret", to: "general", id: $0) })
        let reply = try Self.seq(try await bo.request { .post("hi ann", to: "general", id: $0, replyTo: first) })
        _ = try await Self.follow(away, into: &awayTimeline, until: reply)
        let cursor = awayTimeline.lastSeq
        await away.close()

        // Changes while "di" is away.
        let edit = try Self.seq(try await ann.request { _ in .edit(first, in: "general", text: "hello", id: "edit-1") })
        _ = try await bo.request { .react("👍", to: first, in: "general", id: $0) }
        _ = try await ann.request { .react("👍", to: first, in: "general", id: $0) }
        _ = try await bo.request { .react("🎉", to: reply, in: "general", id: $0) }
        _ = try await ann.request { .edit(second, in: "general", text: "still secret", id: $0) }
        let deleted = try Self.seq(try await ann.request { .delete(second, in: "general", id: $0) })
        // The same edit again (same id, as after a lost ack): the original ack, nothing new stored.
        let repeatEdit = try await ann.request { _ in .edit(first, in: "general", text: "other text", id: "edit-1") }
        #expect(repeatEdit.isDuplicateAck)
        #expect(repeatEdit.ackSeq == edit)
        #expect(edit < deleted)

        // What the rules refuse, each with its documented code; none uses a seq.
        #expect(try await bo.request { .edit(first, in: "general", text: "mine now", id: $0) }.errorCode == .notAuthor)
        #expect(try await bo.request { .delete(first, in: "general", id: $0) }.errorCode == .notAuthor)
        #expect(try await ann.request { .edit(999, in: "general", text: "x", id: $0) }.errorCode == .noSuchPost)
        #expect(try await ann.request { .react("👍", to: edit, in: "general", id: $0) }.errorCode == .noSuchPost)
        #expect(try await ann.request { .edit(second, in: "general", text: "x", id: $0) }.errorCode == .postDeleted)
        #expect(try await ann.request { .post("re", to: "general", id: $0, replyTo: 999) }.errorCode == .noSuchPost)
        try await ann.sendRaw(#"{"action":"react","id":"bad-emoji","circle":"general","target":1,"emoji":"ok"}"#)
        #expect(try await ann.reply(to: "bad-emoji").reply.errorCode == .invalidEmoji)

        // Restart the server on the same data; everyone reconnects from their cursor.
        var annTimeline = CircleTimeline(viewer: "ann")
        _ = try await Self.follow(follower, into: &followed, until: deleted)
        await ann.close()
        await bo.close()
        await follower.close()
        await server.stop()
        try await server.start()
        ann = try await TestClient.connect(server, user: "ann")
        bo = try await TestClient.connect(server, user: "bo")
        follower = try await TestClient.connect(server, user: "cy")
        // New ids: the same ids as before the restart would be answered as retries (duplicates).
        for client in [ann, bo, follower] { client.idPrefix = "after-restart-" }
        _ = try await ann.request { .join("general", id: $0, since: 0) }
        _ = try await Self.follow(ann, into: &annTimeline, until: deleted)
        _ = try await bo.request { .join("general", id: $0) }
        _ = try await follower.request { .join("general", id: $0, since: followed.lastSeq) }

        // More after the restart.
        _ = try await bo.request { .unreact("👍", from: first, in: "general", id: $0) }
        let refusedEdit = try await Self.request(ann, applyingTo: &annTimeline) { .edit(reply, in: "general", text: "x", id: $0) }
        #expect(refusedEdit.errorCode == .notAuthor, "\(refusedEdit)")
        let last = try Self.seq(try await Self.request(ann, applyingTo: &annTimeline) { .post("after the restart", to: "general", id: $0) })
        _ = try await Self.follow(follower, into: &followed, until: last)
        _ = try await Self.follow(ann, into: &annTimeline, until: last)

        away = try await TestClient.connect(server, user: "di")
        away.idPrefix = "back-"
        _ = try await away.request { .join("general", id: $0, since: cursor) }
        var replayed: [CirclePost] = []
        while awayTimeline.lastSeq < last {
            guard let post = try await away.next()?.post else { continue }
            replayed.append(post)
            awayTimeline.apply(post)
        }
        // Deleted text is never replayed: not in the post, not in the edits made to it.
        #expect(!replayed.contains { $0.text == "secret" || $0.text == "still secret" })
        #expect(replayed.map(\.seq) == Array((cursor + 1)...last))

        func visible(_ timeline: CircleTimeline) -> [CirclePost] {
            // `me` depends on the viewer; compare everything else.
            timeline.posts.map { post in
                var post = post
                post.reactions = post.reactions?.map { CircleReaction(emoji: $0.emoji, users: $0.users, me: false) }
                return post
            }
        }
        #expect(visible(awayTimeline) == visible(followed))
        #expect(visible(annTimeline) == visible(followed))
        let posts = followed.posts
        #expect(posts.map(\.seq) == [first, second, reply, last])
        #expect(posts[0].text == "hello" && posts[0].edited != nil)
        #expect(posts[0].reactions?.map(\.emoji) == ["👍"])
        #expect(posts[0].reactions?.first?.users == ["ann"])
        #expect(posts[1].deleted && posts[1].text == nil)
        #expect(posts[2].replyTo == first && posts[2].reactions?.first?.users == ["bo"])

        // History pages show the same state, with `me` for the asker.
        let page = try await Self.historyPosts(ann, "general")
        #expect(page.map(\.seq) == posts.map(\.seq))
        #expect(page.map(\.text) == posts.map(\.text))
        #expect(page.map(\.deleted) == posts.map(\.deleted))
        #expect(page[0].reactions == [CircleReaction(emoji: "👍", users: ["ann"], me: true)])
        #expect(page[3].reactions == [])
        let boPage = try await Self.historyPosts(bo, "general")
        #expect(boPage[0].reactions == [CircleReaction(emoji: "👍", users: ["ann"], me: false)])

        for client in [ann, bo, follower, away] { await client.close() }
        await server.stop()
    }

    @Test("the owner of a private circle deletes any post there; other members only their own")
    func ownerDeletes() async throws {
        let server = TestServer()
        defer { server.remove() }
        try await server.start()
        try await server.createCircle("team", owner: "ann", isPrivate: true)
        let added = try await server.http("POST", "/v1/circles/team/members", token: try await server.token("ann"), json: #"{"user":"bo"}"#)
        #expect(added.status == 200 || added.status == 201)
        let ann = try await TestClient.connect(server, user: "ann")
        let bo = try await TestClient.connect(server, user: "bo")
        _ = try await ann.request { .join("team", id: $0) }
        _ = try await bo.request { .join("team", id: $0) }
        let annPost = try Self.seq(try await ann.request { .post("from ann", to: "team", id: $0) })
        let boPost = try Self.seq(try await bo.request { .post("from bo", to: "team", id: $0) })
        #expect(try await bo.request { .delete(annPost, in: "team", id: $0) }.errorCode == .notAuthor)
        #expect(try await ann.request { .delete(boPost, in: "team", id: $0) }.ackSeq != nil)
        #expect(try await ann.request { .delete(boPost, in: "team", id: $0) }.errorCode == .postDeleted)
        await ann.close()
        await bo.close()
        await server.stop()
    }

    @Test("read markers: forward only, clamped, live to the user's other connections, kept across a restart; unread counts")
    func readMarkers() async throws {
        let server = TestServer()
        defer { server.remove() }
        try await server.start()
        try await server.createCircle("general", owner: "bo")
        try await server.createCircle("quiet", owner: "bo")
        let phone = try await TestClient.connect(server, user: "ann")
        let laptop = try await TestClient.connect(server, user: "ann")
        let bo = try await TestClient.connect(server, user: "bo")
        for client in [phone, laptop, bo] { _ = try await client.request { .join("general", id: $0) } }
        for index in 1...4 { _ = try await bo.request { .post("p\(index)", to: "general", id: $0) } }
        _ = try await phone.request { .post("mine", to: "general", id: $0) }
        _ = try await bo.request { .edit(1, in: "general", text: "p1 edited", id: $0) }  // a change: not unread

        #expect(try await phone.request { .read("general", upTo: 2, id: $0) }.ackSeq == 2)
        var sawMarker = false
        while let message = try await laptop.next() {
            if case .read(let circle, let seq) = message {
                #expect(circle == "general" && seq == 2)
                sawMarker = true
                break
            }
        }
        #expect(sawMarker)
        #expect(try await phone.request { .read("general", upTo: 1, id: $0) }.ackSeq == 2, "never backwards")
        #expect(try await phone.request { .read("general", upTo: 99, id: $0) }.ackSeq == 6, "clamped to the newest seq")
        #expect(try await phone.request { .read("general", upTo: 2, id: $0) }.ackSeq == 6)

        let list = try await bo.request { .circles(id: $0) }
        guard case .circles(_, let circles) = list else { throw TestFailure("expected circles, got \(list)") }
        let general = try #require(circles.first { $0.name == "general" })
        #expect(general.lastSeq == 6 && general.readSeq == 0 && general.unread == 1, "bo: ann's one post is unread, his own and the edit are not")
        #expect(circles.first { $0.name == "quiet" }?.unread == 0)

        await server.stop()
        try await server.start()
        let (status, body) = try await server.http("GET", "/v1/circles", token: try await server.token("ann"))
        #expect(status == 200)
        let decoded = try JSONDecoder().decode(HTTPAPI.CircleList.self, from: Data(body.utf8))
        #expect(decoded.circles.first { $0.name == "general" }.map { [$0.readSeq, $0.unread] } == [6, 0])
        for client in [phone, laptop, bo] { await client.close() }
        await server.stop()
    }
}
