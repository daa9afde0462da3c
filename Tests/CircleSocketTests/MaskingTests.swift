@testable import CircleSocket
import NIOCore
import NIOEmbedded
import NIOWebSocket
import Testing

/// The word-at-a-time masking against NIO's byte-by-byte reference, and the client's frame encoder
/// against NIO's frame decoder.
@Suite("WebSocket masking")
struct MaskingTests {
    static let lengths = [0, 1, 3, 7, 8, 9, 15, 16, 17, 125, 126, 127, 1000, 65535, 65536, 70001]

    private func bytes(_ count: Int, seed: UInt8 = 7) -> [UInt8] {
        (0..<count).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ Int(seed)) }
    }

    @Test("applyWebSocketMask equals NIO's webSocketMask for every length and key offset", arguments: lengths)
    func maskMatchesReference(length: Int) {
        let key: WebSocketMaskingKey = [0x12, 0xA5, 0x00, 0xFF]
        for offset in 0..<4 {
            var reference = ByteBuffer(bytes: self.bytes(length))
            reference.webSocketMask(key, indexOffset: offset)
            var fast = ByteBuffer(bytes: self.bytes(length))
            fast.withUnsafeMutableReadableBytes { applyWebSocketMask($0, key: key, offset: offset) }
            #expect(fast == reference, "length \(length), offset \(offset)")
        }
    }

    @Test("copyWebSocketMasked equals a copy masked in place, at every length and alignment", arguments: lengths)
    func maskedCopyMatchesReference(length: Int) {
        let key: WebSocketMaskingKey = [0x5A, 0x01, 0xC3, 0x80]
        for skew in 0..<3 {
            for offset in 0..<4 {
                var reference = ByteBuffer(bytes: self.bytes(length))
                reference.webSocketMask(key, indexOffset: offset)
                let source = [UInt8](repeating: 0xEE, count: skew) + self.bytes(length)
                var target = [UInt8](repeating: 0xEE, count: length + 3)
                source.withUnsafeBytes { from in
                    target.withUnsafeMutableBytes { to in
                        copyWebSocketMasked(
                            UnsafeRawBufferPointer(rebasing: from[skew...]),
                            to: UnsafeMutableRawBufferPointer(rebasing: to[1...]),
                            key: key,
                            offset: offset
                        )
                    }
                }
                #expect(target[0] == 0xEE && target[length + 1] == 0xEE, "wrote outside its target")
                #expect(Array(target[1..<(length + 1)]) == Array(reference.readableBytesView), "length \(length), skew \(skew), offset \(offset)")
            }
        }
    }

    @Test("fastUnmaskedData equals unmaskedData, also at an unaligned reader index")
    func unmaskedData() {
        for length in Self.lengths {
            var data = ByteBuffer(bytes: [9, 9, 9] + self.bytes(length))
            data.moveReaderIndex(forwardBy: 3)
            let frame = WebSocketFrame(fin: true, opcode: .binary, maskKey: .random(), data: data)
            #expect(frame.fastUnmaskedData == frame.unmaskedData)
            #expect(frame.data == data, "the frame's own payload was changed")
            let withExtension = WebSocketFrame(
                fin: true, opcode: .binary, maskKey: .random(), data: data, extensionData: ByteBuffer(bytes: [1, 2, 3, 4, 5])
            )
            #expect(withExtension.fastUnmaskedData == withExtension.unmaskedData)
        }
    }

    @Test("frames from WebSocketFrameWriter decode to the same frames", arguments: lengths)
    func encoderRoundTrip(length: Int) throws {
        let channel = EmbeddedChannel()
        try channel.pipeline.syncOperations.addHandler(WebSocketFrameWriter())
        let decoder = EmbeddedChannel(handler: ByteToMessageHandler(WebSocketFrameDecoder(maxFrameSize: 1 << 20)))
        let payload = self.bytes(length, seed: 3)
        var headroom = channel.allocator.buffer(capacity: length + 20)
        headroom.writeBytes([UInt8](repeating: 0, count: 14))
        headroom.moveReaderIndex(forwardBy: 14)
        headroom.writeBytes(payload)
        let inputs = [
            WebSocketFrame(fin: true, opcode: .binary, maskKey: .random(), data: ByteBuffer(bytes: payload)),
            WebSocketFrame(fin: false, rsv1: true, opcode: .text, maskKey: .random(), data: headroom),
            WebSocketFrame(fin: true, opcode: .continuation, maskKey: nil, data: ByteBuffer(bytes: payload)),
        ]
        for input in inputs {
            try channel.writeOutbound(input)
            while let chunk = try channel.readOutbound(as: ByteBuffer.self) { try decoder.writeInbound(chunk) }
            let decoded = try #require(try decoder.readInbound(as: WebSocketFrame.self))
            #expect(decoded.fin == input.fin)
            #expect(decoded.rsv1 == input.rsv1)
            #expect(decoded.opcode == input.opcode)
            #expect(decoded.maskKey == input.maskKey)
            #expect(decoded.unmaskedData == ByteBuffer(bytes: payload))
        }
        _ = try channel.finish()
        _ = try decoder.finish()
    }

    @Test("a payload the caller still holds is sent masked and left as it was; small ones go as one buffer", arguments: lengths)
    func sharedPayload(length: Int) throws {
        let channel = EmbeddedChannel()
        try channel.pipeline.syncOperations.addHandler(WebSocketFrameWriter())
        let decoder = EmbeddedChannel(handler: ByteToMessageHandler(WebSocketFrameDecoder(maxFrameSize: 1 << 20)))
        let payload = self.bytes(length, seed: 11)
        // A slice of a larger buffer, as a received message is: shared, with bytes in front.
        let received = ByteBuffer(bytes: [1, 2, 3, 4, 5, 6, 7, 8] + payload)
        let held = received.getSlice(at: 8, length: length)!
        try channel.writeOutbound(WebSocketFrame(fin: true, opcode: .binary, maskKey: .random(), data: held))
        var chunks = 0
        while let chunk = try channel.readOutbound(as: ByteBuffer.self) {
            chunks += 1
            try decoder.writeInbound(chunk)
        }
        let decoded = try #require(try decoder.readInbound(as: WebSocketFrame.self))
        #expect(decoded.unmaskedData == ByteBuffer(bytes: payload))
        #expect(held == ByteBuffer(bytes: payload), "the caller's buffer was masked")
        #expect(received == ByteBuffer(bytes: [1, 2, 3, 4, 5, 6, 7, 8] + payload))
        let headerSize = WebSocketFrameHeader.size(length: length, masked: true)
        #expect(chunks == (headerSize + length <= WebSocketFrameWriter.headerInCopyLimit ? 1 : 2))
        _ = try channel.finish()
        _ = try decoder.finish()
    }
}
