import CircleHTTPClient
import NIOCore

extension CircleServerConfiguration {
    /// A setting outside the values the server can use, such as a port of 99999 (which a socket
    /// address would otherwise truncate to 16 bits, 34463) or a negative queue size.
    public struct InvalidSetting: Error, CustomStringConvertible, Sendable {
        /// The setting as it is spelled in Swift: `port`, `limits.maxMessageBytes`.
        public var setting: String
        /// The value given.
        public var value: String
        /// The values allowed: `from 0 to 65,535`, `more than 0`.
        public var allowed: String

        public init(setting: String, value: String, allowed: String) {
            self.setting = setting
            self.value = value
            self.allowed = allowed
        }

        public var description: String {
            "CircleServerConfiguration.\(self.setting) must be \(self.allowed), not \(self.value)"
        }
    }

    /// The values each numeric setting takes. ``validate()`` checks them; `circle serve` checks
    /// its flags against the same ranges.
    package enum Allowed {
        static let gibibyte = 1 << 30
        package static let port = 0...65_535
        package static let maxPostBytes = 1...gibibyte
        /// At most 1 GiB: SwiftNIO's WebSocket upgrader stops the process on a frame limit above 4 GiB.
        package static let maxMessageBytes = 1...gibibyte
        /// Posts per second: more than 0 and at most this.
        package static let maxPostsPerSecond = 1_000_000.0
        package static let postBurst = 1.0...1_000_000.0
        /// At most 1 GiB: four times it (a reply's bound) must fit, and a negative size would
        /// stop the process in SwiftNIO's write-buffer water mark.
        package static let outboundQueueBytes = 1...gibibyte
        package static let maxConnectionsPerUser = 1...1_000_000
        package static let maxJoinedCircles = 1...100_000
        package static let presenceLimit = 0...1_000_000
        package static let maxMediaBytes: ClosedRange<Int64> = 1...(1 << 40)
        package static let maxPendingUploadsPerUser = 1...1_000_000
        package static let maxPendingConnections = 0...1_000_000
        package static let maxPendingConnectionsPerAddress = 0...1_000_000
        package static let maxRequestsInFlight = 1...4_096
        package static let compressionMinimumBytes = 0...gibibyte
    }

