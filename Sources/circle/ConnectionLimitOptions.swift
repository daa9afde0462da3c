import ArgumentParser
import CircleServer
import NIOCore

/// `circle serve` options that bound what one client can hold: HTTP timeouts, connections not
/// yet upgraded, requests in flight (docs/API.md, "Limits").
struct ConnectionLimitOptions: ParsableArguments {
    @Option(help: "HTTP: close a connection that has not sent its first request head within this time.")
    var requestHeadTimeout: String = "10s"

    @Option(help: "HTTP: close a connection whose request body pauses this long.")
    var requestBodyTimeout: String = "30s"

    @Option(help: "HTTP: close an idle keep-alive connection after this long.")
    var keepAliveTimeout: String = "60s"

    @Option(help: "HTTP: close a connection that does not read its response for this long.")
    var writeStallTimeout: String = "30s"

    @Option(help: "Connections not yet upgraded to an authenticated WebSocket, in all, 0 to 1,000,000 (0: half the open-file limit).")
    var maxPendingConnections: Int = 0

    @Option(help: "The same per client IP address, 0 to 1,000,000 (0: no bound; use 0 behind a reverse proxy).")
    var maxPendingConnectionsPerAddress: Int = 128

    @Option(help: "Store-reading requests (join, history) one WebSocket may have answered at once, 1 to 4096.")
    var maxRequestsInFlight: Int = 8

    /// Writes these options into `limits`, or says which one is wrong.
    func apply(to limits: inout CircleServerConfiguration.Limits) throws {
        limits.requestHeadTimeout = try Self.timeout(self.requestHeadTimeout, "--request-head-timeout")
        limits.requestBodyTimeout = try Self.timeout(self.requestBodyTimeout, "--request-body-timeout")
        limits.keepAliveTimeout = try Self.timeout(self.keepAliveTimeout, "--keep-alive-timeout")
        limits.writeStallTimeout = try Self.timeout(self.writeStallTimeout, "--write-stall-timeout")
        typealias Allowed = CircleServerConfiguration.Allowed
        try OptionRanges.check("--max-pending-connections", self.maxPendingConnections, Allowed.maxPendingConnections)
        try OptionRanges.check(
            "--max-pending-connections-per-address",
            self.maxPendingConnectionsPerAddress,
            Allowed.maxPendingConnectionsPerAddress
        )
        try OptionRanges.check("--max-requests-in-flight", self.maxRequestsInFlight, Allowed.maxRequestsInFlight)
        limits.maxPendingConnections = self.maxPendingConnections
        limits.maxPendingConnectionsPerAddress = self.maxPendingConnectionsPerAddress
        limits.maxRequestsInFlight = self.maxRequestsInFlight
    }

    private static func timeout(_ text: String, _ flag: String) throws -> TimeAmount {
        guard let duration = parseDuration(text), duration > .zero else {
            throw ValidationError("\(flag) takes a duration of at most 100 years, such as 10s or 2m")
        }
        return TimeAmount(duration)
    }
}

extension TimeAmount {
    /// A `Duration` from an option (at most 100 years, so it fits in nanoseconds).
    init(_ duration: Duration) {
        let (seconds, attoseconds) = duration.components
        self = .nanoseconds(seconds * 1_000_000_000 + attoseconds / 1_000_000_000)
    }
}
