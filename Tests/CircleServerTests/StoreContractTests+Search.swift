import CircleTestSupport
import CircleWire
import Foundation
import SQLiteNIO
import Testing

@testable import CircleServer

/// ``CircleStore/search(_:reader:options:)``, on both stores.
extension StoreContractTests {
    /// Noon (UTC) of a day in November 2026.
    func searchDay(_ day: Int64) -> Int64 {
        SearchDate.days(year: 2026, month: 11, day: day) * 86_400_000 + 12 * 3_600_000
    }

    /// Three circles (`secret` is private: alice and carol), a few posts, an edit, a delete and a reaction.
    func makeSearchFixture(_ store: any CircleStore) async throws {
        _ = try await store.createCircle(name: "general", owner: "alice", isPrivate: false, createdAt: 1)
        _ = try await store.createCircle(name: "random", owner: "bob", isPrivate: false, createdAt: 1)
        _ = try await store.createCircle(name: "secret", owner: "alice", isPrivate: true, createdAt: 1)
        try await store.addMember("carol", to: "secret")
        let outcomes = try await store.commit([
            self.newPost("general", author: "alice", id: "g1", text: "The deploy went fine", time: self.searchDay(1)),
            self.newPost("general", author: "bob", id: "g2", text: "Café au lait at the office", time: self.searchDay(2)),
            self.newPost("general", author: "alice", id: "g3", text: "dry run of the release", time: self.searchDay(3)),
            self.newPost("general", author: "carol", id: "g4", text: "東京タワーに行きました", time: self.searchDay(4)),
            self.newPost("general", author: "bob", id: "g5", text: "deploy failed, rolling back", time: self.searchDay(5)),
            self.newPost("random", author: "bob", id: "r1", text: "deploy pizza party", time: self.searchDay(6)),
            self.newPost("secret", author: "alice", id: "s1", text: "secret deploy plans", time: self.searchDay(7)),
            self.newPost("general", author: "alice", id: "g6", text: nil, attachment: nil, time: self.searchDay(8)),
        ])
        #expect(self.storedSeqs(outcomes) == [1, 2, 3, 4, 5, 1, 1, 6])
        let changes = try await store.commit([
            self.change("general", .edit, 3, by: "alice", id: "e1", text: "final notes for the launch", time: self.searchDay(9)),
            self.change("general", .delete, 5, by: "bob", id: "d1", time: self.searchDay(9)),
            self.change("general", .react, 1, by: "bob", id: "x1", emoji: "👍", time: self.searchDay(9)),
        ])
        #expect(self.storedSeqs(changes) == [7, 8, 9])
    }

    /// The hits of a search as `circle:seq`, in order.
    func found(_ store: any CircleStore, _ text: String, reader: String = "bob", options: SearchOptions = SearchOptions()) async throws -> [String] {
        let page = try await store.search(try SearchQuery.parse(text), reader: reader, options: options)
        return page.hits.map { "\($0.circle):\($0.seq)" }
    }

    func foundSet(_ store: any CircleStore, _ text: String, reader: String = "bob") async throws -> Set<String> {
        Set(try await self.found(store, text, reader: reader))
    }

    @Test(arguments: StoreKind.allCases) func searchWordsPhrasesAndExclusions(_ kind: StoreKind) async throws {
        try await self.withStore(kind) { store in
            try await self.makeSearchFixture(store)
            // A word: the deleted post and the private circle bob is not in are not found.
            #expect(try await self.foundSet(store, "deploy") == ["general:1", "random:1"])
            #expect(try await self.foundSet(store, "DEPLOY") == ["general:1", "random:1"])
            // A phrase: the words in that order, next to each other.
            #expect(try await self.found(store, "\"went fine\"") == ["general:1"])
            #expect(try await self.found(store, "\"fine went\"").isEmpty)
            #expect(try await self.found(store, "deploy fine") == ["general:1"])
            // Exclusion of a word and of a phrase; OR.
            #expect(try await self.found(store, "deploy -pizza") == ["general:1"])
            #expect(try await self.found(store, "deploy -\"pizza party\"") == ["general:1"])
            #expect(try await self.foundSet(store, "pizza OR office") == ["random:1", "general:2"])
            #expect(try await self.found(store, "pizza OR office party") == ["random:1"])
            // Diacritics and case folded both ways.
            #expect(try await self.found(store, "cafe") == ["general:2"])
            #expect(try await self.found(store, "CAFÉ") == ["general:2"])
            #expect(try await self.found(store, "cafe\u{301}") == ["general:2"])
            // A hit says what it is.
            let page = try await store.search(try SearchQuery.parse("went"), reader: "bob", options: SearchOptions())
            let hit = try #require(page.hits.first)
            #expect(hit.circle == "general" && hit.seq == 1 && hit.author == "alice" && hit.time == self.searchDay(1))
            #expect(hit.snippet.contains("\u{E000}went\u{E001}"))
            #expect(hit.snippet.replacingOccurrences(of: "\u{E000}", with: "").replacingOccurrences(of: "\u{E001}", with: "") == "The deploy went fine")
            #expect(page.next == nil)
        }
    }

