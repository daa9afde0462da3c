import CircleWire
import Foundation
import SQLiteNIO
import Testing

@testable import CircleServer

/// The SQLite search index (schema step 7), as the post writer keeps it.
extension SQLiteStoreTests {
    /// The posts in the index, as `seq`s of circle "a", read on a connection of the test's own.
    func indexedSeqs(_ path: String, trigrams: Bool = false) async throws -> [Int64] {
        let connection = try await SQLiteConnection.open(storage: .file(path: path))
        do {
            let rows = try await connection.query("SELECT seq FROM search_docs WHERE circle = 'a' AND trigrams >= ? ORDER BY seq", [.integer(trigrams ? 1 : 0)])
            // Each indexed post's row holds its search id, and only theirs do.
            let kept = try await connection.query(
                """
                SELECT p.seq FROM posts AS p JOIN search_docs AS d ON d.id = p.search_id AND d.circle = p.circle AND d.seq = p.seq
                WHERE p.circle = 'a' AND d.trigrams >= ? ORDER BY p.seq
                """,
                [.integer(trigrams ? 1 : 0)]
            )
            let stray = try await connection.query(
                "SELECT count(*) AS n FROM posts AS p WHERE p.search_id IS NOT NULL AND NOT EXISTS (SELECT 1 FROM search_docs AS d WHERE d.id = p.search_id)"
            )
            try await connection.close()
            #expect(kept.map { $0.column("seq")?.integer } == rows.map { $0.column("seq")?.integer })
            #expect(stray.first?.column("n")?.integer == 0)
            return rows.compactMap { $0.column("seq")?.integer.map(Int64.init) }
        } catch {
            try await connection.close()
            throw error
        }
    }

    /// FTS5's own check, `rank = 1` included: every token of the index is in the content (the
    /// posts' current text) and the other way round. It fails the statement when they differ.
    func checkIndex(_ store: SQLiteStore) async throws {
        for table in ["search_words", "search_trigrams"] {
            try await store.execute("INSERT INTO \(table) (\(table), rank) VALUES ('integrity-check', 1)")
        }
    }

    @Test func searchIndexFollowsCommits() async throws {
        try await self.withDatabasePath { path in
            try await self.withStore(at: path) { store in
                _ = try await store.createCircle(name: "a", owner: "alice", isPrivate: false, createdAt: 1)
                func change(_ change: CircleChange, _ target: Int64, id: String, text: String? = nil, emoji: String? = nil) -> NewPost {
                    NewPost(circle: "a", author: "alice", clientID: id, text: text, attachment: nil, time: 2, change: change, target: target, emoji: emoji)
                }
                let first = try await store.commit([
                    self.newPost("a", id: "p1", text: "first text"),
                    self.newPost("a", id: "p2", text: "second"),
                    self.newPost("a", id: "p3", text: nil, attachment: "m"),
                    change(.edit, 1, id: "e1", text: "first edited"),
                    change(.delete, 2, id: "d1"),
                    change(.react, 1, id: "r1", emoji: "👍"),
                    NewPost(circle: "a", author: "bob", clientID: "re", text: "a reply", attachment: nil, time: 3, replyTo: 1),
                    self.newPost("a", id: "p4", text: ""),
                ])
                #expect(self.storedSeqs(first) == [1, 2, 3, 4, 5, 6, 7, 8])
                // Posts with text, in their state at the end of the batch; no change entries. Every
                // one is in both indexes.
                #expect(try await self.indexedSeqs(path) == [1, 7])
                #expect(try await self.indexedSeqs(path, trigrams: true) == [1, 7])
                try await self.checkIndex(store)

                _ = try await store.commit([change(.edit, 1, id: "e2", text: "edited again")])
                #expect(try await self.indexedSeqs(path) == [1, 7])
                try await self.checkIndex(store)
                _ = try await store.commit([change(.delete, 1, id: "d2")])
                #expect(try await self.indexedSeqs(path) == [7])
                try await self.checkIndex(store)
                // A post with no text gets some by an edit.
                _ = try await store.commit([change(.edit, 8, id: "e3", text: "now with words")])
                #expect(try await self.indexedSeqs(path) == [7, 8])
                try await self.checkIndex(store)
                #expect(try await self.indexedSeqs(path, trigrams: true) == [7, 8])
                _ = try await store.commit([self.newPost("a", id: "p5", text: "東京タワー")])
                #expect(try await self.indexedSeqs(path, trigrams: true) == [7, 8, 12])
                try await self.checkIndex(store)
                _ = try await store.commit([change(.edit, 12, id: "e4", text: "plain words now")])
                #expect(try await self.indexedSeqs(path, trigrams: true) == [7, 8, 12])
                #expect(try await self.indexedSeqs(path) == [7, 8, 12])
                try await self.checkIndex(store)
                // Several changes in one commit: one segment of new text for FTS5, given after the
                // commit's other writes (SQLitePostWriter.SearchAdd); what they replace is gone.
                let batch = try await store.commit([
                    change(.edit, 12, id: "e5", text: "また東京"),
                    change(.edit, 8, id: "e6", text: "words edited"),
                    self.newPost("a", id: "p6", text: "brand new"),
                    change(.edit, 12, id: "e7", text: "また東京 again"),
                ])
                #expect(self.storedSeqs(batch) == [14, 15, 16, 17])
                #expect(try await self.indexedSeqs(path) == [7, 8, 12, 16])
                #expect(try await self.indexedSeqs(path, trigrams: true) == [7, 8, 12, 16])
                try await self.checkIndex(store)
                for (text, seqs) in [("edited", [Int64(8)]), ("again", [12]), ("*ran", [16]), ("words", [8]), ("reply", [7]), ("now", [])] {
                    let page = try await store.search(try SearchQuery.parse(text), reader: "alice", options: SearchOptions())
                    #expect(page.hits.map(\.seq) == seqs, "\(text)")
                }
                _ = try await store.commit([change(.delete, 12, id: "d3")])
                #expect(try await self.indexedSeqs(path, trigrams: true) == [7, 8, 16])
                #expect(try await self.indexedSeqs(path) == [7, 8, 16])
                try await self.checkIndex(store)
            }
        }
    }

