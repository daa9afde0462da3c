import Logging

/// Where the search backfill stands after a batch (``CircleStore/backfillSearchIndex(batchSize:)``).
public struct SearchBackfillProgress: Sendable, Hashable {
    /// Posts indexed by the backfill so far (all batches, also before a restart, on any node).
    public var indexed: Int64
    /// Every post stored before the index is in it now; searches answer.
    public var done: Bool

    public init(indexed: Int64, done: Bool) {
        self.indexed = indexed
        self.done = done
    }
}

/// The search index of a database from before it existed, filled in the background while the
/// server serves: a batch of posts per write transaction (so a commit waits at most for one),
/// from where the last batch stopped, on either store. Commits index every post they store or
/// change meanwhile; searches answer "still indexing" until the last batch.
public enum SearchBackfill {
    /// Entries looked at per transaction (posts and change entries).
    public static let batchSize = 500

    /// Runs the backfill to its end, reporting each batch's progress, then returns; returns at
    /// once when there is nothing to index. A failed batch is tried again a second later.
    /// Stops early when the task is cancelled (the next start goes on from there).
    public static func run(
        _ store: any CircleStore,
        batchSize: Int = Self.batchSize,
        logger: Logger,
        progress: @Sendable (SearchBackfillProgress) -> Void
    ) async {
        var batches = 0
        var started = false
        while !Task.isCancelled {
            do {
                let step = try await store.backfillSearchIndex(batchSize: batchSize)
                progress(step)
                if step.done {
                    if started { logger.info("search index: every post indexed", metadata: ["circle.search.indexed": "\(step.indexed)"]) }
                    return
                }
                if !started {
                    logger.info("search index: indexing the posts stored before it existed, in the background; searches answer \"still indexing\" until done")
                    started = true
                }
                batches += 1
                if batches % 20 == 0 { logger.info("search index: indexing", metadata: ["circle.search.indexed": "\(step.indexed)"]) }
            } catch {
                if Task.isCancelled { return }  // the server is stopping; the next start goes on
                logger.warning("search index: a backfill batch failed; trying again", metadata: ["circle.store.error": "\(error)"])
                try? await Task.sleep(for: .seconds(1))
            }
        }
    }
}
