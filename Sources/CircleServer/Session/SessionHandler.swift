import CircleSocket
import CircleWire
import Foundation
import Logging
import NIOCore
import NIOWebSocket

/// One authenticated `circle.v1` connection, entirely on its event loop: it decodes requests,
/// feeds them and every other event to its ``SessionState``, and performs the actions that come
/// back. The framing (close handshake, errors, compression) is ``ServerWebSocketFraming``, shared
/// with `/v1/echo`. No task per frame and no buffers of its own while idle, so that an idle
/// joined connection costs a few KiB.
///
/// A reply that finds more than `slowConsumerFactor` × `outboundQueueBytes` still unsent closes
/// the connection as a slow consumer (1013), as live posts do, so that a client that does not
/// read cannot grow the server.
final class SessionHandler: ChannelDuplexHandler, RemovableChannelHandler, SessionTicker.Session, HubSubscriberSink {
    typealias InboundIn = WebSocketFrame
    typealias OutboundIn = WebSocketFrame
    typealias OutboundOut = WebSocketFrame

    /// Replies are written past the writability mark, up to this many times the outbound queue bound.
    private static let slowConsumerFactor = 4
    /// The largest buffer of replayed frames (``writeStored(_:context:)``).
    private static let storedWriteBytes = 64 * 1024
    /// Tokens that expire later than this are treated as not expiring during the connection.
    private static let expiryHorizon: TimeAmount = .hours(24 * 365)

    private let services: ServerServices
    private let user: AuthenticatedUser
    private let framing: ServerWebSocketFraming
    private var state: SessionState
    private let baseLogger: Logger
    /// The server's logger with this session's user: made when something is logged, so that an
    /// idle connection does not hold a metadata dictionary of its own.
    private var logger: Logger {
        var logger = self.baseLogger
        logger[metadataKey: "circle.user"] = "\(self.user.name)"
        return logger
    }
    private var context: ChannelHandlerContext?
    private var subscriber: HubSubscriber?
    /// Drives the idle and expiry checks (one timer per event loop, not per connection).
    private var ticker: SessionTicker?
    /// When the token expires (nil: not during the connection); a timer is set once it is near.
    private var expiry: NIODeadline?
    private var expiryTimer: Scheduled<Void>?
    /// Hub deliveries written but not yet flushed (see `HubSubscriber`).
    private var unflushed = UnflushedWrites()

    init(services: ServerServices, user: AuthenticatedUser, deflate: PerMessageDeflate?, logger: Logger) {
        self.services = services
        self.user = user
        let limits = services.configuration.limits
        self.framing = ServerWebSocketFraming(maxMessageSize: limits.maxMessageBytes, deflate: deflate, textBytes: true)
        let now = SessionInstant.now()
        // The expiry comes from a signed but foreign claim: "never expires" tokens carry exp
        // values like 1e16 or 1e300, which no timer (and no Int64) can hold. Beyond the horizon
        // the connection simply has no expiry.
        let expires = TimeAmount(clampedSeconds: user.expires.timeIntervalSinceNow, horizon: Self.expiryHorizon).map { now.uptime + $0 }
        var settings = SessionState.Settings(user: user.name, limits: limits)
        settings.session = user.sessionID
        self.state = SessionState(settings: settings, now: now, expires: expires)
        self.baseLogger = logger
    }

    // MARK: Lifecycle

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
        // From here on `channelWritabilityChanged` keeps it current (NIO fires it on every change).
        self.state.isWritable = context.channel.isWritable
        let subscriber = HubSubscriber(
            eventLoop: context.eventLoop,
            user: self.user.name,
            sharedCompression: self.framing.sharedCompression,
            sink: self
        )
        self.subscriber = subscriber
        self.services.hub.register(subscriber)
        self.services.metrics.connections.increment()
        self.services.metrics.connectionsOpened.increment()

