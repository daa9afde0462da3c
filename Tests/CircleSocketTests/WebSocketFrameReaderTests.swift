@testable import CircleSocket
import NIOCore
import NIOEmbedded
import NIOWebSocket
import Testing

/// `WebSocketFrameReader` against NIO's `WebSocketFrameDecoder` as the reference: the same frames
/// and the same errors, whatever the reads' boundaries.
@Suite("WebSocket frame reader")
struct WebSocketFrameReaderTests {
    struct Decoded: Equatable {
        var frames: [WebSocketFrame] = []
        var error: NIOWebSocketError?
    }

    /// Frames and the first error from feeding `reads` to a channel with `handler`.
    private func decode(_ reads: [ByteBuffer], with handler: any ChannelHandler) throws -> Decoded {
        let channel = EmbeddedChannel(handler: handler)
        defer { _ = try? channel.finish() }
        var result = Decoded()
        for read in reads {
            do {
                try channel.writeInbound(read)
            } catch let error as NIOWebSocketError {
                result.error = error
                break
            }
        }
        while let frame = try channel.readInbound(as: WebSocketFrame.self) {
            result.frames.append(frame)
        }
        return result
    }

    private func reference(_ reads: [ByteBuffer], maxFrameSize: Int) throws -> Decoded {
        try self.decode(reads, with: ByteToMessageHandler(WebSocketFrameDecoder(maxFrameSize: maxFrameSize)))
    }

    private func reader(_ reads: [ByteBuffer], maxFrameSize: Int) throws -> Decoded {
        try self.decode(reads, with: WebSocketFrameReader(maxFrameSize: maxFrameSize))
    }

    /// The wire bytes of `frames` (masked when they carry a key), by NIO's encoder.
    private func wire(_ frames: [WebSocketFrame]) throws -> ByteBuffer {
        let channel = EmbeddedChannel(handler: WebSocketFrameEncoder())
        var bytes = ByteBuffer()
        for frame in frames {
            try channel.writeOutbound(frame)
            while var part = try channel.readOutbound(as: ByteBuffer.self) {
                bytes.writeBuffer(&part)
            }
        }
        _ = try channel.finish()
        return bytes
    }

    private func payload(_ count: Int) -> ByteBuffer {
        ByteBuffer(bytes: (0..<count).map { UInt8(truncatingIfNeeded: $0 &* 13 &+ 5) })
    }

    /// Frames of every header form: 7-bit, 16-bit and 64-bit lengths, masked and not, control
    /// frames between fragments, an empty frame, reserved bits.
    private var mixedFrames: [WebSocketFrame] {
        [
            WebSocketFrame(fin: true, opcode: .text, data: self.payload(5)),
            WebSocketFrame(fin: false, opcode: .binary, maskKey: [1, 2, 3, 4], data: self.payload(126)),
            WebSocketFrame(fin: true, opcode: .ping, data: self.payload(0)),
            WebSocketFrame(fin: true, opcode: .continuation, data: self.payload(300)),
            WebSocketFrame(fin: true, rsv1: true, opcode: .binary, maskKey: [9, 8, 7, 6], data: self.payload(70_000)),
            WebSocketFrame(fin: true, opcode: .connectionClose, maskKey: [0, 0, 0, 1], data: self.payload(125)),
            WebSocketFrame(fin: true, opcode: .binary, data: self.payload(125)),
        ]
    }

    @Test("the same frames as NIO's decoder, with the bytes cut into two reads at every point")
    func everySplit() throws {
        // Smaller frames so that every split point runs quickly; 70,000 bytes has its own test.
        var frames = self.mixedFrames
        frames[4] = WebSocketFrame(fin: true, rsv1: true, opcode: .binary, maskKey: [9, 8, 7, 6], data: self.payload(1_000))
        let bytes = try self.wire(frames)
        let whole = try self.reader([bytes], maxFrameSize: 1 << 20)
        #expect(whole.frames.map(\.unmaskedData) == frames.map { self.payload($0.length) })
        #expect(whole.frames.map(\.opcode) == frames.map(\.opcode))
        #expect(whole == (try self.reference([bytes], maxFrameSize: 1 << 20)))
        for cut in 0...bytes.readableBytes {
            let reads = [bytes.getSlice(at: 0, length: cut)!, bytes.getSlice(at: cut, length: bytes.readableBytes - cut)!]
            #expect(try self.reader(reads, maxFrameSize: 1 << 20) == whole, "cut at \(cut)")
        }
    }

