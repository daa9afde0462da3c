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
                    SELECT p.circle, p.seq FROM posts AS p WHERE (p.circle, p.seq) > (?1, ?2) ORDER BY p.circle, p.seq LIMIT ?3
                    """,
                    [.text(state.column("circle")?.string ?? ""), .integer(state.column("seq")?.integer ?? 0), .integer(SQLiteInt64(max(1, batchSize)))]
                )
                // The batch's posts that the index lacks, indexed set by set inside SQLite (a handful
                // of statements per batch, not a few per post: each statement is a hop to the
                // store's threads). Their search ids go in a table of this connection's own: a post
                // with none gets the next free one; a post indexed before step 12 keeps its own and
                // gets its substrings only. The text goes from `posts` to the index inside SQLite:
                // the very bytes the post writer reads back to remove it (sqlite-nio's text would
                // stop at a NUL).
                if let last = rows.last, let lastCircle = last.column("circle")?.string, let lastSeq = last.column("seq")?.integer {
                    _ = try await connection.query(
                        "CREATE TEMP TABLE IF NOT EXISTS search_backfill_batch (id INTEGER PRIMARY KEY, circle TEXT NOT NULL, seq INTEGER NOT NULL, words INTEGER NOT NULL)"
                    )
                    _ = try await connection.query("DELETE FROM search_backfill_batch")
                    _ = try await connection.query(
                        """
                        INSERT INTO search_backfill_batch (id, circle, seq, words)
                        SELECT coalesce(p.search_id, (SELECT coalesce(max(id), 0) FROM search_docs) + row_number() OVER (ORDER BY p.circle, p.seq)),
                            p.circle, p.seq, p.search_id IS NULL
                        FROM posts AS p LEFT JOIN search_docs AS d ON d.id = p.search_id
                        WHERE (p.circle, p.seq) > (?1, ?2) AND (p.circle, p.seq) <= (?3, ?4)
                            AND p.change IS NULL AND p.deleted = 0 AND p.text IS NOT NULL AND p.text <> '' AND coalesce(d.trigrams, 0) = 0
                        """,
                        [.text(state.column("circle")?.string ?? ""), .integer(state.column("seq")?.integer ?? 0), .text(lastCircle), .integer(lastSeq)]
                    )
                    for statement in [
                        "INSERT INTO search_docs (id, circle, seq, trigrams) SELECT id, circle, seq, 1 FROM search_backfill_batch WHERE words = 1",
                        "UPDATE search_docs SET trigrams = 1 WHERE id IN (SELECT id FROM search_backfill_batch WHERE words = 0)",
                        "UPDATE posts SET search_id = b.id FROM search_backfill_batch AS b WHERE posts.circle = b.circle AND posts.seq = b.seq AND b.words = 1",
                        """
                        INSERT INTO search_words (rowid, text)
                        SELECT b.id, p.text FROM search_backfill_batch AS b JOIN posts AS p ON p.circle = b.circle AND p.seq = b.seq WHERE b.words = 1
                        """,
                        """
                        INSERT INTO search_trigrams (rowid, text)
                        SELECT b.id, p.text FROM search_backfill_batch AS b JOIN posts AS p ON p.circle = b.circle AND p.seq = b.seq
                        """,
                    ] {
                        _ = try await connection.query(statement)
                    }
                    let added = try await connection.query("SELECT count(*) AS n FROM search_backfill_batch").first?.column("n")?.integer ?? 0
                    indexed += Int64(added)
                    _ = try await connection.query("DELETE FROM search_backfill_batch")
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
