import CircleSocket
import CircleWire
import NIOCore
import NIOWebSocket

/// An event as the hub hands it out: the encoded JSON of a text frame and, for subscribers
/// that compress every message on its own (RFC 7692 without context takeover), the same bytes
/// deflated once per compression setting, so that a fan-out to many such subscribers compresses
/// once instead of once per subscriber.
///
/// Each also comes as a whole WebSocket frame (``framed``; a server's frames are not masked, so
/// the bytes are the same for every subscriber): a session writes it below the frame encoder,
/// so a fan-out to N subscribers frames once instead of N times, and each delivery is one
/// buffer (one iovec) rather than a header buffer allocated per subscriber plus the payload.
struct HubPayload: Sendable {
    var text: ByteBuffer
    /// `text` as one unfragmented, uncompressed text frame.
    var framed: ByteBuffer?
    var deflated: [(setting: PerMessageDeflate.SharedCompression, payload: ByteBuffer, framed: ByteBuffer)] = []

    init(text: ByteBuffer, framed: ByteBuffer? = nil) {
        self.text = text
        self.framed = framed
    }

    /// `text` with its text frame made once.
    static func framing(_ text: ByteBuffer, allocator: ByteBufferAllocator) -> HubPayload {
        HubPayload(text: text, framed: ServerFrame.text(text, compressed: false, allocator: allocator))
    }

    /// `message` encoded once into a buffer with room for the frame's header in front: the text
    /// and the frame are two views of the same bytes, with no copy.
    static func framed(_ message: CircleServerMessage, allocator: ByteBufferAllocator) -> HubPayload {
        let room = WebSocketFrameHeader.maxUnmaskedSize
        var buffer = allocator.buffer(capacity: 256)
        buffer.moveWriterIndex(forwardBy: room)
        buffer.moveReaderIndex(forwardBy: room)
        message.writeJSON(into: &buffer)
        let length = buffer.readableBytes
        let start = room - WebSocketFrameHeader.size(length: length, masked: false)
        WebSocketFrameHeader.set(opcode: .text, length: length, in: &buffer, at: start)
        let text = buffer
        buffer.moveReaderIndex(to: start)
        return HubPayload(text: text, framed: buffer)
    }

    /// The deflated copy made for `setting`, if the hub made one.
    func deflated(for setting: PerMessageDeflate.SharedCompression) -> ByteBuffer? {
        for copy in self.deflated where copy.setting == setting { return copy.payload }
        return nil
    }

    /// The deflated copy made for `setting` as a whole frame (RSV1 set), if the hub made one.
    func framedDeflated(for setting: PerMessageDeflate.SharedCompression) -> ByteBuffer? {
        for copy in self.deflated where copy.setting == setting { return copy.framed }
        return nil
    }
}
