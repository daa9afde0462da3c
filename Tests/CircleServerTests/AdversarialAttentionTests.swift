import CircleServer
import CircleTestSupport
import CircleWire
import Foundation
import Testing

/// Mentions, direct messages and notification levels (docs/API.md, docs/PROTOCOL.md) against a
/// live server whose canary member must keep being served: what works, and every bad input
/// answered with a documented 4xx, never a 500.
@Suite("Adversarial inputs: mentions, direct messages, notification levels", .serialized, .timeLimit(.minutes(3)))
struct AdversarialAttentionTests {
    private func json(_ text: String) -> [String: Any] {
        (try? JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any]) ?? [:]
    }

    /// The next post event `client` receives (other messages skipped), within 10 s.
    private func nextPost(_ client: TestClient) async throws -> CirclePost? {
        while let message = try await client.next(timeout: .seconds(10)) {
            if let post = message.post { return post }
        }
        return nil
    }

    private func errorCode(_ text: String) -> String? {
        (self.json(text)["error"] as? [String: Any])?["code"] as? String
    }

    @Test("a DM is found or created by its members, private to them, listed with direct, and its post mentions resolve")
    func directMessages() async throws {
        try await withCanaryServer { server, canary in
            let alice = try await server.token("alice")
            let bob = try await server.token("bob")
            let started = try await server.http("POST", HTTPAPI.Path.directMessages, token: alice, json: #"{"members":["bob"]}"#)
            #expect(started.status == 200, "\(started.body)")
            let name = try #require(self.json(started.body)["name"] as? String)
            #expect(name.hasPrefix("dm."))
            #expect(self.json(started.body)["direct"] as? [String] == ["alice", "bob"])
            #expect(self.json(started.body)["notify"] as? String == "all")
            let again = try await server.http("POST", HTTPAPI.Path.directMessages, token: bob, json: #"{"members":["alice","bob"]}"#)
            #expect(self.json(again.body)["name"] as? String == name, "\(again.body)")

            // Private to its members; fixed members; a circle may not take a DM's name.
            let carol = try await server.token("carol")
            #expect(try await server.http("GET", HTTPAPI.Path.circle(name), token: carol).status == 403)
            let add = try await server.http("POST", HTTPAPI.Path.members(name), token: alice, json: #"{"user":"carol"}"#)
            #expect(add.status == 400 && self.errorCode(add.body) == "bad_request", "\(add.body)")
            let taken = try await server.http("POST", HTTPAPI.Path.circles, token: carol, json: #"{"name":"dm.abc"}"#)
            #expect(taken.status == 400 && self.errorCode(taken.body) == "bad_request", "\(taken.body)")

            // bob posts "@alice" over the WebSocket: the event carries the mention, alice's list counts it.
            let client = try await TestClient.connect(server, user: "bob")
            #expect(try await client.request { .join(name, id: $0) }.ackSeq != nil)
            #expect(try await client.request { .post("hi @alice and @carol", to: name, id: $0) }.ackSeq == 1)
            let delivered = try await self.nextPost(client)
            #expect(delivered?.mentions == ["alice"])
            let list = try await server.http("GET", HTTPAPI.Path.circles, token: alice)
            let listed = (self.json(list.body)["circles"] as? [[String: Any]])?.first { $0["name"] as? String == name }
            #expect(listed?["mentions"] as? Int == 1 && listed?["unread"] as? Int == 1, "\(list.body)")
            await client.close()
            try await canary.check("after direct messages")
        }
    }

    @Test(
        "bad POST /v1/dms bodies get 400 bad_request",
        arguments: [
            #"not json"#,
            #"{}"#,
            #"{"members":"bob"}"#,
            #"{"members":[]}"#,
            #"{"members":["alice"]}"#,
            #"{"members":["u1","u2","u3","u4","u5","u6","u7","u8","u9"]}"#,
            #"{"members":["bad name"]}"#,
            #"{"members":["\#(String(repeating: "x", count: 65))"]}"#,
            #"{"members":[1, 2]}"#,
            #"{"members":["\#((0..<5_000).map { "u\($0)" }.joined(separator: #"",""#))"]}"#,
        ]
    )
    func badDirectMessages(_ body: String) async throws {
        try await withCanaryServer { server, canary in
            let answer = try await server.http("POST", HTTPAPI.Path.directMessages, token: try await server.token("alice"), json: body)
            #expect(answer.status == 400 && self.errorCode(answer.body) == "bad_request", "\(body.prefix(80)): \(answer.status) \(answer.body)")
            #expect(try await server.http("POST", HTTPAPI.Path.directMessages, json: #"{"members":["bob"]}"#).status == 401)
            try await canary.check("after a bad direct message")
        }
    }

    @Test("a notification level is kept and reaches every connection of the user; bad levels get 400, unknown circles 404")
    func notificationLevels() async throws {
        try await withCanaryServer { server, canary in
            try await server.createCircle("lobby", owner: "alice")
            try await server.createCircle("staff", owner: "alice", isPrivate: true)
            let bob = try await server.token("bob")
            let phone = try await TestClient.connect(server, user: "bob")
            let laptop = try await TestClient.connect(server, user: "bob")
            let set = try await server.http("PUT", HTTPAPI.Path.notify("lobby"), token: bob, json: #"{"level":"none"}"#)
            #expect(set.status == 200 && self.json(set.body)["notify"] as? String == "none", "\(set.body)")
            for client in [phone, laptop] {
                var level: NotificationLevel?
                while level == nil, let message = try await client.next(timeout: .seconds(10)) {
                    if case .notify("lobby", let value) = message { level = value }
                }
                #expect(level == NotificationLevel.none)
            }
            let list = try await server.http("GET", HTTPAPI.Path.circle("lobby"), token: bob)
            #expect(self.json(list.body)["notify"] as? String == "none", "\(list.body)")
            let reset = try await server.http("PUT", HTTPAPI.Path.notify("lobby"), token: bob, json: #"{"level":null}"#)
            #expect(self.json(reset.body)["notify"] as? String == "mentions", "\(reset.body)")

            for body in [#"{"level":"loud"}"#, #"{"level":3}"#, #"[]"#, #"not json"#, #"{"level":"\#(String(repeating: "a", count: 10_000))"}"#] {
                let answer = try await server.http("PUT", HTTPAPI.Path.notify("lobby"), token: bob, json: body)
                #expect(answer.status == 400 && self.errorCode(answer.body) == "bad_request", "\(body.prefix(40)): \(answer.body)")
            }
            #expect(try await server.http("PUT", HTTPAPI.Path.notify("nowhere"), token: bob, json: #"{"level":"all"}"#).status == 404)
            #expect(try await server.http("PUT", HTTPAPI.Path.notify("staff"), token: bob, json: #"{"level":"all"}"#).status == 403)
            await phone.close()
            await laptop.close()
            try await canary.check("after notification levels")
        }
    }

    @Test("posts full of mentions, @everyone by a member and mentions of strangers are stored and change no one's count")
    func mentionFloods() async throws {
        try await withCanaryServer { server, canary in
            try await server.createCircle("lobby", owner: "alice")
            let client = try await TestClient.connect(server, user: "mallory")
            #expect(try await client.request { .join("lobby", id: $0) }.ackSeq != nil)
            // 1,000 names (under the 8,192-byte post limit), then @everyone and a member.
            let flood = (0..<1_000).map { "@u\($0)" }.joined(separator: " ") + " @everyone @here @alice"
            let reply = try await client.request { .post(flood, to: "lobby", id: $0) }
            #expect(reply.ackSeq != nil, "\(reply)")
            let flooded = try await self.nextPost(client)
            // Only the first 50 mentions are read: alice (the 1,003rd) is not among them.
            #expect(flooded?.seq == 1 && flooded?.mentions == nil && flooded?.mentionsEveryone == false)
            let named = try await client.request { .post("@@@ @. @- @alice@ @alice", to: "lobby", id: $0) }
            #expect(named.ackSeq != nil)
            let resolved = try await self.nextPost(client)
            // "alice" is the owner, a member of the public circle.
            #expect(resolved?.seq == 2 && resolved?.mentions == ["alice"])
            await client.close()
            try await canary.check("after mention floods")
        }
    }
}
