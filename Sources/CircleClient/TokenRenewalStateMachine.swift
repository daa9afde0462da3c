import Foundation

/// When the SDK renews the token of an open connection (``TokenRenewalStateMachine``).
public struct TokenRenewalPolicy: Sendable, Hashable {
    /// Renew once this share of the token's lifetime (`iat` to `exp`) has passed…
    public var lifetimeFraction: Double
    /// …or this long before `exp`, whichever comes first.
    public var lead: Duration
    /// The longest the renewal timer sleeps between looks at the wall clock: a process that was
    /// suspended (a laptop asleep, an app in the background) notices within this much of
    /// resuming that the renewal is due, even though its timers fired late.
    public var checkInterval: Duration
    /// After a token provider failure, try again this much later (while the token is still valid).
    public var retryInterval: Duration
    /// Off: tokens are only replaced by reconnecting after the server closes with 4001.
    public var enabled: Bool

    public init(lifetimeFraction: Double = 0.8, lead: Duration = .seconds(60), checkInterval: Duration = .seconds(15), retryInterval: Duration = .seconds(10), enabled: Bool = true) {
        self.lifetimeFraction = lifetimeFraction
        self.lead = lead
        self.checkInterval = checkInterval
        self.retryInterval = retryInterval
        self.enabled = enabled
    }
}

/// Renews the token of an open connection before it expires: at ``TokenRenewalPolicy/lifetimeFraction``
/// of its lifetime or ``TokenRenewalPolicy/lead`` before `exp`, whichever is earlier, it asks for
/// a token from the provider and sends it with `auth`; a refused `auth` means reconnecting with
/// a fresh token.
///
/// A value: the owner passes the wall-clock time (seconds since 1970, as `exp` counts) into every
/// event and performs the actions. The wall clock, not a monotonic one, because `exp` is wall
/// time and a suspended process's monotonic timers fire late: every ``timerFired(now:)`` compares
/// the wall clock with the renewal time, and the timer never sleeps longer than
/// ``TokenRenewalPolicy/checkInterval``.
public struct TokenRenewalStateMachine: Sendable {
    public enum Action: Sendable, Hashable {
        case none
        /// Call ``TokenRenewalStateMachine/timerFired(now:)`` after this long.
        case scheduleTimer(after: Duration)
        /// Ask the token provider, then feed ``TokenRenewalStateMachine/tokenFetched(_:now:)`` or
        /// ``TokenRenewalStateMachine/tokenFetchFailed(now:)``.
        case fetchToken
        /// Send `auth` with this token, then feed ``TokenRenewalStateMachine/authAccepted(now:)``
        /// or ``TokenRenewalStateMachine/authRefused(now:)``.
        case sendAuth(String)
        /// The server refused the new token: close and reconnect with a fresh token.
        case reconnect
    }

    enum State: Sendable, Hashable {
        /// Not connected, or the token has no readable `exp`.
        case idle
        /// Connected with a token expiring at `expires`; renew at `renewAt`.
        case waiting(expires: Double, renewAt: Double)
        case fetching(expires: Double)
        /// `auth` sent with `token`, waiting for its answer.
        case authenticating(expires: Double, token: String)
    }

    public let policy: TokenRenewalPolicy
    private(set) var state: State = .idle

    public init(policy: TokenRenewalPolicy = .init()) {
        self.policy = policy
    }

    /// When the connection's token should be renewed, or `nil` when it has no readable `exp`:
    /// the earlier of ``TokenRenewalPolicy/lifetimeFraction`` of its lifetime and
    /// ``TokenRenewalPolicy/lead`` before `exp`, but never before half its lifetime (a token
    /// shorter than twice the lead is renewed at its middle, not at once).
    public func renewalTime(of token: String, now: Double) -> (expires: Double, renewAt: Double)? {
        guard let claims = Self.timeClaims(of: token) else { return nil }
        let issued = min(claims.issued ?? now, claims.expires)
        let lifetime = claims.expires - issued
        let byFraction = issued + lifetime * self.policy.lifetimeFraction
        let byLead = claims.expires - Self.seconds(self.policy.lead)
        return (claims.expires, max(min(byFraction, byLead), issued + lifetime / 2))
    }

