import NIOConcurrencyHelpers
import NIOCore

/// Entries written over HTTP, limited per author on each node (docs/API.md, "Posting over
/// HTTP"): the WebSocket's per-connection allowance (`postsPerSecond`, `postBurst`), kept per
/// author since HTTP requests have no connection to hold it.
final class AuthorRateLimiter: Sendable {
    private let buckets = NIOLockedValueBox<[String: TokenBucket]>([:])
    private let rate: Double
    private let burst: Double

    /// Authors tracked at most: beyond, buckets that are full again are forgotten (they hold
    /// nothing), and if that is not enough, all are (a moment's extra allowance, never unbounded memory).
    static let maximumTracked = 10_000

    init(rate: Double, burst: Double) {
        self.rate = rate
        self.burst = burst
    }

    /// Takes one entry's allowance for `author`: `nil` when it may write now, else how long
    /// until it may.
    func take(_ author: String, now: NIODeadline = .now()) -> TimeAmount? {
        self.buckets.withLockedValue { buckets in
            if buckets[author] == nil, buckets.count >= Self.maximumTracked {
                buckets = buckets.filter { !$0.value.isFull(now: now) }
                if buckets.count >= Self.maximumTracked { buckets = [:] }
            }
            var bucket = buckets[author] ?? TokenBucket(rate: self.rate, burst: self.burst)
            let wait = bucket.takeOrWait(now: now)
            buckets[author] = bucket
            return wait
        }
    }
}
