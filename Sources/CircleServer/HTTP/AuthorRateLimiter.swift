import NIOConcurrencyHelpers
import NIOCore

/// Entries written over HTTP, limited per author on each node (docs/API.md, "Posting over
/// HTTP"): the WebSocket's per-connection allowance (`postsPerSecond`, `postBurst`), kept per
/// author since HTTP requests have no connection to hold it.
final class AuthorRateLimiter: Sendable {
    private let buckets = NIOLockedValueBox<[String: TokenBucket]>([:])
    /// The rate and burst are read at each write: a reload applies to the next one.
    private let configuration: LiveConfiguration

    /// Authors tracked at most: beyond, buckets that are full again are forgotten (they hold
    /// nothing), and if that is not enough, all are (a moment's extra allowance, never unbounded memory).
    static let maximumTracked = 10_000

    init(configuration: LiveConfiguration) {
        self.configuration = configuration
    }

    /// Takes one entry's allowance for `author`: `nil` when it may write now, else how long
    /// until it may.
    func take(_ author: String, now: NIODeadline = .now()) -> TimeAmount? {
        let limits = self.configuration.current.limits
        return self.buckets.withLockedValue { buckets in
            if buckets[author] == nil, buckets.count >= Self.maximumTracked {
                buckets = buckets.filter { !$0.value.isFull(now: now) }
                if buckets.count >= Self.maximumTracked { buckets = [:] }
            }
            // A bucket made before a reload changed the allowance starts over, full, with the new one.
            var bucket = buckets[author].flatMap { $0.rate == limits.postsPerSecond && $0.burst == limits.postBurst ? $0 : nil }
                ?? TokenBucket(rate: limits.postsPerSecond, burst: limits.postBurst)
            let wait = bucket.takeOrWait(now: now)
            buckets[author] = bucket
            return wait
        }
    }
}
