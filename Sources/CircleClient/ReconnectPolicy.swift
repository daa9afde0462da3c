/// How a client waits between reconnect attempts: exponential backoff with full jitter.
///
/// The delay before attempt `n` (1-based) is uniformly random in `0 ..< min(cap, base · 2^(n-1))`,
/// which spreads a crowd of clients that lost the same server instead of bringing them back
/// in lock-step (the "thundering herd").
public struct ReconnectPolicy: Sendable, Hashable {
    /// The upper bound of the first delay.
    public var base: Duration
    /// The largest delay.
    public var cap: Duration
    /// Give up after this many failed attempts in a row; `nil` never gives up.
    public var maxAttempts: Int?
    /// Upper bound of the small random delay after a server said it is going away (1001),
    /// so that its clients reconnect promptly but not all in the same millisecond.
    public var goingAwayJitter: Duration

    public init(
        base: Duration = .milliseconds(500),
        cap: Duration = .seconds(30),
        maxAttempts: Int? = nil,
        goingAwayJitter: Duration = .milliseconds(250)
    ) {
        self.base = base
        self.cap = cap
        self.maxAttempts = maxAttempts
        self.goingAwayJitter = goingAwayJitter
    }

    /// The delay before attempt `attempt` (1-based), for a random value in `0..<1`.
    public func delay(attempt: Int, random: Double) -> Duration {
        let exponent = min(max(attempt - 1, 0), 40)
        let ceiling = min(self.cap, self.base * Double(1 << min(exponent, 62)))
        return ceiling * min(max(random, 0), 0.999_999)
    }
}

/// When a client pings and when it declares a connection dead.
public struct HeartbeatPolicy: Sendable, Hashable {
    /// Time between pings. 20 s stays well under API Gateway's 10-minute idle timeout and
    /// common NAT timeouts.
    public var interval: Duration
    /// A pong must arrive within this time, or the connection is declared dead.
    public var timeout: Duration

    public init(interval: Duration = .seconds(20), timeout: Duration = .seconds(10)) {
        self.interval = interval
        self.timeout = timeout
    }
}
