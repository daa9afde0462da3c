import CircleServer
import CircleTestSupport
import CircleWire
import Foundation
import Testing

/// Bad input to webhooks, each against a live server whose canary member must keep being served
/// (docs/API.md, "Webhooks"; docs/SECURITY.md, "Outbound requests").
@Suite("Adversarial inputs: webhooks", .serialized, .timeLimit(.minutes(3)))
struct AdversarialWebhookTests {
    /// A canary server with its first admin, ada; `body` gets ada's token.
    private func withAdmin(
        configure: (inout CircleServerConfiguration) -> Void = { _ in },
        _ body: (TestServer, Canary, String) async throws -> Void
    ) async throws {
        try await withCanaryServer(configure: configure) { server, canary in
            let link = try #require(server.server?.setupLink)
            let setup = try await server.http(
                "POST", HTTPAPI.Path.authSetup, json: #"{"token":"\#(link.split(separator: "#setup=")[1])","name":"ada","password":"correct horse battery"}"#
            )
            #expect(setup.status == 201, "\(setup.body)")
            try await body(server, canary, try await server.token("ada"))
        }
    }

    /// Waits (bounded) until the first delivery of `webhook` has been tried.
    private func firstAttempt(_ server: TestServer, _ token: String, _ webhook: String) async throws -> [String: Any] {
        let deadline = ContinuousClock.now + .seconds(60)
        while ContinuousClock.now < deadline {
            let list = try await server.http("GET", HTTPAPI.Path.adminWebhookDeliveries(webhook), token: token)
            let deliveries = (try? JSONSerialization.jsonObject(with: Data(list.body.utf8)) as? [String: Any])?["deliveries"] as? [[String: Any]] ?? []
            if let tried = deliveries.first(where: { ($0["attempts"] as? Int ?? 0) > 0 }) { return tried }
            try await Task.sleep(for: .milliseconds(50))
        }
        Issue.record("no delivery of \(webhook) was tried within 60 s")
        return [:]
    }

