import NIOCore

/// The first handler of an HTTP/1.1 connection (after TLS): it passes the peer's bytes on until
/// the connection is to end after an answer, then drops them.
///
/// Why it exists: NIO's HTTP request decoder stops parsing for good after a request that asks for
/// an upgrade (or a `CONNECT`), and from then on keeps every byte that arrives in a buffer of
/// its own with no bound. A connection whose upgrade was refused, or that asked to upgrade a
/// path that is not a WebSocket, can therefore only be answered and closed — and until it is
/// closed, what its peer still sends must not pile up behind the stopped decoder. Dropping the
/// bytes here, ahead of the decoder, bounds that; reading them (rather than not reading at all)
/// lets the close be a FIN rather than a reset that could destroy the answer before the client
/// read it.
///
/// It holds no bytes of its own, so it can leave the pipeline at any moment: it does so when the
/// connection becomes a WebSocket.
final class InboundDrain: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = ByteBuffer
    typealias InboundOut = ByteBuffer

    private(set) var isDraining = false

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard !self.isDraining else { return }
        context.fireChannelRead(data)
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        guard !self.isDraining else { return }
        context.fireChannelReadComplete()
    }

    /// From now on nothing the peer sends reaches the HTTP handlers, and the connection is
    /// closed after `grace` unless the peer closes it first (its FIN ends the channel). The
    /// caller half-closes the output once the answer is written (`outbound.finish()`).
    static func drainThenClose(_ channel: any Channel, drain: NIOLoopBound<InboundDrain>, grace: TimeAmount) {
        channel.eventLoop.execute {
            drain.value.isDraining = true
            channel.eventLoop.scheduleTask(in: grace) { channel.close(promise: nil) }
        }
    }
}
