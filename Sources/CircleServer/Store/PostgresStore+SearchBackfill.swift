import Logging
import PostgresNIO

/// The search index of a database from before it existed (schema step 7 adds the `search`
/// column empty): the posts stored before the step get theirs in the background, a batch per
/// transaction, while the nodes serve. See ``SearchBackfill``.
extension PostgresStore {
    /// Whether the search index holds every post; reads `search_backfill` until it does.
    func searchIndexComplete() async throws -> Bool {
        if self.searchIndexDone.withLockedValue({ $0 }) { return true }
        let done = try await self.operation("read the search index's state") {
            var done = true
            let rows = try await self.client.query("SELECT done FROM search_backfill WHERE id = 1", logger: self.logger)
            for try await value in rows.decode(Bool.self) { done = value }
            return done
        }
        if done { self.searchIndexDone.withLockedValue { $0 = true } }
        return done
    }

    /// Sets `search` for the next `batchSize` entries (in `(circle, seq)` order, from where the
    /// last batch stopped, on any node) that are current text without it, and records where it
    /// stopped, in one transaction. The row lock on `search_backfill` runs one batch at a time
    /// across nodes; a commit that changed a post first has set it already (the trigger).
    public func backfillSearchIndex(batchSize: Int = SearchBackfill.batchSize) async throws -> SearchBackfillProgress {
        let limit = Int64(max(1, batchSize))
        let logger = self.logger
        // Background work, not a request: a batch of 500 on a busy database may take longer than a
        // request's bound, and one given up on would still hold the row lock the retry waits for.
        let progress = try await self.operation("index old posts for search", limit: .seconds(120)) {
            try await self.client.withTransaction(logger: logger) { connection -> SearchBackfillProgress in
                var state: (Bool, String, Int64, Int64)?
                let rows = try await connection.query(
                    "SELECT done, circle, seq, indexed FROM search_backfill WHERE id = 1 FOR UPDATE", logger: logger
                )
                for try await row in rows.decode((Bool, String, Int64, Int64).self) { state = row }
                guard let (done, circle, seq, indexed) = state else { return SearchBackfillProgress(indexed: 0, done: true) }
                if done { return SearchBackfillProgress(indexed: indexed, done: true) }
                let batch = try await connection.query(
                    """
                    WITH batch AS (
                        SELECT circle, seq FROM posts WHERE (circle, seq) > (\(circle), \(seq)) ORDER BY circle, seq LIMIT \(limit)
                    ), indexed AS (
                        UPDATE posts AS p SET search = circle_search_vector(p.text, p.change, p.deleted)
                        FROM batch AS b
                        WHERE p.circle = b.circle AND p.seq = b.seq AND p.search IS NULL
                          AND p.change IS NULL AND NOT p.deleted AND p.text IS NOT NULL
                        RETURNING 1
                    ), last AS (
                        SELECT circle, seq FROM batch ORDER BY circle DESC, seq DESC LIMIT 1
                    )
                    SELECT (SELECT count(*) FROM batch), (SELECT count(*) FROM indexed), (SELECT circle FROM last), (SELECT seq FROM last)
                    """,
                    logger: logger
                )
                var result: (Int64, Int64, String?, Int64?) = (0, 0, nil, nil)
                for try await row in batch.decode((Int64, Int64, String?, Int64?).self) { result = row }
                let finished = result.0 < limit
                let total = indexed + result.1
                try await connection.query(
                    """
                    UPDATE search_backfill SET done = \(finished), circle = \(result.2 ?? circle), seq = \(result.3 ?? seq), indexed = \(total)
                    WHERE id = 1
                    """,
                    logger: logger
                )
                return SearchBackfillProgress(indexed: total, done: finished)
            }
        }
        if progress.done { self.searchIndexDone.withLockedValue { $0 = true } }
        return progress
    }
}
