@testable import CircleSocket
import NIOCore
import NIOEmbedded
import NIOWebSocket
import Testing

/// ``WebSocketFrameHeader``'s writing against the header NIO's `WebSocketFrameEncoder` writes.
@Suite("WebSocket frame header writing")
struct WebSocketFrameHeaderWritingTests {
    static let lengths = [0, 1, 125, 126, 127, 65535, 65536, 70001]

    /// The bytes NIO's encoder writes before the payload of `frame`.
    private func nioHeader(of frame: WebSocketFrame) throws -> [UInt8] {
        let channel = EmbeddedChannel(handler: WebSocketFrameEncoder())
        try channel.writeOutbound(frame)
        var written: [UInt8] = []
        while let chunk = try channel.readOutbound(as: ByteBuffer.self) { written += chunk.readableBytesView }
        _ = try channel.finish()
        return Array(written.prefix(written.count - frame.length))
    }

    @Test("set and write lay out the header as NIO's encoder does", arguments: lengths)
    func matchesNIO(length: Int) throws {
        let payload = ByteBuffer(repeating: 0x61, count: length)
        for maskKey in [nil, WebSocketMaskingKey([0x12, 0xA5, 0x00, 0xFF])] {
            for (opcode, fin, rsv1) in [(WebSocketOpcode.text, true, false), (.binary, true, true), (.continuation, false, false), (.ping, true, false)] {
                let frame = WebSocketFrame(fin: fin, rsv1: rsv1, opcode: opcode, maskKey: maskKey, data: payload)
                let expected = try self.nioHeader(of: frame)
                let size = WebSocketFrameHeader.size(length: length, masked: maskKey != nil)
                #expect(size == expected.count, "length \(length)")

                var set = ByteBuffer(repeating: 0xEE, count: size + 2)
                #expect(WebSocketFrameHeader.set(opcode: opcode, fin: fin, rsv1: rsv1, length: length, maskKey: maskKey, in: &set, at: 1) == size)
                #expect(Array(set.readableBytesView) == [0xEE] + expected + [0xEE], "\(opcode), length \(length), masked \(maskKey != nil)")

                var written = ByteBuffer(bytes: [0xEE])
                #expect(WebSocketFrameHeader.write(opcode: opcode, fin: fin, rsv1: rsv1, length: length, maskKey: maskKey, into: &written) == size)
                #expect(Array(written.readableBytesView) == [0xEE] + expected, "\(opcode), length \(length), masked \(maskKey != nil)")
            }
        }
        #expect(WebSocketFrameHeader.size(length: length, masked: true) <= WebSocketFrameHeader.maxSize)
        #expect(WebSocketFrameHeader.size(length: length, masked: false) <= WebSocketFrameHeader.maxUnmaskedSize)
    }
}
