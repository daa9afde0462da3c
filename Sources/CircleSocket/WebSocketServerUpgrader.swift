import NIOCore
import NIOHTTP1
import NIOWebSocket

/// NIO's WebSocket server upgrade (`NIOTypedWebSocketServerUpgrader`) with CircleSocket's
/// ``WebSocketFrameReader`` and ``WebSocketFrameWriter`` in place of NIO's
/// `ByteToMessageHandler(WebSocketFrameDecoder)` and `WebSocketFrameEncoder`.
///
/// The handshake is NIO's: the checks of `Sec-WebSocket-Key` and `-Version`, `shouldUpgrade`, the
/// `Sec-WebSocket-Accept` value. Only the pipeline after the 101 differs: the frame writer
/// (stateless, where NIO's encoder keeps a header buffer per connection), then the frame reader
/// (which passes frames whole in a read on as slices of it, and throws the same
/// `NIOWebSocketError`s as NIO's decoder), then `upgradePipelineHandler`. No automatic error
/// handling: the handlers behind decide what a protocol error closes with.
package struct WebSocketServerUpgrader<UpgradeResult: Sendable>: NIOTypedHTTPServerProtocolUpgrader {
    package let supportedProtocol = "websocket"
    package let requiredUpgradeHeaders: [String] = []

    private let handshake: NIOTypedWebSocketServerUpgrader<UpgradeResult>
    private let maxFrameSize: Int
    private let upgradePipelineHandler: @Sendable (any Channel, HTTPRequestHead) -> EventLoopFuture<UpgradeResult>

    package init(
        maxFrameSize: Int,
        shouldUpgrade: @escaping @Sendable (any Channel, HTTPRequestHead) -> EventLoopFuture<HTTPHeaders?>,
        upgradePipelineHandler: @escaping @Sendable (any Channel, HTTPRequestHead) -> EventLoopFuture<UpgradeResult>
    ) {
        self.handshake = NIOTypedWebSocketServerUpgrader(
            maxFrameSize: maxFrameSize,
            enableAutomaticErrorHandling: false,
            shouldUpgrade: shouldUpgrade,
            upgradePipelineHandler: upgradePipelineHandler
        )
        self.maxFrameSize = maxFrameSize
        self.upgradePipelineHandler = upgradePipelineHandler
    }

    package func buildUpgradeResponse(
        channel: any Channel,
        upgradeRequest: HTTPRequestHead,
        initialResponseHeaders: HTTPHeaders
    ) -> EventLoopFuture<HTTPHeaders> {
        self.handshake.buildUpgradeResponse(
            channel: channel,
            upgradeRequest: upgradeRequest,
            initialResponseHeaders: initialResponseHeaders
        )
    }

    package func upgrade(channel: any Channel, upgradeRequest: HTTPRequestHead) -> EventLoopFuture<UpgradeResult> {
        let maxFrameSize = self.maxFrameSize
        return channel.eventLoop.makeCompletedFuture {
            try channel.pipeline.syncOperations.addHandlers(
                WebSocketFrameWriter(),
                // A header that no client may send fails the connection as soon as it arrives.
                WebSocketFrameReader(maxFrameSize: maxFrameSize, checkHeadersAs: .server)
            )
        }.flatMap {
            self.upgradePipelineHandler(channel, upgradeRequest)
        }
    }
}

/// The same upgrade for NIO's untyped HTTP server pipeline (``WebSocketServer``).
extension WebSocketServerUpgrader: HTTPServerProtocolUpgrader where UpgradeResult == Void {
    package func upgrade(context: ChannelHandlerContext, upgradeRequest: HTTPRequestHead) -> EventLoopFuture<Void> {
        self.upgrade(channel: context.channel, upgradeRequest: upgradeRequest)
    }
}