    /// Checks every setting against the values the server can use; throws ``InvalidSetting`` for
    /// the first one outside them. ``CircleServer/init(configuration:store:eventLoopGroup:logger:)``
    /// calls it before it opens anything.
    public func validate() throws(InvalidSetting) {
        try Self.check(self.port, Allowed.port, "port")
        try Self.check(self.compressionMinimumBytes, Allowed.compressionMinimumBytes, "compressionMinimumBytes")
        try Self.checkPositive(self.nodePollInterval, "nodePollInterval")
        if !Self.isValidPathPrefix(self.pathPrefix) {
            throw InvalidSetting(
                setting: "pathPrefix",
                value: "\"\(self.pathPrefix.prefix(100))\"",
                allowed: "empty, or /SEGMENT[/SEGMENT…] of letters, digits, . _ ~ - (not . or ..), at most 200 bytes, no trailing /"
            )
        }
        if let interval = self.heapTrimInterval { try Self.checkPositive(interval, "heapTrimInterval") }
        if let url = self.identity.publicURL, !IdentityConfiguration.isValidPublicURL(url) {
            throw InvalidSetting(setting: "identity.publicURL", value: url, allowed: "an origin such as https://chat.example.com, without a path")
        }
        if !(4...31).contains(self.identity.passwordCost) {
            throw InvalidSetting(setting: "identity.passwordCost", value: "\(self.identity.passwordCost)", allowed: "4 to 31 (bcrypt)")
        }
        if self.identity.minimumPasswordLength < 8 {
            throw InvalidSetting(setting: "identity.minimumPasswordLength", value: "\(self.identity.minimumPasswordLength)", allowed: "at least 8")
        }
        try Self.checkPositive(self.identity.sessionIdleTimeout, "identity.sessionIdleTimeout")
        try Self.checkPositive(self.identity.sessionLifetime, "identity.sessionLifetime")
        try Self.checkPositive(self.identity.setupLinkLifetime, "identity.setupLinkLifetime")
        try self.validateIssuers()
        let limits = self.limits
        try Self.check(limits.maxPostBytes, Allowed.maxPostBytes, "limits.maxPostBytes")
        try Self.check(limits.maxMessageBytes, Allowed.maxMessageBytes, "limits.maxMessageBytes")
        if !(limits.postsPerSecond > 0 && limits.postsPerSecond <= Allowed.maxPostsPerSecond) {
            throw InvalidSetting(
                setting: "limits.postsPerSecond",
                value: "\(limits.postsPerSecond)",
                allowed: "more than 0 and at most \(Allowed.maxPostsPerSecond.displayed)"
            )
        }
        try Self.check(limits.postBurst, Allowed.postBurst, "limits.postBurst")
        try Self.check(limits.outboundQueueBytes, Allowed.outboundQueueBytes, "limits.outboundQueueBytes")
        try Self.check(limits.maxConnectionsPerUser, Allowed.maxConnectionsPerUser, "limits.maxConnectionsPerUser")
        try Self.check(limits.maxJoinedCircles, Allowed.maxJoinedCircles, "limits.maxJoinedCircles")
        try Self.check(limits.presenceLimit, Allowed.presenceLimit, "limits.presenceLimit")
        try Self.check(limits.maxMediaBytes, Allowed.maxMediaBytes, "limits.maxMediaBytes")
        try Self.check(limits.maxPendingUploadsPerUser, Allowed.maxPendingUploadsPerUser, "limits.maxPendingUploadsPerUser")
        try Self.check(limits.maxPendingConnections, Allowed.maxPendingConnections, "limits.maxPendingConnections")
        try Self.check(
            limits.maxPendingConnectionsPerAddress,
            Allowed.maxPendingConnectionsPerAddress,
            "limits.maxPendingConnectionsPerAddress"
        )
        try Self.check(limits.maxRequestsInFlight, Allowed.maxRequestsInFlight, "limits.maxRequestsInFlight")
        for (amount, name) in [
            (limits.idleTimeout, "idleTimeout"), (limits.uploadExpiry, "uploadExpiry"),
            (limits.requestHeadTimeout, "requestHeadTimeout"), (limits.requestBodyTimeout, "requestBodyTimeout"),
            (limits.keepAliveTimeout, "keepAliveTimeout"), (limits.writeStallTimeout, "writeStallTimeout"),
        ] where amount.nanoseconds <= 0 {
            throw InvalidSetting(setting: "limits.\(name)", value: "\(amount)", allowed: "more than zero")
        }
    }

    private static func check<Value: Comparable & FormattedNumber>(
        _ value: Value,
        _ range: ClosedRange<Value>,
        _ setting: String
    ) throws(InvalidSetting) {
        guard !range.contains(value) else { return }
        throw InvalidSetting(setting: setting, value: "\(value)", allowed: rangeDescription(range))
    }

    private static func checkPositive(_ duration: Duration, _ setting: String) throws(InvalidSetting) {
        guard duration <= .zero else { return }
        throw InvalidSetting(setting: setting, value: "\(duration)", allowed: "more than zero")
    }
}

/// A number as an option's range shows it.
package protocol FormattedNumber: CustomStringConvertible {
    /// `65,535` (digits grouped from 10,000 on), `1024`, `0.5`.
    var displayed: String { get }
}

extension Int: FormattedNumber {
    package var displayed: String { formatNumber(Int64(self)) }
}

extension Int64: FormattedNumber {
    package var displayed: String { formatNumber(self) }
}

extension Double: FormattedNumber {
    package var displayed: String { formatNumber(self) }
}

