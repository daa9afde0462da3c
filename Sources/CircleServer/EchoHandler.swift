import CircleSocket
import NIOCore
import NIOWebSocket

/// `/v1/echo`: sends every message back. Enabled only by a flag; it exists so that the Autobahn
/// fuzzing client and the echo benchmark exercise exactly the server's WebSocket layer.
final class EchoHandler: ChannelInboundHandler {
    typealias InboundIn = WebSocketFrame
    typealias OutboundOut = WebSocketFrame

    private var state: WebSocketProtocolState
    private var needsFlush = false

    init(maxMessageSize: Int, deflate: PerMessageDeflate?) {
        self.state = WebSocketProtocolState(role: .server, maxMessageSize: maxMessageSize, deflate: deflate)
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch self.state.receive(self.unwrapInboundIn(data), allocator: context.channel.allocator) {
        case .none, .pong:
            break
        case .deliver(let message):
            guard let frames = try? self.state.frames(for: message, fragmentSize: nil, allocator: context.channel.allocator) else {
                return
            }
            for frame in frames { context.write(self.wrapOutboundOut(frame), promise: nil) }
            self.needsFlush = true
        case .reply(let frame):
            context.write(self.wrapOutboundOut(frame), promise: nil)
            self.needsFlush = true
        case .peerClosed(_, _, let reply):
            let channel = context.channel
            if let reply {
                context.writeAndFlush(self.wrapOutboundOut(reply)).whenComplete { _ in channel.close(promise: nil) }
            } else {
                context.close(promise: nil)
            }
        case .fail(let code, let error):
            self.failConnection(context: context, code: code, reason: error.message)
        }
    }

    // Flushing once per read batch instead of once per message: with many messages in flight
    // this is what keeps the server's CPU per message low.
    func channelReadComplete(context: ChannelHandlerContext) {
        if self.needsFlush {
            self.needsFlush = false
            context.flush()
        }
        context.fireChannelReadComplete()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        switch error {
        case NIOWebSocketError.invalidFrameLength:
            self.failConnection(context: context, code: .messageTooBig, reason: "message too big")
        case is NIOWebSocketError:
            self.failConnection(context: context, code: .protocolError, reason: "\(error)")
        default:
            context.close(promise: nil)
        }
    }

    private func failConnection(context: ChannelHandlerContext, code: WebSocketCloseCode, reason: String) {
        let channel = context.channel
        if let frame = self.state.close(code: code, reason: reason) {
            context.writeAndFlush(self.wrapOutboundOut(frame)).whenComplete { _ in channel.close(promise: nil) }
        } else {
            context.close(promise: nil)
        }
    }
}