    @Test("the same frames with the bytes fed in reads of every size from 1 to 20, and of 4 KiB")
    func smallReads() throws {
        let bytes = try self.wire(self.mixedFrames)
        let expected = try self.reference([bytes], maxFrameSize: 1 << 20)
        #expect(expected.frames.count == self.mixedFrames.count)
        for size in Array(1...20) + [4096] {
            var rest = bytes
            var reads: [ByteBuffer] = []
            while rest.readableBytes > 0 {
                reads.append(rest.readSlice(length: min(size, rest.readableBytes))!)
            }
            #expect(try self.reader(reads, maxFrameSize: 1 << 20) == expected, "reads of \(size) bytes")
        }
    }

    @Test("a frame that lies whole in a read is passed on without a copy")
    func wholeFrameIsASlice() throws {
        let bytes = try self.wire([WebSocketFrame(fin: true, opcode: .binary, data: self.payload(1000))])
        let channel = EmbeddedChannel(handler: WebSocketFrameReader(maxFrameSize: 1 << 20))
        try channel.writeInbound(bytes)
        let frame = try #require(try channel.readInbound(as: WebSocketFrame.self))
        let read = bytes.withUnsafeReadableBytes { $0.baseAddress! }
        let data = frame.data.withUnsafeReadableBytes { $0.baseAddress! }
        #expect(data == read + 4)  // after the 2-byte header and 16-bit length
        _ = try channel.finish()
    }

    @Test(
        "the same errors as NIO's decoder, at once or byte by byte, and nothing after them",
        arguments: [
            // A payload over the limit (16-bit and 64-bit lengths), and over 2^63.
            ([0x82, 126, 0x04, 0x01], NIOWebSocketError.invalidFrameLength),
            ([0x82, 127, 0, 0, 0, 0, 0, 0, 0x04, 0x01], .invalidFrameLength),
            ([0x82, 127, 0x80, 0, 0, 0, 0, 0, 0, 0], .invalidFrameLength),
            // A control frame without fin; a control frame over 125 bytes.
            ([0x09, 0x00], .fragmentedControlFrame),
            ([0x89, 126, 0x00, 0x7E], .multiByteControlFrameLength),
        ] as [([UInt8], NIOWebSocketError)]
    )
    func errors(header: [UInt8], error: NIOWebSocketError) throws {
        let good = try self.wire([WebSocketFrame(fin: true, opcode: .text, data: self.payload(3))])
        var bytes = good
        bytes.writeBytes(header)
        var after = good
        bytes.writeBuffer(&after)  // a good frame after the bad header: must not come out
        let reference = try self.reference([bytes], maxFrameSize: 1024)
        #expect(reference.error == error)
        #expect(reference.frames.count == 1)
        #expect(try self.reader([bytes], maxFrameSize: 1024) == reference)
        var rest = bytes
        var reads: [ByteBuffer] = []
        while rest.readableBytes > 0 { reads.append(rest.readSlice(length: 1)!) }
        #expect(try self.reader(reads, maxFrameSize: 1024) == reference)
    }

