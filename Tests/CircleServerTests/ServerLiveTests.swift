import CircleServer
import CircleTestSupport
import CircleSocket
import CircleWire
import Foundation
import NIOCore
import Testing

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

@Suite("Circle server on loopback", .serialized)
struct ServerLiveTests {
    @Test("join, post, history, typing and leave, with events to the other member")
    func everyAction() async throws {
        let server = TestServer()
        defer { server.remove() }
        try await server.start()
        try await server.createCircle("general", owner: "alice")
        let alice = try await TestClient.connect(server, user: "alice")
        let bob = try await TestClient.connect(server, user: "bob")
        #expect(alice.socket.subprotocol == circleSubprotocol)

        #expect(try await alice.request { .join("general", id: $0) }.ackSeq == 0)
        #expect(try await bob.request { .join("general", id: $0) }.ackSeq == 0)

        let ack = try await alice.request { .post("hello bob", to: "general", id: $0) }
        #expect(ack.ackSeq == 1)
        // Bob sees alice's join? He joined later; he sees her post.
        var bobSaw: [CircleServerMessage] = []
        while let message = try await bob.next() {
            bobSaw.append(message)
            if message.post != nil { break }
        }
        #expect(bobSaw.last?.post?.text == "hello bob")
        #expect(bobSaw.last?.post?.author == "alice")
        #expect(bobSaw.last?.post?.seq == 1)

        try await bob.request { .typing(in: "general", id: $0) }
        var aliceSawTyping = false
        while let message = try await alice.next() {
            if case .typing(let circle, let user) = message {
                #expect(circle == "general")
                #expect(user == "bob")
                aliceSawTyping = true
                break
            }
        }
        #expect(aliceSawTyping)

        for index in 2...5 { _ = try await alice.request { .post("m\(index)", to: "general", id: $0) } }
        let page = try await bob.request { .history(of: "general", id: $0, before: 5, limit: 2) }
        guard case .history(_, _, let posts, let more, _) = page else {
            Issue.record("expected history, got \(page)")
            return
        }
        #expect(posts.map(\.seq) == [3, 4])
        #expect(more)
        let after = try await bob.request { .history(of: "general", id: $0, after: 3, limit: 10) }
        if case .history(_, _, let posts, let more, _) = after {
            #expect(posts.map(\.seq) == [4, 5])
            #expect(!more)
        } else {
            Issue.record("expected history, got \(after)")
        }

        #expect(try await bob.request { .leave("general", id: $0) }.ackSeq == nil)
        var aliceSawLeft = false
        while let message = try await alice.next() {
            if case .left(_, let user) = message, user == "bob" {
                aliceSawLeft = true
                break
            }
        }
        #expect(aliceSawLeft)
        #expect(try await bob.request { .post("after leaving", to: "general", id: $0) }.errorCode == .forbidden)
        await alice.close()
        await bob.close()
        await server.stop()
    }

    @Test("joined and left are announced only in circles within the presence limit")
    func presenceLimit() async throws {
        let server = TestServer(limits: .init(presenceLimit: 2))
        defer { server.remove() }
        try await server.start()
        try await server.createCircle("big", owner: "alice")
        let alice = try await TestClient.connect(server, user: "alice")
        let bob = try await TestClient.connect(server, user: "bob")
        let carol = try await TestClient.connect(server, user: "carol")
        try await alice.request { .join("big", id: $0) }
        try await bob.request { .join("big", id: $0) }  // 2 members: announced
        try await carol.request { .join("big", id: $0) }  // 3 members: quiet
        try await carol.request { .leave("big", id: $0) }  // was the third: quiet
        try await bob.request { .leave("big", id: $0) }  // was the second: announced
        // Everything the server sent alice before the ack of her marker post, in order.
        try await alice.send(.post("marker", to: "big", id: "marker"))
        let (marker, others) = try await alice.reply(to: "marker")
        #expect(marker.ackSeq == 1)
        var presence: [String] = []
        for message in others {
            switch message {
            case .joined(_, let user): presence.append("+\(user)")
            case .left(_, let user): presence.append("-\(user)")
            default: break
            }
        }
        #expect(presence == ["+bob", "-bob"])
        await alice.close()
        await bob.close()
        await carol.close()
        await server.stop()
    }