    @Test(arguments: StoreKind.allCases) func searchFilters(_ kind: StoreKind) async throws {
        try await self.withStore(kind) { store in
            try await self.makeSearchFixture(store)
            #expect(try await self.found(store, "deploy from:bob") == ["random:1"])
            #expect(try await self.foundSet(store, "deploy from:bob from:@alice") == ["general:1", "random:1"])
            #expect(try await self.found(store, "deploy in:general") == ["general:1"])
            #expect(try await self.found(store, "deploy in:#random") == ["random:1"])
            #expect(try await self.found(store, "deploy in:nowhere").isEmpty)
            #expect(try await self.found(store, "deploy before:2026-11-06") == ["general:1"])
            #expect(try await self.found(store, "deploy after:2026-11-01") == ["random:1"])
            #expect(try await self.foundSet(store, "deploy after:2026-11-01T11:00:00Z") == ["general:1", "random:1"])
            #expect(try await self.found(store, "deploy after:2026-11-06T12:00:00Z").isEmpty)
            #expect(try await self.found(store, "deploy after:2026-11-06T11:59:59.999Z") == ["random:1"])
        }
    }

    @Test(arguments: StoreKind.allCases) func searchSeesOnlyReadableCircles(_ kind: StoreKind) async throws {
        try await self.withStore(kind) { store in
            try await self.makeSearchFixture(store)
            #expect(try await self.found(store, "secret").isEmpty)
            #expect(try await self.found(store, "plans in:secret").isEmpty)
            #expect(try await self.foundSet(store, "deploy", reader: "alice") == ["general:1", "random:1", "secret:1"])
            #expect(try await self.found(store, "plans", reader: "carol") == ["secret:1"])
            // Membership is read by the query itself: joining and leaving count at once.
            try await store.addMember("bob", to: "secret")
            #expect(try await self.found(store, "plans") == ["secret:1"])
            try await store.removeMember("bob", from: "secret")
            #expect(try await self.found(store, "plans").isEmpty)
            // Pages never count what the reader cannot see: two visible hits, no next page.
            let page = try await store.search(try SearchQuery.parse("deploy"), reader: "bob", options: SearchOptions(limit: 2))
            #expect(page.hits.count == 2 && page.next == nil)
        }
    }

    @Test(arguments: StoreKind.allCases) func searchFindsOnlyCurrentText(_ kind: StoreKind) async throws {
        try await self.withStore(kind) { store in
            try await self.makeSearchFixture(store)
            // The edit replaced "dry run of the release"; the edit entry itself is not a hit.
            #expect(try await self.found(store, "dry").isEmpty)
            #expect(try await self.found(store, "\"dry run\"").isEmpty)
            #expect(try await self.found(store, "release").isEmpty)
            #expect(try await self.found(store, "launch") == ["general:3"])
            // Deleted: its words are gone.
            #expect(try await self.found(store, "rolling").isEmpty)
            // Edited twice, then deleted.
            _ = try await store.commit([self.change("general", .edit, 3, by: "alice", id: "e2", text: "launch moved to friday")])
            #expect(try await self.found(store, "launch") == ["general:3"])
            #expect(try await self.found(store, "notes").isEmpty)
            #expect(try await self.found(store, "friday") == ["general:3"])
            _ = try await store.commit([self.change("general", .delete, 3, by: "alice", id: "d2")])
            #expect(try await self.found(store, "launch").isEmpty)
            #expect(try await self.found(store, "friday").isEmpty)
            // Posted, edited and deleted within one batch: never indexed.
            _ = try await store.commit([
                self.newPost("general", author: "alice", id: "b1", text: "ephemeral thought"),
                self.change("general", .edit, 12, by: "alice", id: "b2", text: "ephemeral second thought"),
                self.newPost("general", author: "alice", id: "b3", text: "lasting thought"),
                self.change("general", .edit, 14, by: "alice", id: "b4", text: "lasting better thought"),
                self.change("general", .delete, 12, by: "alice", id: "b5"),
            ])
            #expect(try await self.found(store, "ephemeral").isEmpty)
            #expect(try await self.found(store, "better") == ["general:14"])
            #expect(try await self.found(store, "thought") == ["general:14"])
        }
    }

