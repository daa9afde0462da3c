/// Pings on an open connection and declares it dead when a pong is late. A value: the owner
/// passes the time in and performs the actions.
public struct HeartbeatStateMachine<Instant: InstantProtocol & Sendable>: Sendable where Instant.Duration == Duration {
    public enum Action: Sendable, Hashable {
        case none
        /// Send a ping now, then call `timerFired` at the given time.
        case sendPing(thenTimer: Instant)
        /// Call `timerFired` at this time.
        case scheduleTimer(Instant)
        /// No pong within the timeout: the connection is dead.
        case declareDead
    }

    public let policy: HeartbeatPolicy
    private var nextPing: Instant?
    private var awaitingPongSince: Instant?

    public init(policy: HeartbeatPolicy) {
        self.policy = policy
    }

    /// The connection opened.
    public mutating func connected(now: Instant) -> Action {
        self.awaitingPongSince = nil
        let next = now.advanced(by: self.policy.interval)
        self.nextPing = next
        return .scheduleTimer(next)
    }

    public mutating func timerFired(now: Instant) -> Action {
        if let since = self.awaitingPongSince {
            let deadline = since.advanced(by: self.policy.timeout)
            if now >= deadline {
                self.awaitingPongSince = nil
                self.nextPing = nil
                return .declareDead
            }
            return .scheduleTimer(deadline)
        }
        guard let nextPing else { return .none }
        guard now >= nextPing else { return .scheduleTimer(nextPing) }
        self.awaitingPongSince = now
        return .sendPing(thenTimer: now.advanced(by: self.policy.timeout))
    }

    public mutating func pongReceived(now: Instant) -> Action {
        guard self.awaitingPongSince != nil else { return .none }
        self.awaitingPongSince = nil
        let next = now.advanced(by: self.policy.interval)
        self.nextPing = next
        return .scheduleTimer(next)
    }

    /// The connection closed: no more pings.
    public mutating func disconnected() {
        self.nextPing = nil
        self.awaitingPongSince = nil
    }
}
