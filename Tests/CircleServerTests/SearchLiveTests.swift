import CircleServer
import CircleTestSupport
import CircleWire
import Foundation
import Logging
import Testing

/// `GET /v1/search` against a real server on loopback with its SQLite store (and once with PostgreSQL): readable circles
/// only, snippets, paging, and every documented refusal.
@Suite("Search over HTTP, live")
struct SearchLiveTests {
    /// A server with alice's public `general` and private `team` (bob is in neither list of
    /// members of `team`), and posts acked in both before `body` runs.
    static func withSearchServer(postgres: Bool = false, _ body: (TestServer, TestClient) async throws -> Void) async throws {
        let server = TestServer()
        defer { server.remove() }
        var pool: Task<Void, Never>?
        if postgres {
            var logger = Logger(label: "circle.test.search")
            logger.logLevel = .warning
            let store = try PostgresStore(url: try await PostgresTestServer.shared.freshDatabase(), logger: logger)
            pool = Task { await store.run() }
            server.store = store
        }
        defer { pool?.cancel() }
        try await server.start()
        try await server.createCircle("general", owner: "alice")
        try await server.createCircle("team", owner: "alice", isPrivate: true)
        let alice = try await TestClient.connect(server, user: "alice")
        for circle in ["general", "team"] {
            #expect(try await alice.request { .join(circle, id: $0) }.ackSeq != nil)
        }
        for (circle, text) in [("general", "we deploy at five"), ("general", "the Café is open"), ("team", "secret deploy plan"), ("general", "deploy done")] {
            let reply = try await alice.request { .post(text, to: circle, id: $0) }
            #expect(reply.ackSeq != nil, "post \(text): \(reply)")
        }
        try await body(server, alice)
        await alice.close()
        await server.stop()
    }

    static func path(_ items: [(String, String)]) -> String {
        var components = URLComponents()
        components.path = HTTPAPI.Path.search
        components.queryItems = items.map { URLQueryItem(name: $0.0, value: $0.1) }
        return components.string ?? HTTPAPI.Path.search
    }

    static func search(_ server: TestServer, _ user: String, _ items: [(String, String)]) async throws -> HTTPAPI.SearchResults {
        let answer = try await server.http("GET", Self.path(items), token: try await server.token(user))
        #expect(answer.status == 200, "\(items): \(answer.body)")
        guard let results = HTTPAPI.decode(HTTPAPI.SearchResults.self, from: Data(answer.body.utf8)) else {
            throw TestFailure("not a search page: \(answer.body)")
        }
        return results
    }

    static func refusal(_ server: TestServer, _ user: String, _ items: [(String, String)]) async throws -> (status: Int, code: CircleErrorCode?) {
        let answer = try await server.http("GET", Self.path(items), token: try await server.token(user))
        return (answer.status, HTTPAPI.decode(HTTPAPI.ErrorBody.self, from: Data(answer.body.utf8))?.error.code)
    }

    @Test("hits come only from circles the reader may read, with marked snippets")
    func readableCirclesOnly() async throws {
        try await Self.withSearchServer { server, _ in
            let bob = try await Self.search(server, "bob", [("q", "deploy"), ("order", "newest")])
            #expect(bob.hits.map(\.circle) == ["general", "general"])
            #expect(bob.hits.map(\.seq) == [3, 1])
            #expect(bob.hits.allSatisfy { $0.author == "alice" && $0.time > 0 })
            #expect(bob.hits.last?.snippet == "we \u{E000}deploy\u{E001} at five")
            #expect(bob.next == nil)

            let alice = try await Self.search(server, "alice", [("q", "deploy")])
            #expect(Set(alice.hits.map(\.circle)) == ["general", "team"])
            #expect(alice.hits.count == 3)

            let cafe = try await Self.search(server, "bob", [("q", "cafe")])
            #expect(cafe.hits.map(\.seq) == [2])

            let narrowed = try await Self.search(server, "alice", [("q", "deploy"), ("circle", "team")])
            #expect(narrowed.hits.map(\.circle) == ["team"])
            let outside = try await Self.search(server, "alice", [("q", "deploy in:general"), ("circle", "team")])
            #expect(outside.hits.isEmpty)
            let byBob = try await Self.search(server, "alice", [("q", "deploy"), ("from", "bob")])
            #expect(byBob.hits.isEmpty)
            let future = try await Self.search(server, "alice", [("q", "deploy"), ("after", "2999-01-01")])
            #expect(future.hits.isEmpty)
            let past = try await Self.search(server, "alice", [("q", "deploy"), ("before", "2999-01-01T00:00:00Z")])
            #expect(past.hits.count == 3)
        }
    }

