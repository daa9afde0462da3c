/// An identity provider whose tokens the server accepts: its `iss`, the audiences its tokens
/// must name, where its public keys are published (a JWKS) and which claim names the user.
///
/// ```swift
/// var configuration = CircleServerConfiguration(tokenKeys: .hs256(secret: secret))
/// configuration.tokenIssuers = [
///     TokenIssuer(issuer: "https://id.example.com", audiences: ["chat"], keys: .url("https://id.example.com/.well-known/jwks.json"))
/// ]
/// ```
public struct TokenIssuer: Sendable, Hashable {
    /// Where the issuer's JWKS is read from.
    public struct KeySource: Sendable, Hashable, CustomStringConvertible {
        enum Value: Sendable, Hashable {
            case url(String)
            case file(String)
        }
        let value: Value

        /// An `https` (or, for tests and local providers, `http`) URL, fetched and refreshed.
        public static func url(_ url: String) -> KeySource { KeySource(value: .url(url)) }
        /// A file holding a JWKS, read again on every refresh.
        public static func file(_ path: String) -> KeySource { KeySource(value: .file(path)) }

        public var description: String {
            switch self.value {
            case .url(let url): return url
            case .file(let path): return "file \(path)"
            }
        }
    }

    /// The `iss` the tokens carry (compared exactly).
    public var issuer: String
    /// When not empty, a token's `aud` (a string or an array) must name one of these.
    public var audiences: [String]
    /// The JWKS.
    public var keys: KeySource
    /// The claim whose value is the user name (`sub`, `preferred_username`, `email`, …); the
    /// value must be a valid Circle user name (``TokenAuthority/isValidUserName(_:)``).
    public var userClaim: String
    /// Lets the JWKS URL resolve to private, loopback or link-local addresses (an identity
    /// provider on the local network). The server-wide `allowPrivateOutbound` does this for all.
    public var allowsPrivateAddresses: Bool

    public init(issuer: String, audiences: [String] = [], keys: KeySource, userClaim: String = "sub", allowsPrivateAddresses: Bool = false) {
        self.issuer = issuer
        self.audiences = audiences
        self.keys = keys
        self.userClaim = userClaim
        self.allowsPrivateAddresses = allowsPrivateAddresses
    }
}

/// How JWKS documents are fetched and kept.
public struct JWKSSettings: Sendable, Hashable {
    /// A whole fetch (resolve, connect, TLS, request, body): after this the fetch fails and the
    /// issuer keeps its keys. Default 5 s.
    public var fetchTimeout: Duration
    /// A token naming a `kid` the issuer's set does not have refreshes the set at most this
    /// often (per issuer). Default 60 s.
    public var unknownKeyRefreshInterval: Duration
    /// The periodic refresh: every this long, or sooner when the answer's `Cache-Control:
    /// max-age` says so, but never more often than ``minimumRefreshInterval``. Default 10 min.
    public var refreshInterval: Duration
    /// The shortest periodic refresh a `max-age` may ask for. Default 60 s.
    public var minimumRefreshInterval: Duration

    public init(
        fetchTimeout: Duration = .seconds(5),
        unknownKeyRefreshInterval: Duration = .seconds(60),
        refreshInterval: Duration = .seconds(600),
        minimumRefreshInterval: Duration = .seconds(60)
    ) {
        self.fetchTimeout = fetchTimeout
        self.unknownKeyRefreshInterval = unknownKeyRefreshInterval
        self.refreshInterval = refreshInterval
        self.minimumRefreshInterval = minimumRefreshInterval
    }
}
