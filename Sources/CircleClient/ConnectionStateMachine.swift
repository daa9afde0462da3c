import CircleWire

/// Why a client stopped for good (it does not reconnect by itself from here).
public enum StopReason: Sendable, Hashable {
    /// The app called `disconnect()`.
    case requested
    /// The server closed with 1000: the session is over.
    case serverClosed
    /// The server refused the token again after a fresh one was fetched.
    case unauthorized(String)
    /// The server closed for a reason reconnecting cannot fix (policy violation, banned user,
    /// protocol error, refused upgrade other than 401/429/5xx).
    case rejected(code: Int, reason: String)
    /// `ReconnectPolicy.maxAttempts` failures in a row.
    case gaveUp(attempts: Int)
}

/// How a connection attempt or an open connection ended, as the state machine needs to know it.
public enum ConnectionEnd: Sendable, Hashable {
    /// A network failure, a timeout, a server error (5xx) or an abnormal closure: retry with backoff.
    case transient
    /// The token was refused or expired (HTTP 401, close 4001), or the session it belongs to
    /// ended (close 4005): fetch a new one, then retry.
    case tokenRejected(String)
    /// The server is going away (1001, 1012): come back quickly, to the next URL if there are several.
    case goingAway
    /// The server ended the session normally (1000).
    case normalClosure
    /// A refusal that retrying cannot fix.
    case rejected(code: Int, reason: String)
    /// The heartbeat declared the connection dead (no pong within the timeout).
    case heartbeatTimeout

    /// Classifies a WebSocket close code.
    public static func closeCode(_ code: Int, reason: String) -> ConnectionEnd {
        switch code {
        case 1000: return .normalClosure
        case 1001, 1012: return .goingAway
        case Int(CircleCloseCode.tokenExpired), Int(CircleCloseCode.accessEnded): return .tokenRejected(reason)
        case 1002, 1003, 1007, 1008, 1010, Int(CircleCloseCode.tooManyConnections), Int(CircleCloseCode.forbidden):
            return .rejected(code: code, reason: reason)
        default: return .transient  // 1006, 1011, 1013, CircleCloseCode.idleTimeout, …
        }
    }

    /// Classifies an HTTP status that refused the upgrade.
    public static func httpStatus(_ status: Int, body: String) -> ConnectionEnd {
        switch status {
        case 401: return .tokenRejected(body)
        case 408, 429, 500...599: return .transient
        default: return .rejected(code: status, reason: body)
        }
    }
}

/// The connect/reconnect logic of a client as a value: events in, actions out. It performs no
/// I/O and reads no clock; the owner passes the time in, which is how the tests drive it.
public struct ConnectionStateMachine<Instant: InstantProtocol & Sendable>: Sendable where Instant.Duration == Duration {
    public enum State: Sendable, Hashable {
        case idle
        /// A connection attempt is under way (`attempt` counts failures in a row, from 1).
        case connecting(attempt: Int, server: Int)
        case connected(server: Int)
        /// Waiting until `until` before the next attempt.
        case waiting(until: Instant, attempt: Int, server: Int)
        /// Fetching a fresh token before connecting again.
        case refreshingToken(attempt: Int, server: Int)
        case stopped(StopReason)
    }

    public enum Action: Sendable, Hashable {
        case none
        /// Open a connection to server number `server` (an index into the configured URLs).
        case connect(server: Int)
        /// Ask the token provider for a new token, then report `tokenRefreshed` or `tokenRefreshFailed`.
        case refreshToken
        /// Call `timerFired` at this time.
        case scheduleTimer(Instant)
        /// Close the current connection (the heartbeat declared it dead, or the app asked), then,
        /// when given, call `timerFired` at that time.
        case closeConnection(thenTimer: Instant?)
        /// The session is over; tell the app why.
        case report(StopReason)
    }

    public private(set) var state: State = .idle
    public let policy: ReconnectPolicy
    public let serverCount: Int
    /// Whether the last token refresh was followed by another rejection (then give up).
    private var refreshedSinceLastConnect = false

    public init(policy: ReconnectPolicy, serverCount: Int) {
        precondition(serverCount > 0, "at least one server URL")
        self.policy = policy
        self.serverCount = serverCount
    }

