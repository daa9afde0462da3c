import NIOCore
import NIOWebSocket

/// Writing a frame's header (RFC 6455 §5.2): the one place that lays out its bytes, for the frame
/// encoder of both sides (``WebSocketFrameWriter``) and for the server's pre-framed fan-out bytes.
extension WebSocketFrameHeader {
    /// Largest header: 2 bytes, an 8-byte length, a 4-byte key.
    package static let maxSize = 14
    /// Largest header of an unmasked frame (a server's): 2 bytes and an 8-byte length.
    package static let maxUnmaskedSize = 10

    /// The size of the header of a frame with `length` payload bytes (extension data included).
    package static func size(length: Int, masked: Bool) -> Int {
        let lengthBytes: Int
        switch length {
        case 0...125: lengthBytes = 0
        case 126...Int(UInt16.max): lengthBytes = 2
        default: lengthBytes = 8
        }
        return 2 + lengthBytes + (masked ? 4 : 0)
    }

    /// Sets the header of a frame with `length` payload bytes at `index`, within the buffer's
    /// capacity (the writer index does not move); returns its size (``size(length:masked:)``).
    ///
    /// - Parameters:
    ///   - opcode: The frame's opcode.
    ///   - fin: Whether this is the final frame of its message.
    ///   - rsv1: RSV1: the message is compressed (RFC 7692).
    ///   - rsv2: RSV2, unused by this package's extensions.
    ///   - rsv3: RSV3, unused by this package's extensions.
    ///   - length: The payload's size in bytes, extension data included.
    ///   - maskKey: A client's masking key (then the mask bit is set and the key follows the
    ///     length); `nil` for a server's frame.
    ///   - buffer: Where the header goes.
    ///   - index: The header's first byte.
    @discardableResult
    package static func set(
        opcode: WebSocketOpcode,
        fin: Bool = true,
        rsv1: Bool = false,
        rsv2: Bool = false,
        rsv3: Bool = false,
        length: Int,
        maskKey: WebSocketMaskingKey? = nil,
        in buffer: inout ByteBuffer,
        at index: Int
    ) -> Int {
        var first: UInt8 = fin ? 0x80 : 0
        if rsv1 { first |= 0x40 }
        if rsv2 { first |= 0x20 }
        if rsv3 { first |= 0x10 }
        first |= UInt8(webSocketOpcode: opcode)
        var at = index
        at += buffer.setInteger(first, at: at)
        let maskBit: UInt8 = maskKey == nil ? 0 : 0x80
        switch length {
        case 0...125:
            at += buffer.setInteger(UInt8(length) | maskBit, at: at)
        case 126...Int(UInt16.max):
            at += buffer.setInteger(126 | maskBit, at: at)
            at += buffer.setInteger(UInt16(length), at: at)
        default:
            at += buffer.setInteger(127 | maskBit, at: at)
            at += buffer.setInteger(UInt64(length), at: at)
        }
        if let maskKey { at += buffer.setBytes(maskKey, at: at) }
        return at - index
    }

    /// Writes the header of a frame with `length` payload bytes at the buffer's writer index
    /// (growing it when needed); returns its size. The parameters are those of
    /// ``set(opcode:fin:rsv1:rsv2:rsv3:length:maskKey:in:at:)``.
    @discardableResult
    package static func write(
        opcode: WebSocketOpcode,
        fin: Bool = true,
        rsv1: Bool = false,
        rsv2: Bool = false,
        rsv3: Bool = false,
        length: Int,
        maskKey: WebSocketMaskingKey? = nil,
        into buffer: inout ByteBuffer
    ) -> Int {
        let size = Self.size(length: length, masked: maskKey != nil)
        buffer.reserveCapacity(minimumWritableBytes: size)
        Self.set(opcode: opcode, fin: fin, rsv1: rsv1, rsv2: rsv2, rsv3: rsv3, length: length, maskKey: maskKey, in: &buffer, at: buffer.writerIndex)
        buffer.moveWriterIndex(forwardBy: size)
        return size
    }
}