    @Test(
        "a bad length or control frame fails as soon as the length is there, before the masking key",
        arguments: [
            [0x82, 0xFF, 0x80, 0, 0, 0, 0, 0, 0, 0],  // masked, over 2^63
            [0x82, 0xFE, 0x04, 0x01],  // masked, over the limit
            [0x09, 0x80],  // masked ping without fin
            [0x89, 0xFE, 0x00, 0x7E, 1, 2],  // masked ping of 126 bytes, half a key
        ] as [[UInt8]]
    )
    func errorBeforeMaskingKey(header: [UInt8]) throws {
        let bytes = ByteBuffer(bytes: header)
        let reference = try self.reference([bytes], maxFrameSize: 1024)
        #expect(reference.error != nil)
        #expect(try self.reader([bytes], maxFrameSize: 1024) == reference)
        let reads = header.map { ByteBuffer(bytes: [$0]) }
        #expect(try self.reader(reads, maxFrameSize: 1024) == reference)
    }

    @Test("a partial frame at the end is kept for the next read, not passed on")
    func partialFrameWaits() throws {
        let bytes = try self.wire([WebSocketFrame(fin: true, opcode: .binary, data: self.payload(70_000))])
        let channel = EmbeddedChannel(handler: WebSocketFrameReader(maxFrameSize: 1 << 20))
        try channel.writeInbound(bytes.getSlice(at: 0, length: 40_000)!)
        #expect(try channel.readInbound(as: WebSocketFrame.self) == nil)
        try channel.writeInbound(bytes.getSlice(at: 40_000, length: bytes.readableBytes - 40_000)!)
        let frame = try #require(try channel.readInbound(as: WebSocketFrame.self))
        #expect(frame.data == self.payload(70_000))
        _ = try channel.finish()
    }

    @Test("a stalled frame holds memory in proportion to the bytes received, not to its announced size")
    func stalledFrameHoldsLittle() throws {
        let size = 1 << 20
        let bytes = try self.wire([WebSocketFrame(fin: true, opcode: .binary, data: self.payload(size))])
        var parser = WebSocketFrameParser(maxFrameSize: 1 << 21)

        // Only the header (10 bytes) and a few payload bytes: a peer that announces 1 MiB and stalls.
        var first = bytes.getSlice(at: 0, length: 16)!
        #expect(try parser.next(from: &first) == nil)
        #expect(try #require(parser.pendingCapacity) <= WebSocketFrameParser.pendingFloor)

        // Trickled bytes grow the buffer with them: below twice what arrived (or the floor).
        var received = 16
        for count in [1, 100, 5_000, 20_000, 1] {
            var part = bytes.getSlice(at: received, length: count)!
            received += count
            #expect(try parser.next(from: &part) == nil)
            let capacity = try #require(parser.pendingCapacity)
            #expect(capacity >= received)
            #expect(capacity < 2 * max(received, WebSocketFrameParser.pendingFloor))
        }

        // The rest in one read completes the frame.
        var rest = bytes.getSlice(at: received, length: bytes.readableBytes - received)!
        let frame = try #require(try parser.next(from: &rest))
        #expect(frame.data == self.payload(size))
        #expect(parser.pendingCapacity == nil)
        #expect(rest.readableBytes == 0)
    }

    @Test("a partial header waits in a buffer about the longest header's size")
    func partialHeaderIsSmall() throws {
        var parser = WebSocketFrameParser(maxFrameSize: 1 << 20)
        var first = ByteBuffer(bytes: [0x82, 0xFF, 0, 0])  // 64-bit length, masked: a 14-byte header
        #expect(try parser.next(from: &first) == nil)
        #expect(try #require(parser.pendingCapacity) < 2 * 14)
    }

    @Test("the capacity asked for a partial frame: what it holds, at least the floor, at most the frame")
    func partialCapacity() {
        let floor = WebSocketFrameParser.pendingFloor
        #expect(WebSocketFrameParser.capacity(frameSize: nil, holding: 3) == 14)
        #expect(WebSocketFrameParser.capacity(frameSize: 100, holding: 50) == 100)
        #expect(WebSocketFrameParser.capacity(frameSize: 1 << 20, holding: 10) == floor)
        #expect(WebSocketFrameParser.capacity(frameSize: 1 << 20, holding: 10_000) == 10_000)
        #expect(WebSocketFrameParser.capacity(frameSize: 16_398, holding: 16_398) == 16_398)
    }
}