    /// The app asked to connect.
    public mutating func start() -> Action {
        switch self.state {
        case .idle, .stopped:
            self.state = .connecting(attempt: 1, server: 0)
            self.refreshedSinceLastConnect = false
            return .connect(server: 0)
        default:
            return .none
        }
    }

    /// The connection is open (handshake done).
    public mutating func connected() -> Action {
        guard case .connecting(_, let server) = self.state else { return .none }
        self.state = .connected(server: server)
        self.refreshedSinceLastConnect = false
        return .none
    }

    /// A connection attempt failed, or an open connection ended.
    public mutating func ended(_ end: ConnectionEnd, now: Instant, random: Double) -> Action {
        let attempt: Int
        let server: Int
        switch self.state {
        case .connecting(let failed, let current):
            attempt = failed
            server = current
        case .connected(let current):
            attempt = 0
            server = current
        default:
            return .none
        }
        switch end {
        case .normalClosure:
            return self.stop(.serverClosed)
        case .rejected(let code, let reason):
            return self.stop(.rejected(code: code, reason: reason))
        case .tokenRejected(let reason):
            if self.refreshedSinceLastConnect, case .connecting = self.state {
                return self.stop(.unauthorized(reason))
            }
            self.state = .refreshingToken(attempt: attempt + 1, server: server)
            return .refreshToken
        case .goingAway:
            let next = (server + 1) % self.serverCount
            let until = now.advanced(by: self.policy.goingAwayJitter * min(max(random, 0), 0.999_999))
            self.state = .waiting(until: until, attempt: 1, server: next)
            return .scheduleTimer(until)
        case .transient, .heartbeatTimeout:
            let nextAttempt = attempt + 1
            if let maxAttempts = self.policy.maxAttempts, attempt >= maxAttempts {
                return self.stop(.gaveUp(attempts: attempt))
            }
            // A failed attempt tries the next server; a dropped connection first retries its own.
            let next = attempt > 0 ? (server + 1) % self.serverCount : server
            let until = now.advanced(by: self.policy.delay(attempt: nextAttempt, random: random))
            self.state = .waiting(until: until, attempt: nextAttempt, server: next)
            return end == .heartbeatTimeout ? .closeConnection(thenTimer: until) : .scheduleTimer(until)
        }
    }

    /// A scheduled timer fired.
    public mutating func timerFired(now: Instant) -> Action {
        guard case .waiting(let until, let attempt, let server) = self.state else { return .none }
        guard now >= until else { return .scheduleTimer(until) }
        self.state = .connecting(attempt: attempt, server: server)
        return .connect(server: server)
    }

    /// "The app came to the foreground / the network is back": skip the wait.
    public mutating func reconnectNow() -> Action {
        switch self.state {
        case .waiting(_, let attempt, let server):
            self.state = .connecting(attempt: attempt, server: server)
            return .connect(server: server)
        case .idle, .stopped:
            return self.start()
        default:
            return .none
        }
    }

    public mutating func tokenRefreshed() -> Action {
        guard case .refreshingToken(let attempt, let server) = self.state else { return .none }
        self.refreshedSinceLastConnect = true
        self.state = .connecting(attempt: attempt, server: server)
        return .connect(server: server)
    }

    public mutating func tokenRefreshFailed(_ message: String, now: Instant, random: Double) -> Action {
        guard case .refreshingToken(let attempt, let server) = self.state else { return .none }
        // The provider may fail for a passing reason (the app's backend is unreachable): back off.
        if let maxAttempts = self.policy.maxAttempts, attempt > maxAttempts {
            return self.stop(.unauthorized(message))
        }
        let until = now.advanced(by: self.policy.delay(attempt: attempt, random: random))
        self.state = .waiting(until: until, attempt: attempt, server: server)
        self.refreshedSinceLastConnect = false
        return .scheduleTimer(until)
    }

    /// The app asked to disconnect.
    public mutating func stopRequested() -> Action {
        switch self.state {
        case .stopped: return .none
        case .connected, .connecting:
            self.state = .stopped(.requested)
            return .closeConnection(thenTimer: nil)
        default:
            return self.stop(.requested)
        }
    }

    private mutating func stop(_ reason: StopReason) -> Action {
        self.state = .stopped(reason)
        return .report(reason)
    }
}