    /// The backfill indexes an upgraded database's posts exactly as the post writer would (a NUL
    /// and text after it included), so that later edits and deletes remove the very tokens.
    @Test func searchBackfillIndexesOldPostsExactly() async throws {
        try await self.withDatabasePath { path in
            let old = try await SQLiteStore.open(path: path, logger: Self.logger)
            try await old.migrate(upTo: SQLiteStore.versionBeforeSearch)
            let insert = "INSERT INTO posts (circle, seq, author, client_id, text, attachment, time, deleted) VALUES"
            for statement in [
                "INSERT INTO circles (name, owner, private, created_at, last_seq) VALUES ('a', 'alice', 0, 1, 4)",
                "\(insert) ('a', 1, 'alice', 'o1', 'plain old words', NULL, 10, 0)",
                "\(insert) ('a', 2, 'alice', 'o2', 'before' || char(0) || ' 東京タワー after', NULL, 20, 0)",
                "\(insert) ('a', 3, 'alice', 'o3', '', 'm', 30, 0)",
                "\(insert) ('a', 4, 'alice', 'o4', NULL, NULL, 40, 1)",
            ] {
                try await old.execute(statement)
            }
            try await old.close()
            try await self.withStore(at: path) { store in
                #expect(try await self.indexedSeqs(path).isEmpty)
                var rounds = 0
                while try await !store.backfillSearchIndex(batchSize: 3).done, rounds < 5 { rounds += 1 }
                #expect(rounds == 1)
                #expect(try await self.indexedSeqs(path) == [1, 2])
                #expect(try await self.indexedSeqs(path, trigrams: true) == [1, 2])
                try await self.checkIndex(store)
                let found = try await store.search(try SearchQuery.parse("after タワー"), reader: "bob", options: SearchOptions())
                #expect(found.hits.map(\.seq) == [2])
                func change(_ change: CircleChange, _ target: Int64, id: String, text: String? = nil) -> NewPost {
                    NewPost(circle: "a", author: "alice", clientID: id, text: text, attachment: nil, time: 50, change: change, target: target)
                }
                _ = try await store.commit([change(.edit, 2, id: "e1", text: "plain now"), change(.delete, 1, id: "d1")])
                #expect(try await self.indexedSeqs(path) == [2])
                #expect(try await self.indexedSeqs(path, trigrams: true) == [2])
                try await self.checkIndex(store)
            }
        }
    }

