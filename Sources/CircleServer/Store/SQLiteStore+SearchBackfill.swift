import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOCore
import SQLiteNIO

/// The search index of a database from before it existed: the posts stored before the schema
/// step are indexed in the background, a batch per write transaction, while the server serves.
extension SQLiteStore {
    /// Whether the search index holds every post; reads `search_backfill` until it does.
    func searchIndexComplete() async throws -> Bool {
        if self.searchIndexDone.withLockedValue({ $0 }) == true { return true }
        let done = try await self.exclusive("read the search index's state") { connection in
            try await connection.query("SELECT done FROM search_backfill WHERE id = 1").first?.column("done")?.integer ?? 1
        }
        if done == 1 { self.searchIndexDone.withLockedValue { $0 = true } }
        return done == 1
    }

    /// Indexes the next `batchSize` entries of the posts table (in `(circle, seq)` order, from
    /// where the last batch stopped) that the index lacks, in one write transaction: a commit
    /// waits for it at most that long, and one that changed a post first indexed it already.
    /// A post indexed before every post's substrings were (schema step 12: its `search_docs`
    /// row says `trigrams = 0`) gets its substrings.
    ///
    /// - Parameter batchSize: Entries looked at per transaction (posts and changes).
    /// - Returns: The progress after the batch.
    public func backfillSearchIndex(batchSize: Int = SearchBackfill.batchSize) async throws -> SearchBackfillProgress {
        let progress = try await self.exclusive("index old posts for search") { connection in
            try await Self.transaction(on: connection, logger: self.logger) { () async throws -> SearchBackfillProgress in
                guard let state = try await connection.query("SELECT done, circle, seq, indexed FROM search_backfill WHERE id = 1").first else {
                    return SearchBackfillProgress(indexed: 0, done: true)
                }
                var indexed = Int64(state.column("indexed")?.integer ?? 0)
                if state.column("done")?.integer == 1 { return SearchBackfillProgress(indexed: indexed, done: true) }
                let rows = try await connection.query(
                    """
                    SELECT p.circle, p.seq, p.change IS NULL AND p.deleted = 0 AND p.text IS NOT NULL AND p.text <> '' AS searchable,
                        p.search_id AS id, coalesce(d.trigrams, 0) AS trigrams
                    FROM posts AS p LEFT JOIN search_docs AS d ON d.id = p.search_id
                    WHERE (p.circle, p.seq) > (?1, ?2) ORDER BY p.circle, p.seq LIMIT ?3
                    """,
                    [.text(state.column("circle")?.string ?? ""), .integer(state.column("seq")?.integer ?? 0), .integer(SQLiteInt64(max(1, batchSize)))]
                )
                for row in rows where row.column("searchable")?.integer == 1 && row.column("trigrams")?.integer == 0 {
                    // The text goes from `posts` to the index inside SQLite: the very bytes the post
                    // writer reads back to remove it (sqlite-nio's text would stop at a NUL).
                    guard let circle = row.column("circle")?.string, let seq = row.column("seq")?.integer else { continue }
                    let tables: [String]
                    let id: Int
                    if let indexed = row.column("id")?.integer {
                        // In the word index already, not in the trigram index.
                        id = indexed
                        tables = ["search_trigrams"]
                        _ = try await connection.query("UPDATE search_docs SET trigrams = 1 WHERE id = ?1", [.integer(id)])
                    } else {
                        guard
                            let added = try await connection.query(
                                "INSERT INTO search_docs (circle, seq, trigrams) VALUES (?1, ?2, 1) RETURNING id", [.text(circle), .integer(seq)]
                            ).first?.column("id")?.integer
                        else { continue }
                        id = added
                        tables = ["search_words", "search_trigrams"]
                        _ = try await connection.query(
                            "UPDATE posts SET search_id = ?3 WHERE circle = ?1 AND seq = ?2", [.text(circle), .integer(seq), .integer(id)]
                        )
                    }
                    for table in tables {
                        _ = try await connection.query(
                            "INSERT INTO \(table) (rowid, text) SELECT ?1, text FROM posts WHERE circle = ?2 AND seq = ?3",
                            [.integer(id), .text(circle), .integer(seq)]
                        )
                    }
                    indexed += 1
                }
                let done = rows.count < max(1, batchSize)
                let last = rows.last
                _ = try await connection.query(
                    "UPDATE search_backfill SET done = ?1, circle = ?2, seq = ?3, indexed = ?4 WHERE id = 1",
                    [
                        .integer(done ? 1 : 0), .text(last?.column("circle")?.string ?? state.column("circle")?.string ?? ""),
                        .integer(last?.column("seq")?.integer ?? state.column("seq")?.integer ?? 0), .integer(SQLiteInt64(indexed)),
                    ]
                )
                return SearchBackfillProgress(indexed: indexed, done: done)
            }
        }
        if progress.done { self.searchIndexDone.withLockedValue { $0 = true } }
        return progress
    }
}