/// `from 1 to 1,073,741,824`.
package func rangeDescription<Value: FormattedNumber>(_ range: ClosedRange<Value>) -> String {
    "from \(range.lowerBound.displayed) to \(range.upperBound.displayed)"
}

/// `65,535`: digits in groups of three from 10,000 on, so that `1024` stays as people write it.
package func formatNumber(_ value: Int64) -> String {
    let digits = String(value.magnitude)
    guard digits.count > 4 else { return value < 0 ? "-" + digits : digits }
    var grouped = ""
    for (index, digit) in digits.enumerated() {
        if index > 0, (digits.count - index) % 3 == 0 { grouped.append(",") }
        grouped.append(digit)
    }
    return value < 0 ? "-" + grouped : grouped
}

/// A whole `Double` as an integer (`1,000,000`), any other as Swift prints it (`0.5`).
package func formatNumber(_ value: Double) -> String {
    if value.isFinite, value == value.rounded(), value.magnitude < 1e15 { return formatNumber(Int64(value)) }
    return "\(value)"
}

extension CircleServerConfiguration {
    /// The issuers: each with an `iss`, once, a user claim, and an `http(s)` JWKS URL or a file;
    /// the JWKS timings more than zero.
    /// Whether `prefix` can be ``pathPrefix``: empty, or `/` and segments of letters, digits,
    /// `.`, `_`, `~`, `-` (not `.` or `..`), at most 200 bytes, no trailing `/`.
    static func isValidPathPrefix(_ prefix: String) -> Bool {
        if prefix.isEmpty { return true }
        guard prefix.utf8.count <= 200, prefix.hasPrefix("/") else { return false }
        let segments = prefix.dropFirst().split(separator: "/", omittingEmptySubsequences: false)
        return segments.allSatisfy { segment in
            !segment.isEmpty && segment != "." && segment != ".."
                && segment.utf8.allSatisfy { byte in
                    (byte >= 0x61 && byte <= 0x7A) || (byte >= 0x41 && byte <= 0x5A) || (byte >= 0x30 && byte <= 0x39)
                        || byte == 0x2E || byte == 0x5F || byte == 0x7E || byte == 0x2D
                }
        }
    }

    public func validateIssuers() throws(InvalidSetting) {
        var seen: Set<String> = []
        for (index, issuer) in self.tokenIssuers.enumerated() {
            let setting = "tokenIssuers[\(index)]"
            guard !issuer.issuer.isEmpty else { throw InvalidSetting(setting: "\(setting).issuer", value: "\"\"", allowed: "a non-empty string") }
            guard seen.insert(issuer.issuer).inserted else {
                throw InvalidSetting(setting: "\(setting).issuer", value: "\"\(issuer.issuer)\"", allowed: "configured once")
            }
            guard !issuer.userClaim.isEmpty else { throw InvalidSetting(setting: "\(setting).userClaim", value: "\"\"", allowed: "a claim name") }
            switch issuer.keys.value {
            case .url(let url):
                let lowered = url.lowercased()
                guard lowered.hasPrefix("https://") || lowered.hasPrefix("http://"), (try? HTTPTarget.parse(url, schemes: ["http", "https"])) != nil else {
                    throw InvalidSetting(setting: "\(setting).keys", value: "\"\(url)\"", allowed: "an https:// (or http://) URL")
                }
            case .file(let path):
                guard !path.isEmpty else { throw InvalidSetting(setting: "\(setting).keys", value: "\"\"", allowed: "a file path") }
            }
        }
        try Self.checkPositive(self.jwks.fetchTimeout, "jwks.fetchTimeout")
        try Self.checkPositive(self.jwks.refreshInterval, "jwks.refreshInterval")
        try Self.checkPositive(self.jwks.minimumRefreshInterval, "jwks.minimumRefreshInterval")
        if self.jwks.unknownKeyRefreshInterval < .zero {
            throw InvalidSetting(setting: "jwks.unknownKeyRefreshInterval", value: "\(self.jwks.unknownKeyRefreshInterval)", allowed: "zero or more")
        }
    }
}
