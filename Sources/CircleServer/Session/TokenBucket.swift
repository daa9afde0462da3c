import NIOCore

/// Actions allowed: `burst` at once, refilled at `rate` per second (posts per connection,
/// ceremonies per address).
struct TokenBucket {
    let rate: Double
    let burst: Double
    private var tokens: Double
    private var updated: NIODeadline?

    init(rate: Double, burst: Double) {
        self.rate = rate
        self.burst = burst
        self.tokens = burst
    }

    mutating func take(now: NIODeadline) -> Bool {
        self.takeOrWait(now: now) == nil
    }

    /// Takes a token, or returns how long until one is there (nothing is taken then).
    mutating func takeOrWait(now: NIODeadline) -> TimeAmount? {
        self.refill(now: now)
        guard self.tokens >= 1 else {
            return self.rate > 0 ? .nanoseconds(Int64(((1 - self.tokens) / self.rate * 1e9).rounded(.up))) : .hours(24)
        }
        self.tokens -= 1
        return nil
    }

    /// Whether the bucket would be full at `now`: nothing has been taken that is not back.
    func isFull(now: NIODeadline) -> Bool {
        var copy = self
        copy.refill(now: now)
        return copy.tokens >= copy.burst
    }

    /// When a token was last asked for.
    var lastUse: NIODeadline? { self.updated }

    private mutating func refill(now: NIODeadline) {
        if let updated {
            let elapsed = Double(max(0, (now - updated).nanoseconds)) / 1e9
            self.tokens = min(self.burst, self.tokens + elapsed * self.rate)
        }
        self.updated = now
    }
}