    @Test("bad subscriptions: long, odd or private URLs, unknown events and circles, non-admins, too many; each a 4xx, nothing made")
    func badSubscriptions() async throws {
        try await self.withAdmin { server, canary, admin in
            let cases: [(String, Int)] = [
                (#"{"url":"https://example.com/\#(String(repeating: "a", count: 2100))"}"#, 400),
                (#"{"url":"javascript:alert(1)"}"#, 400),
                (#"{"url":"ftp://example.com/x"}"#, 400),
                (#"{"url":"https://user:pass@example.com/x"}"#, 400),
                (#"{"url":"http://127.0.0.1/x"}"#, 400),
                (#"{"url":"http://[::1]:8080/x"}"#, 400),
                (#"{"url":"http://10.1.2.3/x"}"#, 400),
                (#"{"url":"http://169.254.169.254/latest/meta-data"}"#, 400),
                (#"{"url":"http://0.0.0.0/x"}"#, 400),
                (#"{"url":"https://example.com/x","events":["typing"]}"#, 400),
                (#"{"url":"https://example.com/x","events":[]}"#, 400),
                (#"{"url":"https://example.com/x","circle":"nowhere"}"#, 404),
                (#"{"url":42}"#, 400),
                (#"{"url":"https://example.com/x","events":"post"}"#, 400),
            ]
            for (body, status) in cases {
                let answer = try await server.http("POST", HTTPAPI.Path.adminWebhooks, token: admin, json: body)
                #expect(answer.status == status, "\(body.prefix(80)): \(answer.status) \(answer.body.prefix(200))")
            }
            let member = try await server.http("POST", HTTPAPI.Path.adminWebhooks, token: try await server.token("mallory"), json: #"{"url":"https://example.com/x"}"#)
            #expect(member.status == 403)
            try await canary.check("after bad subscriptions")
            let list = try await server.http("GET", HTTPAPI.Path.adminWebhooks, token: admin)
            #expect(list.body == #"{"webhooks":[]}"#, "nothing was made: \(list.body)")

            for index in 0..<100 {
                let made = try await server.http("POST", HTTPAPI.Path.adminWebhooks, token: admin, json: #"{"url":"https://example.com/\#(index)","circle":"canary","events":["delete"]}"#)
                #expect(made.status == 201)
            }
            let tooMany = try await server.http("POST", HTTPAPI.Path.adminWebhooks, token: admin, json: #"{"url":"https://example.com/x"}"#)
            #expect(tooMany.status == 409, "\(tooMany.body)")
            for path in [HTTPAPI.Path.adminWebhook("wh_nope"), HTTPAPI.Path.adminWebhookDeliveries("wh_nope")] {
                #expect(try await server.http("GET", path, token: admin).status == 404)
            }
            #expect(try await server.http("POST", HTTPAPI.Path.adminWebhookRetry("wh_nope", delivery: "msg_x"), token: admin).status == 404)
            try await canary.check("with 100 webhooks")
        }
    }

    @Test("a host name that resolves to loopback is refused at delivery, and the endpoint never hears from the server")
    func resolvesToLoopback() async throws {
        let listener = SilentListener()
        try await listener.start()
        defer { Task { await listener.stop() } }
        try await self.withAdmin { server, canary, admin in
            let made = try await server.http("POST", HTTPAPI.Path.adminWebhooks, token: admin, json: #"{"url":"http://localhost:\#(listener.port)/hook"}"#)
            #expect(made.status == 201, "a name is checked when it is resolved, at each attempt: \(made.body)")
            let id = try #require((try JSONSerialization.jsonObject(with: Data(made.body.utf8)) as? [String: Any])?["id"] as? String)
            try await canary.check("a post to be delivered")
            let tried = try await self.firstAttempt(server, admin, id)
            #expect(tried["status"] as? String == "pending")
            #expect((tried["lastError"] as? String ?? "").contains("refused by the outbound address policy"), "\(tried)")
            #expect(listener.accepted == 0, "the server did not connect")
            try await canary.check("after a refused delivery")
        }
    }

    @Test("an endpoint that never answers holds only its own deliveries: posts are acknowledged, the canary served")
    func hangingEndpoint() async throws {
        let listener = SilentListener()
        try await listener.start()
        defer { Task { await listener.stop() } }
        try await self.withAdmin(configure: {
            $0.allowPrivateOutbound = true
            $0.webhooks.timeout = .seconds(1)
        }) { server, canary, admin in
            let made = try await server.http("POST", HTTPAPI.Path.adminWebhooks, token: admin, json: #"{"url":"http://127.0.0.1:\#(listener.port)/hook"}"#)
            #expect(made.status == 201, "\(made.body)")
            let id = try #require((try JSONSerialization.jsonObject(with: Data(made.body.utf8)) as? [String: Any])?["id"] as? String)
            for index in 0..<10 { try await canary.check("post \(index) while the endpoint hangs") }
            let tried = try await self.firstAttempt(server, admin, id)
            #expect((tried["lastError"] as? String ?? "").contains("within"), "the attempt timed out: \(tried)")
            #expect(listener.accepted >= 1)
            try await canary.check("while a webhook endpoint hangs")
        }
    }

    @Test("a webhook timeout reloaded (SIGHUP) applies to the next attempt: a hanging endpoint fails within it")
    func reloadedTimeout() async throws {
        let listener = SilentListener()
        try await listener.start()
        defer { Task { await listener.stop() } }
        try await self.withAdmin(configure: {
            $0.allowPrivateOutbound = true
            // Longer than the test waits: only the reloaded timeout can end the attempt in time.
            $0.webhooks.timeout = .seconds(600)
        }) { server, canary, admin in
            let circle = try #require(server.server)
            try circle.reload { $0.webhooks.timeout = .seconds(1) }
            #expect(circle.currentConfiguration.webhooks.timeout == .seconds(1))
            let made = try await server.http("POST", HTTPAPI.Path.adminWebhooks, token: admin, json: #"{"url":"http://127.0.0.1:\#(listener.port)/hook"}"#)
            #expect(made.status == 201, "\(made.body)")
            let id = try #require((try JSONSerialization.jsonObject(with: Data(made.body.utf8)) as? [String: Any])?["id"] as? String)
            try await canary.check("a post for the webhook")
            let tried = try await self.firstAttempt(server, admin, id)
            #expect((tried["lastError"] as? String ?? "").contains("within"), "the attempt timed out: \(tried)")
            try await canary.check("after the reload")
        }
    }
}
