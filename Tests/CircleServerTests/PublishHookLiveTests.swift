import CircleServer
import CircleTestSupport
import CircleWire
import Foundation
import Testing

/// A circle's publish hook against a live server and a receiver on loopback (docs/API.md,
/// "Publish hooks"): each case asserts what the sender sees and what is stored.
@Suite("Publish hooks, live", .serialized, .timeLimit(.minutes(3)))
struct PublishHookLiveTests {
    /// A server allowing loopback hooks, with ada its first admin, a circle `room` owned by
    /// alice, and a receiver; `body` gets ada's token and a client of bo's that joined `room`.
    private func withHookServer(_ body: (TestServer, HookReceiver, String, TestClient) async throws -> Void) async throws {
        let receiver = HookReceiver()
        try await receiver.start()
        let server = TestServer()
        server.configuration.allowPrivateOutbound = true
        defer { server.remove() }
        try await server.start()
        let link = try #require(server.server?.setupLink)
        let setup = try await server.http(
            "POST", HTTPAPI.Path.authSetup, json: #"{"token":"\#(link.split(separator: "#setup=")[1])","name":"ada","password":"correct horse battery"}"#
        )
        #expect(setup.status == 201, "\(setup.body)")
        let admin = try await server.token("ada")
        try await server.createCircle("room", owner: "alice")
        try await server.createCircle("elsewhere", owner: "alice")
        let bo = try await TestClient.connect(server, user: "bo")
        #expect(try await bo.request { .join("room", id: $0) }.ackSeq != nil)
        #expect(try await bo.request { .join("elsewhere", id: $0) }.ackSeq != nil)
        try await body(server, receiver, admin, bo)
        await bo.close()
        await server.stop()
        await receiver.stop()
    }

    /// Sets `room`'s hook; returns its secret.
    private func setHook(_ server: TestServer, _ admin: String, url: String, timeoutMs: Int = 2000, onFailure: String = "refuse") async throws -> String {
        let set = try await server.http(
            "PUT", HTTPAPI.Path.publishHook("room"), token: admin, json: #"{"url":"\#(url)","timeoutMs":\#(timeoutMs),"onFailure":"\#(onFailure)"}"#
        )
        #expect(set.status == 201 || set.status == 200, "\(set.body)")
        let info = try JSONDecoder().decode(HTTPAPI.PublishHookInfo.self, from: Data(set.body.utf8))
        return info.secret ?? ""
    }

    private func texts(_ server: TestServer, _ circle: String = "room") async throws -> [String] {
        let page = try await server.http("GET", HTTPAPI.Path.messages(circle), token: try await server.token("alice"))
        return try JSONDecoder().decode(HTTPAPI.MessagePage.self, from: Data(page.body.utf8)).posts.map { $0.text ?? "" }
    }

    private func error(_ message: CircleServerMessage) -> (CircleErrorCode, String)? {
        if case .error(_, let code, let text) = message { return (code, text) }
        return nil
    }

    @Test("accept: the post is stored as sent; the hook got it signed, with its circle, author, id and text")
    func accept() async throws {
        try await self.withHookServer { server, receiver, admin, bo in
            let secret = try await self.setHook(server, admin, url: receiver.url)
            #expect(secret.hasPrefix("whsec_"))
            let reply = try await bo.request { .post("hello hook", to: "room", id: $0) }
            #expect(reply.ackSeq == 1, "\(reply)")
            #expect(try await self.texts(server) == ["hello hook"])
            let call = try #require(receiver.calls.first)
            #expect(receiver.calls.count == 1)
            #expect(HookReceiver.isSigned(call, secret: secret), "\(call.headers)")
            #expect(call.headers["webhook-id"]?.hasPrefix("pub_") == true)
            #expect(call.json?["type"] as? String == "publish")
            #expect(call.data?["circle"] as? String == "room" && call.data?["author"] as? String == "bo" && call.data?["text"] as? String == "hello hook")
            #expect(call.data?["kind"] as? String == "post")

            // Another circle has no hook: its posts never reach the receiver.
            let other = try await bo.request { .post("not hooked", to: "elsewhere", id: $0) }
            #expect(other.ackSeq == 1)
            #expect(receiver.calls.count == 1)
        }
    }

