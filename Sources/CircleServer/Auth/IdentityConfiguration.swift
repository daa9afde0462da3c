import Foundation

/// Accounts, sessions and sign-in (docs/API.md, "Sign-in and identity").
public struct IdentityConfiguration: Sendable {
    /// The origin people open the page at (`https://chat.example.com`): links (setup, invites),
    /// the cookie's `Secure` flag and `__Host-` name, the origin checks, and the passkeys' RP ID.
    /// Without it, links use the listening address, and the origin a request must come from is
    /// the one its `Host` names.
    public var publicURL: String?
    /// A page session unused for this long ends.
    public var sessionIdleTimeout: Duration
    /// A page or device session ends this long after sign-in, used or not.
    public var sessionLifetime: Duration
    /// The shortest password accepted (NIST SP 800-63B asks for at least 8).
    public var minimumPasswordLength: Int
    /// bcrypt's cost (2^cost rounds): 12 takes about 0.25 s of one core here.
    public var passwordCost: UInt8
    /// How long the first-run setup link works.
    public var setupLinkLifetime: Duration
    /// Failed sign-ins per account name tried.
    public var accountThrottle: SignInThrottle
    /// Failed sign-ins per address.
    public var addressThrottle: SignInThrottle
    /// Ceremonies (passkey options, device codes) started per address, and in flight at once.
    public var ceremonyLimits: CeremonyLimits

    public init(
        publicURL: String? = nil,
        sessionIdleTimeout: Duration = .seconds(14 * 24 * 3600),
        sessionLifetime: Duration = .seconds(90 * 24 * 3600),
        minimumPasswordLength: Int = 10,
        passwordCost: UInt8 = 12,
        setupLinkLifetime: Duration = .seconds(3600),
        accountThrottle: SignInThrottle = .account,
        addressThrottle: SignInThrottle = .address,
        ceremonyLimits: CeremonyLimits = CeremonyLimits()
    ) {
        self.publicURL = publicURL
        self.sessionIdleTimeout = sessionIdleTimeout
        self.sessionLifetime = sessionLifetime
        self.minimumPasswordLength = minimumPasswordLength
        self.passwordCost = passwordCost
        self.setupLinkLifetime = setupLinkLifetime
        self.accountThrottle = accountThrottle
        self.addressThrottle = addressThrottle
        self.ceremonyLimits = ceremonyLimits
    }

    /// Whether `url` is an origin a page can be served at: http or https, a host, an optional
    /// port, no path (a trailing `/` is allowed), no query, no user.
    public static func isValidPublicURL(_ url: String) -> Bool {
        guard let components = URLComponents(string: url), let scheme = components.scheme?.lowercased(), ["http", "https"].contains(scheme),
            let host = components.host, !host.isEmpty, components.user == nil, components.password == nil, components.query == nil,
            components.fragment == nil, components.path.isEmpty || components.path == "/"
        else { return false }
        return (components.port ?? 443) > 0 && (components.port ?? 443) <= 65535
    }

    /// The longest password accepted, in UTF-8 bytes: longer ones are no safer, only slower to
    /// hash and a way to make the server hash megabytes.
    public static let maximumPasswordBytes = 1024
    /// The longest display name, in characters.
    public static let maximumDisplayNameLength = 64
    /// Personal access tokens a user may hold at once.
    public static let maximumPersonalTokens = 50
}

/// How many sign-in ceremonies may start: each start stores a challenge, and anyone may start
/// one (docs/API.md, "Limits of sign-in").
public struct CeremonyLimits: Sendable, Hashable {
    /// Starts one address may make at once (IPv6: one /64)…
    public var burst: Int
    /// …and then per minute. Beyond: 429 `rate_limited` with `Retry-After`.
    public var perMinute: Int
    /// Challenges not yet used or expired, in the whole store (every node). Beyond: 503
    /// `unavailable` with `Retry-After`, until some are used or expire (5 to 10 minutes).
    public var outstanding: Int

    public init(burst: Int = 30, perMinute: Int = 30, outstanding: Int = 10_000) {
        self.burst = burst
        self.perMinute = perMinute
        self.outstanding = outstanding
    }
}

/// When sign-in attempts wait: a value, tested without I/O (SignInThrottleTests).
///
/// Each failed sign-in counts under the account name tried (whether it exists or not, so the
/// answers say nothing about which names exist) and under the address it came from. A key may
/// fail ``freeFailures`` times; after that, each attempt must wait ``firstWait`` × 2^(failures −
/// free) after the last failure, at most ``longestWait``. A success clears the account's count.
public struct SignInThrottle: Sendable, Hashable {
    public var freeFailures: Int
    public var firstWait: Duration
    public var longestWait: Duration

    public init(freeFailures: Int, firstWait: Duration = .seconds(1), longestWait: Duration) {
        self.freeFailures = freeFailures
        self.firstWait = firstWait
        self.longestWait = longestWait
    }

    /// Per account name: 5 free failures.
    public static let account = SignInThrottle(freeFailures: 5, longestWait: .seconds(900))
    /// Per address (many people may share one behind a NAT): 20 free failures.
    public static let address = SignInThrottle(freeFailures: 20, longestWait: .seconds(900))

    /// How long an attempt must still wait at `now` (milliseconds since 1970), or `nil` when it may go ahead.
    public func wait(after failures: SignInFailures?, now: Int64) -> Duration? {
        guard let failures, failures.count >= self.freeFailures else { return nil }
        let exponent = min(failures.count - self.freeFailures, 20)
        let step = min(self.firstWait * (1 << exponent), self.longestWait)
        let waited = Duration.milliseconds(max(0, now - failures.last))
        return waited >= step ? nil : step - waited
    }
}
