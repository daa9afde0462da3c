import CircleServer
import CircleTestSupport
import CircleWire
import Foundation
import Testing

/// API keys and posting over HTTP (docs/API.md, "API keys", "Posting over HTTP"), each against a
/// live server whose canary member must keep being served: what a key may do, what it may not,
/// and keys that are revoked, garbled or forged.
@Suite("Adversarial inputs: API keys and posting over HTTP", .serialized, .timeLimit(.minutes(3)))
struct AdversarialAPIKeyTests {
    /// A canary server with its first admin, ada, and a public circle `lobby` and a private
    /// circle `staff` (both ada's); `body` gets ada's token.
    private func withAdmin(
        _ limits: CircleServerConfiguration.Limits = .init(),
        _ body: (TestServer, Canary, String) async throws -> Void
    ) async throws {
        try await withCanaryServer(limits) { server, canary in
            let link = try #require(server.server?.setupLink)
            let setup = try await server.http(
                "POST", HTTPAPI.Path.authSetup, json: #"{"token":"\#(link.split(separator: "#setup=")[1])","name":"ada","password":"correct horse battery"}"#
            )
            #expect(setup.status == 201, "\(setup.body)")
            try await server.createCircle("lobby", owner: "ada")
            try await server.createCircle("staff", owner: "ada", isPrivate: true)
            try await body(server, canary, try await server.token("ada"))
        }
    }

