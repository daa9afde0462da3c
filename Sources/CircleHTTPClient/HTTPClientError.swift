// CircleHTTPClient: the one HTTP client stack of Circle's client side — the SDK's API calls and
// media transfers, the CLI (through the SDK), and the TLS and URL handling of CircleSocket's
// WebSocket connections.
//
// It is written on SwiftNIO instead of using async-http-client (1.37.0) or URLSession because
// of two measured needs: async-http-client has no hook to check the server key against SPKI
// pins before a request is sent, and reports neither the TCP connect nor the TLS handshake
// time (`RequestMetrics` in CircleClient reports both, with time to first byte and connection
// reuse); URLSession's `URLSessionTaskMetrics` is empty on Linux and it has no pinning there.

/// Why an HTTP exchange (or the connection under it) failed.
///
/// ```swift
/// do { _ = try await client.execute(.GET, url: "https://chat.example.com/healthz") }
/// catch let error as HTTPClientError where error.code == .pinMismatch { … }
/// ```
public struct HTTPClientError: Error, Sendable, CustomStringConvertible {
    /// What kind of failure: switch on it.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        fileprivate enum Value: String, Sendable {
            case invalidURL = "invalid_url"
            case connectFailed = "connect_failed"
            case connectTimeout = "connect_timeout"
            case tlsFailed = "tls_failed"
            case pinMismatch = "pin_mismatch"
            case connectionClosed = "connection_closed"
            case idleTimeout = "idle_timeout"
        }
        fileprivate let value: Value

        /// The URL is not `http(s)://` (or `ws(s)://`) with a host.
        public static let invalidURL = Code(value: .invalidURL)
        /// No TCP connection (refused, unreachable, the name does not resolve).
        public static let connectFailed = Code(value: .connectFailed)
        /// No TCP connection or TLS handshake within the connect timeout.
        public static let connectTimeout = Code(value: .connectTimeout)
        /// TLS could not be set up, the certificate is not trusted, or a pin is malformed.
        public static let tlsFailed = Code(value: .tlsFailed)
        /// The certificate is trusted but its key matches none of the pins.
        public static let pinMismatch = Code(value: .pinMismatch)
        /// The connection failed or the server closed it before the answer was complete.
        public static let connectionClosed = Code(value: .connectionClosed)
        /// The server sent nothing (or took nothing) for longer than the timeout.
        public static let idleTimeout = Code(value: .idleTimeout)

        public var description: String { self.value.rawValue }
    }

    /// What kind of failure.
    public var code: Code
    /// A sentence a person can act on.
    public var message: String
    /// The error of the layer below (NIO, NIOSSL), if any.
    public var underlying: (any Error)?

    public var description: String {
        "\(self.code): \(self.message)" + (self.underlying.map { " (\($0))" } ?? "")
    }

    /// Creates an error.
    public init(_ code: Code, _ message: String, underlying: (any Error)? = nil) {
        self.code = code
        self.message = message
        self.underlying = underlying
    }
}