    @Test(arguments: StoreKind.allCases) func searchSpacelessScripts(_ kind: StoreKind) async throws {
        try await self.withStore(kind) { store in
            try await self.makeSearchFixture(store)
            // Three characters or more: the trigram index; fewer: a substring scan.
            #expect(try await self.found(store, "東京タワー") == ["general:4"])
            #expect(try await self.found(store, "タワー") == ["general:4"])
            #expect(try await self.found(store, "東京") == ["general:4"])
            #expect(try await self.found(store, "大阪").isEmpty)
            #expect(try await self.found(store, "東京 -タワー").isEmpty)
            #expect(try await self.found(store, "東京 from:bob").isEmpty)
            // A group with a CJK term goes to the trigram index whole.
            #expect(try await self.foundSet(store, "deploy OR 東京タワー") == ["general:1", "random:1", "general:4"])
            #expect(try await self.foundSet(store, "deploy -東京") == ["general:1", "random:1"])
            for text in ["東京タワー", "東京"] {
                let page = try await store.search(try SearchQuery.parse(text), reader: "bob", options: SearchOptions())
                let snippet = try #require(page.hits.first?.snippet)
                #expect(snippet.contains("\u{E000}"), "\(snippet)")
                #expect(snippet.replacingOccurrences(of: "\u{E000}", with: "").replacingOccurrences(of: "\u{E001}", with: "") == "東京タワーに行きました")
            }
        }
    }

    /// `dep*` (words beginning so) and `*ploy` (letters anywhere, inside words too): the word
    /// index with a prefix, the trigram index (every post's text), a scan under three characters.
    @Test(arguments: StoreKind.allCases) func searchPrefixesAndSubstrings(_ kind: StoreKind) async throws {
        try await self.withStore(kind) { store in
            try await self.makeSearchFixture(store)
            for query in ["*ploy", "*ploy*", "*EPLO", "dep*", "DEPL*", "deploy*"] {
                #expect(try await self.foundSet(store, query) == ["general:1", "random:1"], "\(query)")
            }
            #expect(try await self.found(store, "ploy").isEmpty)
            #expect(try await self.found(store, "ploy*").isEmpty)
            #expect(try await self.found(store, "*ffic") == ["general:2"])
            #expect(try await self.found(store, "*afe") == ["general:2"])
            #expect(try await self.found(store, "caf*") == ["general:2"])
            #expect(try await self.found(store, "*zz") == ["random:1"])
            #expect(try await self.found(store, "*ploy -*izz") == ["general:1"])
            #expect(try await self.found(store, "*ploy -piz*") == ["general:1"])
            #expect(try await self.foundSet(store, "*izza OR *ffice") == ["random:1", "general:2"])
            #expect(try await self.found(store, "*ploy went") == ["general:1"])
            // Only current text: the edit replaced "dry run of the release"; the deleted post is gone.
            #expect(try await self.found(store, "*eleas").isEmpty)
            #expect(try await self.found(store, "*aunc") == ["general:3"])
            #expect(try await self.found(store, "*olling").isEmpty)
            // The private circle stays private.
            #expect(try await self.foundSet(store, "*ecre", reader: "alice") == ["secret:1"])
            #expect(try await self.found(store, "*ecre").isEmpty)
            // A hit marks what matched.
            for query in ["*ploy", "dep*"] {
                let page = try await store.search(try SearchQuery.parse(query), reader: "bob", options: SearchOptions(order: .newest))
                let snippet = try #require(page.hits.last?.snippet)
                #expect(snippet.contains("\u{E000}"), "\(query): \(snippet)")
                #expect(snippet.replacingOccurrences(of: "\u{E000}", with: "").replacingOccurrences(of: "\u{E001}", with: "") == "The deploy went fine")
            }
        }
    }