    @Test("a post retried with the same id is stored once, also across a server restart")
    func idempotencyAcrossRestart() async throws {
        let server = TestServer()
        defer { server.remove() }
        try await server.start()
        try await server.createCircle("ops", owner: "alice")
        var alice = try await TestClient.connect(server, user: "alice")
        _ = try await alice.request { .join("ops", id: $0) }
        let first = try await alice.request { _ in .post("deploy done", to: "ops", id: "post-1") }
        #expect(first.ackSeq == 1)
        #expect(!first.isDuplicateAck)
        let again = try await alice.request { _ in .post("deploy done", to: "ops", id: "post-1") }
        #expect(again.ackSeq == 1)
        #expect(again.isDuplicateAck)
        await alice.close()

        await server.stop()
        try await server.start()
        alice = try await TestClient.connect(server, user: "alice")
        _ = try await alice.request { .join("ops", id: $0) }
        let afterRestart = try await alice.request { _ in .post("deploy done", to: "ops", id: "post-1") }
        #expect(afterRestart.ackSeq == 1)
        #expect(afterRestart.isDuplicateAck)
        if case .ack(_, _, let time, _) = afterRestart, case .ack(_, _, let firstTime, _) = first {
            #expect(time == firstTime)
        }
        let next = try await alice.request { _ in .post("second", to: "ops", id: "post-2") }
        #expect(next.ackSeq == 2)
        let history = try await alice.request { .history(of: "ops", id: $0) }
        if case .history(_, _, let posts, _, _) = history {
            #expect(posts.map(\.text) == ["deploy done", "second"])
        }
        await alice.close()
        await server.stop()
    }

    @Test("10 writers × 500 posts while a reader joins with since mid-way: all 5000 once, in order")
    func gaplessReplay() async throws {
        let server = TestServer(limits: .init(postsPerSecond: 100_000, postBurst: 100_000))
        defer { server.remove() }
        try await server.start()
        try await server.createCircle("busy", owner: "w0")
        let writers = 10
        let perWriter = 500
        let total = writers * perWriter

        let midway = AsyncStream<Void>.makeStream()
        let writersDone = try await withThrowingTaskGroup(of: Int.self) { group in
            for writer in 0..<writers {
                group.addTask {
                    let client = try await TestClient.connect(server, user: "w\(writer)")
                    _ = try await client.request { .join("busy", id: $0) }
                    var acked = 0
                    for index in 0..<perWriter {
                        let id = "w\(writer)-\(index)"
                        try await client.send(.post("\(writer):\(index)", to: "busy", id: id))
                        let reply = try await client.reply(to: id, timeout: .seconds(30)).reply
                        if reply.ackSeq != nil { acked += 1 }
                        if writer == 0 && index == perWriter / 2 { midway.continuation.yield() }
                    }
                    await client.close()
                    return acked
                }
            }
            var iterator = midway.stream.makeAsyncIterator()
            _ = await iterator.next()
            // Mid-way: a reader that has seen up to 100 joins with since = 100.
            let reader = try await TestClient.connect(server, user: "reader")
            try await reader.send(.join("busy", id: "join", since: 100))
            var seqs: [Int64] = []
            var texts = Set<String>()
            while seqs.count < total - 100 {
                guard let message = try await reader.next(timeout: .seconds(30)) else { break }
                if let post = message.post {
                    seqs.append(post.seq)
                    texts.insert(post.text ?? "")
                }
            }
            #expect(seqs == Array(101...Int64(total)))
            #expect(texts.count == total - 100)
            await reader.close()
            var acked = 0
            for try await count in group { acked += count }
            return acked
        }
        #expect(writersDone == total)
        let page = try await server.http("GET", "/v1/circles/busy/messages?after=4990&limit=50", token: try await server.token("w1"))
        #expect(page.status == 200)
        #expect(page.body.contains("\"seq\":5000"))
        #expect(!page.body.contains("\"seq\":5001"))
        await server.stop()
    }

