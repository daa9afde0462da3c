@testable import CircleSocket
import NIOCore
import NIOWebSocket
import Testing

/// The RFC 6455 decisions, without I/O.
@Suite("WebSocket protocol state")
struct WebSocketProtocolStateTests {
    let allocator = ByteBufferAllocator()

    func client(max: Int = 1024) -> WebSocketProtocolState {
        WebSocketProtocolState(role: .client, maxMessageSize: max, deflate: nil)
    }

    func frame(_ opcode: WebSocketOpcode, fin: Bool = true, rsv1: Bool = false, masked: Bool = false, _ bytes: [UInt8]) -> WebSocketFrame {
        WebSocketFrame(fin: fin, rsv1: rsv1, opcode: opcode, maskKey: masked ? .random() : nil, data: ByteBuffer(bytes: bytes))
    }

    func failCode(_ action: WebSocketProtocolState.InboundAction) -> WebSocketCloseCode? {
        if case .fail(let code, _) = action { return code }
        return nil
    }

    @Test("fragments are reassembled; control frames may interleave")
    func reassembly() {
        var state = self.client()
        #expect(failCode(state.receive(frame(.text, fin: false, Array("hel".utf8)), allocator: allocator)) == nil)
        guard case .reply(let pong) = state.receive(frame(.ping, [1, 2]), allocator: allocator) else {
            Issue.record("a ping must be answered")
            return
        }
        #expect(pong.opcode == .pong)
        #expect(pong.maskKey != nil)  // client frames are masked
        guard case .deliver(let message) = state.receive(frame(.continuation, Array("lo".utf8)), allocator: allocator) else {
            Issue.record("the message must be delivered")
            return
        }
        #expect(message == .text("hello"))
    }

    @Test("protocol violations fail with 1002", arguments: [
        ("masked frame from a server", WebSocketFrame(fin: true, opcode: .text, maskKey: .random(), data: ByteBuffer(string: "x"))),
        ("reserved opcode", WebSocketFrame(fin: true, opcode: WebSocketOpcode(encodedWebSocketOpcode: 3)!, data: ByteBuffer())),
        ("continuation without a message", WebSocketFrame(fin: true, opcode: .continuation, data: ByteBuffer())),
        ("rsv1 without compression", WebSocketFrame(fin: true, rsv1: true, opcode: .text, data: ByteBuffer(string: "x"))),
        ("rsv2", WebSocketFrame(fin: true, rsv2: true, opcode: .binary, data: ByteBuffer())),
        ("close with a one-byte payload", WebSocketFrame(fin: true, opcode: .connectionClose, data: ByteBuffer(bytes: [3]))),
        ("close with code 1005", WebSocketFrame(fin: true, opcode: .connectionClose, data: ByteBuffer(bytes: [0x03, 0xED]))),
        ("close with code 999", WebSocketFrame(fin: true, opcode: .connectionClose, data: ByteBuffer(bytes: [0x03, 0xE7]))),
    ])
    func violations(_ name: String, _ bad: WebSocketFrame) {
        var state = self.client()
        #expect(failCode(state.receive(bad, allocator: allocator)) == .protocolError, "\(name)")
    }

    @Test("a new message inside a fragmented one is a violation")
    func interleavedMessages() {
        var state = self.client()
        _ = state.receive(frame(.binary, fin: false, [1]), allocator: allocator)
        #expect(failCode(state.receive(frame(.text, [2]), allocator: allocator)) == .protocolError)
    }

    @Test("invalid UTF-8 fails fast, in the first fragment that shows it (1007)")
    func utf8FailFast() {
        var state = self.client()
        // 0xC0 can never start a valid sequence: known bad before the message ends.
        #expect(failCode(state.receive(frame(.text, fin: false, [0x61, 0xC0]), allocator: allocator)) == .invalidPayloadData)
        var split = self.client()
        // A code point split across fragments is fine.
        _ = split.receive(frame(.text, fin: false, [0xE2, 0x82]), allocator: allocator)
        guard case .deliver(.text(let euro)) = split.receive(frame(.continuation, [0xAC]), allocator: allocator) else {
            Issue.record("€ split over two fragments must be delivered")
            return
        }
        #expect(euro == "€")
        var truncated = self.client()
        #expect(failCode(truncated.receive(frame(.text, [0xE2, 0x82]), allocator: allocator)) == .invalidPayloadData)
        var badReason = self.client()
        #expect(failCode(badReason.receive(frame(.connectionClose, [0x03, 0xE8, 0xFF]), allocator: allocator)) == .invalidPayloadData)
    }

    @Test("messages over the limit fail with 1009, also across fragments")
    func tooBig() {
        var state = self.client(max: 4)
        #expect(failCode(state.receive(frame(.binary, [1, 2, 3, 4, 5]), allocator: allocator)) == .messageTooBig)
        var fragmented = self.client(max: 4)
        _ = fragmented.receive(frame(.binary, fin: false, [1, 2, 3]), allocator: allocator)
        #expect(failCode(fragmented.receive(frame(.continuation, [4, 5]), allocator: allocator)) == .messageTooBig)
    }

    @Test("close handshake: the peer's close is echoed once; nothing is sent or received after")
    func closeHandshake() {
        var state = self.client()
        guard case .peerClosed(let code, let reason, let reply?) = state.receive(frame(.connectionClose, [0x0F, 0xA1] + Array("bye".utf8)), allocator: allocator) else {
            Issue.record("the close must be answered")
            return
        }
        #expect(code == WebSocketCloseCode(4001))
        #expect(reason == "bye")
        #expect(reply.opcode == .connectionClose)
        #expect(!state.canSend)
        #expect(throws: WebSocketError.self) { _ = try state.frames(for: .text("late"), fragmentSize: nil, allocator: allocator) }
        guard case .none = state.receive(frame(.text, Array("after".utf8)), allocator: allocator) else {
            Issue.record("frames after the close must be ignored")
            return
        }

        var initiator = self.client()
        let sent = initiator.close(code: .goingAway, reason: "later")
        #expect(sent?.opcode == .connectionClose)
        #expect(initiator.close(code: .normalClosure, reason: "") == nil)  // only once
        guard case .peerClosed(_, _, nil) = initiator.receive(frame(.connectionClose, [0x03, 0xE9]), allocator: allocator) else {
            Issue.record("the answer to our close needs no reply")
            return
        }
        #expect(initiator.closeState == .closed)
        #expect(initiator.sentCloseCode == .goingAway)
    }

    @Test("outbound fragmentation splits the payload and marks only the last frame fin")
    func fragmentation() throws {
        var state = WebSocketProtocolState(role: .server, maxMessageSize: 1024, deflate: nil)
        let frames = try state.frames(for: .binary(ByteBuffer(bytes: Array(0..<10))), fragmentSize: 4, allocator: allocator)
        #expect(frames.map(\.opcode) == [.binary, .continuation, .continuation])
        #expect(frames.map(\.fin) == [false, false, true])
        #expect(frames.map(\.length) == [4, 4, 2])
        #expect(frames.allSatisfy { $0.maskKey == nil })  // servers don't mask
    }
}
