import CircleServer
import CircleTestSupport
import CircleWire
import Foundation
import Testing

/// Moderation against a live server (docs/API.md, "Moderation"): read-only circles, and ending
/// a user's connections on every node.
@Suite("Moderation, live", .serialized, .timeLimit(.minutes(3)))
struct ModerationLiveTests {
    /// A canary server with its first admin, ada, and a circle `news` owned by alice; `body` gets
    /// ada's token.
    private func withAdmin(_ body: (TestServer, Canary, String) async throws -> Void) async throws {
        try await withCanaryServer { server, canary in
            let link = try #require(server.server?.setupLink)
            let setup = try await server.http(
                "POST", HTTPAPI.Path.authSetup, json: #"{"token":"\#(link.split(separator: "#setup=")[1])","name":"ada","password":"correct horse battery"}"#
            )
            #expect(setup.status == 201, "\(setup.body)")
            try await server.createCircle("news", owner: "alice")
            try await body(server, canary, try await server.token("ada"))
        }
    }

    private func key(_ server: TestServer, _ admin: String, scopes: [String]) async throws -> String {
        let list = scopes.map { "\"\($0)\"" }.joined(separator: ",")
        let made = try await server.http("POST", HTTPAPI.Path.adminAPIKeys, token: admin, json: #"{"name":"mod","bot":"mod-bot","scopes":[\#(list)]}"#)
        #expect(made.status == 201, "\(made.body)")
        return try #require((try JSONSerialization.jsonObject(with: Data(made.body.utf8)) as? [String: Any])?["key"] as? String)
    }

    private func post(_ server: TestServer, as token: String, _ text: String, id: String, extra: String = "") async throws -> (status: Int, body: String) {
        try await server.http("POST", HTTPAPI.Path.messages("news"), token: token, json: #"{"text":"\#(text)","id":"\#(id)"\#(extra)}"#)
    }

    @Test("a read-only circle: members get read_only (WebSocket and HTTP 403); the owner, admins and API keys still post; off opens it again")
    func readOnly() async throws {
        try await self.withAdmin { server, canary, admin in
            let bo = try await TestClient.connect(server, user: "bo")
            #expect(try await bo.request { .join("news", id: $0) }.ackSeq != nil)
            let early = try await bo.request { .post("before", to: "news", id: $0) }
            #expect(early.ackSeq == 1)

            // Who may switch it: not a member; the owner, an admin, a moderate key.
            let boToken = try await server.token("bo")
            #expect(try await server.http("PUT", HTTPAPI.Path.readOnly("news"), token: boToken, json: #"{"readOnly":true}"#).status == 403)
            #expect(try await server.http("PUT", HTTPAPI.Path.readOnly("nowhere"), token: admin, json: #"{"readOnly":true}"#).status == 404)
            #expect(try await server.http("PUT", HTTPAPI.Path.readOnly("news"), token: admin, json: #"{"readOnly":"yes"}"#).status == 400)
            let set = try await server.http("PUT", HTTPAPI.Path.readOnly("news"), token: admin, json: #"{"readOnly":true}"#)
            #expect(set.status == 200 && set.body.contains(#""readOnly":true"#), "\(set)")
            // Members see it in the circle list (and the page and `circle` show it from there).
            #expect(try await server.http("GET", HTTPAPI.Path.circle("news"), token: boToken).body.contains(#""readOnly":true"#))
            #expect(try await server.http("GET", HTTPAPI.Path.circles, token: boToken).body.contains(#""name":"news","notify":"mentions","owner":"alice","private":false,"readOnly":true"#))

            let afterID = bo.nextID()
            try await bo.send(.post("after", to: "news", id: afterID))
            let (refused, _) = try await bo.reply(to: afterID)
            guard case .error(_, let code, let message) = refused else {
                Issue.record("a member posted in a read-only circle: \(refused)")
                return
            }
            #expect(code == .readOnly && message.contains("read-only"))
            let reactID = bo.nextID()
            try await bo.send(.react("👍", to: 1, in: "news", id: reactID))
            let (reaction, _) = try await bo.reply(to: reactID)
            #expect(reaction.errorCode == .readOnly, "\(reaction)")
            let http = try await self.post(server, as: boToken, "after", id: "h1")
            #expect(http.status == 403 && http.body.contains("read_only"), "\(http)")
            // A member still deletes their own post.
            let deleteID = bo.nextID()
            try await bo.send(CircleRequest.delete(1, in: "news", id: deleteID))
            let (delete, _) = try await bo.reply(to: deleteID)
            #expect(delete.ackSeq == 2, "\(delete)")

            #expect(try await self.post(server, as: try await server.token("alice"), "from the owner", id: "o1").status == 201)
            #expect(try await self.post(server, as: admin, "from an admin", id: "a1").status == 201)
            let key = try await self.key(server, admin, scopes: ["post_as_user"])
            let viaKey = try await self.post(server, as: key, "via an app", id: "k1", extra: #","as":"bo""#)
            #expect(viaKey.status == 201, "an API key with a post scope still posts, also as a member: \(viaKey)")
            try await canary.check("while news is read-only")

            let off = try await server.http("PUT", HTTPAPI.Path.readOnly("news"), token: try await server.token("alice"), json: #"{"readOnly":false}"#)
            #expect(off.status == 200 && off.body.contains(#""readOnly":false"#), "the owner opens it: \(off)")
            #expect(try await server.http("GET", HTTPAPI.Path.circle("news"), token: boToken).body.contains(#""readOnly":false"#))
            let again = try await bo.request { .post("open again", to: "news", id: $0) }
            #expect(again.ackSeq != nil, "\(again)")
            await bo.close()
        }
    }

    @Test("disconnect: every connection of the user closes with 4005, others stay; admins and moderate keys only")
    func disconnect() async throws {
        try await self.withAdmin { server, canary, admin in
            let first = try await TestClient.connect(server, user: "bo")
            let second = try await TestClient.connect(server, user: "bo")
            let cy = try await TestClient.connect(server, user: "cy")
            #expect(try await server.http("POST", HTTPAPI.Path.adminUserDisconnect("bo"), token: try await server.token("cy")).status == 403)
            let readKey = try await self.key(server, admin, scopes: ["read"])
            #expect(try await server.http("POST", HTTPAPI.Path.adminUserDisconnect("bo"), token: readKey).status == 403)
            #expect(try await server.http("POST", HTTPAPI.Path.adminUserDisconnect("bad name!"), token: admin).status == 400)
            let moderate = try await self.key(server, admin, scopes: ["moderate"])
            #expect(try await server.http("POST", HTTPAPI.Path.adminUserDisconnect("bo"), token: moderate).status == 204)
            for connection in [first, second] {
                #expect(try await IdentityLiveTests.closeCode(of: connection) == CircleCloseCode.accessEnded)
            }
            #expect(try await cy.request { .join("news", id: $0) }.ackSeq != nil, "another user's connection stays")
            // Their session stays: they may connect again.
            let back = try await TestClient.connect(server, user: "bo")
            #expect(try await back.request { .join("news", id: $0) }.ackSeq != nil)
            #expect(try await server.http("POST", HTTPAPI.Path.adminUserDisconnect("bo"), token: admin).status == 204)
            #expect(try await IdentityLiveTests.closeCode(of: back) == CircleCloseCode.accessEnded)
            try await canary.check("after disconnects")
            await cy.close()
        }
    }
}

@Suite("Moderation across nodes", .serialized)
struct ModerationNodeTests {
    /// Node A's signals may be lost (muted): B then learns of it from the account log.
    @Test("a disconnect through node A closes the user's connections on node B", arguments: [false, true])
    func disconnectAcrossNodes(muted: Bool) async throws {
        let nodes = try await NodeFanoutTests.Nodes(muteA: muted, pollInterval: .milliseconds(200))
        defer { Task { await nodes.stop() } }
        let link = try #require(nodes.a.server?.setupLink)
        let setup = try await nodes.a.http(
            "POST", HTTPAPI.Path.authSetup, json: #"{"token":"\#(link.split(separator: "#setup=")[1])","name":"ada","password":"correct horse battery"}"#
        )
        #expect(setup.status == 201, "\(setup.body)")
        let onB = try await TestClient.connect(nodes.b, user: "bo")
        let other = try await TestClient.connect(nodes.b, user: "cy")
        try await nodes.a.createCircle("news", owner: "alice")
        #expect(try await onB.request { .join("news", id: $0) }.ackSeq != nil)
        #expect(try await nodes.a.http("POST", HTTPAPI.Path.adminUserDisconnect("bo"), token: try await nodes.a.token("ada")).status == 204)
        #expect(try await IdentityLiveTests.closeCode(of: onB) == CircleCloseCode.accessEnded)
        #expect(try await other.request { .join("news", id: $0) }.ackSeq != nil)
        await other.close()
    }

    @Test("a circle made read-only through node A refuses members' posts on node B within the refresh")
    func readOnlyAcrossNodes() async throws {
        let nodes = try await NodeFanoutTests.Nodes(pollInterval: .milliseconds(200))
        defer { Task { await nodes.stop() } }
        let link = try #require(nodes.a.server?.setupLink)
        let setup = try await nodes.a.http(
            "POST", HTTPAPI.Path.authSetup, json: #"{"token":"\#(link.split(separator: "#setup=")[1])","name":"ada","password":"correct horse battery"}"#
        )
        #expect(setup.status == 201, "\(setup.body)")
        try await nodes.a.createCircle("news", owner: "alice")
        let set = try await nodes.a.http("PUT", HTTPAPI.Path.readOnly("news"), token: try await nodes.a.token("ada"), json: #"{"readOnly":true}"#)
        #expect(set.status == 200)
        // Node B reads the read-only circles every second (the webhooks' poll interval): bounded retries.
        let token = try await nodes.b.token("bo")
        let deadline = ContinuousClock.now + .seconds(20)
        var answer = (status: 0, body: "")
        var attempt = 0
        while ContinuousClock.now < deadline {
            attempt += 1
            answer = try await nodes.b.http("POST", HTTPAPI.Path.messages("news"), token: token, json: #"{"text":"hi","id":"p\#(attempt)"}"#)
            if answer.status == 403 { break }
            try await Task.sleep(for: .milliseconds(100))
        }
        #expect(answer.status == 403 && answer.body.contains("read_only"), "\(answer)")
    }
}