    @Test("a resume across three replay pages sends every post once, in order, compressed or not, and the connection stays live")
    func replayPagesCompressedOrNot() async throws {
        let server = TestServer(limits: .init(postsPerSecond: 100_000, postBurst: 100_000))
        server.configuration.compression = true
        defer { server.remove() }
        try await server.start()
        try await server.createCircle("long", owner: "w")
        let writer = try await TestClient.connect(server, user: "w")
        _ = try await writer.request { .join("long", id: $0) }
        let stored = 600  // pages of 256: two full pages and a part
        for index in 1...stored {
            let text = index % 50 == 0 ? String(repeating: "long post \(index) ", count: 400) : "post \(index)"
            #expect(try await writer.request { .post(text, to: "long", id: $0) }.ackSeq == Int64(index))
        }
        var total = Int64(stored)
        for compression in [false, true] {
            let reader = try await TestClient(url: server.wsURL, token: try await server.token("r"), compression: compression)
            #expect((reader.socket.compression != nil) == compression)
            try await reader.send(.join("long", id: "join", since: 0))
            var seqs: [Int64] = []
            while seqs.count < total {
                guard let message = try await reader.next(timeout: .seconds(30)) else { break }
                if let post = message.post {
                    seqs.append(post.seq)
                    let expected = post.seq > stored ? "after \(post.seq)" : post.seq % 50 == 0 ? "long post \(post.seq) " : "post \(post.seq)"
                    #expect(post.text?.hasPrefix(expected) == true, "seq \(post.seq)")
                }
            }
            #expect(seqs == Array(1...total), "compression \(compression)")
            // Live after the replay: the next post follows at once.
            total += 1
            let next = total
            #expect(try await writer.request { .post("after \(next)", to: "long", id: $0) }.ackSeq == next)
            var live: CirclePost?
            while live == nil {
                guard let message = try await reader.next(timeout: .seconds(30)) else { break }
                live = message.post
            }
            #expect(live?.seq == next)
            await reader.close()
        }
        await writer.close()
        await server.stop()
    }