        let idleTimeout = self.services.configuration.limits.idleTimeout
        let interval = TimeAmount.nanoseconds(max(idleTimeout.nanoseconds / 4, 1_000_000))
        self.ticker = SessionTicker.add(self, on: context.eventLoop, interval: interval)
        if let untilExpiry = TimeAmount(clampedSeconds: self.user.expires.timeIntervalSinceNow, horizon: Self.expiryHorizon) {
            let expiry = NIODeadline.now() + untilExpiry
            self.expiry = expiry
            self.armExpiryTimer(ifBefore: NIODeadline.now() + interval)
        }
        self.logger.info("connected", metadata: ["circle.address": "\(context.channel.remoteAddress.logDescription)"])
    }

    /// The ticker's periodic call: the idle check, and the expiry timer once expiry is near.
    func tick(nextTick: NIODeadline) {
        self.feed { $0.timerFired(now: .now()) }
        self.armExpiryTimer(ifBefore: nextTick)
    }

    private func armExpiryTimer(ifBefore deadline: NIODeadline) {
        guard self.expiryTimer == nil, let expiry = self.expiry, expiry <= deadline, let context else { return }
        let loopBound = NIOLoopBound(self, eventLoop: context.eventLoop)
        self.expiryTimer = context.eventLoop.scheduleTask(deadline: expiry) {
            loopBound.value.feed { $0.timerFired(now: .now()) }
        }
    }

    func channelInactive(context: ChannelHandlerContext) {
        self.tearDown()
        context.fireChannelInactive()
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        self.tearDown()
        self.context = nil
    }

    private func tearDown() {
        guard self.subscriber != nil else { return }
        self.ticker?.remove(self)
        self.ticker = nil
        self.expiryTimer?.cancel()
        self.perform(self.state.ended())
        self.subscriber = nil
        self.services.releaseConnection(for: self.user.name)
        self.services.metrics.connections.decrement()
        self.logger.info("disconnected", metadata: ["circle.reason": "\(self.framing.endReason)"])
    }

    // MARK: Inbound

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let now = SessionInstant.now()
        self.state.frameArrived(now: now)
        switch self.framing.receive(self.unwrapInboundIn(data), context: context) {
        case .none:
            break
        case .text(let bytes):
            // Parsed from the frame's bytes, whose UTF-8 the parser checks as it reads: a frame
            // it accepts is UTF-8. One it refuses is checked whole; not UTF-8, it ends the
            // connection with 1007 (RFC 6455 §8.1) rather than getting an error reply.
            let request = CircleRequest.decode(bytes.readableBytesView)
            if case .failure = request, String(validating: bytes.readableBytesView, as: UTF8.self) == nil {
                self.framing.failInvalidText(context: context)
                self.state.closeStarted()
                self.services.metrics.error("ws_\(WebSocketCloseCode.invalidPayloadData.rawValue)")
                return
            }
            self.feed { $0.received(request, now: now) }
        case .message(.text(let text)):
            // Not delivered as a String with textBytes on; parsed the same way if it were.
            self.feed { $0.received(CircleRequest.decode(text.utf8), now: now) }
        case .message(.binary):
            self.feed { $0.receivedBinary() }
        case .closing(let failure):
            self.state.closeStarted()
            if case let (code, error)? = failure {
                self.logger.debug("protocol failure", metadata: ["error": "\(error)"])
                self.services.metrics.error("ws_\(code.rawValue)")
            }
        }
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        if let code = self.framing.errorCaught(error, context: context) {
            self.state.closeStarted()
            if code == .messageTooBig { self.services.metrics.error("ws_1009") }
        } else if self.framing.isClosing {
            self.state.closeStarted()
        }
    }

    func channelWritabilityChanged(context: ChannelHandlerContext) {
        let isWritable = context.channel.isWritable
        self.feed { $0.writabilityChanged(isWritable: isWritable, now: .now()) }
        context.fireChannelWritabilityChanged()
    }

    func read(context: ChannelHandlerContext) {
        if self.state.readRequested() { context.read() }
    }

    /// From the hub, on this event loop.
    func receive(_ event: HubEvent) {
        guard self.context != nil else { return }
        // Deliveries of a batch wait for one flush at its end, but a large batch must not look
        // like a slow consumer: hand what is buffered to the socket first.
        if !self.state.isWritable { self.flushDeliveries() }
        // Replies too (a post's ack, a revocation's notice) wait for the inbox's flush, which
        // comes after the rest of the hand-over: an ack and its batch's posts leave together.
        self.feed(flushingReplies: false) { $0.hubEvent(event) }
    }

    func flushDeliveries() {
        guard self.unflushed.count > 0 else { return }
        self.unflushed.flushed()
        self.context?.flush()
    }

    /// After a write that waits for the batch's flush: flushes now when too many wait.
    private func wroteUnflushed(context: ChannelHandlerContext) {
        guard self.unflushed.wrote() else { return }
        self.unflushed.flushed()
        context.flush()
    }

    /// From the hub: the server is shutting down.
    func shutDown() {
        self.feed { $0.shutDown() }
    }

    // MARK: Performing actions

    /// Feeds one event to the state, then performs the actions.
    ///
    /// The state's `isWritable` is the socket's: set when the handler is added and on every
    /// `channelWritabilityChanged`, which NIO fires synchronously inside the write or flush that
    /// changes it. Not asking the channel spares each delivery a load from an object that only
    /// that question touches (fan-out, docs/bench/fanout.md).
    /// `flushingReplies: false` inside a hub delivery: the inbox flushes after it.
    private func feed(flushingReplies: Bool = true, _ event: (inout SessionState) -> [SessionState.Action]) {
        guard self.context != nil else { return }
        let actions = event(&self.state)
        if !actions.isEmpty { self.perform(actions, flushingReplies: flushingReplies) }
    }

    private func perform(_ actions: [SessionState.Action], flushingReplies: Bool = true) {
        guard let context else { return }
        for action in actions {
            switch action {
            case .send(let message):
                self.reply(message, flush: flushingReplies, context: context)
            case .fail(let id, let code, let message):
                self.services.metrics.error(code.rawValue)
                self.reply(.error(id: id, code: code, message: message), flush: flushingReplies, context: context)
            case .writePosts(let posts):
                self.writeStored(posts, context: context)
            case .write(let payload):
                self.framing.write(payload, flush: false, context: context)
                self.wroteUnflushed(context: context)
            case .writeRun(let run):
                self.framing.write(run, context: context)
                self.wroteUnflushed(context: context)
            case .flush:
                self.unflushed.flushed()
                context.flush()
            case .subscribe(let circle):
                if let subscriber { self.services.hub.subscribe(subscriber, to: circle) }
            case .unsubscribe(let circle):
                if let subscriber { self.services.hub.unsubscribe(subscriber, from: circle) }
            case .arrive(let circle):
                if self.services.hub.arrive(self.user.name, in: circle) {
                    self.announce(.joined(circle: circle, user: self.user.name), in: circle)
                }
            case .depart(let circle):
                if self.services.hub.depart(self.user.name, from: circle) {
                    self.announce(.left(circle: circle, user: self.user.name), in: circle)
                }
            case .broadcastTyping(let circle):
                self.services.hub.broadcast(.typing(circle: circle, user: self.user.name), in: circle, except: self.subscriber)
            case .checkAccess(let request):
                self.checkAccess(request)
            case .readReplay(let circle, let after, let limit):
                self.readReplay(circle, after: after, limit: limit)
            case .readHistory(let request):
                self.readHistory(request)
            case .submit(let post):
                self.submit(post)
            case .markRead(let request):
                self.markRead(request)
            case .listCircles(let request):
                self.listCircles(request)
            case .search(let request):
                self.search(request)
            case .verifyToken(let request):
                self.verifyToken(request)
            case .expiryChanged(let expiry):
                self.expiryTimer?.cancel()
                self.expiryTimer = nil
                self.expiry = expiry
                if let ticker { self.armExpiryTimer(ifBefore: NIODeadline.now() + ticker.interval) }
            case .broadcastRead(let circle, let seq):
                self.services.hub.send(.read(circle: circle, seq: seq), toUser: self.user.name, except: self.subscriber)
            case .read:
                context.read()
            case .close(let code, let reason):
                self.framing.close(code: code, reason: reason, context: context)
            case .count(.join):
                self.services.metrics.joins.increment()
            case .count(.duplicatePost):
                self.services.metrics.duplicatePosts.increment()
            case .count(.slowConsumer):
                self.services.metrics.error("slow_consumer")
                if !self.framing.isClosing { self.logger.info("closing a slow consumer") }
            case .count(.requestQueueFull):
                self.services.metrics.limitHit("ws_request_queue")
            case .logReplayFailure(let circle, let error):
                self.logger.error("replay failed", metadata: ["circle": "\(circle)", "error": "\(error)"])
            case .unregister(let circles):
                if let subscriber { self.services.hub.unregister(subscriber, circles: circles) }
            }
        }
        // A write that could not be compressed closes the connection in the framing itself.
        if self.framing.isClosing && !self.state.isClosing { self.state.closeStarted() }
    }

    /// Writes a reply. Replies go out past the writability mark (the request was taken while
    /// there was room), but not without bound: past the slow-consumer mark the connection closes.
    /// Unflushed (`flush: false`), it counts as a delivery waiting for ``flushDeliveries()``.
    private func reply(_ message: CircleServerMessage, flush: Bool, context: ChannelHandlerContext) {
        if !self.state.isWritable {
            let buffered = (try? context.channel.syncOptions?.getOption(.bufferedWritableBytes)) ?? 0
            if buffered > Self.slowConsumerFactor * self.services.configuration.limits.outboundQueueBytes {
                self.perform(self.state.slowConsumer())
                return
            }
        }
        // Encoded with room for the frame's header in front, so that the frame is one buffer
        // (and one pending write) instead of a header buffer and the payload.
        let payload = HubPayload.framed(message, allocator: context.channel.allocator)
        self.framing.write(payload, flush: flush, context: context)
        if !flush { self.wroteUnflushed(context: context) }
    }

    /// Writes posts read from the store (a replay page), unflushed: on a connection that does
    /// not compress, their frames back to back in a few buffers; otherwise post by post, with a
    /// flush after every few (``UnflushedWrites``).
    private func writeStored(_ posts: [CirclePost], context: ChannelHandlerContext) {
        let allocator = context.channel.allocator
        if !self.framing.compresses {
            let buffers = ServerFrame.frames(of: posts.lazy.map { .post($0) }, maxBytes: Self.storedWriteBytes, allocator: allocator)
            if self.framing.write(frames: buffers, context: context) { return }
        }
        for post in posts {
            self.framing.write(HubPayload.framed(.post(post), allocator: allocator), flush: false, context: context)
            self.wroteUnflushed(context: context)
        }
    }

    /// Tells the circle's other members that this user joined or left (already subscribed or
    /// unsubscribed), in circles small enough for presence (`Limits.presenceLimit`). A leaver
    /// counts as still there, so that circles on the limit announce the leaves of the members
    /// whose joins they announced.
    private func announce(_ message: CircleServerMessage, in circle: String) {
        var limit = self.services.configuration.limits.presenceLimit
        if case .left = message { limit -= 1 }
        self.services.hub.broadcast(message, in: circle, except: self.subscriber, limit: limit)
    }

    // MARK: Store and committer

    private func checkAccess(_ request: CircleRequest) {
        let circle = request.circle
        let user = self.user.name
        let store = self.services.store
        self.onLoop({ () async throws -> JoinAccess in
            JoinAccess(try await CircleVisibility.read(circle, for: user, in: store))
        }) { handler, result in
            let access: JoinAccess
            switch result {
            case .success(let value): access = value
            case .failure(let error): access = .failed("\(error)")
            }
            handler.feed { $0.accessChecked(request, access, now: .now()) }
        }
    }

    private func readReplay(_ circle: String, after: Int64, limit: Int) {
        let store = self.services.store
        self.onLoop({ try await store.posts(in: circle, after: after, limit: limit) }) { handler, result in
            handler.feed { $0.replayRead(circle: circle, after: after, result) }
        }
    }

    private func readHistory(_ request: CircleRequest) {
        let circle = request.circle
        let user = self.user.name
        let limit = request.limit ?? HistoryPaging.defaultLimit
        let store = self.services.store
        self.onLoop({ () async throws -> HistoryAnswer in
            if let refusal = try await CircleVisibility.read(circle, for: user, in: store).refusal() { return .refused(refusal) }
            let page = try await store.historyPage(in: circle, before: request.before, after: request.after, limit: limit, viewer: user)
            return .page(page.posts, more: page.more, lastSeq: page.lastSeq)
        }) { handler, result in
            handler.feed { $0.historyRead(request, result, now: .now()) }
        }
    }

    private func markRead(_ request: CircleRequest) {
        let user = self.user.name
        let store = self.services.store
        self.onLoop({ try await store.markRead(user, in: request.circle, upTo: request.seq ?? 0) }) { handler, result in
            handler.feed { $0.readMarked(request, result, now: .now()) }
        }
    }

    private func listCircles(_ request: CircleRequest) {
        let user = self.user.name
        let store = self.services.store
        self.onLoop({ try await store.circles(visibleTo: user).map(\.summary) }) { handler, result in
            handler.feed { $0.circlesListed(request, result, now: .now()) }
        }
    }

    /// `search`: answered as `GET /v1/search` answers (``SearchAnswer``), off the loop.
    private func search(_ request: CircleRequest) {
        let reader = self.user.name
        let answer = SearchAnswer(store: self.services.store)
        let asked = request.search ?? HTTPAPI.SearchRequest(q: "")
        self.onLoop({ try await answer.answer(asked, reader: reader) }) { handler, result in
            handler.feed { $0.searchAnswered(request, result, now: .now()) }
        }
    }

    /// `auth`: the one credential check (``ServerServices/authenticate(_:)``), off the loop: a
    /// JWT, or a credential of the server's own sent as a bearer token.
    private func verifyToken(_ request: CircleRequest) {
        let services = self.services
        let token = request.token
        let address = self.context?.channel.remoteAddress.logDescription
        self.onLoop({ () async throws -> Result<AuthenticatedUser, TokenError> in
            do throws(APIError) {
                let credentials = CredentialsInput(bearer: token, changesState: false, isUpgrade: false, address: address)
                return .success(try await services.authenticate(credentials))
            } catch {
                return .failure(TokenError(code: error.code, message: error.message))
            }
        }) { handler, outcome in
            let result: Result<(user: String, expires: NIODeadline?), TokenError>
            switch outcome {
            case .success(.success(let user)):
                let expires = TimeAmount(clampedSeconds: user.expires.timeIntervalSinceNow, horizon: Self.expiryHorizon).map { NIODeadline.now() + $0 }
                result = .success((user.name, expires))
            case .success(.failure(let error)):
                result = .failure(error)
            case .failure(let error):
                result = .failure(TokenError(code: .internalError, message: "\(error)"))
            }
            handler.feed { $0.tokenVerified(request, result, now: .now()) }
        }
    }

    /// The committer answers through the hub, as one more delivery to this session
    /// (``HubEvent/answered(id:_:)``).
    private func submit(_ post: NewPost) {
        guard let subscriber else { return }
        self.services.committer.submit(post, answering: subscriber)
    }

    /// Runs store work off the event loop and continues on it with the result.
    private func onLoop<T: Sendable>(
        _ work: @escaping @Sendable () async throws -> T,
        then: @escaping (SessionHandler, Result<T, any Error>) -> Void
    ) {
        guard let eventLoop = self.context?.eventLoop else { return }
        let loopBound = NIOLoopBound((self, then), eventLoop: eventLoop)
        Task {
            let result: Result<T, any Error>
            do { result = .success(try await work()) } catch { result = .failure(error) }
            eventLoop.execute {
                let (handler, then) = loopBound.value
                then(handler, result)
            }
        }
    }
}

