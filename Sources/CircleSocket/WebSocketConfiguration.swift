import NIOCore
import NIOHTTP1

/// Settings for one WebSocket connection. Every field has a default.
///
/// ```swift
/// var configuration = WebSocketConfiguration()
/// configuration.subprotocols = ["circle.v1"]
/// configuration.headers.add(name: "Authorization", value: "Bearer \(token)")
/// configuration.compression = .init()
/// let socket = try await WebSocket.connect(to: "wss://chat.example.com/ws", configuration: configuration)
/// ```
public struct WebSocketConfiguration: Sendable {
    /// Extra headers sent with the upgrade request.
    public var headers: HTTPHeaders
    /// Subprotocols offered in `Sec-WebSocket-Protocol`, most preferred first.
    public var subprotocols: [String]
    /// Time allowed for TCP connect, TLS handshake and HTTP upgrade together.
    public var connectTimeout: TimeAmount
    /// Time to wait for the peer's close frame (and, for a client, the server's TCP close)
    /// after sending a close frame, before the connection is dropped.
    public var closeTimeout: TimeAmount
    /// Largest inbound message, after decompression. A larger one closes the connection with 1009.
    /// The default, 16 MiB, fits the Autobahn suite's largest messages; chat servers set far less.
    public var maxMessageSize: Int
    /// Largest inbound frame. Defaults to `maxMessageSize`, since a frame is never larger than its message.
    public var maxFrameSize: Int?
    /// Outbound messages larger than this are sent in fragments of this size; `nil` sends each
    /// message as one frame.
    public var fragmentSize: Int?
    /// TLS settings for `wss://` URLs.
    public var tls: WebSocketTLSConfiguration
    /// permessage-deflate (RFC 7692) to offer; `nil` offers no compression.
    public var compression: PerMessageDeflateConfiguration?
    /// Connect to this address instead of resolving the URL's host. The host is still used for
    /// the `Host` header, SNI and certificate checks (like curl's `--resolve`).
    public var connectAddress: SocketAddress?
    /// Inbound messages buffered before reading from the socket pauses (backpressure).
    public var inboundBufferLimit: Int

    /// The largest message either side takes unless told otherwise: 16 MiB.
    public static let defaultMaxMessageSize = 16 * 1024 * 1024

    public init(
        headers: HTTPHeaders = [:],
        subprotocols: [String] = [],
        connectTimeout: TimeAmount = .seconds(10),
        closeTimeout: TimeAmount = .seconds(5),
        maxMessageSize: Int = WebSocketConfiguration.defaultMaxMessageSize,
        maxFrameSize: Int? = nil,
        fragmentSize: Int? = nil,
        tls: WebSocketTLSConfiguration = .init(),
        compression: PerMessageDeflateConfiguration? = nil,
        connectAddress: SocketAddress? = nil,
        inboundBufferLimit: Int = 64
    ) {
        self.headers = headers
        self.subprotocols = subprotocols
        self.connectTimeout = connectTimeout
        self.closeTimeout = closeTimeout
        self.maxMessageSize = maxMessageSize
        self.maxFrameSize = maxFrameSize
        self.fragmentSize = fragmentSize
        self.tls = tls
        self.compression = compression
        self.connectAddress = connectAddress
        self.inboundBufferLimit = inboundBufferLimit
    }

    var effectiveMaxFrameSize: Int {
        min(self.maxFrameSize ?? self.maxMessageSize, Int(UInt32.max))
    }
}

/// permessage-deflate (RFC 7692) parameters.
///
/// The defaults offer compression with context takeover both ways and let the
/// server choose the window sizes, which is what browsers offer.
public struct PerMessageDeflateConfiguration: Sendable, Hashable {
    /// Ask the server to reset its compressor after each message (less memory on the server, worse ratio).
    public var serverNoContextTakeover: Bool
    /// Announce that this side resets its compressor after each message.
    public var clientNoContextTakeover: Bool
    /// Ask the server to use at most this LZ77 window (8...15 bits); `nil` leaves it to the server.
    public var serverMaxWindowBits: Int?
    /// Offer `client_max_window_bits`, with this value when set (8...15); the server may then
    /// choose a smaller window for this side's compressor.
    public var clientMaxWindowBits: Int?
    /// zlib compression level, 1 (fastest) to 9 (smallest).
    public var compressionLevel: Int
    /// Messages smaller than this are sent uncompressed; compressing them costs more than it saves.
    public var minimumCompressedSize: Int

    public init(
        serverNoContextTakeover: Bool = false,
        clientNoContextTakeover: Bool = false,
        serverMaxWindowBits: Int? = nil,
        clientMaxWindowBits: Int? = nil,
        compressionLevel: Int = 6,
        minimumCompressedSize: Int = 64
    ) {
        self.serverNoContextTakeover = serverNoContextTakeover
        self.clientNoContextTakeover = clientNoContextTakeover
        self.serverMaxWindowBits = serverMaxWindowBits
        self.clientMaxWindowBits = clientMaxWindowBits
        self.compressionLevel = compressionLevel
        self.minimumCompressedSize = minimumCompressedSize
    }
}
