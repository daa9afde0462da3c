import CircleSocket
import CircleWire
import NIOCore

/// The bytes of a server's WebSocket frame (RFC 6455 §5.2): FIN, the opcode, RSV1 when the
/// payload is deflated (RFC 7692), the length in 7, 16 or 64 bits, no mask.
enum ServerFrame {
    static let maxHeaderSize = 10

    static func text(_ payload: ByteBuffer, compressed: Bool, allocator: ByteBufferAllocator) -> ByteBuffer {
        let length = payload.readableBytes
        var frame = allocator.buffer(capacity: length + Self.maxHeaderSize)
        Self.writeHeader(compressed: compressed, length: length, into: &frame)
        frame.writeImmutableBuffer(payload)
        return frame
    }

    /// `message` as one uncompressed frame in one buffer (header, then payload), or `nil` when
    /// the frame would be over `maxBytes`.
    ///
    /// For `/v1/echo`: written below the frame encoder like the chat's frames, it is one NIO
    /// pending write and one `write`, where a `WebSocketFrame` through the encoder costs a header
    /// buffer of its own, two pending writes and a `writev`. The payload is copied, so large
    /// messages keep the encoder's way (``WebSocketFrameWriter/headerInCopyLimit``).
    static func frame(of message: WebSocketMessage, maxBytes: Int, allocator: ByteBufferAllocator) -> ByteBuffer? {
        switch message {
        case .text(let text):
            let length = text.utf8.count
            guard Self.headerSize(length: length) + length <= maxBytes else { return nil }
            var frame = allocator.buffer(capacity: Self.headerSize(length: length) + length)
            Self.writeHeader(first: textFirstByte, length: length, into: &frame)
            frame.writeString(text)
            return frame
        case .binary(let payload):
            let length = payload.readableBytes
            guard Self.headerSize(length: length) + length <= maxBytes else { return nil }
            var frame = allocator.buffer(capacity: Self.headerSize(length: length) + length)
            Self.writeHeader(first: binaryFirstByte, length: length, into: &frame)
            frame.writeImmutableBuffer(payload)
            return frame
        }
    }

    /// FIN and the opcode; RSV1 is added for a deflated payload.
    private static let textFirstByte: UInt8 = 0x81
    private static let binaryFirstByte: UInt8 = 0x82
    private static let rsv1: UInt8 = 0x40

    /// The header of a final text frame of `length` payload bytes, written at the end.
    static func writeHeader(compressed: Bool, length: Int, into frame: inout ByteBuffer) {
        Self.writeHeader(first: compressed ? Self.textFirstByte | Self.rsv1 : Self.textFirstByte, length: length, into: &frame)
    }

    private static func writeHeader(first: UInt8, length: Int, into frame: inout ByteBuffer) {
        let size = Self.headerSize(length: length)
        frame.reserveCapacity(minimumWritableBytes: size)
        Self.setHeader(first: first, length: length, in: &frame, at: frame.writerIndex)
        frame.moveWriterIndex(forwardBy: size)
    }

    /// `messages` as uncompressed text frames back to back, in buffers of at most about
    /// `maxBytes` each (a larger message gets a buffer of its own).
    ///
    /// For a replay page: its posts go to the socket as a few buffers rather than one frame each
    /// (two NIO pending writes each: the header's buffer and the JSON). NIO's pending-writes
    /// queue grows to what waits for a flush and never shrinks, so a page of 256 posts written
    /// one by one left every resumed connection about 32 KB larger for the rest of its life
    /// (`benchmarks/idle.py --history 256`: 38 KB per connection, 6 KB with this).
    static func frames(of messages: some Sequence<CircleServerMessage>, maxBytes: Int, allocator: ByteBufferAllocator) -> [ByteBuffer] {
        var buffers: [ByteBuffer] = []
        var scratch = allocator.buffer(capacity: 512)
        var batch = allocator.buffer(capacity: 0)
        for message in messages {
            scratch.clear()
            message.writeJSON(into: &scratch)
            let size = Self.headerSize(length: scratch.readableBytes) + scratch.readableBytes
            if batch.readableBytes > 0, batch.readableBytes + size > maxBytes {
                buffers.append(batch)
                batch = allocator.buffer(capacity: 0)
            }
            if batch.capacity == 0 { batch.reserveCapacity(min(maxBytes, max(size, 4096))) }
            Self.writeHeader(compressed: false, length: scratch.readableBytes, into: &batch)
            batch.writeImmutableBuffer(scratch)
        }
        if batch.readableBytes > 0 { buffers.append(batch) }
        return buffers
    }

    static func headerSize(length: Int) -> Int {
        length < 126 ? 2 : (length <= Int(UInt16.max) ? 4 : 10)
    }

    /// Sets the header of a final text frame of `length` payload bytes at `index` (within the
    /// buffer's capacity); returns its size.
    @discardableResult
    static func setHeader(compressed: Bool, length: Int, in frame: inout ByteBuffer, at index: Int) -> Int {
        Self.setHeader(first: compressed ? Self.textFirstByte | Self.rsv1 : Self.textFirstByte, length: length, in: &frame, at: index)
    }

    @discardableResult
    private static func setHeader(first: UInt8, length: Int, in frame: inout ByteBuffer, at index: Int) -> Int {
        frame.setInteger(first, at: index)
        let size = Self.headerSize(length: length)
        switch size {
        case 2:
            frame.setInteger(UInt8(length), at: index + 1)
        case 4:
            frame.setInteger(UInt8(126), at: index + 1)
            frame.setInteger(UInt16(length), at: index + 2)
        default:
            frame.setInteger(UInt8(127), at: index + 1)
            frame.setInteger(UInt64(length), at: index + 2)
        }
        return size
    }
}