    @Test("on PostgreSQL: the same hits, paging and refusals over HTTP and the WebSocket")
    func overPostgres() async throws {
        try await Self.withSearchServer(postgres: true) { server, alice in
            let bob = try await Self.search(server, "bob", [("q", "deploy"), ("order", "newest")])
            #expect(bob.hits.map { "\($0.circle)#\($0.seq)" } == ["general#3", "general#1"])
            #expect(bob.hits.allSatisfy { $0.snippet.contains("\u{E000}") && $0.snippet.contains("\u{E001}") }, "\(bob.hits.map(\.snippet))")
            #expect(try await Self.search(server, "bob", [("q", "cafe")]).hits.map(\.seq) == [2])
            let first = try await Self.search(server, "alice", [("q", "deploy"), ("order", "newest"), ("limit", "2")])
            let second = try await Self.search(server, "alice", [("q", "deploy"), ("order", "newest"), ("limit", "2"), ("cursor", first.next ?? "")])
            #expect(Set((first.hits + second.hits).map { "\($0.circle)#\($0.seq)" }) == ["general#3", "team#1", "general#1"])
            #expect(second.next == nil)
            for (items, status, code) in [
                ([("q", "deploy"), ("circle", "team")], 403, CircleErrorCode.forbidden), ([("q", "-deploy")], 400, .nothingToFind),
                ([("q", #"NEAR(deploy, 2) "unbalanced"#), ("cursor", "x")], 400, .badCursor),
            ] {
                let refusal = try await Self.refusal(server, "bob", items)
                #expect(refusal.status == status && refusal.code == code, "\(items): \(refusal)")
            }
            let reply = try await alice.request { .search(HTTPAPI.SearchRequest(q: "secret"), id: $0) }
            guard case .search(_, let results) = reply else { throw TestFailure("no search page: \(reply)") }
            #expect(results.hits.map(\.circle) == ["team"])
        }
    }

    @Test("a cursor goes on to the next page, in the same order")
    func paging() async throws {
        try await Self.withSearchServer { server, _ in
            var seen: [String] = []
            var cursor: String?
            for _ in 0..<4 {
                var items = [("q", "deploy"), ("order", "newest"), ("limit", "1")]
                if let cursor { items.append(("cursor", cursor)) }
                let page = try await Self.search(server, "alice", items)
                seen += page.hits.map { "\($0.circle)#\($0.seq)" }
                cursor = page.next
                if cursor == nil { break }
            }
            // Every hit once (two posts of one millisecond may come in either circle's order).
            #expect(seen.count == 3 && Set(seen) == ["general#3", "team#1", "general#1"], "\(seen)")
            #expect(cursor == nil)
        }
    }

    @Test("refusals carry their documented status and code")
    func refusals() async throws {
        try await Self.withSearchServer { server, _ in
            let cases: [([(String, String)], Int, CircleErrorCode)] = [
                ([("q", "")], 400, .nothingToFind),
                ([("q", "-only -exclusions")], 400, .nothingToFind),
                ([("q", String(repeating: "a", count: 513))], 400, .queryTooLong),
                ([("q", (1...17).map { "w\($0)" }.joined(separator: " "))], 400, .tooManyTerms),
                ([("q", "deploy before:yesterday")], 400, .badDate),
                ([("q", "deploy"), ("after", "2026-13-01")], 400, .badDate),
                ([("q", "deploy"), ("cursor", "not-a-cursor")], 400, .badCursor),
                ([("q", "deploy"), ("limit", "0")], 400, .badRequest),
                ([("q", "deploy"), ("limit", "101")], 400, .badRequest),
                ([("q", "deploy"), ("limit", "ten")], 400, .badRequest),
                ([("q", "deploy"), ("order", "oldest")], 400, .badRequest),
                ([("q", "deploy"), ("circle", "Not A Name")], 400, .badRequest),
                ([("limit", "5")], 400, .badRequest),
                ([("q", "deploy"), ("circle", "team")], 403, .forbidden),
                ([("q", "deploy in:team")], 403, .forbidden),
                ([("q", "deploy"), ("circle", "nope")], 404, .notFound),
            ]
            for (items, status, code) in cases {
                let refusal = try await Self.refusal(server, "bob", items)
                #expect(refusal.status == status && refusal.code == code, "\(items.map { "\($0.0)=\($0.1.prefix(40))" }): \(refusal)")
            }
            let twice = try await server.http("GET", "/v1/search?q=a&q=b", token: try await server.token("bob"))
            #expect(twice.status == 400)
            let anonymous = try await server.http("GET", Self.path([("q", "deploy")]))
            #expect(anonymous.status == 401)
            // FTS syntax is plain text: answered, never an error from the store.
            for text in [#"deploy NEAR(plan, 2)"#, "dep*", #""unbalanced"#, "text:deploy", "^deploy", "(deploy) AND NOT x"] {
                let answer = try await server.http("GET", Self.path([("q", text)]), token: try await server.token("bob"))
                #expect(answer.status == 200 || answer.status == 400, "\(text): \(answer.status) \(answer.body)")
            }
        }
    }

    @Test("the circle.v1 search request answers what GET /v1/search answers, and refuses alike")
    func overWebSocket() async throws {
        try await Self.withSearchServer { server, alice in
            let reply = try await alice.request { .search(HTTPAPI.SearchRequest(q: "deploy", order: "newest", limit: 2), id: $0) }
            guard case .search(_, let results) = reply else { throw TestFailure("no search page: \(reply)") }
            let http = try await Self.search(server, "alice", [("q", "deploy"), ("order", "newest"), ("limit", "2")])
            #expect(results == http)
            #expect(results.hits.count == 2 && results.next != nil)
            let rest = try await alice.request { .search(HTTPAPI.SearchRequest(q: "deploy", order: "newest", limit: 2, cursor: results.next), id: $0) }
            guard case .search(_, let second) = rest else { throw TestFailure("no second page: \(rest)") }
            #expect(second.hits.count == 1 && second.next == nil)
            let refusals: [(HTTPAPI.SearchRequest, CircleErrorCode)] = [
                (HTTPAPI.SearchRequest(q: ""), .nothingToFind),
                (HTTPAPI.SearchRequest(q: "deploy", limit: 0), .badRequest),
                (HTTPAPI.SearchRequest(q: "deploy", order: "random"), .badRequest),
                (HTTPAPI.SearchRequest(q: "deploy", before: "soon"), .badDate),
                (HTTPAPI.SearchRequest(q: "deploy", circle: "nope"), .notFound),
                (HTTPAPI.SearchRequest(q: "deploy", cursor: "x"), .badCursor),
            ]
            for (asked, code) in refusals {
                let answer = try await alice.request { .search(asked, id: $0) }
                #expect(answer.errorCode == code, "\(asked): \(answer)")
            }
        }
    }

    @Test("a space in a query string may be written + or %20")
    func formEncoding() async throws {
        try await Self.withSearchServer { server, _ in
            for query in ["q=deploy+done", "q=deploy%20done", "q=%22deploy+done%22"] {
                let answer = try await server.http("GET", "\(HTTPAPI.Path.search)?\(query)", token: try await server.token("bob"))
                let page = HTTPAPI.decode(HTTPAPI.SearchResults.self, from: Data(answer.body.utf8))
                #expect(page?.hits.map(\.seq) == [3], "\(query): \(answer.body)")
            }
        }
    }
}
