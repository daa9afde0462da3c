import CircleSocket
import NIOCore
import NIOWebSocket

/// `/v1/echo`: a session whose messages go back. Enabled only by a flag; it exists so that the
/// Autobahn fuzzing client and the echo benchmark exercise the server's WebSocket framing, which
/// is the same ``ServerWebSocketFraming`` chat connections use.
final class EchoHandler: ChannelInboundHandler {
    typealias InboundIn = WebSocketFrame
    typealias OutboundOut = WebSocketFrame

    private let framing: ServerWebSocketFraming
    private var needsFlush = false

    init(maxMessageSize: Int, deflate: PerMessageDeflate?) {
        self.framing = ServerWebSocketFraming(maxMessageSize: maxMessageSize, deflate: deflate)
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch self.framing.receive(self.unwrapInboundIn(data), context: context) {
        case .none, .closing, .text:  // .text: not asked for (the framing's textBytes is off)
            break
        case .message(let message):
            self.framing.write(message: message, context: context)
            self.needsFlush = true
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
        _ = self.framing.errorCaught(error, context: context)
    }
}
