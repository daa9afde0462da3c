@testable import CircleServer
import CircleTestSupport
import CircleWire
import Foundation
import Logging
import PostgresNIO
import Testing

/// The search index of an upgraded database (SQLite, PostgreSQL), filled in the background by a real server.
@Suite("Search backfill, live")
struct SearchBackfillLiveTests {
    @Test("still_indexing is a 503 with Retry-After")
    func stillIndexingAnswer() {
        let error = SearchRoutes.apiError(SearchRefusal(.stillIndexing, "later"))
        #expect(error.status == .serviceUnavailable)
        #expect(error.code == .stillIndexing)
        #expect(error.headers[.retryAfter] == "5")
    }

    @Test(
        "a server on an upgraded database indexes the older posts in the background, shows it in /metrics, then finds them",
        arguments: [false, true]
    )
    func backfillOnUpgrade(postgres: Bool) async throws {
        let server = TestServer()
        let path = server.dataDirectory + "-old.sqlite"
        defer {
            server.remove()
            for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: path + suffix) }
        }
        var logger = Logger(label: "circle.test.backfill")
        logger.logLevel = .warning
        let count = 1_200
        let rows = { (seq: Int, text: (String) -> String) in
            "('old', \(seq), \(text("alice")), \(text("o\(seq)")), \(text("post number \(seq)\(seq == 777 ? " with a needle" : "")")), NULL, \(seq))"
        }
        let store: any CircleStore
        var pool: Task<Void, Never>?
        if postgres {
            let url = try await PostgresTestServer.shared.freshDatabase()
            let old = try PostgresStore(url: url, logger: logger)
            let oldPool = Task { await old.run() }
            try await old.migrate(upTo: PostgresStore.versionBeforeSearch)
            try await old.client.query(
                PostgresQuery(unsafeSQL: "INSERT INTO circles (name, owner, private, created_at, last_seq) VALUES ('old', 'alice', false, 1, \(count))"),
                logger: logger
            )
            for start in stride(from: 1, through: count, by: 200) {
                let values = (start..<(start + 200)).map { rows($0) { "convert_to('\($0)', 'UTF8')" } }
                try await old.client.query(
                    PostgresQuery(unsafeSQL: "INSERT INTO posts (circle, seq, author, client_id, text, attachment, time) VALUES \(values.joined(separator: ", "))"),
                    logger: logger
                )
            }
            oldPool.cancel()
            let current = try PostgresStore(url: url, logger: logger)
            pool = Task { await current.run() }
            store = current
        } else {
            let old = try await SQLiteStore.open(path: path, logger: logger)
            try await old.migrate(upTo: SQLiteStore.versionBeforeSearch)
            try await old.execute("INSERT INTO circles (name, owner, private, created_at, last_seq) VALUES ('old', 'alice', 0, 1, \(count))")
            for start in stride(from: 1, through: count, by: 200) {
                let values = (start..<(start + 200)).map { rows($0) { "'\($0)'" } }
                try await old.execute("INSERT INTO posts (circle, seq, author, client_id, text, attachment, time) VALUES \(values.joined(separator: ", "))")
            }
            try await old.close()
            store = try await SQLiteStore.open(path: path, logger: logger)
        }
        defer { pool?.cancel() }
        server.store = store
        try await server.start()
        // Bounded: the backfill's 3 batches of 500 take well under a minute even on a loaded machine.
        var metrics = ""
        let deadline = ContinuousClock.now + .seconds(60)
        while ContinuousClock.now < deadline {
            metrics = try await server.http("GET", "/metrics").body
            if metrics.contains("circle_search_index_ready 1") { break }
            try await Task.sleep(for: .milliseconds(50))
        }
        #expect(metrics.contains("circle_search_index_ready 1"), "\(metrics.split(separator: "\n").filter { $0.contains("search") })")
        #expect(metrics.contains("circle_search_backfill_indexed_posts \(count)"))
        let answer = try await server.http("GET", "/v1/search?q=needle", token: try await server.token("bob"))
        #expect(answer.status == 200, "\(answer.body)")
        let page = HTTPAPI.decode(HTTPAPI.SearchResults.self, from: Data(answer.body.utf8))
        #expect(page?.hits.map { "\($0.circle):\($0.seq)" } == ["old:777"])
        let all = try await server.http("GET", "/v1/search?q=number&limit=100", token: try await server.token("bob"))
        #expect(HTTPAPI.decode(HTTPAPI.SearchResults.self, from: Data(all.body.utf8))?.hits.count == 100)
        await server.stop()
        try await (store as? SQLiteStore)?.close()
    }
}