    /// A connection opened with `token`.
    public mutating func connected(token: String, now: Double) -> Action {
        self.wait(for: token, now: now)
    }

    /// The renewal timer fired (possibly late, after the process was suspended).
    public mutating func timerFired(now: Double) -> Action {
        guard case .waiting(let expires, let renewAt) = self.state else { return .none }
        guard now >= renewAt else { return self.schedule(until: renewAt, now: now) }
        self.state = .fetching(expires: expires)
        return .fetchToken
    }

    /// The provider gave a token: send it with `auth`. A token that would itself be due for
    /// renewal already (the provider handed back the same or an equally old token) counts as a
    /// provider failure, so that a provider with a cache cannot make the client renew in a loop.
    public mutating func tokenFetched(_ token: String, now: Double) -> Action {
        guard case .fetching(let expires) = self.state else { return .none }
        if let (newExpires, renewAt) = self.renewalTime(of: token, now: now), renewAt <= now || newExpires <= expires {
            return self.tokenFetchFailed(now: now)
        }
        self.state = .authenticating(expires: expires, token: token)
        return .sendAuth(token)
    }

    /// The provider failed: try again after ``TokenRenewalPolicy/retryInterval`` while the token
    /// is valid; once it expired, the server's 4001 close leads to a reconnect.
    public mutating func tokenFetchFailed(now: Double) -> Action {
        guard case .fetching(let expires) = self.state else { return .none }
        let retryAt = now + Self.seconds(self.policy.retryInterval)
        guard retryAt < expires else {
            self.state = .idle
            return .none
        }
        self.state = .waiting(expires: expires, renewAt: retryAt)
        return self.schedule(until: retryAt, now: now)
    }

    /// The server acked `auth`: the new token's expiry is the connection's.
    public mutating func authAccepted(now: Double) -> Action {
        guard case .authenticating(_, let token) = self.state else { return .none }
        return self.wait(for: token, now: now)
    }

    /// The server refused `auth` (or did not answer): reconnect with a fresh token.
    public mutating func authRefused(now: Double) -> Action {
        guard case .authenticating = self.state else { return .none }
        self.state = .idle
        return .reconnect
    }

    /// The connection closed: nothing to renew until the next one.
    public mutating func disconnected() {
        self.state = .idle
    }

    private mutating func wait(for token: String, now: Double) -> Action {
        guard self.policy.enabled, let (expires, renewAt) = self.renewalTime(of: token, now: now) else {
            self.state = .idle
            return .none
        }
        self.state = .waiting(expires: expires, renewAt: renewAt)
        return self.timerFired(now: now)
    }

    private func schedule(until instant: Double, now: Double) -> Action {
        let remaining = max(instant - now, 0)
        let check = Self.seconds(self.policy.checkInterval)
        let wait = check > 0 ? min(remaining, check) : remaining
        return .scheduleTimer(after: .milliseconds(Int64((wait * 1000).rounded(.up))))
    }

    static func seconds(_ duration: Duration) -> Double {
        Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
    }

    /// `exp` and `iat` of a JWT's payload, read without verifying (the server verifies).
    static func timeClaims(of token: String) -> (expires: Double, issued: Double?)? {
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3 else { return nil }
        var base64 = parts[1].replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        while base64.count % 4 != 0 { base64 += "=" }
        guard let data = Data(base64Encoded: base64),
            let object = try? JSONSerialization.jsonObject(with: data) as? [String: Any],
            let expires = (object["exp"] as? NSNumber)?.doubleValue, expires.isFinite
        else { return nil }
        let issued = ((object["iat"] as? NSNumber)?.doubleValue).flatMap { $0.isFinite ? $0 : nil }
        return (expires, issued)
    }
}