    @Test("refuse: the sender gets refused_by_hook with the reason (WebSocket and HTTP 403); nothing is stored")
    func refuse() async throws {
        try await self.withHookServer { server, receiver, admin, bo in
            _ = try await self.setHook(server, admin, url: receiver.url)
            receiver.answer { _ in .json(#"{"action":"refuse","reason":"no shouting, please"}"#) }
            let reply = try await bo.request { .post("HELLO", to: "room", id: $0) }
            let refused = try #require(self.error(reply), "\(reply)")
            #expect(refused.0 == .refusedByHook && refused.1 == "no shouting, please")
            let http = try await server.http("POST", HTTPAPI.Path.messages("room"), token: try await server.token("alice"), json: #"{"text":"HELLO","id":"h1"}"#)
            #expect(http.status == 403 && http.body.contains("refused_by_hook") && http.body.contains("no shouting, please"), "\(http)")
            #expect(try await self.texts(server).isEmpty)
            #expect(receiver.calls.count == 2)
        }
    }

    @Test("replace: the hook's text is stored and delivered instead of the sender's")
    func replace() async throws {
        try await self.withHookServer { server, receiver, admin, bo in
            _ = try await self.setHook(server, admin, url: receiver.url)
            receiver.answer { call in
                let text = call.data?["text"] as? String ?? ""
                return .json(#"{"action":"replace","text":"\#(text.replacingOccurrences(of: "darn", with: "****"))"}"#)
            }
            let request = CircleRequest.post("oh darn", to: "room", id: "r1")
            try await bo.send(request)
            let (reply, others) = try await bo.reply(to: "r1")
            #expect(reply.ackSeq == 1, "\(reply)")
            var delivered = others.compactMap(\.post).first
            while delivered == nil, let message = try await bo.next(timeout: .seconds(10)) { delivered = message.post }
            #expect(delivered?.text == "oh ****", "subscribers see the replacement")
            #expect(try await self.texts(server) == ["oh ****"])
            // An edit goes through the hook too.
            let edit = try await bo.request { .edit(1, in: "room", text: "darn again", id: $0) }
            #expect(edit.ackSeq == 2, "\(edit)")
            #expect(try await self.texts(server) == ["**** again"])
            #expect(receiver.calls.last?.data?["kind"] as? String == "edit")
        }
    }

    @Test("a hook that hangs past its deadline: refuse → hook_unavailable (HTTP 503), nothing stored; accept → stored as sent")
    func hangs() async throws {
        try await self.withHookServer { server, receiver, admin, bo in
            receiver.answer { _ in .hang }
            _ = try await self.setHook(server, admin, url: receiver.url, timeoutMs: 300)
            let started = ContinuousClock.now
            let reply = try await bo.request { .post("waiting", to: "room", id: $0) }
            #expect(self.error(reply)?.0 == .hookUnavailable, "\(reply)")
            #expect(ContinuousClock.now - started >= .milliseconds(300), "answered at the deadline, not before")
            let http = try await server.http("POST", HTTPAPI.Path.messages("room"), token: try await server.token("alice"), json: #"{"text":"waiting","id":"h1"}"#)
            #expect(http.status == 503 && http.body.contains("hook_unavailable"), "\(http)")
            #expect(try await self.texts(server).isEmpty)

            _ = try await self.setHook(server, admin, url: receiver.url, timeoutMs: 300, onFailure: "accept")
            let accepted = try await bo.request { .post("waited", to: "room", id: $0) }
            #expect(accepted.ackSeq == 1, "\(accepted)")
            #expect(try await self.texts(server) == ["waited"])
        }
    }

    @Test(
        "answers that are not verdicts follow the policy: refused with hook_unavailable, or stored as sent",
        arguments: [
            HookReceiver.Answer.raw(status: 200, contentType: "text/plain", body: "ok"),
            .raw(status: 200, contentType: "application/json", body: "{not json"),
            .raw(status: 500, contentType: "application/json", body: #"{"action":"accept"}"#),
            .json(#"{"action":"maybe"}"#),
            .json(#"{"action":"replace","text":""}"#),
            .json(#"["accept"]"#),
        ]
    )
    func garbage(_ answer: HookReceiver.Answer) async throws {
        try await self.withHookServer { server, receiver, admin, bo in
            receiver.answer { _ in answer }
            _ = try await self.setHook(server, admin, url: receiver.url)
            let reply = try await bo.request { .post("garbage in", to: "room", id: $0) }
            #expect(self.error(reply)?.0 == .hookUnavailable, "\(reply)")
            #expect(try await self.texts(server).isEmpty)
            _ = try await self.setHook(server, admin, url: receiver.url, onFailure: "accept")
            let accepted = try await bo.request { .post("garbage in", to: "room", id: $0) }
            #expect(accepted.ackSeq == 1, "\(accepted)")
            #expect(try await self.texts(server) == ["garbage in"])
        }
    }

    @Test("a retried post already committed is answered as a duplicate without calling the hook again")
    func retriedPost() async throws {
        try await self.withHookServer { server, receiver, admin, bo in
            _ = try await self.setHook(server, admin, url: receiver.url)
            let first = try await bo.request { _ in .post("once", to: "room", id: "same") }
            #expect(first.ackSeq == 1)
            let again = try await bo.request { _ in .post("once", to: "room", id: "same") }
            #expect(again.ackSeq == 1 && again.isDuplicateAck, "\(again)")
            let token = try await server.token("alice")
            let http = try await server.http("POST", HTTPAPI.Path.messages("room"), token: token, json: #"{"text":"x","id":"k1"}"#)
            let retried = try await server.http("POST", HTTPAPI.Path.messages("room"), token: token, json: #"{"text":"x","id":"k1"}"#)
            #expect(http.status == 201 && retried.status == 200 && retried.body.contains(#""duplicate":true"#), "\(retried)")
            #expect(receiver.calls.count == 2, "one call per post, none for the retries")
            #expect(try await self.texts(server) == ["once", "x"])
        }
    }

    @Test("a circle without a hook is not delayed by another circle's hanging hook")
    func otherCirclesNotDelayed() async throws {
        try await self.withHookServer { server, receiver, admin, bo in
            receiver.answer { _ in .hang }
            _ = try await self.setHook(server, admin, url: receiver.url, timeoutMs: 10_000)
            try await bo.send(.post("held", to: "room", id: "held"))
            await receiver.waitForCalls(1)
            #expect(receiver.calls.count == 1, "the hook holds the post")
            let other = try await TestClient.connect(server, user: "cy")
            #expect(try await other.request { .join("elsewhere", id: $0) }.ackSeq != nil)
            let started = ContinuousClock.now
            let reply = try await other.request { .post("free", to: "elsewhere", id: $0) }
            #expect(reply.ackSeq == 1)
            #expect(ContinuousClock.now - started < .seconds(5), "acked while the other circle's hook still hangs")
            await other.close()
            let (held, _) = try await bo.reply(to: "held", timeout: .seconds(20))
            #expect(self.error(held)?.0 == .hookUnavailable, "\(held)")
        }
    }

    @Test("a circle's posts are committed in the order they arrived, though the hook answers the first one last")
    func orderKept() async throws {
        try await self.withHookServer { server, receiver, admin, bo in
            _ = try await self.setHook(server, admin, url: receiver.url)
            let gate = HookReceiver.Gate()
            receiver.answer { call in
                call.data?["text"] as? String == "first" ? .held(#"{"action":"accept"}"#, release: gate) : .json(#"{"action":"accept"}"#)
            }
            try await bo.send(.post("first", to: "room", id: "o1"))
            await receiver.waitForCalls(1)
            try await bo.send(.post("second", to: "room", id: "o2"))
            await receiver.waitForCalls(2)
            #expect(receiver.calls.count == 2, "both posts reached the hook; the second was answered at once")
            gate.open()
            var acks: [String: Int64] = [:]
            while acks.count < 2, let message = try await bo.next(timeout: .seconds(10)) {
                if case .ack(let id, let seq, _, _) = message, let seq { acks[id] = seq }
            }
            let expected: [String: Int64] = ["o1": 1, "o2": 2]
            #expect(acks == expected, "\(acks)")
            #expect(try await self.texts(server) == ["first", "second"])
        }
    }

    @Test("the admin API: set, show (no secret), replace keeping the secret, rotate, delete; limits and who may")
    func adminAPI() async throws {
        try await self.withHookServer { server, receiver, admin, _ in
            let path = HTTPAPI.Path.publishHook("room")
            #expect(try await server.http("GET", path, token: admin).status == 404)
            let secret = try await self.setHook(server, admin, url: receiver.url)
            let shown = try await server.http("GET", path, token: admin)
            #expect(shown.status == 200 && shown.body.contains(#""timeoutMs":2000"#) && !shown.body.contains("whsec_"), "\(shown)")
            let replaced = try await server.http("PUT", path, token: admin, json: #"{"url":"\#(receiver.url)","timeoutMs":500}"#)
            #expect(replaced.status == 200 && !replaced.body.contains("whsec_"), "the secret stays and is not shown again: \(replaced)")
            let rotated = try await server.http("PUT", path, token: admin, json: #"{"url":"\#(receiver.url)","rotateSecret":true}"#)
            let newSecret = try JSONDecoder().decode(HTTPAPI.PublishHookInfo.self, from: Data(rotated.body.utf8)).secret
            #expect(newSecret != nil && newSecret != secret)
            for (body, status) in [
                (#"{"url":"\#(receiver.url)","timeoutMs":50}"#, 400),
                (#"{"url":"\#(receiver.url)","timeoutMs":10001}"#, 400),
                (#"{"url":"\#(receiver.url)","onFailure":"maybe"}"#, 400),
                (#"{"url":"ftp://example.com/x"}"#, 400),
                (#"{"url":"https://example.com/\#(String(repeating: "a", count: 2100))"}"#, 400),
                (#"{"timeoutMs":100}"#, 400),
            ] {
                let answer = try await server.http("PUT", path, token: admin, json: body)
                #expect(answer.status == status, "\(body.prefix(60)): \(answer)")
            }
            #expect(try await server.http("PUT", HTTPAPI.Path.publishHook("nowhere"), token: admin, json: #"{"url":"\#(receiver.url)"}"#).status == 404)
            let member = try await server.http("PUT", path, token: try await server.token("alice"), json: #"{"url":"\#(receiver.url)"}"#)
            #expect(member.status == 403, "the circle's owner is not an admin: \(member)")
            #expect(try await server.http("DELETE", path, token: admin).status == 204)
            #expect(try await server.http("DELETE", path, token: admin).status == 404)
        }
    }
}
