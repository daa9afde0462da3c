import NIOCore
import NIOWebSocket

/// The frame encoder of both sides: writes the frame header and the (masked) payload.
///
/// NIO's `WebSocketFrameEncoder` masks a client's payload one byte at a time; for 16 KiB messages
/// that loop was most of the client's CPU per message in the echo benchmark. This encoder does the
/// same job with `applyWebSocketMask` (eight bytes at a time) and otherwise behaves alike: the
/// header is written into the payload buffer's headroom when it has some, else into a separate
/// buffer. Frames without a masking key (server role) pass through unmasked.
///
/// Servers use it too (``WebSocketServerUpgrader``): it keeps no state, where NIO's encoder
/// holds a header buffer per connection, so an idle connection costs that much less
/// (`benchmarks/idle.py --memprobe`, docs/bench/idle.md).
///
/// A payload the app still holds (a message it received and sends back, a buffer it reuses)
/// cannot be masked in place. NIO's encoder would copy it (copy-on-write) and then mask the
/// copy; this one masks while copying, in one pass, into a buffer of its own. A small payload's
/// copy also gets the header in front of it, so the frame is one buffer and one `write`
/// (benchmarks/client.py, docs/bench/client.md).
package final class WebSocketFrameWriter: ChannelOutboundHandler {
    package typealias OutboundIn = WebSocketFrame
    package typealias OutboundOut = ByteBuffer

    package init() {}

    /// A copied payload up to this size (header included) shares its buffer with the header.
    /// Larger ones keep a buffer of exactly their size: `ByteBuffer` rounds capacities up to a
    /// power of two, and 16 KiB plus a header would take 32 KiB, whose fresh pages cost more
    /// (page faults) than the second `iovec` of a `writev`.
    package static let headerInCopyLimit = 4096

    package func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        let frame = self.unwrapOutboundIn(data)
        var payload = frame.data
        let length = (frame.extensionData?.readableBytes ?? 0) + payload.readableBytes
        let headerSize = WebSocketFrameHeader.size(length: length, masked: frame.maskKey != nil)
        if var extensionData = frame.extensionData {
            // Extension data (none of this library's extensions send any) takes the simple way.
            if let key = frame.maskKey {
                extensionData.withUnsafeMutableReadableBytes { applyWebSocketMask($0, key: key, offset: 0) }
                payload.withUnsafeMutableReadableBytes { applyWebSocketMask($0, key: key, offset: extensionData.readableBytes % 4) }
            }
            context.write(self.wrapOutboundOut(Self.header(of: frame, length: length, allocator: context.channel.allocator)), promise: nil)
            context.write(self.wrapOutboundOut(extensionData), promise: nil)
            context.write(self.wrapOutboundOut(payload), promise: promise)
            return
        }
        if let key = frame.maskKey {
            let maskedInPlace: Void? = payload.modifyIfUniquelyOwned { buffer in
                buffer.withUnsafeMutableReadableBytes { applyWebSocketMask($0, key: key, offset: 0) }
            }
            if maskedInPlace == nil {
                payload = Self.maskedCopy(of: payload, frame: frame, headerSize: headerSize, key: key, allocator: context.channel.allocator)
                if payload.readerIndex == 0, payload.readableBytes == headerSize + length {
                    // The copy starts with its header: one buffer.
                    context.write(self.wrapOutboundOut(payload), promise: promise)
                    return
                }
            }
        }
        if payload.readerIndex >= headerSize {
            // Enough headroom: one buffer, one write (as NIO's encoder does).
            let start = payload.readerIndex - headerSize
            Self.setHeader(of: frame, length: length, in: &payload, at: start)
            payload.moveReaderIndex(to: start)
        } else {
            context.write(self.wrapOutboundOut(Self.header(of: frame, length: length, allocator: context.channel.allocator)), promise: nil)
        }
        context.write(self.wrapOutboundOut(payload), promise: promise)
    }

    /// `payload` masked into a new buffer; for a small payload the header is written in front
    /// (the returned buffer's readable bytes are then the whole frame).
    private static func maskedCopy(
        of payload: ByteBuffer,
        frame: WebSocketFrame,
        headerSize: Int,
        key: WebSocketMaskingKey,
        allocator: ByteBufferAllocator
    ) -> ByteBuffer {
        let length = payload.readableBytes
        let withHeader = headerSize + length <= Self.headerInCopyLimit
        var copy = allocator.buffer(capacity: withHeader ? headerSize + length : length)
        if withHeader {
            copy.moveWriterIndex(forwardBy: Self.setHeader(of: frame, length: length, in: &copy, at: 0))
        }
        copy.writeWithUnsafeMutableBytes(minimumWritableBytes: length) { target in
            payload.withUnsafeReadableBytes { source in copyWebSocketMasked(source, to: target, key: key) }
            return length
        }
        return copy
    }

    /// The frame's header in a buffer of its own.
    static func header(of frame: WebSocketFrame, length: Int, allocator: ByteBufferAllocator) -> ByteBuffer {
        var header = allocator.buffer(capacity: WebSocketFrameHeader.maxSize)
        header.moveWriterIndex(forwardBy: Self.setHeader(of: frame, length: length, in: &header, at: 0))
        return header
    }

    /// Writes the header of `frame`, whose payload is `length` bytes, at `index`; returns its size.
    @discardableResult
    static func setHeader(of frame: WebSocketFrame, length: Int, in buffer: inout ByteBuffer, at index: Int) -> Int {
        WebSocketFrameHeader.set(
            opcode: frame.opcode,
            fin: frame.fin,
            rsv1: frame.rsv1,
            rsv2: frame.rsv2,
            rsv3: frame.rsv3,
            length: length,
            maskKey: frame.maskKey,
            in: &buffer,
            at: index
        )
    }
}

@available(*, unavailable)
extension WebSocketFrameWriter: Sendable {}
