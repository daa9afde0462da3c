import CircleSocket
import Crypto
import Foundation
import NIOCore
import NIOPosix
import Testing

/// A server that answers the upgrade with the 101, some frames and (optionally) its TCP close
/// in a single write, as Autobahn's fuzzing server does.
private final class BurstServerHandler: ChannelInboundHandler, Sendable {
    typealias InboundIn = ByteBuffer
    let frames: [UInt8]
    let closeAfter: Bool

    init(frames: [UInt8], closeAfter: Bool) {
        self.frames = frames
        self.closeAfter = closeAfter
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let request = String(buffer: self.unwrapInboundIn(data))
        guard let keyLine = request.split(separator: "\r\n").first(where: { $0.lowercased().hasPrefix("sec-websocket-key:") }) else { return }
        let key = keyLine.split(separator: ":", maxSplits: 1)[1].trimmingCharacters(in: .whitespaces)
        let accept = Data(Insecure.SHA1.hash(data: Data((key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11").utf8))).base64EncodedString()
        var out = context.channel.allocator.buffer(capacity: 256)
        out.writeString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: \(accept)\r\n\r\n")
        out.writeBytes(self.frames)
        let channel = context.channel
        let closeAfter = self.closeAfter
        context.writeAndFlush(NIOAny(out)).whenComplete { _ in if closeAfter { channel.close(promise: nil) } }
    }
}

private func burstServer(frames: [UInt8], closeAfter: Bool) async throws -> any Channel {
    try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
        .childChannelInitializer { $0.pipeline.addHandler(BurstServerHandler(frames: frames, closeAfter: closeAfter)) }
        .bind(host: "127.0.0.1", port: 0).get()
}

@Suite("Handshake edge cases")
struct HandshakeEdgeTests {
    @Test("frames and the TCP close in the same read as the 101 are all delivered")
    func burstThenClose() async throws {
        // text "hi", then close 1000, then FIN.
        let server = try await burstServer(frames: [0x81, 0x02, 0x68, 0x69, 0x88, 0x02, 0x03, 0xE8], closeAfter: true)
        defer { server.close(promise: nil) }
        for _ in 0..<10 {
            let socket = try await WebSocket.connect(to: "ws://127.0.0.1:\(server.localAddress!.port!)/getCaseCount")
            var received: [WebSocketMessage] = []
            for try await message in socket.messages { received.append(message) }
            #expect(received == [.text("hi")])
            #expect(await socket.closeInfo.code == .normalClosure)
        }
    }

    @Test("a protocol error right behind the 101 fails the stream, not connect()")
    func protocolErrorBehindTheUpgrade() async throws {
        // A ping with a 126-byte payload is illegal (control frames carry at most 125).
        let server = try await burstServer(frames: [0x89, 0x7E, 0x00, 0x7E] + [UInt8](repeating: 0x2A, count: 126), closeAfter: false)
        defer { server.close(promise: nil) }
        let socket = try await WebSocket.connect(to: "ws://127.0.0.1:\(server.localAddress!.port!)/")
        await #expect(throws: WebSocketError.self) {
            for try await _ in socket.messages {}
        }
        #expect(await socket.closeInfo.sentCode == .protocolError)
    }
}