    @Test("bad input gets a documented error and the connection stays open")
    func badInput() async throws {
        let server = TestServer(limits: .init(maxPostBytes: 100, maxMessageBytes: 4096, postsPerSecond: 1, postBurst: 3))
        defer { server.remove() }
        try await server.start()
        try await server.createCircle("lab", owner: "alice")
        let alice = try await TestClient.connect(server, user: "alice")

        let cases: [(String, String?, CircleErrorCode)] = [
            ("not json", nil, .badRequest),
            ("[1,2,3]", nil, .badRequest),
            (#"{"action":"post","circle":"lab","text":"x"}"#, nil, .badRequest),
            (#"{"id":"a1","action":"dance","circle":"lab"}"#, "a1", .unknownAction),
            (#"{"id":"a2","action":"join"}"#, "a2", .badRequest),
            (#"{"id":"a3","action":"join","circle":42}"#, "a3", .badRequest),
            (#"{"id":"a4","action":"history","circle":"lab","limit":1000}"#, "a4", .badRequest),
            (#"{"id":"a5","action":"join","circle":"nowhere"}"#, "a5", .notFound),
            (#"{"id":"a6","action":"post","circle":"lab","text":"not joined"}"#, "a6", .forbidden),
        ]
        for (text, id, code) in cases {
            try await alice.sendRaw(text)
            let reply = try await alice.next()
            guard case .error(let replyID, let replyCode, let message)? = reply else {
                Issue.record("expected an error for \(text), got \(String(describing: reply))")
                continue
            }
            #expect(replyID == id, "\(text)")
            #expect(replyCode == code, "\(text): \(message)")
            #expect(!message.isEmpty)
        }
        // Unknown fields are ignored.
        let join = try await alice.request { id in
            CircleRequest.join("lab", id: id)
        }
        #expect(join.ackSeq == 0)
        try await alice.sendRaw(#"{"id":"u1","action":"post","circle":"lab","text":"hi","mood":"happy"}"#)
        #expect(try await alice.reply(to: "u1").reply.ackSeq == 1)

        let tooLong = try await alice.request { .post(String(repeating: "x", count: 101), to: "lab", id: $0) }
        #expect(tooLong.errorCode == .tooLarge)

        // The bucket holds 3; one was spent on "hi".
        var codes: [CircleErrorCode?] = []
        for index in 0..<4 {
            codes.append(try await alice.request { .post("burst \(index)", to: "lab", id: $0) }.errorCode)
        }
        #expect(codes == [nil, nil, .rateLimited, .rateLimited])

        // Still open and working.
        let history = try await alice.request { .history(of: "lab", id: $0) }
        if case .history(_, _, let posts, _, _) = history {
            #expect(posts.count == 3)
        } else {
            Issue.record("expected history, got \(history)")
        }

        // A message over the frame limit ends the connection with 1009.
        try await alice.sendRaw(String(repeating: "y", count: 5000))
        #expect(try await alice.next() == nil)
        #expect(await alice.socket.closeInfo.code == .messageTooBig)
        await server.stop()
    }

    @Test("private circles: members only")
    func privateCircles() async throws {
        let server = TestServer()
        defer { server.remove() }
        try await server.start()
        try await server.createCircle("secret", owner: "alice", isPrivate: true)
        let mallory = try await TestClient.connect(server, user: "mallory")
        #expect(try await mallory.request { .join("secret", id: $0) }.errorCode == .forbidden)
        #expect(try await mallory.request { .history(of: "secret", id: $0) }.errorCode == .forbidden)
        // Join and post pipelined: the post waits for the access check and is refused with it.
        try await mallory.send(.join("secret", id: "pj"))
        try await mallory.send(.post("sneaky", to: "secret", id: "pp"))
        #expect(try await mallory.reply(to: "pj").reply.errorCode == .forbidden)
        #expect(try await mallory.reply(to: "pp").reply.errorCode == .forbidden)
        let forbidden = try await server.http("GET", "/v1/circles/secret/messages", token: try await server.token("mallory"))
        #expect(forbidden.status == 403)
        #expect(forbidden.body.contains("\"forbidden\""))
        let notOwner = try await server.http("POST", "/v1/circles/secret/members", token: try await server.token("mallory"), json: #"{"user":"mallory"}"#)
        #expect(notOwner.status == 403)

        let added = try await server.http("POST", "/v1/circles/secret/members", token: try await server.token("alice"), json: #"{"user":"bob"}"#)
        #expect(added.status == 200)
        #expect(added.body.contains("bob"))
        let bob = try await TestClient.connect(server, user: "bob")
        // Seq 1 is the system entry "alice added bob".
        #expect(try await bob.request { .join("secret", id: $0) }.ackSeq == 1)
        #expect(try await bob.request { .post("in", to: "secret", id: $0) }.ackSeq == 2)
        // A member may pipeline them: the held post goes through once the join is confirmed.
        let carolToken = try await server.token("alice")
        let alice = try await TestClient(url: server.wsURL, token: carolToken)
        try await alice.send(.join("secret", id: "aj"))
        try await alice.send(.post("pipelined", to: "secret", id: "ap"))
        #expect(try await alice.reply(to: "aj").reply.ackSeq == 2)
        #expect(try await alice.reply(to: "ap").reply.ackSeq == 3)

        let bobsList = try await server.http("GET", "/v1/circles", token: try await server.token("bob"))
        #expect(bobsList.body.contains("secret"))
        let mallorysList = try await server.http("GET", "/v1/circles", token: try await server.token("mallory"))
        #expect(!mallorysList.body.contains("secret"))
        await server.stop()
    }

    @Test("auth failures refuse the upgrade with 401 and a JSON body")
    func authFailures() async throws {
        let server = TestServer()
        defer { server.remove() }
        try await server.start()
        let forged = try await TokenAuthority(.hs256(secret: "another-secret-0123456789-0123456789")).mint(user: "alice", ttl: .seconds(60))
        let expired = try await server.token("alice", ttl: .seconds(-10))
        let cases: [(String?, CircleErrorCode)] = [
            (nil, .unauthorized),
            ("garbage", .unauthorized),
            ("a.b.c", .unauthorized),
            (forged, .unauthorized),
            (expired, .tokenExpired),
        ]
        for (token, code) in cases {
            do {
                _ = try await TestClient(url: server.wsURL, token: token)
                Issue.record("connecting with \(token ?? "no token") should fail")
            } catch let error as WebSocketError {
                #expect(error.code == .handshakeRefused)
                #expect(error.httpStatus == 401)
                #expect(error.httpBody?.contains("\"\(code.rawValue)\"") == true, "\(error.httpBody ?? "")")
            }
        }
        // The token may come as a query parameter, for browsers.
        let viaQuery = try await TestClient(url: server.wsURL + "?token=" + (try await server.token("carol")), token: nil)
        await viaQuery.close()
        // HTTP API the same.
        #expect(try await server.http("GET", "/v1/circles").status == 401)
        #expect(try await server.http("GET", "/v1/circles", token: expired).body.contains("token_expired"))
        await server.stop()
    }

    @Test("a token expiring on an open connection closes it with 4001")
    func tokenExpiryCloses() async throws {
        let server = TestServer()
        defer { server.remove() }
        try await server.start()
        let client = try await TestClient(url: server.wsURL, token: try await server.token("dora", ttl: .seconds(2)))
        #expect(try await client.next(timeout: .seconds(10)) == nil)
        #expect(await client.socket.closeInfo.code == WebSocketCloseCode(CircleCloseCode.tokenExpired))
        await server.stop()
    }

    @Test("connection limit per user, idle timeout and the subprotocol check")
    func connectionLimits() async throws {
        let server = TestServer(limits: .init(maxConnectionsPerUser: 2, idleTimeout: .milliseconds(600)))
        defer { server.remove() }
        try await server.start()
        let first = try await TestClient.connect(server, user: "eve")
        let second = try await TestClient.connect(server, user: "eve")
        do {
            _ = try await TestClient.connect(server, user: "eve")
            Issue.record("a third connection should be refused")
        } catch let error as WebSocketError {
            #expect(error.httpStatus == 429)
        }
        // Silent connections are closed after the idle timeout.
        #expect(try await first.next(timeout: .seconds(10)) == nil)
        #expect(await first.socket.closeInfo.code == WebSocketCloseCode(CircleCloseCode.idleTimeout))
        #expect(try await second.next(timeout: .seconds(10)) == nil)
        // Slots are free again.
        let third = try await TestClient.connect(server, user: "eve")
        await third.close()

        var configuration = WebSocketConfiguration()
        configuration.subprotocols = ["mqtt"]
        configuration.headers.add(name: "Authorization", value: "Bearer \(try await server.token("eve"))")
        do {
            _ = try await WebSocket.connect(to: server.wsURL, configuration: configuration)
            Issue.record("a foreign subprotocol should be refused")
        } catch let error as WebSocketError {
            #expect(error.httpStatus == 400)
        }
        await server.stop()
    }

    @Test("a consumer that stops reading is closed with 1013 and others are unaffected")
    func slowConsumer() async throws {
        let server = TestServer(limits: .init(maxPostBytes: 8000, postsPerSecond: 100_000, postBurst: 100_000, outboundQueueBytes: 64 * 1024))
        defer { server.remove() }
        try await server.start()
        try await server.createCircle("firehose", owner: "pub")
        // The slow one reads nothing after joining; its client stops reading the socket.
        var slowConfiguration = WebSocketConfiguration()
        slowConfiguration.subprotocols = [circleSubprotocol]
        slowConfiguration.inboundBufferLimit = 2
        slowConfiguration.headers.add(name: "Authorization", value: "Bearer \(try await server.token("slow"))")
        let slow = try await WebSocket.connect(to: server.wsURL, configuration: slowConfiguration)
        try await slow.send(String(decoding: try JSONEncoder().encode(CircleRequest.join("firehose", id: "j")), as: UTF8.self))
        let publisher = try await TestClient.connect(server, user: "pub")
        _ = try await publisher.request { .join("firehose", id: $0) }
        let big = String(repeating: "z", count: 7000)
        // Far more than the kernel's socket buffers on loopback can absorb (several MiB).
        let count = 2500
        // The publisher is a member too and must keep reading (its own posts come back to it).
        let reader = Task {
            var acks = 0
            while acks < count, let message = try await publisher.next(timeout: .seconds(60)) {
                if message.ackSeq != nil { acks += 1 }
            }
            return acks
        }
        for index in 0..<count {
            try await publisher.socket.send(
                String(decoding: try JSONEncoder().encode(CircleRequest.post(big, to: "firehose", id: "p\(index)")), as: UTF8.self)
            )
        }
        #expect(try await reader.value == count)
        let watchdog = Task {
            try await Task.sleep(for: .seconds(25))
            slow.abort()
        }
        // Now the slow client catches up: it reads what was queued, then the 1013 close frame.
        var received = 0
        do {
            for try await _ in slow.messages { received += 1 }
        } catch {
            Issue.record("the slow client's stream should end with the close frame, not \(error)")
        }
        #expect(received < count)
        let info = await slow.closeInfo
        watchdog.cancel()
        #expect(info.code == .tryAgainLater, "\(info)")
        // The publisher is still fine.
        #expect(try await publisher.request { .history(of: "firehose", id: $0, limit: 1) }.errorCode == nil)
        await server.stop()
    }

    @Test("graceful shutdown closes WebSockets with 1001")
    func gracefulShutdown() async throws {
        let server = TestServer()
        defer { server.remove() }
        try await server.start()
        let client = try await TestClient.connect(server, user: "zed")
        await server.stop()
        #expect(try await client.next() == nil)
        #expect(await client.socket.closeInfo.code == .goingAway)
    }

    @Test("HTTP API: health, metrics, circles, messages, members")
    func httpAPI() async throws {
        let server = TestServer(dev: true)
        defer { server.remove() }
        try await server.start()
        let health = try await server.http("GET", "/healthz")
        #expect(health.status == 200)
        #expect(health.body.contains("\"ok\""))

        let token = try await server.token("alice")
        #expect(try await server.http("POST", "/v1/circles", token: token, json: #"{"name":"Bad Name"}"#).status == 400)
        #expect(try await server.http("POST", "/v1/circles", token: token, json: "{").status == 400)
        #expect(try await server.http("POST", "/v1/circles", token: token, json: #"{"name":"town"}"#).status == 201)
        #expect(try await server.http("POST", "/v1/circles", token: token, json: #"{"name":"town"}"#).status == 409)
        #expect(try await server.http("GET", "/v1/circles/nowhere", token: token).status == 404)
        #expect(try await server.http("GET", "/v1/circles/town/messages?limit=0", token: token).status == 400)
        #expect(try await server.http("GET", "/v1/nothing").status == 404)

        let alice = try await TestClient.connect(server, user: "alice")
        _ = try await alice.request { .join("town", id: $0) }
        for index in 1...3 { _ = try await alice.request { .post("t\(index)", to: "town", id: $0) } }
        let messages = try await server.http("GET", "/v1/circles/town/messages?before=3&limit=1", token: token)
        #expect(messages.status == 200)
        let page = try JSONDecoder().decode(PageBody.self, from: Data(messages.body.utf8))
        #expect(page.posts.map(\.seq) == [2])
        #expect(page.more)

        let dev = try await server.http("GET", "/v1/dev/token?user=zoe")
        #expect(dev.status == 200)
        #expect(dev.body.contains("\"token\""))

        let metrics = try await server.http("GET", "/metrics")
        #expect(metrics.status == 200)
        #expect(metrics.body.contains("circle_posts_total 3"))
        #expect(metrics.body.contains("circle_connections 1"))
        #expect(metrics.body.contains("circle_commit_seconds"))
        await alice.close()
        await server.stop()
    }

    private struct PageBody: Decodable {
        var posts: [CirclePost]
        var more: Bool
    }
}

@Suite("Circle server: join edge cases and revocation", .serialized)
struct ServerEdgeCaseTests {
    @Test("a cursor above the newest post does not swallow the next posts")
    func sinceFromTheFuture() async throws {
        let server = TestServer()
        defer { server.remove() }
        try await server.start()
        try await server.createCircle("fresh", owner: "ann")
        let ann = try await TestClient.connect(server, user: "ann")
        #expect(try await ann.request { .join("fresh", id: $0, since: 100) }.ackSeq == 0)
        try await ann.send(.post("first", to: "fresh", id: "p1"))
        // The post's event and its ack may come in either order.
        var sawPost = false
        var sawAck = false
        while !(sawPost && sawAck), let message = try await ann.next(timeout: .seconds(5)) {
            if message.post?.seq == 1 { sawPost = true }
            if message.ackSeq == 1 { sawAck = true }
        }
        #expect(sawPost)
        #expect(sawAck)
        await server.stop()
    }

    @Test("join, post and leave pipelined: every request gets an answer")
    func pipelinedLeave() async throws {
        let server = TestServer()
        defer { server.remove() }
        try await server.start()
        try await server.createCircle("busy", owner: "ann")
        let ann = try await TestClient.connect(server, user: "ann")
        try await ann.send(.join("busy", id: "j1"))
        try await ann.send(.join("busy", id: "j2"))
        try await ann.send(.post("held", to: "busy", id: "p1"))
        try await ann.send(.leave("busy", id: "l1"))
        var replies: [String: CircleServerMessage] = [:]
        while replies.count < 4, let message = try await ann.next(timeout: .seconds(5)) {
            switch message {
            case .ack(let id, _, _, _), .error(let id?, _, _): replies[id] = message
            default: break
            }
        }
        // Whether the join's check finished before the leave arrived depends on timing; either
        // way every request is answered, consistently.
        #expect(replies.count == 4)
        #expect(replies["l1"]?.ackSeq == nil && replies["l1"]?.errorCode == nil)
        if replies["j1"]?.errorCode == nil {
            #expect(replies["j2"]?.errorCode == nil)
            #expect(replies["p1"]?.ackSeq == 1)
        } else {
            #expect(replies["j1"]?.errorCode == .badRequest)
            #expect(replies["j2"]?.errorCode == .badRequest)
            #expect(replies["p1"]?.errorCode == .forbidden)
        }
        // Two joins of a missing circle: both get the refusal.
        try await ann.send(.join("nowhere", id: "n1"))
        try await ann.send(.join("nowhere", id: "n2"))
        #expect(try await ann.reply(to: "n1").reply.errorCode == .notFound)
        #expect(try await ann.reply(to: "n2").reply.errorCode == .notFound)
        await server.stop()
    }

    @Test("a member removed from a private circle loses it on the open connection")
    func revocation() async throws {
        let server = TestServer()
        defer { server.remove() }
        try await server.start()
        try await server.createCircle("inner", owner: "ann", isPrivate: true)
        let annToken = try await server.token("ann")
        #expect(try await server.http("POST", "/v1/circles/inner/members", token: annToken, json: #"{"user":"ben"}"#).status == 200)
        let ben = try await TestClient.connect(server, user: "ben")
        #expect(try await ben.request { .join("inner", id: $0) }.ackSeq == 1)  // the system entry "ann added ben"
        #expect(try await server.http("DELETE", "/v1/circles/inner/members/ben", token: annToken).status == 200)
        var sawLeft = false
        while let message = try await ben.next(timeout: .seconds(5)) {
            if case .left(let circle, let user) = message, circle == "inner", user == "ben" { sawLeft = true; break }
        }
        #expect(sawLeft)
        #expect(try await ben.request { .post("still here?", to: "inner", id: $0) }.errorCode == .forbidden)
        // The owner cannot remove themselves (they would lock themselves out).
        #expect(try await server.http("DELETE", "/v1/circles/inner/members/ann", token: annToken).status == 400)
        await server.stop()
    }

    @Test("a malformed upgrade gets 400; unknown paths do not create metric series")
    func malformedUpgradeAndMetrics() async throws {
        let server = TestServer()
        defer { server.remove() }
        try await server.start()
        let response = try await server.rawHTTP("GET /v1/ws HTTP/1.1\r\nHost: localhost\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
        #expect(response.hasPrefix("HTTP/1.1 400"), "\(response)")
        #expect(response.contains("Sec-WebSocket-Key"))
        for index in 0..<5 { _ = try await server.http("GET", "/random-\(index)") }
        let metrics = try await server.http("GET", "/metrics").body
        #expect(!metrics.contains("random-"))
        #expect(metrics.contains("route=\"other\""))
        await server.stop()
    }
}
