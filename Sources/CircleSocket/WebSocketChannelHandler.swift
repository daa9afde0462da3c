import Logging
import NIOCore
import NIOWebSocket

/// What the public API asks of a connection besides sends (which go through
/// ``WebSocketOutbound``); written into the channel, performed on its event loop.
enum WebSocketCommand: Sendable {
    case ping(timeout: TimeAmount, EventLoopPromise<TimeAmount>)
    case close(WebSocketCloseCode, reason: String, EventLoopPromise<WebSocketCloseInfo>?)
}

typealias WebSocketInboundProducer = NIOThrowingAsyncSequenceProducer<
    WebSocketMessage, any Error, NIOAsyncSequenceProducerBackPressureStrategies.HighLowWatermark,
    WebSocketChannelHandler.ProducerDelegate
>

/// Performs what ``WebSocketProtocolState`` decides for one upgraded channel: delivers inbound
/// messages to an async sequence (pausing socket reads while the consumer is behind), writes
/// outbound messages, answers pings, measures round trips and runs the close handshake.
final class WebSocketChannelHandler: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = WebSocketFrame
    typealias OutboundIn = WebSocketCommand
    typealias OutboundOut = WebSocketFrame

    struct ProducerDelegate: NIOAsyncSequenceProducerDelegate {
        let eventLoop: any EventLoop
        let handler: NIOLoopBound<WebSocketChannelHandler>

        func produceMore() {
            self.eventLoop.execute { self.handler.value.produceMore() }
        }

        func didTerminate() {
            self.eventLoop.execute { self.handler.value.consumerTerminated() }
        }
    }

    private struct PendingPing {
        var id: UInt64
        var sent: NIODeadline
        var promise: EventLoopPromise<TimeAmount>
        var timeout: Scheduled<Void>
    }

    private var state: WebSocketProtocolState
    private let closeTimeout: TimeAmount
    private let closedPromise: EventLoopPromise<WebSocketCloseInfo>
    private var logger: Logger
    private var source: WebSocketInboundProducer.Source?
    private var context: ChannelHandlerContext?
    private var producing = true
    private var readPending = false
    private var pings: [PendingPing] = []
    private var nextPingID: UInt64 = 0
    private var closeTimer: Scheduled<Void>?
    private var peerClose: (code: WebSocketCloseCode, reason: String)?
    private var failure: WebSocketError?
    private var peerInitiatedClose = false
    /// Frames were written without a flush; a task on the loop flushes them once.
    private var flushScheduled = false
    /// The send side shared with ``WebSocket``.
    let outbound = WebSocketOutbound()

    init(state: WebSocketProtocolState, closeTimeout: TimeAmount, closedPromise: EventLoopPromise<WebSocketCloseInfo>, logger: Logger) {
        self.state = state
        self.closeTimeout = closeTimeout
        self.closedPromise = closedPromise
        self.logger = logger
    }

    /// Creates the inbound sequence; call on the channel's event loop before adding the handler.
    func makeInboundSequence(eventLoop: any EventLoop, bufferLimit: Int) -> WebSocketInboundProducer {
        let result = WebSocketInboundProducer.makeSequence(
            elementType: WebSocketMessage.self,
            failureType: (any Error).self,
            backPressureStrategy: .init(lowWatermark: max(1, bufferLimit / 2), highWatermark: max(2, bufferLimit)),
            finishOnDeinit: false,
            delegate: ProducerDelegate(eventLoop: eventLoop, handler: NIOLoopBound(self, eventLoop: eventLoop))
        )
        self.source = result.source
        return result.sequence
    }

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        self.context = nil
    }

    // MARK: Inbound

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let frame = self.unwrapInboundIn(data)
        switch self.state.receive(frame, allocator: context.channel.allocator) {
        case .none:
            break
        case .deliver(let message):
            switch self.source?.yield(message) {
            case .stopProducing: self.producing = false
            case .produceMore, .dropped, .none: break
            }
        case .deliverText:
            preconditionFailure("this handler's protocol state delivers text as a String")
        case .reply(let reply):
            context.writeAndFlush(self.wrapOutboundOut(reply), promise: nil)
        case .pong(let payload):
            self.receivePong(payload)
        case .peerClosed(let code, let reason, let reply):
            self.peerClose = (code, reason)
            self.peerInitiatedClose = reply != nil
            self.source?.finish()
            self.stopSending()
            self.logger.debug("peer closed", metadata: ["ws.code": "\(code.rawValue)", "ws.reason": "\(reason)"])
            if let reply {
                let written = context.writeAndFlush(self.wrapOutboundOut(reply))
                self.finishAfterCloseHandshake(context: context, after: written)
            } else {
                self.finishAfterCloseHandshake(context: context, after: context.eventLoop.makeSucceededVoidFuture())
            }
        case .fail(let code, let error):
            self.fail(context: context, code: code, error: error)
        }
    }

    /// After both close frames: a server drops TCP at once; a client gives the server
    /// `closeTimeout` to do so first, as RFC 6455 7.1.1 asks.
    private func finishAfterCloseHandshake(context: ChannelHandlerContext, after written: EventLoopFuture<Void>) {
        let loopBoundContext = NIOLoopBound(context, eventLoop: context.eventLoop)
        if self.state.role == .server {
            written.whenComplete { _ in loopBoundContext.value.close(promise: nil) }
        } else {
            self.closeTimer?.cancel()
            self.closeTimer = context.eventLoop.scheduleTask(in: self.closeTimeout) {
                loopBoundContext.value.close(promise: nil)
            }
        }
    }

    private func fail(context: ChannelHandlerContext, code: WebSocketCloseCode, error: WebSocketError) {
        guard self.failure == nil else { return }
        self.failure = error
        self.logger.debug("failing connection", metadata: ["ws.code": "\(code.rawValue)", "ws.error": "\(error)"])
        self.source?.finish(error)
        let loopBoundContext = NIOLoopBound(context, eventLoop: context.eventLoop)
        if let frame = self.state.close(code: code, reason: error.message) {
            context.writeAndFlush(self.wrapOutboundOut(frame)).whenComplete { _ in
                loopBoundContext.value.close(promise: nil)
            }
        } else {
            context.close(promise: nil)
        }
        self.stopSending()
    }

    /// Once the close handshake began or the connection ended: later sends throw `notOpen`.
    private func stopSending(_ error: WebSocketError? = nil) {
        guard !self.state.canSend || error != nil else { return }
        let dropped = self.outbound.close(
            error ?? WebSocketError(.notOpen, "the connection is closing; nothing more can be sent")
        )
        if dropped > 0 {
            self.logger.debug("messages dropped at close", metadata: ["ws.dropped": "\(dropped)"])
        }
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        if case let (code, failure)? = self.state.closeCode(forDecoderError: error) {
            self.fail(context: context, code: code, error: failure)
            return
        }
        if self.failure == nil {
            self.failure = WebSocketError(.connectionLost, "the connection failed", underlying: error)
        }
        context.close(promise: nil)
    }

    func channelInactive(context: ChannelHandlerContext) {
        self.closeTimer?.cancel()
        self.closeTimer = nil
        let sentCode = self.state.sentCloseCode
        let info = WebSocketCloseInfo(
            code: self.peerClose?.code ?? .abnormalClosure,
            reason: self.peerClose?.reason ?? "",
            sentCode: sentCode,
            initiatedByPeer: self.peerInitiatedClose,
            wasClean: self.peerClose != nil && self.failure == nil
        )
        if let failure {
            self.source?.finish(failure)
        } else if self.peerClose == nil && sentCode == nil {
            // Neither side said goodbye: the TCP connection just ended.
            self.source?.finish(
                WebSocketError(.connectionLost, "the connection ended without a close frame", closeInfo: info)
            )
        } else {
            self.source?.finish()
        }
        let error = self.failure ?? WebSocketError(.notOpen, "the connection is closed", closeInfo: info)
        self.stopSending(WebSocketError(.notOpen, "the connection is closed; the message was not sent", closeInfo: info))
        for ping in self.pings {
            ping.timeout.cancel()
            ping.promise.fail(error)
        }
        self.pings.removeAll()
        self.closedPromise.succeed(info)
        context.fireChannelInactive()
    }

    // MARK: Backpressure

    func read(context: ChannelHandlerContext) {
        if self.producing {
            context.read()
        } else {
            self.readPending = true
        }
    }

    private func produceMore() {
        self.producing = true
        if self.readPending, let context {
            self.readPending = false
            context.read()
        }
    }

    private func consumerTerminated() {
        // Nobody reads messages any more: keep reading so control frames are still answered.
        self.produceMore()
    }

    // MARK: Outbound

    func channelWritabilityChanged(context: ChannelHandlerContext) {
        self.outbound.setWritable(context.channel.isWritable)
        context.fireChannelWritabilityChanged()
    }

    /// Writes a message sent on the event loop: after whatever was queued off the loop, unflushed,
    /// with one flush per burst (a task on the loop, run once the sender yields).
    ///
    /// - Throws: ``WebSocketError/Code/notOpen`` once the close handshake has begun; errors of the compressor.
    func send(_ message: WebSocketMessage, fragmentSize: Int?) throws {
        guard let context else {
            throw WebSocketError(.notOpen, "the connection is closed; the message was not sent")
        }
        self.writeQueued(context: context)
        try self.write(message, fragmentSize: fragmentSize, context: context)
        self.scheduleFlush(context: context)
    }

    /// Writes and flushes what was sent off the loop (the task ``WebSocket`` schedules once per burst).
    func drain() {
        guard let context else { return }
        self.writeQueued(context: context)
        self.flushScheduled = false
        context.flush()
        self.outbound.drained()
    }

    private func writeQueued(context: ChannelHandlerContext) {
        for queued in self.outbound.takeQueued() {
            do {
                try self.write(queued.message, fragmentSize: queued.fragmentSize, context: context)
            } catch {
                // Its sender has returned already (only the compressor can fail here): close the
                // connection rather than send what follows out of order.
                self.fail(
                    context: context, code: .internalError,
                    error: WebSocketError(.connectionLost, "a queued message could not be compressed; the connection was closed", underlying: error)
                )
                return
            }
        }
    }

    private func write(_ message: WebSocketMessage, fragmentSize: Int?, context: ChannelHandlerContext) throws {
        for frame in try self.state.frames(for: message, fragmentSize: fragmentSize, allocator: context.channel.allocator) {
            context.write(self.wrapOutboundOut(frame), promise: nil)
        }
    }

    private func scheduleFlush(context: ChannelHandlerContext) {
        guard !self.flushScheduled else { return }
        self.flushScheduled = true
        let handler = NIOLoopBound(self, eventLoop: context.eventLoop)
        context.eventLoop.execute {
            let handler = handler.value
            guard handler.flushScheduled, let context = handler.context else { return }
            handler.flushScheduled = false
            context.flush()
        }
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        switch self.unwrapOutboundIn(data) {
        case .ping(let timeout, let pingPromise):
            self.writeQueued(context: context)
            self.sendPing(context: context, timeout: timeout, promise: pingPromise)
            promise?.succeed()
        case .close(let code, let reason, let closePromise):
            if let closePromise { self.closedPromise.futureResult.cascade(to: closePromise) }
            self.writeQueued(context: context)
            if let frame = self.state.close(code: code, reason: reason) {
                let loopBoundContext = NIOLoopBound(context, eventLoop: context.eventLoop)
                context.writeAndFlush(self.wrapOutboundOut(frame), promise: nil)
                self.closeTimer = context.eventLoop.scheduleTask(in: self.closeTimeout) {
                    loopBoundContext.value.close(promise: nil)
                }
            }
            self.stopSending()
            promise?.succeed()
        }
    }

    private func sendPing(context: ChannelHandlerContext, timeout: TimeAmount, promise: EventLoopPromise<TimeAmount>) {
        self.nextPingID &+= 1
        let id = self.nextPingID
        var payload = context.channel.allocator.buffer(capacity: 8)
        payload.writeInteger(id)
        guard let frame = self.state.pingFrame(payload: payload) else {
            promise.fail(WebSocketError(.notOpen, "the connection is closing; no ping can be sent"))
            return
        }
        let handler = NIOLoopBound(self, eventLoop: context.eventLoop)
        let timer = context.eventLoop.scheduleTask(in: timeout) {
            handler.value.pingTimedOut(id: id, after: timeout)
        }
        self.pings.append(PendingPing(id: id, sent: .now(), promise: promise, timeout: timer))
        context.writeAndFlush(self.wrapOutboundOut(frame), promise: nil)
    }

    private func pingTimedOut(id: UInt64, after timeout: TimeAmount) {
        guard let index = self.pings.firstIndex(where: { $0.id == id }) else { return }
        let ping = self.pings.remove(at: index)
        ping.promise.fail(WebSocketError(.pingTimeout, "no pong within \(timeout.nanoseconds / 1_000_000) ms"))
    }

    private func receivePong(_ payload: ByteBuffer) {
        // Unsolicited pongs (RFC 6455 5.5.3) and pongs for pings that timed out are ignored.
        guard payload.readableBytes == 8, let id = payload.getInteger(at: payload.readerIndex, as: UInt64.self),
            let index = self.pings.firstIndex(where: { $0.id == id })
        else { return }
        let ping = self.pings.remove(at: index)
        ping.timeout.cancel()
        ping.promise.succeed(NIODeadline.now() - ping.sent)
    }
}
