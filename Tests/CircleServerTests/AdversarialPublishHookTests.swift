import CircleServer
import CircleTestSupport
import CircleWire
import Foundation
import Testing

/// A publish hook that misbehaves, each against a live server whose canary member (in a circle
/// without a hook) must keep being served (docs/API.md, "Publish hooks").
@Suite("Adversarial inputs: publish hooks", .serialized, .timeLimit(.minutes(3)))
struct AdversarialPublishHookTests {
    /// A canary server with its first admin, ada, and a circle `room`; `body` gets ada's token.
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
            try await server.createCircle("room", owner: "alice")
            try await body(server, canary, try await server.token("ada"))
        }
    }

    private func post(_ server: TestServer, _ text: String, id: String) async throws -> (status: Int, body: String) {
        try await server.http("POST", HTTPAPI.Path.messages("room"), token: try await server.token("bo"), json: #"{"text":"\#(text)","id":"\#(id)"}"#)
    }

    private func stored(_ server: TestServer) async throws -> Int {
        let page = try await server.http("GET", HTTPAPI.Path.messages("room"), token: try await server.token("alice"))
        return try JSONDecoder().decode(HTTPAPI.MessagePage.self, from: Data(page.body.utf8)).posts.count
    }

    @Test("bad hook settings are each a 4xx, and private addresses are refused without --allow-private-outbound")
    func badSettings() async throws {
        try await self.withAdmin { server, canary, admin in
            let path = HTTPAPI.Path.publishHook("room")
            for body in [
                #"{"url":"http://127.0.0.1/x"}"#, #"{"url":"http://[::1]:8080/x"}"#, #"{"url":"http://169.254.169.254/latest"}"#, #"{"url":"javascript:alert(1)"}"#,
                #"{"url":"https://user:pass@example.com/x"}"#, #"{"url":42}"#, #"{"url":"https://example.com/x","timeoutMs":"2000"}"#,
                #"{"url":"https://example.com/x","timeoutMs":-1}"#, #"{"url":"https://example.com/x","onFailure":"REFUSE"}"#, "[]", "not json",
            ] {
                let answer = try await server.http("PUT", path, token: admin, json: body)
                #expect(answer.status == 400, "\(body.prefix(60)): \(answer)")
            }
            #expect(try await server.http("GET", path, token: admin).status == 404, "nothing was set")
            try await canary.check("after bad hook settings")
        }
    }

    @Test("a hook whose name resolves to loopback is refused at the call: the post gets hook_unavailable, the listener never hears from the server")
    func resolvesToLoopback() async throws {
        let listener = SilentListener()
        try await listener.start()
        defer { Task { await listener.stop() } }
        try await self.withAdmin { server, canary, admin in
            let set = try await server.http("PUT", HTTPAPI.Path.publishHook("room"), token: admin, json: #"{"url":"http://localhost:\#(listener.port)/hook"}"#)
            #expect(set.status == 201, "\(set)")
            let answer = try await self.post(server, "hi", id: "p1")
            #expect(answer.status == 503 && answer.body.contains("hook_unavailable") && answer.body.contains("outbound address policy"), "\(answer)")
            #expect(listener.accepted == 0)
            #expect(try await self.stored(server) == 0)
            try await canary.check("after a refused hook call")
        }
    }

    @Test("an answer over 64 KiB, an error status with a huge body, or a hang: each refused per the policy; the canary is served throughout")
    func hostileAnswers() async throws {
        let receiver = HookReceiver()
        try await receiver.start()
        defer { Task { await receiver.stop() } }
        try await self.withAdmin(configure: { $0.allowPrivateOutbound = true }) { server, canary, admin in
            let set = try await server.http("PUT", HTTPAPI.Path.publishHook("room"), token: admin, json: #"{"url":"\#(receiver.url)","timeoutMs":500}"#)
            #expect(set.status == 201, "\(set)")
            let huge = #"{"action":"replace","text":"\#(String(repeating: "x", count: 70_000))"}"#
            for (index, answer) in [
                HookReceiver.Answer.json(huge), .raw(status: 500, contentType: "text/html", body: String(repeating: "<p>", count: 30_000)), .hang,
                .raw(status: 301, contentType: "application/json", body: #"{"action":"accept"}"#),
            ].enumerated() {
                receiver.answer { _ in answer }
                let reply = try await self.post(server, "hi", id: "p\(index)")
                #expect(reply.status == 503 && reply.body.contains("hook_unavailable"), "answer \(index): \(reply.status) \(reply.body.prefix(200))")
                try await canary.check("after hostile answer \(index)")
            }
            #expect(try await self.stored(server) == 0)
        }
    }

    @Test("a flood of 30 posts to a circle whose hook hangs: each answered at the deadline; the canary's circle is not held")
    func floodBehindHangingHook() async throws {
        let receiver = HookReceiver()
        try await receiver.start()
        defer { Task { await receiver.stop() } }
        receiver.answer { _ in .hang }
        try await self.withAdmin(configure: { $0.allowPrivateOutbound = true }) { server, canary, admin in
            let set = try await server.http("PUT", HTTPAPI.Path.publishHook("room"), token: admin, json: #"{"url":"\#(receiver.url)","timeoutMs":5000}"#)
            #expect(set.status == 201, "\(set)")
            let token = try await server.token("bo")
            try await withThrowingTaskGroup(of: Int.self) { group in
                for index in 0..<30 {
                    group.addTask {
                        try await server.http("POST", HTTPAPI.Path.messages("room"), token: token, json: #"{"text":"flood \#(index)","id":"f\#(index)"}"#).status
                    }
                }
                // The posts wait for the hook; the canary, in another circle, does not.
                await receiver.waitForCalls(1)
                let started = ContinuousClock.now
                try await canary.check("while 30 posts wait for a hanging hook")
                #expect(ContinuousClock.now - started < .milliseconds(4500), "served before the hook's deadline")
                var statuses: [Int] = []
                for try await status in group { statuses.append(status) }
                #expect(statuses.count == 30 && statuses.allSatisfy { $0 == 503 }, "\(statuses)")
            }
            #expect(try await self.stored(server) == 0)
        }
    }
}
