@testable import CircleClient
import CircleServer
import CircleTestSupport
import CircleWire
import Foundation
import Testing

private func cached(_ seq: Int64, _ text: String, in circle: String = "c", by author: String = "ann", time: Int64? = nil) -> CirclePost {
    CirclePost(circle: circle, seq: seq, author: author, text: text, attachment: nil, time: time ?? seq * 1000, id: "id\(seq)")
}

@Suite("Search in the SDK: the offline matcher, and client.search against a real server", .serialized)
struct ClientSearchTests {
    @Test("the offline matcher: words and phrases as text, OR, exclusions, filters, newest first, marked snippets")
    func cachedMatching() throws {
        let posts = [
            cached(1, "We deploy at five"), cached(2, "the Café opens", by: "bob"), cached(3, "deploy: dry run first"),
            cached(4, "deploy done", in: "d"), cached(5, "release notes"),
        ]
        func seqs(_ q: String, circle: String? = nil, from: String? = nil) -> [String] {
            guard let search = CachedSearch(HTTPAPI.SearchRequest(q: q, circle: circle, from: from)) else { return ["nothing"] }
            return search.hits(in: posts, offset: 0, limit: 10).hits.map { "\($0.circle)\($0.seq)" }
        }
        #expect(seqs("deploy") == ["d4", "c3", "c1"])
        #expect(seqs("cafe") == ["c2"])
        #expect(seqs(#""dry run""#) == ["c3"])
        #expect(seqs(#"deploy -"dry run""#) == ["d4", "c1"])
        #expect(seqs("deploy -done") == ["c3", "c1"])
        #expect(seqs("release OR cafe") == ["c5", "c2"])
        #expect(seqs("deploy in:d") == ["d4"])
        #expect(seqs("deploy", circle: "c") == ["c3", "c1"])
        #expect(seqs("deploy in:d", circle: "c").isEmpty)
        #expect(seqs("opens from:bob") == ["c2"])
        #expect(seqs("opens", from: "ann").isEmpty)
        #expect(seqs("deploy before:1970-01-02") == ["d4", "c3", "c1"])
        #expect(seqs("deploy before:1970-01-01").isEmpty)
        #expect(seqs("deploy after:1970-01-01T00:00:01Z") == ["d4", "c3"])
        #expect(seqs("deploy after:1970-01-02").isEmpty)
        #expect(seqs("-deploy") == ["nothing"])
        #expect(seqs("* --") == ["nothing"])
        let page = try #require(CachedSearch(HTTPAPI.SearchRequest(q: "deploy"))).hits(in: posts, offset: 1, limit: 1)
        #expect(page.hits.map(\.seq) == [3])
        #expect(page.more)
        #expect(page.hits.first?.snippet == "\u{E000}deploy\u{E001}: dry run first")
    }

    @Test("client.search asks the server when connected and answers from the offline cache when not, saying so")
    func connectedAndOffline() async throws {
        let server = TestServer(limits: .init(postsPerSecond: 10_000, postBurst: 10_000))
        let stateFile = server.dataDirectory + "-search.sqlite"
        defer { server.remove(); removeStateFile(stateFile) }
        try await server.start()
        try await server.createCircle("feed", owner: "alice")
        func client(_ user: String, port: Int? = nil, stateFile: String? = nil) async throws -> CircleClient {
            try await CircleClient(
                configuration: .init(
                    servers: ["ws://127.0.0.1:\(port ?? server.port)/v1/ws"],
                    tokenProvider: { try await server.token(user, ttl: .seconds(3600)) },
                    reconnect: .init(base: .milliseconds(100), cap: .seconds(1)),
                    stateFile: stateFile
                )
            )
        }
        let alice = try await client("alice")
        await alice.connect()
        var reader = try await client("rita", stateFile: stateFile)
        let events = await reader.messages(in: "feed")
        _ = events
        await reader.connect()
        #expect(await eventually { await reader.cursor(of: "feed") != nil })
        var last: Int64 = 0
        for text in ["we deploy at five", "lunch?", "deploy done"] { last = try await alice.post(text, to: "feed").seq }
        #expect(await eventually { await reader.cursor(of: "feed") == last })

        let online = try await reader.search("deploy", newest: true)
        #expect(!online.fromCache)
        #expect(online.hits.map(\.seq) == [3, 1])
        #expect(online.hits.first?.snippet == "\u{E000}deploy\u{E001} done")
        do {
            _ = try await reader.search("-deploy")
            Issue.record("a search with nothing to find was answered")
        } catch let error as CircleClientError {
            #expect(error.code == .server(.nothingToFind), "\(error)")
        }
        await reader.shutdown()

        let port = server.port
        await server.stop()
        reader = try await client("rita", port: port, stateFile: stateFile)
        let offline = try await reader.search("deploy")
        #expect(offline.fromCache)
        #expect(offline.hits.map(\.seq) == [3, 1])
        #expect(offline.hits.last?.snippet == "we \u{E000}deploy\u{E001} at five")
        await reader.shutdown()
        await alice.shutdown()
    }
}