extension SessionInstant {
    /// The current time on both clocks.
    static func now() -> SessionInstant {
        SessionInstant(uptime: .now(), wallMilliseconds: Int64(Date().timeIntervalSince1970 * 1000))
    }
}

extension TimeAmount {
    /// `seconds` as a time amount when it is within `0...horizon` (negative counts as zero);
    /// `nil` beyond the horizon or when not finite. Never traps, whatever the input.
    init?(clampedSeconds seconds: Double, horizon: TimeAmount) {
        guard seconds.isFinite, seconds <= Double(horizon.nanoseconds) / 1e9 else { return nil }
        self = .nanoseconds(Int64(max(seconds, 0) * 1e9))
    }
}

/// Writes that wait for a batch's flush. At most ``limit`` wait: NIO's queue of a channel's
/// pending writes has room for 15 buffers (a write is one or two) and doubles, for good, when a
/// burst fills it. The presence storm of many joins did that on many idle connections (heaptrack;
/// docs/bench/idle.md). A
/// commit's posts reach a subscriber as one write (``HubPostRun``), so fan-out seldom gets here.
struct UnflushedWrites {
    static let limit = 7

    private(set) var count = 0

    /// One more write; true when the owner must flush now.
    mutating func wrote() -> Bool {
        self.count += 1
        return self.count >= Self.limit
    }

    mutating func flushed() {
        self.count = 0
    }
}