    private func json(_ text: String) -> [String: Any] {
        (try? JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any]) ?? [:]
    }

    private func errorCode(_ text: String) -> String? {
        (self.json(text)["error"] as? [String: Any])?["code"] as? String
    }

    /// Makes a key; returns its id and secret.
    private func makeKey(_ server: TestServer, _ admin: String, bot: String, scopes: [String]) async throws -> (id: String, key: String) {
        let scopeList = scopes.map { "\"\($0)\"" }.joined(separator: ",")
        let made = try await server.http("POST", HTTPAPI.Path.adminAPIKeys, token: admin, json: #"{"name":"test key","bot":"\#(bot)","scopes":[\#(scopeList)]}"#)
        #expect(made.status == 201, "\(made.body)")
        let answer = self.json(made.body)
        return (try #require(answer["id"] as? String), try #require(answer["key"] as? String))
    }

    @Test("a key is shown once, posts as its bot with an idempotent ack that reaches subscribers, and shows its last use")
    func postAsBot() async throws {
        try await self.withAdmin { server, canary, admin in
            let watcher = try await TestClient.connect(server, user: "watcher")
            #expect(try await watcher.request { .join("lobby", id: $0) }.ackSeq != nil)

            let (id, key) = try await self.makeKey(server, admin, bot: "deploy-bot", scopes: ["post_as_bot"])
            #expect(key.hasPrefix("circle_key_\(id)."))
            let list = try await server.http("GET", HTTPAPI.Path.adminAPIKeys, token: admin)
            #expect(list.status == 200)
            #expect(!list.body.contains(key) && !list.body.contains("\"key\""), "the key is shown once: \(list.body)")
            #expect(list.body.contains("\"bot\":\"deploy-bot\"") && !list.body.contains("lastUsedAt"), "not used yet: \(list.body)")
            let users = try await server.http("GET", HTTPAPI.Path.adminUsers, token: admin)
            #expect(users.body.contains("\"name\":\"deploy-bot\"") && users.body.contains("\"role\":\"bot\""), "the bot was made with the key")

            let posted = try await server.http("POST", HTTPAPI.Path.messages("lobby"), token: key, json: #"{"text":"deployed v1","id":"deploy-1"}"#)
            #expect(posted.status == 201, "\(posted.body)")
            let ack = self.json(posted.body)
            #expect(ack["seq"] as? Int == 1 && ack["author"] as? String == "deploy-bot" && ack["duplicate"] as? Bool == false, "\(ack)")
            var delivered: CirclePost?
            while delivered == nil, let message = try await watcher.next(timeout: .seconds(10)) { delivered = message.post }
            #expect(delivered?.text == "deployed v1" && delivered?.author == "deploy-bot" && delivered?.seq == 1)

            // The same id: the same ack, 200; the Idempotency-Key header is the same key.
            let again = try await server.http("POST", HTTPAPI.Path.messages("lobby"), token: key, json: #"{"text":"deployed v1","id":"deploy-1"}"#)
            #expect(again.status == 200 && self.json(again.body)["seq"] as? Int == 1 && self.json(again.body)["duplicate"] as? Bool == true, "\(again.body)")
            let header = try await server.http(
                "POST", HTTPAPI.Path.messages("lobby"), token: key, json: #"{"text":"deployed v1"}"#, headers: ["Idempotency-Key": "deploy-1"]
            )
            #expect(header.status == 200 && self.json(header.body)["seq"] as? Int == 1, "\(header.body)")
            // A repeat with another body: the original's ack; the new body is not stored.
            let changed = try await server.http(
                "POST", HTTPAPI.Path.messages("lobby"), token: key, json: #"{"text":"something else"}"#, headers: ["Idempotency-Key": "deploy-1"]
            )
            #expect(changed.status == 200 && self.json(changed.body)["seq"] as? Int == 1, "\(changed.body)")
            let history = try await server.http("GET", HTTPAPI.Path.messages("lobby"), token: admin)
            #expect(history.body.contains("deployed v1") && !history.body.contains("something else"), "\(history.body)")
            let differ = try await server.http(
                "POST", HTTPAPI.Path.messages("lobby"), token: key, json: #"{"text":"x","id":"a"}"#, headers: ["Idempotency-Key": "b"]
            )
            #expect(differ.status == 400, "\(differ.body)")
            // Without an id each request is a new post.
            let fresh = try await server.http("POST", HTTPAPI.Path.messages("lobby"), token: key, json: #"{"text":"second"}"#)
            #expect(fresh.status == 201 && self.json(fresh.body)["seq"] as? Int == 2, "\(fresh.body)")

            let used = try await server.http("GET", HTTPAPI.Path.adminAPIKeys, token: admin)
            let keys = self.json(used.body)["keys"] as? [[String: Any]] ?? []
            #expect(keys.first?["lastUsedAt"] as? Int != nil, "the use is recorded: \(used.body)")
            try await canary.check("after posting over HTTP")
            await watcher.close()
        }
    }

    @Test("edits, deletes and reactions over HTTP follow the WebSocket's rules")
    func changes() async throws {
        try await self.withAdmin { server, canary, admin in
            let (_, key) = try await self.makeKey(server, admin, bot: "helper", scopes: ["post_as_bot", "post_as_user"])
            let bot = try await server.http("POST", HTTPAPI.Path.messages("lobby"), token: key, json: #"{"text":"typo"}"#)
            #expect(bot.status == 201)
            let person = try await server.http("POST", HTTPAPI.Path.messages("lobby"), token: admin, json: #"{"text":"ada's"}"#)
            #expect(person.status == 201 && self.json(person.body)["author"] as? String == "ada", "a person posts as themselves: \(person.body)")

            let edit = try await server.http("PATCH", HTTPAPI.Path.message(1, in: "lobby"), token: key, json: #"{"text":"fixed","id":"edit-1"}"#)
            #expect(edit.status == 201 && self.json(edit.body)["seq"] as? Int == 3, "\(edit.body)")
            let notTheirs = try await server.http("PATCH", HTTPAPI.Path.message(2, in: "lobby"), token: key, json: #"{"text":"mine now"}"#)
            #expect(notTheirs.status == 403 && self.errorCode(notTheirs.body) == "not_author", "\(notTheirs.body)")
            let asAda = try await server.http("PATCH", HTTPAPI.Path.message(2, in: "lobby"), token: key, json: #"{"text":"ada, edited","as":"ada"}"#)
            #expect(asAda.status == 201, "post_as_user edits as the author: \(asAda.body)")
            let noPost = try await server.http("PATCH", HTTPAPI.Path.message(99, in: "lobby"), token: key, json: #"{"text":"x"}"#)
            #expect(noPost.status == 404 && self.errorCode(noPost.body) == "no_such_post", "\(noPost.body)")

            let thumbs = "%F0%9F%91%8D"
            let react = try await server.http("PUT", "\(HTTPAPI.Path.message(1, in: "lobby"))/reactions/\(thumbs)", token: key)
            #expect(react.status == 201, "\(react.body)")
            let notEmoji = try await server.http("PUT", "\(HTTPAPI.Path.message(1, in: "lobby"))/reactions/abc", token: key)
            #expect(notEmoji.status == 400 && self.errorCode(notEmoji.body) == "invalid_emoji", "\(notEmoji.body)")
            let unreact = try await server.http("DELETE", "\(HTTPAPI.Path.message(1, in: "lobby"))/reactions/\(thumbs)", token: key)
            #expect(unreact.status == 201, "\(unreact.body)")

            let delete = try await server.http("DELETE", HTTPAPI.Path.message(1, in: "lobby"), token: key, headers: ["Idempotency-Key": "del-1"])
            #expect(delete.status == 201, "\(delete.body)")
            let repeated = try await server.http("DELETE", HTTPAPI.Path.message(1, in: "lobby"), token: key, headers: ["Idempotency-Key": "del-1"])
            #expect(repeated.status == 200 && self.json(repeated.body)["seq"] as? Int == self.json(delete.body)["seq"] as? Int, "\(repeated.body)")
            let twice = try await server.http("DELETE", HTTPAPI.Path.message(1, in: "lobby"), token: key)
            #expect(twice.status == 409 && self.errorCode(twice.body) == "post_deleted", "\(twice.body)")
            let badSeq = try await server.http("DELETE", "/v1/circles/lobby/messages/0", token: key)
            #expect(badSeq.status == 400, "\(badSeq.body)")

            // A key with `moderate` deletes anyone's post, in a private circle too; without it, only its own.
            let staff = try await server.http("POST", HTTPAPI.Path.messages("staff"), token: admin, json: #"{"text":"staff only"}"#)
            #expect(staff.status == 201, "\(staff.body)")
            let notMod = try await server.http("DELETE", HTTPAPI.Path.message(2, in: "lobby"), token: key)
            #expect(notMod.status == 403 && self.errorCode(notMod.body) == "not_author", "\(notMod.body)")
            let (_, moderator) = try await self.makeKey(server, admin, bot: "mod-bot", scopes: ["moderate"])
            let moderated = try await server.http("DELETE", HTTPAPI.Path.message(2, in: "lobby"), token: moderator)
            #expect(moderated.status == 201 && self.json(moderated.body)["author"] as? String == "mod-bot", "\(moderated.body)")
            let privateModerated = try await server.http("DELETE", HTTPAPI.Path.message(1, in: "staff"), token: moderator)
            #expect(privateModerated.status == 201, "\(privateModerated.body)")
            let modPost = try await server.http("POST", HTTPAPI.Path.messages("lobby"), token: moderator, json: #"{"text":"x"}"#)
            #expect(modPost.status == 403, "moderate alone does not post: \(modPost.body)")

            // It removes members of any circle (and does not add them); a key without manage or moderate does neither.
            #expect(try await server.http("POST", HTTPAPI.Path.members("staff"), token: admin, json: #"{"user":"bo"}"#).status == 200)
            let (_, reader) = try await self.makeKey(server, admin, bot: "reader-bot", scopes: ["read"])
            #expect(try await server.http("DELETE", HTTPAPI.Path.member("bo", of: "staff"), token: reader).status == 403)
            #expect(try await server.http("POST", HTTPAPI.Path.members("staff"), token: moderator, json: #"{"user":"cy"}"#).status == 403)
            let removed = try await server.http("DELETE", HTTPAPI.Path.member("bo", of: "staff"), token: moderator)
            #expect(removed.status == 200 && !removed.body.contains("\"bo\""), "\(removed.body)")
            try await canary.check("after changes over HTTP")
        }
    }

    @Test("revoked, forged, garbled and out-of-scope keys are refused; keys never open a WebSocket or reach routes without a scope")
    func refusedKeys() async throws {
        try await self.withAdmin { server, canary, admin in
            let (id, key) = try await self.makeKey(server, admin, bot: "reader", scopes: ["read"])
            #expect(try await server.http("GET", HTTPAPI.Path.messages("lobby"), token: key).status == 200)
            #expect(try await server.http("GET", HTTPAPI.Path.circles, token: key).status == 200)
            // It searches what its bot may read: the public circle, not the private one.
            #expect(try await server.http("POST", HTTPAPI.Path.messages("lobby"), token: admin, json: #"{"text":"quarterly figures"}"#).status == 201)
            #expect(try await server.http("POST", HTTPAPI.Path.messages("staff"), token: admin, json: #"{"text":"quarterly secrets"}"#).status == 201)
            let found = try await server.http("GET", HTTPAPI.Path.search + "?q=quarterly", token: key)
            let hits = self.json(found.body)["hits"] as? [[String: Any]] ?? []
            #expect(found.status == 200 && hits.map { $0["circle"] as? String } == ["lobby"], "\(found.body)")
            let hidden = try await server.http("GET", HTTPAPI.Path.search + "?q=quarterly&circle=staff", token: key)
            #expect(hidden.status == 403 || hidden.status == 404, "\(hidden.body)")

            // Without the scope.
            let post = try await server.http("POST", HTTPAPI.Path.messages("lobby"), token: key, json: #"{"text":"hi"}"#)
            #expect(post.status == 403 && self.errorCode(post.body) == "forbidden", "\(post.body)")
            #expect(try await server.http("POST", HTTPAPI.Path.circles, token: key, json: #"{"name":"mine"}"#).status == 403)
            #expect(try await server.http("GET", HTTPAPI.Path.adminAPIKeys, token: key).status == 403)
            #expect(try await server.http("POST", HTTPAPI.Path.members("lobby"), token: key, json: #"{"user":"bo"}"#).status == 403)
            let (_, poster) = try await self.makeKey(server, admin, bot: "poster", scopes: ["post_as_bot"])
            let unscoped = try await server.http("GET", HTTPAPI.Path.search + "?q=quarterly", token: poster)
            #expect(unscoped.status == 403 && self.errorCode(unscoped.body) == "forbidden", "search needs read: \(unscoped.body)")
            // Routes that take no key at all.
            for (method, path) in [("GET", HTTPAPI.Path.authSessions), ("POST", HTTPAPI.Path.authTokens), ("GET", HTTPAPI.Path.users)] {
                let answer = try await server.http(method, path, token: key, json: method == "POST" ? #"{"name":"x"}"# : nil)
                #expect(answer.status == 403, "\(method) \(path): \(answer.status) \(answer.body)")
            }
            // Nor a WebSocket.
            let upgrade = try await server.rawHTTP(
                "GET /v1/ws HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                    + "Sec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: circle.v1\r\nAuthorization: Bearer \(key)\r\n\r\n"
            )
            #expect(upgrade.hasPrefix("HTTP/1.1 403"), "\(upgrade.prefix(300))")

            // Forged and garbled.
            let forged = "circle_key_\(id)." + String(repeating: "A", count: 43)
            let garbled = [
                forged, "circle_key_nope.secret", "circle_key_.x", "circle_key_\(id).", "circle_key_", String(key.dropLast()), key + "x",
                "circle_key_" + String(repeating: "a", count: 300) + ".x",
            ]
            for text in garbled {
                let answer = try await server.http("GET", HTTPAPI.Path.circles, token: text)
                #expect(answer.status == 401, "\(text.prefix(60)): \(answer.status) \(answer.body)")
            }
            try await canary.check("after forged keys")

            // Revoked: refused at once.
            #expect(try await server.http("DELETE", HTTPAPI.Path.adminAPIKey(id), token: admin).status == 204)
            #expect(try await server.http("DELETE", HTTPAPI.Path.adminAPIKey(id), token: admin).status == 204, "revoking twice is fine")
            #expect(try await server.http("DELETE", HTTPAPI.Path.adminAPIKey("nope"), token: admin).status == 404)
            let revoked = try await server.http("GET", HTTPAPI.Path.circles, token: key)
            #expect(revoked.status == 401 && self.errorCode(revoked.body) == "unauthorized", "\(revoked.body)")
            #expect(try await server.http("GET", HTTPAPI.Path.adminAPIKeys, token: admin).body.contains("\"revokedAt\":"))

            // Bad keys to make.
            let cases: [(String, Int)] = [
                (#"{"name":"x","bot":"b1","scopes":[]}"#, 400),
                (#"{"name":"x","bot":"b1","scopes":["root"]}"#, 400),
                (#"{"name":"x","bot":"b1","scopes":["read","read"]}"#, 400),
                (#"{"name":"","bot":"b1","scopes":["read"]}"#, 400),
                (#"{"name":"\#(String(repeating: "n", count: 61))","bot":"b1","scopes":["read"]}"#, 400),
                (#"{"name":"x","bot":"not a name!","scopes":["read"]}"#, 400),
                (#"{"name":"x","bot":"ada","scopes":["read"]}"#, 409),
                (#"{"name":"x","scopes":["read"]}"#, 400),
            ]
            for (body, status) in cases {
                let answer = try await server.http("POST", HTTPAPI.Path.adminAPIKeys, token: admin, json: body)
                #expect(answer.status == status, "\(body.prefix(80)): \(answer.status) \(answer.body)")
            }
            let member = try await server.http("POST", HTTPAPI.Path.adminAPIKeys, token: try await server.token("mallory"), json: #"{"name":"x","bot":"b","scopes":["admin"]}"#)
            #expect(member.status == 403)
            try await canary.check("after refused keys")
        }
    }

    @Test("posting where the key's bot may not, as others without the scope, huge bodies and texts: each a documented 4xx")
    func badPosts() async throws {
        try await self.withAdmin { server, canary, admin in
            let (_, bot) = try await self.makeKey(server, admin, bot: "poster", scopes: ["post_as_bot"])
            let (_, users) = try await self.makeKey(server, admin, bot: "relay", scopes: ["post_as_user"])

            let privateCircle = try await server.http("POST", HTTPAPI.Path.messages("staff"), token: bot, json: #"{"text":"let me in"}"#)
            #expect(privateCircle.status == 403 && self.errorCode(privateCircle.body) == "forbidden", "\(privateCircle.body)")
            let nowhere = try await server.http("POST", HTTPAPI.Path.messages("nowhere"), token: bot, json: #"{"text":"hi"}"#)
            #expect(nowhere.status == 404)
            let asAda = try await server.http("POST", HTTPAPI.Path.messages("lobby"), token: bot, json: #"{"text":"I am ada","as":"ada"}"#)
            #expect(asAda.status == 403, "post_as_bot cannot name another author: \(asAda.body)")
            let personAs = try await server.http("POST", HTTPAPI.Path.messages("lobby"), token: try await server.token("bo"), json: #"{"text":"I am ada","as":"ada"}"#)
            #expect(personAs.status == 403, "\(personAs.body)")
            let noAs = try await server.http("POST", HTTPAPI.Path.messages("lobby"), token: users, json: #"{"text":"who am I"}"#)
            #expect(noAs.status == 400, "\(noAs.body)")
            let relayed = try await server.http("POST", HTTPAPI.Path.messages("staff"), token: users, json: #"{"text":"from ada","as":"ada"}"#)
            #expect(relayed.status == 201 && self.json(relayed.body)["author"] as? String == "ada", "ada is a member of staff: \(relayed.body)")
            let notMember = try await server.http("POST", HTTPAPI.Path.messages("staff"), token: users, json: #"{"text":"from bo","as":"bo"}"#)
            #expect(notMember.status == 403, "\(notMember.body)")

            let empty = try await server.http("POST", HTTPAPI.Path.messages("lobby"), token: bot, json: #"{}"#)
            #expect(empty.status == 400)
            let longText = try await server.http("POST", HTTPAPI.Path.messages("lobby"), token: bot, json: #"{"text":"\#(String(repeating: "x", count: 70_000))"}"#)
            #expect(longText.status == 413 && self.errorCode(longText.body) == "too_large", "\(longText.status) \(longText.body.prefix(200))")
            let huge = try await server.http("POST", HTTPAPI.Path.messages("lobby"), token: bot, json: #"{"text":"\#(String(repeating: "x", count: 1_100_000))"}"#)
            #expect(huge.status == 413, "\(huge.status) \(huge.body.prefix(200))")
            let longID = try await server.http("POST", HTTPAPI.Path.messages("lobby"), token: bot, json: #"{"text":"x","id":"\#(String(repeating: "i", count: 129))"}"#)
            #expect(longID.status == 400)
            let wrongType = try await server.http("POST", HTTPAPI.Path.messages("lobby"), token: bot, json: #"{"text":42}"#)
            #expect(wrongType.status == 400)
            let badAttachment = try await server.http("POST", HTTPAPI.Path.messages("lobby"), token: bot, json: #"{"attachment":"\#(String(repeating: "a", count: 64))"}"#)
            #expect(badAttachment.status == 400 && self.errorCode(badAttachment.body) == "invalid_attachment", "\(badAttachment.body)")
            try await canary.check("after bad posts")
            let history = try await server.http("GET", HTTPAPI.Path.messages("lobby"), token: admin)
            #expect(self.json(history.body)["posts"] as? [Any] != nil && (self.json(history.body)["posts"] as? [Any])?.isEmpty == true, "nothing was stored in lobby: \(history.body.prefix(300))")
        }
    }

    @Test("each author has the WebSocket's allowance of entries over HTTP; beyond it, 429 with Retry-After and nothing stored")
    func rateLimited() async throws {
        // A burst of 3 and no refill to speak of: the count, not the clock, decides.
        try await self.withAdmin(CircleServerConfiguration.Limits(postsPerSecond: 0.001, postBurst: 3)) { server, canary, admin in
            let (_, key) = try await self.makeKey(server, admin, bot: "chatty", scopes: ["post_as_bot", "post_as_user"])
            for index in 1...3 {
                let posted = try await server.http("POST", HTTPAPI.Path.messages("lobby"), token: key, json: #"{"text":"\#(index)","id":"p\#(index)"}"#)
                #expect(posted.status == 201, "\(posted.body)")
            }
            let refused = try await server.http("POST", HTTPAPI.Path.messages("lobby"), token: key, json: #"{"text":"4","id":"p4"}"#)
            #expect(refused.status == 429 && self.errorCode(refused.body) == "rate_limited", "\(refused.status) \(refused.body)")
            let body = #"{"text":"4","id":"p4"}"#
            let raw = try await server.rawHTTP(
                "POST /v1/circles/lobby/messages HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer \(key)\r\nContent-Type: application/json\r\n"
                    + "Content-Length: \(body.utf8.count)\r\n\r\n\(body)"
            )
            #expect(raw.hasPrefix("HTTP/1.1 429") && raw.lowercased().contains("\r\nretry-after: "), "\(raw.prefix(400))")
            let edit = try await server.http("PATCH", HTTPAPI.Path.message(1, in: "lobby"), token: key, json: #"{"text":"one"}"#)
            #expect(edit.status == 429, "changes count too: \(edit.body)")
            let other = try await server.http("POST", HTTPAPI.Path.messages("lobby"), token: key, json: #"{"text":"from ada","as":"ada"}"#)
            #expect(other.status == 201, "another author has an allowance of their own: \(other.body)")
            let history = try await server.http("GET", HTTPAPI.Path.messages("lobby"), token: admin)
            #expect((self.json(history.body)["posts"] as? [Any])?.count == 4, "\(history.body)")
            try await canary.check("after a writer was limited")
        }
    }
}

/// Posting over HTTP with two PostgreSQL nodes: an entry written on one reaches a subscriber of
/// the other, and a key revoked on one is refused by the other.
@Suite("API keys and posting over HTTP across nodes", .serialized, .timeLimit(.minutes(3)))
struct APIKeyNodeTests {
    /// Node A's signals may be lost (muted): B then finds the post by polling the store.
    @Test("a key's post on node A reaches a subscriber on node B; a key revoked on A is refused on B", arguments: [false, true])
    func acrossNodes(muted: Bool) async throws {
        let nodes = try await NodeFanoutTests.Nodes(muteA: muted, pollInterval: .milliseconds(200))
        defer { Task { await nodes.stop() } }
        let link = try #require(nodes.a.server?.setupLink)
        let setup = try await nodes.a.http(
            "POST", HTTPAPI.Path.authSetup, json: #"{"token":"\#(link.split(separator: "#setup=")[1])","name":"ada","password":"correct horse battery"}"#
        )
        #expect(setup.status == 201, "\(setup.body)")
        let admin = try await nodes.a.token("ada")
        try await nodes.a.createCircle("lobby", owner: "ada")
        let made = try await nodes.a.http("POST", HTTPAPI.Path.adminAPIKeys, token: admin, json: #"{"name":"n","bot":"node-bot","scopes":["post_as_bot"]}"#)
        #expect(made.status == 201, "\(made.body)")
        let answer = (try? JSONSerialization.jsonObject(with: Data(made.body.utf8)) as? [String: Any]) ?? [:]
        let id = try #require(answer["id"] as? String)
        let key = try #require(answer["key"] as? String)

        let watcher = try await TestClient.connect(nodes.b, user: "watcher")
        #expect(try await watcher.request { .join("lobby", id: $0) }.ackSeq != nil)
        let posted = try await nodes.a.http("POST", HTTPAPI.Path.messages("lobby"), token: key, json: #"{"text":"from node A","id":"x1"}"#)
        #expect(posted.status == 201, "\(posted.body)")
        var delivered: CirclePost?
        while delivered == nil, let message = try await watcher.next(timeout: .seconds(20)) { delivered = message.post }
        #expect(delivered?.text == "from node A" && delivered?.author == "node-bot" && delivered?.seq == 1, "\(String(describing: delivered))")
        // The same id on the other node: the same entry.
        let again = try await nodes.b.http("POST", HTTPAPI.Path.messages("lobby"), token: key, json: #"{"text":"from node A","id":"x1"}"#)
        #expect(again.status == 200 && again.body.contains("\"seq\":1"), "\(again.body)")

        #expect(try await nodes.a.http("DELETE", HTTPAPI.Path.adminAPIKey(id), token: admin).status == 204)
        let refused = try await nodes.b.http("POST", HTTPAPI.Path.messages("lobby"), token: key, json: #"{"text":"after"}"#)
        #expect(refused.status == 401, "each request reads the key: \(refused.body)")
        await watcher.close()
    }
}