    /// A database whose posts were indexed before their rows kept their search ids (schema step
    /// 9) gets the ids in the upgrade, and edits and deletes then find and remove the very tokens.
    @Test func searchIDsMoveIntoThePostsOnUpgrade() async throws {
        try await self.withDatabasePath { path in
            let old = try await SQLiteStore.open(path: path, logger: Self.logger)
            let before = try #require(SQLiteStore.migrations.firstIndex { $0.summary == "search ids kept with the posts" })
            try await old.migrate(upTo: before)
            let insert = "INSERT INTO posts (circle, seq, author, client_id, text, attachment, time) VALUES"
            for statement in [
                "INSERT INTO circles (name, owner, private, created_at, last_seq) VALUES ('a', 'alice', 0, 1, 3)",
                "\(insert) ('a', 1, 'alice', 'o1', 'alpha words', NULL, 10)",
                "\(insert) ('a', 2, 'alice', 'o2', 'beta words', NULL, 20)",
                "\(insert) ('a', 3, 'alice', 'o3', 'gamma 東京タワー', NULL, 30)",
                "INSERT INTO search_docs (id, circle, seq, trigrams) VALUES (5, 'a', 1, 0), (6, 'a', 2, 0), (7, 'a', 3, 1)",
                "INSERT INTO search_words (search_words) VALUES ('rebuild')",
                "INSERT INTO search_trigrams (search_trigrams) VALUES ('rebuild')",
            ] {
                try await old.execute(statement)
            }
            try await old.close()
            try await self.withStore(at: path) { store in
                #expect(try await self.indexedSeqs(path) == [1, 2, 3])
                #expect(try await self.indexedSeqs(path, trigrams: true) == [3])
                try await self.checkIndex(store)
                // Schema step 12: the posts indexed without their substrings get them in the
                // background; searches wait for that.
                await #expect(throws: SearchError.self) {
                    _ = try await store.search(try SearchQuery.parse("alpha"), reader: "bob", options: SearchOptions())
                }
                var rounds = 0
                while try await !store.backfillSearchIndex(batchSize: 2).done, rounds < 5 { rounds += 1 }
                #expect(rounds == 1)
                #expect(try await self.indexedSeqs(path) == [1, 2, 3])
                #expect(try await self.indexedSeqs(path, trigrams: true) == [1, 2, 3])
                try await self.checkIndex(store)
                #expect(try await store.search(try SearchQuery.parse("*lph"), reader: "bob", options: SearchOptions()).hits.map(\.seq) == [1])
                func change(_ change: CircleChange, _ target: Int64, id: String, text: String? = nil) -> NewPost {
                    NewPost(circle: "a", author: "alice", clientID: id, text: text, attachment: nil, time: 50, change: change, target: target)
                }
                _ = try await store.commit([change(.edit, 1, id: "e1", text: "delta now"), change(.delete, 2, id: "d1"), change(.edit, 3, id: "e2", text: "plain")])
                #expect(try await self.indexedSeqs(path) == [1, 3])
                #expect(try await self.indexedSeqs(path, trigrams: true) == [1, 3])
                try await self.checkIndex(store)
                for (query, seqs) in [("alpha", [Int64]()), ("beta", []), ("delta", [1]), ("words", []), ("東京タワー", []), ("plain", [3]), ("*elt", [1]), ("*lph", [])] {
                    let found = try await store.search(try SearchQuery.parse(query), reader: "bob", options: SearchOptions())
                    #expect(found.hits.map(\.seq) == seqs, "\(query)")
                }
            }
        }
    }

    @Test func searchIndexCheckNoticesADifference() async throws {
        try await self.withStore { store in
            _ = try await store.createCircle(name: "a", owner: "alice", isPrivate: false, createdAt: 1)
            _ = try await store.commit([self.newPost("a", id: "p1", text: "indexed words")])
            try await self.checkIndex(store)
            // Text changed behind the index's back: the check that the tests above rely on fails.
            try await store.execute("UPDATE posts SET text = 'other words' WHERE circle = 'a' AND seq = 1")
            await #expect(throws: (any Error).self) { try await self.checkIndex(store) }
        }
    }
}
