import NIOCore
import NIOHTTP1

/// When an HTTP connection has waited too long for its peer, as a value: events in, the
/// deadline (or none) and the reason out. ``HTTPTimeoutHandler`` performs it; tests drive it
/// without I/O.
///
/// - Waiting for a request head: ``Timeouts/requestHead`` for the first request of a
///   connection (an idle or half-sent first request), ``Timeouts/keepAlive`` for the next
///   ones. The clock does not restart on partial input, so a head sent a byte at a time is
///   bounded too.
/// - Reading a request body: ``Timeouts/bodyIdle`` without a byte of progress.
/// - A response the peer does not read (the socket stays unwritable): ``Timeouts/writeStall``.
/// - While the server works on a request: no deadline of this machine's.
struct HTTPTimeoutState {
    struct Timeouts: Sendable {
        var requestHead: TimeAmount
        var bodyIdle: TimeAmount
        var keepAlive: TimeAmount
        var writeStall: TimeAmount
    }

    enum Reason: String, Sendable {
        case requestHead = "http_request_head_timeout"
        case bodyIdle = "http_body_timeout"
        case keepAlive = "http_keep_alive_timeout"
        case writeStall = "http_write_stall_timeout"
    }

    let timeouts: Timeouts
    /// Between a request's head and its end.
    private var requestOpen = false
    /// Requests whose response has not ended yet.
    private var responsesPending = 0
    private var servedOne = false
    private var writable = true
    /// When the current wait began (connection open, last response end, last body byte, the
    /// socket turning unwritable).
    private var since: NIODeadline

    init(timeouts: Timeouts, now: NIODeadline) {
        self.timeouts = timeouts
        self.since = now
    }

    /// The deadline now in force, with what it is for.
    var deadline: (at: NIODeadline, reason: Reason)? {
        if !self.writable && self.responsesPending > 0 {
            return (self.since + self.timeouts.writeStall, .writeStall)
        }
        if self.requestOpen {
            return (self.since + self.timeouts.bodyIdle, .bodyIdle)
        }
        if self.responsesPending > 0 { return nil }
        return self.servedOne
            ? (self.since + self.timeouts.keepAlive, .keepAlive)
            : (self.since + self.timeouts.requestHead, .requestHead)
    }

    mutating func requestHead(now: NIODeadline) {
        self.requestOpen = true
        self.responsesPending += 1
        self.since = now
    }

    mutating func requestBody(now: NIODeadline) {
        if self.writable { self.since = now }
    }

    mutating func requestEnd(now: NIODeadline) {
        self.requestOpen = false
        if self.writable { self.since = now }
    }

    mutating func responseEnd(now: NIODeadline) {
        self.responsesPending = max(self.responsesPending - 1, 0)
        self.servedOne = true
        if self.writable { self.since = now }
    }

    mutating func writabilityChanged(_ writable: Bool, now: NIODeadline) {
        guard writable != self.writable else { return }
        self.writable = writable
        self.since = now
    }
}

/// Closes HTTP connections whose peer keeps them waiting (see ``HTTPTimeoutState``), so that
/// idle, half-sent and unread connections cannot hold the server's file descriptors. It sits
/// behind NIO's HTTP codec and is removed when the connection upgrades to a WebSocket, which
/// has timeouts of its own.
final class HTTPTimeoutHandler: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias InboundOut = HTTPServerRequestPart
    typealias OutboundIn = HTTPServerResponsePart
    typealias OutboundOut = HTTPServerResponsePart

    private var state: HTTPTimeoutState
    private var timer: Scheduled<Void>?
    private var timerDeadline: NIODeadline?
    private let onTimeout: (HTTPTimeoutState.Reason) -> Void
    /// The request being answered is HTTP/1.0 without keep-alive: the connection ends after its
    /// answer (the HTTP/1.1 layer above no longer sees the version).
    private var closeAfterAnswer = false

    init(timeouts: HTTPTimeoutState.Timeouts, onTimeout: @escaping (HTTPTimeoutState.Reason) -> Void) {
        self.state = HTTPTimeoutState(timeouts: timeouts, now: .now())
        self.onTimeout = onTimeout
    }

    func handlerAdded(context: ChannelHandlerContext) {
        self.rearm(context: context)
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        self.timer?.cancel()
        self.timer = nil
    }

    func channelInactive(context: ChannelHandlerContext) {
        self.timer?.cancel()
        self.timer = nil
        context.fireChannelInactive()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch self.unwrapInboundIn(data) {
        case .head(let head):
            self.closeAfterAnswer = head.version == .http1_0 && !head.isKeepAlive
            self.state.requestHead(now: .now())
        case .body: self.state.requestBody(now: .now())
        case .end: self.state.requestEnd(now: .now())
        }
        self.rearm(context: context)
        context.fireChannelRead(data)
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        guard case .end = self.unwrapOutboundIn(data) else {
            context.write(data, promise: promise)
            return
        }
        self.state.responseEnd(now: .now())
        self.rearm(context: context)
        guard self.closeAfterAnswer else {
            context.write(data, promise: promise)
            return
        }
        let channel = context.channel
        let written = context.eventLoop.makePromise(of: Void.self)
        written.futureResult.whenComplete { _ in Self.close(afterAnswerOn: channel) }
        written.futureResult.cascade(to: promise)
        context.write(data, promise: written)
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        if error is HTTPParserError, context.channel.isActive {
            // NIO's HTTPServerProtocolErrorHandler has written a 400 with "Connection: close" and
            // the decoder reads nothing more: shut the connection once the 400 is out.
            Self.close(afterAnswerOn: context.channel)
        }
        context.fireErrorCaught(error)
    }

    /// Half-closes once everything written has gone out, keeps reading (and dropping) what the
    /// client still sends for a moment, so its unread request does not turn the answer into a
    /// reset before it is read, then closes.
    static func close(afterAnswerOn channel: any Channel) {
        channel.close(mode: .output).whenComplete { result in
            if case .failure = result {
                channel.close(promise: nil)
            } else {
                channel.eventLoop.scheduleTask(in: .seconds(5)) { channel.close(promise: nil) }
            }
        }
    }

    func channelWritabilityChanged(context: ChannelHandlerContext) {
        self.state.writabilityChanged(context.channel.isWritable, now: .now())
        self.rearm(context: context)
        context.fireChannelWritabilityChanged()
    }

    /// Keeps one timer for the current deadline; a timer that fires early (the deadline moved
    /// later meanwhile) re-arms instead of closing.
    private func rearm(context: ChannelHandlerContext) {
        guard let deadline = self.state.deadline else {
            self.timer?.cancel()
            self.timer = nil
            self.timerDeadline = nil
            return
        }
        if let current = self.timerDeadline, self.timer != nil, current <= deadline.at { return }
        self.timer?.cancel()
        self.timerDeadline = deadline.at
        let loopBound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
        self.timer = context.eventLoop.scheduleTask(deadline: deadline.at) {
            let (handler, context) = loopBound.value
            handler.timer = nil
            handler.timerDeadline = nil
            handler.fired(context: context)
        }
    }

    private func fired(context: ChannelHandlerContext) {
        guard let deadline = self.state.deadline else { return }
        guard deadline.at <= .now() else {
            self.rearm(context: context)
            return
        }
        self.onTimeout(deadline.reason)
        context.close(promise: nil)
    }
}
