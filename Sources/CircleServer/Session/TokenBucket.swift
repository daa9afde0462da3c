import NIOCore

/// Posts allowed per connection: `burst` at once, refilled at `rate` per second.
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
        if let updated {
            let elapsed = Double((now - updated).nanoseconds) / 1e9
            self.tokens = min(self.burst, self.tokens + elapsed * self.rate)
        }
        self.updated = now
        guard self.tokens >= 1 else { return false }
        self.tokens -= 1
        return true
    }
}
