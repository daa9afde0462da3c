import Foundation
import Logging

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Retention (docs/OPERATIONS.md, "Retention"): every `interval`, each circle with a policy
/// loses its entries that are due (``RetentionPolicy/trimThrough(oldest:lastSeq:now:)``), from
/// the oldest on, at most `batchSize` (500) per transaction so that commits never wait long behind
/// it; then the files of the media that went with them are deleted.
///
/// What remains keeps its seqs, and new entries follow them. A reader resuming from a seq that
/// was removed is sent a `gap` for the removed range and goes on after it (``SessionState``).
/// With several nodes on one PostgreSQL each node sweeps: removing the same entries twice
/// removes nothing the second time.
struct RetentionSweeper: Sendable {
    let store: any CircleStore
    let media: MediaFiles
    let interval: Duration
    let logger: Logger
    /// Called with each transaction's count of removed entries.
    var removed: @Sendable (Int) -> Void = { _ in }
    /// Entries looked at, and at most removed, per transaction.
    var batchSize = 500

    /// Until cancelled: a sweep a minute after the start, then one each `interval`.
    func run() async {
        var wait = min(self.interval, .seconds(60))
        while !Task.isCancelled {
            guard (try? await Task.sleep(for: wait)) != nil else { return }
            wait = self.interval
            do {
                let removed = try await self.sweep(now: Identity.now)
                if removed > 0 { self.logger.info("retention: removed old entries", metadata: ["circle.retention.removed": "\(removed)"]) }
            } catch {
                if Task.isCancelled { return }
                self.logger.warning("retention: a sweep failed; trying again at the next", metadata: ["circle.store.error": "\(error)"])
            }
        }
    }

    /// One sweep over every circle with a policy; returns the entries removed.
    @discardableResult
    func sweep(now: Int64) async throws -> Int {
        var total = 0
        for (circle, policy) in try await self.store.retentionPolicies().sorted(by: { $0.key < $1.key }) {
            while !Task.isCancelled {
                guard let lastSeq = try await self.store.circle(named: circle)?.lastSeq else { break }
                let oldest = try await self.store.oldestEntries(in: circle, limit: self.batchSize)
                guard let through = policy.trimThrough(oldest: oldest, lastSeq: lastSeq, now: now) else { break }
                let trimmed = try await self.store.trimEntries(in: circle, through: through)
                for id in trimmed.media { _ = unlink(self.media.mediaPath(id)) }
                total += trimmed.entries
                self.removed(trimmed.entries)
                if trimmed.entries == 0 { break }
            }
        }
        return total
    }
}