    @Test(arguments: StoreKind.allCases) func searchPages(_ kind: StoreKind) async throws {
        try await self.withStore(kind) { store in
            _ = try await store.createCircle(name: "a", owner: "alice", isPrivate: false, createdAt: 1)
            _ = try await store.createCircle(name: "b", owner: "alice", isPrivate: false, createdAt: 1)
            var batch: [NewPost] = []
            for index in 0..<7 {
                // Two posts share each time: the circle and seq decide between them.
                batch.append(self.newPost(index % 2 == 0 ? "a" : "b", id: "p\(index)", text: "paging item \(index)", time: self.searchDay(Int64(index / 2 + 1))))
            }
            _ = try await store.commit(batch)
            for order in [SearchOptions.Order.newest, .relevance] {
                var seen: [String] = []
                var cursor: String?
                var pages = 0
                repeat {
                    let page = try await store.search(try SearchQuery.parse("paging"), reader: "bob", options: SearchOptions(order: order, limit: 3, cursor: cursor))
                    seen += page.hits.map { "\($0.circle):\($0.seq)" }
                    #expect(page.hits.count <= 3)
                    cursor = page.next
                    pages += 1
                } while cursor != nil && pages < 10
                #expect(pages == 3)
                #expect(Set(seen).count == 7 && seen.count == 7)
                if order == .newest {
                    #expect(seen == ["a:4", "b:3", "a:3", "b:2", "a:2", "b:1", "a:1"])
                }
            }
            // A cursor of the other order, or a damaged one, is refused.
            let first = try await store.search(try SearchQuery.parse("paging"), reader: "bob", options: SearchOptions(order: .newest, limit: 3))
            let next = try #require(first.next)
            let wrongOrder = await #expect(throws: SearchError.self) {
                _ = try await store.search(try SearchQuery.parse("paging"), reader: "bob", options: SearchOptions(order: .relevance, cursor: next))
            }
            #expect(wrongOrder?.code == .badCursor)
            await #expect(throws: SearchError.self) {
                _ = try await store.search(try SearchQuery.parse("paging"), reader: "bob", options: SearchOptions(cursor: "%%%"))
            }
        }
    }

    /// FTS syntax of both stores, SQL, and other hostile input: a typed query error, or a page.
    @Test(arguments: StoreKind.allCases) func searchTreatsInjectionAsText(_ kind: StoreKind) async throws {
        try await self.withStore(kind) { store in
            try await self.makeSearchFixture(store)
            let attempts = [
                "NEAR(deploy fine)", "NEAR(deploy fine, 2)", "deploy*", "^deploy", "text:deploy", "{text}:deploy", "\"unbalanced",
                "deploy\" OR \"pizza", "(deploy", "deploy)", "deploy AND NOT fine", "deploy NOT fine", "'; DROP TABLE posts; --",
                "deploy' OR 1=1 --", "\\", "%", "_", "%deploy%", "de_ploy", "!!deploy", "deploy & fine", "deploy | fine", "deploy <-> fine",
                "deploy:*", "a:*", "deploy:A", "\"\"\"\"", "-\"", "OR", "* OR *", "rank:1", "search_words:deploy", "\u{0}deploy",
                "d\u{0}eploy", "東京*", "%東%", "_京", "\u{E000}deploy\u{E001}", String(repeating: "x", count: 400),
                String(repeating: "ab ", count: 16), "from:bob' OR '1'='1", "in:\"general\"", "deploy -\"", "\"deploy\"\"fine\"",
            ]
            for attempt in attempts {
                let query: SearchQuery
                do throws(SearchQueryError) {
                    query = try SearchQuery.parse(attempt)
                } catch {
                    #expect(!error.message.isEmpty)
                    continue
                }
                let page = try await store.search(query, reader: "bob", options: SearchOptions())
                #expect(page.hits.allSatisfy { $0.circle != "secret" }, "\(attempt)")
            }
            // Operators are words: these find what their words find, and nothing more (`deploy*`
            // is a prefix: here the same posts).
            #expect(try await self.foundSet(store, "deploy*") == ["general:1", "random:1"])
            #expect(try await self.foundSet(store, "^deploy") == ["general:1", "random:1"])
            #expect(try await self.found(store, "NEAR(deploy fine)").isEmpty)  // "near deploy" is not in the text
            #expect(try await self.found(store, "NEAR deploy went fine").isEmpty)
            #expect(try await self.found(store, "text:deploy").isEmpty)
            #expect(try await self.found(store, "deploy AND NOT fine").isEmpty)
            #expect(try await self.found(store, "%deploy%").count == 2)
            #expect(try await self.found(store, "%東%").isEmpty)
            #expect(try await self.found(store, "de_ploy").isEmpty)
        }
    }

    /// A database from before the search step upgrades in place, commits index from then on, and
    /// the posts stored before are found too: the index starts empty and searches say "still
    /// indexing" until the backfill has run, a batch at a time, beside commits.
    @Test(arguments: StoreKind.allCases) func searchAfterMigration(_ kind: StoreKind) async throws {
        try await self.withLocation(kind) { location in
            let isPrivate = kind == .sqlite ? "0" : "false"
            let user = kind == .sqlite ? "user" : "user_name"
            let version = kind == .sqlite ? SQLiteStore.versionBeforeSearch : PostgresStore.versionBeforeSearch
            try await self.makeOldDatabase(at: location, version: version, [
                "INSERT INTO circles (name, owner, private, created_at, last_seq) VALUES ('old', 'alice', \(isPrivate), 1, 2)",
                "INSERT INTO members (circle, \(user)) VALUES ('old', 'alice')",
                "INSERT INTO posts (circle, seq, author, client_id, text, attachment, time) VALUES ('old', 1, 'alice', 'o1', 'first words', NULL, 10)",
                "INSERT INTO posts (circle, seq, author, client_id, text, attachment, time) VALUES ('old', 2, 'bob', 'o2', 'second words', NULL, 20)",
            ])
            try await self.withStore(at: location) { store in
                _ = try await store.commit([
                    self.change("old", .edit, 1, id: "e1", text: "first edited", time: 40),
                    self.newPost("old", author: "bob", id: "n1", text: "new words", time: 50),
                ])
                // The posts stored before the step are not in the index yet: searches say so
                // until the backfill has indexed them.
                let early = await #expect(throws: SearchError.self) { _ = try await self.found(store, "new") }
                #expect(early?.code == .stillIndexing)
                var steps: [SearchBackfillProgress] = []
                repeat {
                    steps.append(try await store.backfillSearchIndex(batchSize: 2))
                } while steps.last?.done == false && steps.count < 10
                // Entries 1 and 2 (1 was edited: the commit indexed it), then 3 and 4 (an edit and
                // a post the commit indexed), then none.
                #expect(steps.map(\.indexed) == [1, 1, 1])
                #expect(steps.map(\.done) == [false, false, true])
                #expect(try await store.backfillSearchIndex(batchSize: 2).done)
                #expect(try await self.found(store, "edited") == ["old:1"])
                #expect(try await self.found(store, "first") == ["old:1"])
                #expect(try await self.found(store, "new") == ["old:4"])
                #expect(try await self.found(store, "second") == ["old:2"])
                let words = try await self.foundSet(store, "words")
                #expect(words == ["old:2", "old:4"])
            }
        }
    }

    /// Several PostgreSQL nodes backfill one database at once: batches run one at a time (the
    /// row lock), each post is indexed once, and every node ends up answering searches.
    @Test func searchBackfillAcrossNodes() async throws {
        try await self.withLocation(.postgres) { location in
            guard case .postgres(let url) = location else { return }
            let count = 300
            let values = (1...count).map { "('old', \($0), convert_to('alice', 'UTF8'), convert_to('o\($0)', 'UTF8'), convert_to('word\($0) common', 'UTF8'), NULL, \($0))" }
            try await self.makeOldDatabase(at: location, version: PostgresStore.versionBeforeSearch, [
                "INSERT INTO circles (name, owner, private, created_at, last_seq) VALUES ('old', 'alice', false, 1, \(count))",
                "INSERT INTO posts (circle, seq, author, client_id, text, attachment, time) VALUES \(values.joined(separator: ", "))",
            ])
            let nodes = try (0..<3).map { _ in try PostgresStore(url: url, logger: Self.logger) }
            let pools = nodes.map { node in Task { await node.run() } }
            defer { for pool in pools { pool.cancel() } }
            try await nodes[0].migrate()
            let early = await #expect(throws: SearchError.self) {
                _ = try await nodes[1].search(try SearchQuery.parse("common"), reader: "bob", options: SearchOptions())
            }
            #expect(early?.code == .stillIndexing)
            let finals = try await withThrowingTaskGroup(of: SearchBackfillProgress.self) { group in
                for node in nodes {
                    group.addTask {
                        var step = try await node.backfillSearchIndex(batchSize: 7)
                        var rounds = 0
                        while !step.done, rounds < 200 {
                            step = try await node.backfillSearchIndex(batchSize: 7)
                            rounds += 1
                        }
                        return step
                    }
                }
                return try await group.reduce(into: []) { $0.append($1) }
            }
            #expect(finals.allSatisfy { $0.done && $0.indexed == Int64(count) }, "\(finals)")
            for node in nodes {
                let page = try await node.search(try SearchQuery.parse("word123"), reader: "bob", options: SearchOptions())
                #expect(page.hits.map { "\($0.circle):\($0.seq)" } == ["old:123"])
            }
        }
    }

    /// A search that runs past its time bound is stopped with `.timedOut`, and the store searches
    /// on afterwards. (The statements stand in for a search over a huge table; each would end on
    /// its own after several seconds, so a broken bound fails the test instead of hanging it.)
    @Test(arguments: StoreKind.allCases) func searchTimeBound(_ kind: StoreKind) async throws {
        try await self.withStore(kind) { store in
            try await self.makeSearchFixture(store)
            let options = SearchOptions(timeLimit: .milliseconds(50))
            let stopped = await #expect(throws: SearchError.self) {
                switch store {
                case let sqlite as SQLiteStore:
                    let statement = SQLiteSearchStatement(
                        sql: """
                            WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 100000000)
                            SELECT 'a', 1, 'b', 2, 'c' FROM c WHERE x < 0
                            """,
                        values: []
                    )
                    _ = try await sqlite.searcher.search(statement, options: options)
                case let postgres as PostgresStore:
                    let statement = PostgresSearchStatement(
                        query: "SELECT 'a', 1::int8, '\\x'::bytea, 2::int8, NULL::text, '\\x'::bytea FROM pg_sleep(10)",
                        snippetTerms: nil
                    )
                    _ = try await postgres.search(statement, options: options)
                default:
                    Issue.record("unknown store \(type(of: store))")
                }
            }
            #expect(stopped?.code == .timedOut)
            for _ in 0..<3 {
                #expect(try await self.foundSet(store, "deploy") == ["general:1", "random:1"])
            }
        }
    }

    /// The SQLite this build bundles has what schema step 6 needs.
    @Test func bundledSQLiteHasFTS5AndTrigrams() async throws {
        let connection = try await SQLiteConnection.open(storage: .memory)
        do {
            let options = try await connection.query("PRAGMA compile_options").compactMap { $0.column("compile_options")?.string }
            #expect(options.contains("ENABLE_FTS5"))
            let version = try await connection.query("SELECT sqlite_version() AS version").first?.column("version")?.string ?? ""
            let parts = version.split(separator: ".").compactMap { Int($0) }
            // The trigram tokenizer's remove_diacritics option came in 3.45.
            #expect(parts.count >= 2 && (parts[0], parts[1]) >= (3, 45), "\(version)")
            _ = try await connection.query("CREATE VIRTUAL TABLE t USING fts5 (text, tokenize = 'trigram remove_diacritics 1')")
            _ = try await connection.query("INSERT INTO t (text) VALUES ('東京タワー')")
            #expect(try await connection.query("SELECT rowid FROM t WHERE t MATCH '\"京タワ\"'").count == 1)
        } catch {
            try await connection.close()
            throw error
        }
        try await connection.close()
    }
}
