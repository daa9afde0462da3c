import CircleSocket
import CircleWire
import NIOCore
import NIOWebSocket

/// The bytes of a server's WebSocket frames, made once and written below the frame encoder: final,
/// RSV1 when the payload is deflated (RFC 7692), no mask. The header's bytes are
/// ``WebSocketFrameHeader``'s.
enum ServerFrame {
    static func text(_ payload: ByteBuffer, compressed: Bool, allocator: ByteBufferAllocator) -> ByteBuffer {
        let length = payload.readableBytes
        var frame = allocator.buffer(capacity: length + WebSocketFrameHeader.maxUnmaskedSize)
        WebSocketFrameHeader.write(opcode: .text, rsv1: compressed, length: length, into: &frame)
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
            let size = WebSocketFrameHeader.size(length: length, masked: false) + length
            guard size <= maxBytes else { return nil }
            var frame = allocator.buffer(capacity: size)
            WebSocketFrameHeader.write(opcode: .text, length: length, into: &frame)
            frame.writeString(text)
            return frame
        case .binary(let payload):
            let length = payload.readableBytes
            let size = WebSocketFrameHeader.size(length: length, masked: false) + length
            guard size <= maxBytes else { return nil }
            var frame = allocator.buffer(capacity: size)
            WebSocketFrameHeader.write(opcode: .binary, length: length, into: &frame)
            frame.writeImmutableBuffer(payload)
            return frame
        }
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
            let size = WebSocketFrameHeader.size(length: scratch.readableBytes, masked: false) + scratch.readableBytes
            if batch.readableBytes > 0, batch.readableBytes + size > maxBytes {
                buffers.append(batch)
                batch = allocator.buffer(capacity: 0)
            }
            if batch.capacity == 0 { batch.reserveCapacity(min(maxBytes, max(size, 4096))) }
            WebSocketFrameHeader.write(opcode: .text, length: scratch.readableBytes, into: &batch)
            batch.writeImmutableBuffer(scratch)
        }
        if batch.readableBytes > 0 { buffers.append(batch) }
        return buffers
    }
}
