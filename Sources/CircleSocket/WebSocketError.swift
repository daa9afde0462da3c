import NIOHTTP1

/// An error from a WebSocket connection: a code to switch on and a message a person can act on.
public struct WebSocketError: Error, Sendable, CustomStringConvertible {
    /// What went wrong, as a value to switch on.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        private enum Value: String, Sendable {
            case invalidURL = "invalid URL"
            case connectTimeout = "connect timeout"
            case connectionFailed = "connection failed"
            case tlsFailed = "TLS failed"
            case pinMismatch = "certificate pin mismatch"
            case handshakeRefused = "handshake refused"
            case handshakeInvalid = "invalid handshake response"
            case notOpen = "connection not open"
            case connectionLost = "connection lost"
            case protocolViolation = "protocol violation"
            case messageTooBig = "message too big"
            case invalidUTF8 = "invalid UTF-8"
            case pingTimeout = "ping timeout"
            case closedByPeer = "closed by peer"
        }
        private let value: Value

        /// The URL is not a `ws://` or `wss://` URL with a host.
        public static let invalidURL = Code(value: .invalidURL)
        /// TCP, TLS and the upgrade did not complete within the connect timeout.
        public static let connectTimeout = Code(value: .connectTimeout)
        /// The TCP connection could not be made (refused, unreachable, name not resolved).
        public static let connectionFailed = Code(value: .connectionFailed)
        /// The TLS handshake failed (for example an untrusted or expired certificate).
        public static let tlsFailed = Code(value: .tlsFailed)
        /// The server's certificate is valid but its public key matches none of the configured pins.
        public static let pinMismatch = Code(value: .pinMismatch)
        /// The server answered the upgrade request with an HTTP status other than 101.
        public static let handshakeRefused = Code(value: .handshakeRefused)
        /// The server's 101 response broke the protocol (wrong accept key, unrequested subprotocol or extension).
        public static let handshakeInvalid = Code(value: .handshakeInvalid)
        /// A send, ping or close was attempted after the close handshake began or the connection ended.
        public static let notOpen = Code(value: .notOpen)
        /// The connection ended without a close handshake.
        public static let connectionLost = Code(value: .connectionLost)
        /// The peer broke RFC 6455; the connection was closed with 1002.
        public static let protocolViolation = Code(value: .protocolViolation)
        /// A message exceeded the configured maximum size; the connection was closed with 1009.
        public static let messageTooBig = Code(value: .messageTooBig)
        /// A text message was not valid UTF-8; the connection was closed with 1007.
        public static let invalidUTF8 = Code(value: .invalidUTF8)
        /// No pong arrived within the ping timeout.
        public static let pingTimeout = Code(value: .pingTimeout)
        /// The peer closed the connection with a close frame.
        public static let closedByPeer = Code(value: .closedByPeer)

        public var description: String { self.value.rawValue }
    }

    /// What went wrong.
    public var code: Code
    /// A sentence for a person.
    public var message: String
    /// The HTTP status of a refused handshake.
    public var httpStatus: Int?
    /// The response headers of a refused handshake.
    public var httpHeaders: HTTPHeaders?
    /// The response body of a refused handshake (at most 64 KiB of it).
    public var httpBody: String?
    /// How the connection closed, where it has.
    public var closeInfo: WebSocketCloseInfo?
    /// The lower-level error, where there is one.
    public var underlying: (any Error)?

    public init(
        _ code: Code,
        _ message: String,
        httpStatus: Int? = nil,
        httpHeaders: HTTPHeaders? = nil,
        httpBody: String? = nil,
        closeInfo: WebSocketCloseInfo? = nil,
        underlying: (any Error)? = nil
    ) {
        self.code = code
        self.message = message
        self.httpStatus = httpStatus
        self.httpHeaders = httpHeaders
        self.httpBody = httpBody
        self.closeInfo = closeInfo
        self.underlying = underlying
    }

    public var description: String {
        var text = "\(self.code): \(self.message)"
        if let underlying { text += " (\(underlying))" }
        return text
    }
}
