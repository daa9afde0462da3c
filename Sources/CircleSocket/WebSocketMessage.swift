import NIOCore

/// One complete WebSocket message, reassembled from its fragments.
public enum WebSocketMessage: Sendable, Hashable {
    /// A text message; its bytes were validated as UTF-8.
    case text(String)
    /// A binary message.
    case binary(ByteBuffer)

    /// Creates a binary message from bytes.
    public static func binary(_ bytes: some Sequence<UInt8>) -> WebSocketMessage {
        .binary(ByteBuffer(bytes: bytes))
    }

    /// The message's payload size in bytes.
    public var byteCount: Int {
        switch self {
        case .text(let string): return string.utf8.count
        case .binary(let buffer): return buffer.readableBytes
        }
    }
}
