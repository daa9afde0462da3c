import CircleServer
import CircleTestSupport
import CircleWire
import Foundation
import Testing

/// Search under attack, against a real server with a canary member that must keep being
/// served: full-text syntax injected into queries, huge and pathological queries, and a search
/// by someone who was removed from a private circle. Every answer is a page or a documented
/// refusal; never a 500, never the private circle's text.
@Suite("Adversarial: search", .serialized)
struct AdversarialSearchTests {
    /// The codes a refused search may carry.
    static let documented: Set<CircleErrorCode> = [.badRequest, .queryTooLong, .tooManyTerms, .nothingToFind, .badDate, .badCursor, .searchTimedOut]

    static func path(_ q: String, _ extra: [(String, String)] = []) -> String {
        var components = URLComponents()
        components.path = HTTPAPI.Path.search
        components.queryItems = [URLQueryItem(name: "q", value: q)] + extra.map { URLQueryItem(name: $0.0, value: $0.1) }
        // A literal + would be read as a space (form encoding).
        return (components.string ?? HTTPAPI.Path.search).replacingOccurrences(of: "+", with: "%2B")
    }

    @Test("FTS syntax, huge and pathological queries: a page or a documented 400, the canary served")
    func injectedSyntax() async throws {
        try await withCanaryServer { server, canary in
            try await server.createCircle("general", owner: "alice")
            let alice = try await TestClient.connect(server, user: "alice")
            #expect(try await alice.request { .join("general", id: $0) }.ackSeq != nil)
            for text in ["near the river", "star * power", #"she said "hi""#, "東京タワーに行った", "text: column", "-- dashes --"] {
                #expect(try await alice.request { .post(text, to: "general", id: $0) }.ackSeq != nil)
            }
            let token = try await server.token("mallory")
            let injections = [
                "NEAR(river the, 1)", "NEAR", "river*", "*", "**", "\"", "\"\"\"", "\"river", "river\"", "^river", "^",
                "text:river", "search_words:river", "{text}:river", "text : river", "- river", "-", "--", "river AND", "AND OR NOT",
                "OR river OR", "(river", "river)", "()", "'); DROP TABLE posts; --", "river; SELECT 1", "%", "_", "\\", "\u{0}river\u{0}",
                "\u{7}\u{1b}[31m", "river\u{E000}x\u{E001}", "ri\u{301}ver", "東", "東京", "タワー", "\u{FFFD}", "🙂 river", "a:b:c", "from:", "in:",
                "before:", "after:9999-99-99", "in:Canary river", String(repeating: "\"a\" ", count: 16), String(repeating: "東", count: 170),
                String(repeating: "x", count: 512), String(repeating: "x", count: 513), String(repeating: "é", count: 300),
                (1...16).map { "t\($0)" }.joined(separator: " OR "), (1...40).map { _ in "-" }.joined(separator: " "),
            ]
            for (index, q) in injections.enumerated() {
                let answer = try await server.http("GET", Self.path(q), token: token)
                if answer.status == 200 {
                    #expect(HTTPAPI.decode(HTTPAPI.SearchResults.self, from: Data(answer.body.utf8)) != nil, "\(q.debugDescription): \(answer.body)")
                } else {
                    let code = HTTPAPI.decode(HTTPAPI.ErrorBody.self, from: Data(answer.body.utf8))?.error.code
                    #expect(answer.status == 400 && code.map(Self.documented.contains) == true, "\(q.debugDescription): \(answer.status) \(answer.body)")
                }
                if index % 10 == 9 { try await canary.check("after \(index + 1) injected queries") }
            }
            // The same over the WebSocket, where a frame may carry a much longer query.
            let mallory = try await TestClient(url: server.wsURL, token: token)
            let huge = String(repeating: "river ", count: 9_000)
            let reply = try await mallory.request { .search(HTTPAPI.SearchRequest(q: huge), id: $0) }
            #expect(reply.errorCode == .queryTooLong, "\(reply)")
            for q in ["NEAR(river the)", "\"", "*", "text:river"] {
                let answer = try await mallory.request { .search(HTTPAPI.SearchRequest(q: q), id: $0) }
                if case .search = answer {
                } else {
                    #expect(answer.errorCode.map(Self.documented.contains) == true, "\(q): \(answer)")
                }
            }
            let typed = try await mallory.request { id in
                CircleRequest(action: .search, id: id, circle: "")
            }
            #expect(typed.errorCode == .badRequest, "\(typed)")
            try await mallory.sendRaw(#"{"action":"search","id":"m1","search":{"q":5}}"#)
            #expect(try await mallory.reply(to: "m1").reply.errorCode == .badRequest)
            try await mallory.sendRaw(#"{"action":"search","id":"m2","search":"river"}"#)
            #expect(try await mallory.reply(to: "m2").reply.errorCode == .badRequest)
            await mallory.close()
            await alice.close()
            try await canary.check("after the search attacks")
        }
    }

    @Test("a member removed from a private circle finds nothing of it, and naming it is forbidden")
    func removedMember() async throws {
        try await withCanaryServer { server, canary in
            try await server.createCircle("team", owner: "alice", isPrivate: true)
            let aliceToken = try await server.token("alice")
            #expect(try await server.http("POST", "/v1/circles/team/members", token: aliceToken, json: #"{"user":"bob"}"#).status == 200)
            let bob = try await TestClient.connect(server, user: "bob")
            #expect(try await bob.request { .join("team", id: $0) }.ackSeq != nil)
            #expect(try await bob.request { .post("the launch codes are 1234", to: "team", id: $0) }.ackSeq != nil)
            let before = try await bob.request { .search(HTTPAPI.SearchRequest(q: "launch"), id: $0) }
            guard case .search(_, let found) = before else { throw TestFailure("no search page: \(before)") }
            #expect(found.hits.map(\.circle) == ["team"])

            #expect(try await server.http("DELETE", "/v1/circles/team/members/bob", token: aliceToken).status == 200)
            let bobToken = try await server.token("bob")
            let plain = try await server.http("GET", Self.path("launch codes"), token: bobToken)
            #expect(plain.status == 200 && HTTPAPI.decode(HTTPAPI.SearchResults.self, from: Data(plain.body.utf8))?.hits.isEmpty == true, "\(plain)")
            let named = try await server.http("GET", Self.path("launch", [("circle", "team")]), token: bobToken)
            #expect(named.status == 403 && named.body.contains("forbidden"), "\(named)")
            let filtered = try await server.http("GET", Self.path("launch in:team"), token: bobToken)
            #expect(filtered.status == 403, "\(filtered)")
            // The connection opened while bob was a member asks again.
            let after = try await bob.request { .search(HTTPAPI.SearchRequest(q: "launch", circle: "team"), id: $0) }
            #expect(after.errorCode == .forbidden, "\(after)")
            let everywhere = try await bob.request { .search(HTTPAPI.SearchRequest(q: "launch"), id: $0) }
            guard case .search(_, let none) = everywhere else { throw TestFailure("no search page: \(everywhere)") }
            #expect(none.hits.isEmpty)
            await bob.close()
            try await canary.check("after the removed member's searches")
        }
    }
}
