import CircleSocket
import CircleWire
import Foundation
import Logging
import NIOCore
import NIOWebSocket

/// One authenticated `circle.v1` connection, entirely on its event loop: no task and no
/// buffers of its own while idle, so that an idle joined connection costs a few KiB.
///
/// Joining subscribes to the hub *before* reading the store, and buffers live posts while the
/// replay runs; afterwards only posts above the last one sent go out. So a member who joins
/// with `since` sees every post once and in order, including those committed during the replay.
///
/// Backpressure: requests are taken only while the socket is writable and fewer than
/// `Limits.maxRequestsInFlight` store reads are under way; otherwise reads stop (the client's
/// TCP window fills) and requests already decoded wait in order. A reply that finds more than
/// `slowConsumerFactor` × `outboundQueueBytes` still unsent closes the connection as a slow
/// consumer (1013), as live posts do, so that a client that does not read cannot grow the server.
final class CircleSessionHandler: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = WebSocketFrame
    typealias OutboundIn = WebSocketFrame
    typealias OutboundOut = WebSocketFrame

    private struct Membership {
        /// The last sequence number sent to this client.
        var lastSent: Int64
        /// While replaying from the store: live posts wait here.
        var replaying: Bool
        var pending: [(seq: Int64, payload: ByteBuffer)] = []
        /// Replay paused until the channel is writable again.
        var waitingForWritability = false
        /// Whether the access check of the join passed; until then posts wait in `heldPosts`,
        /// so a client may pipeline join and post without a post slipping past the check.
        var confirmed = false
        var heldPosts: [CircleRequest] = []
        /// Join requests waiting for the access check (a repeated join is answered with the first).
        var pendingJoins: [String] = []
        /// When the last typing event was passed on (typing is throttled to one a second).
        var lastTyping: NIODeadline?
        /// Joined with `"quiet": true`: this connection is not announced (`joined`/`left`).
        var quiet = false
    }

    private static let replayPage = 256
    private static let maxPendingDuringReplay = 10_000
    private static let maxHeldPosts = 100
    private static let closeGrace: TimeAmount = .seconds(2)
    private static let closeHardCap: TimeAmount = .seconds(30)
    /// Requests decoded but waiting for capacity, at most (the rest of one read, with reads held).
    private static let maxQueuedRequests = 4096
    /// Replies are written past the writability mark, up to this many times the outbound queue bound.
    private static let slowConsumerFactor = 4
    /// Tokens that expire later than this are treated as not expiring during the connection.
    private static let expiryHorizon: TimeAmount = .hours(24 * 365)

    private let services: ServerServices
    private let user: AuthenticatedUser
    private var protocolState: WebSocketProtocolState
    private var logger: Logger
    private var context: ChannelHandlerContext?
    private var subscriber: HubSubscriber?
    private var memberships: [String: Membership] = [:]
    private var bucket: TokenBucket
    private var lastRead = NIODeadline.now()
    private var idleTimer: RepeatedTask?
    private var expiryTimer: Scheduled<Void>?
    private var closing = false
    /// Why the connection ended, for the log: the close this side started, the peer's close, or
    /// the transport's error.
    private var endReason = "connection lost"
    /// Hub deliveries written but not yet flushed (see `HubSubscriber`).
    private var unflushed = false
    /// Requests that wait for capacity (writability, in-flight store reads), in arrival order:
    /// `queuedRequests[queuedStart...]`. An array, so that an idle connection holds no buffer.
    private var queuedRequests: [String] = []
    private var queuedStart = 0
    private var hasQueuedRequests: Bool { self.queuedStart < self.queuedRequests.count }
    /// Store reads under way for requests (`join` checks, `history`).
    private var requestsInFlight = 0
    private var readPending = false

    init(services: ServerServices, user: AuthenticatedUser, deflate: PerMessageDeflate?, logger: Logger) {
        self.services = services
        self.user = user
        let limits = services.configuration.limits
        self.protocolState = WebSocketProtocolState(role: .server, maxMessageSize: limits.maxMessageBytes, deflate: deflate)
        self.bucket = TokenBucket(rate: limits.postsPerSecond, burst: limits.postBurst)
        self.logger = logger
        self.logger[metadataKey: "circle.user"] = "\(user.name)"
    }

    // MARK: Lifecycle

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
        let loopBound = NIOLoopBound(self, eventLoop: context.eventLoop)
        let subscriber = HubSubscriber(
            eventLoop: context.eventLoop,
            user: self.user.name,
            deliver: { loopBound.value.receive($0) },
            endBatch: { loopBound.value.flushDeliveries() },
            goAway: { loopBound.value.close(code: .goingAway, reason: "server shutting down") }
        )
        self.subscriber = subscriber
        self.services.hub.register(subscriber)
        self.services.metrics.connections.increment()
        self.services.metrics.connectionsOpened.increment()

        let idleTimeout = self.services.configuration.limits.idleTimeout
        let interval = TimeAmount.nanoseconds(max(idleTimeout.nanoseconds / 4, 1_000_000))
        self.idleTimer = context.eventLoop.scheduleRepeatedTask(initialDelay: interval, delay: interval) { _ in
            let handler = loopBound.value
            if NIODeadline.now() - handler.lastRead > idleTimeout {
                handler.close(code: WebSocketCloseCode(CircleCloseCode.idleTimeout), reason: "idle timeout")
            }
        }
        // The expiry comes from a signed but foreign claim: "never expires" tokens carry exp
        // values like 1e16 or 1e300, which no timer (and no Int64) can hold. Beyond the horizon
        // the connection simply has no expiry timer.
        if let untilExpiry = TimeAmount(clampedSeconds: self.user.expires.timeIntervalSinceNow, horizon: Self.expiryHorizon) {
            self.expiryTimer = context.eventLoop.scheduleTask(in: untilExpiry) {
                loopBound.value.close(code: WebSocketCloseCode(CircleCloseCode.tokenExpired), reason: "token expired")
            }
        }
        self.logger.info("connected", metadata: ["circle.address": "\(context.channel.remoteAddress.logDescription)"])
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
        guard let subscriber = self.subscriber else { return }
        self.subscriber = nil
        self.idleTimer?.cancel()
        self.expiryTimer?.cancel()
        let circles = Array(self.memberships.keys)
        self.services.hub.unregister(subscriber, circles: circles)
        for (circle, membership) in self.memberships where membership.confirmed && !membership.quiet {
            self.departed(circle, except: nil)
        }
        self.memberships = [:]
        self.services.releaseConnection(for: self.user.name)
        self.services.metrics.connections.decrement()
        self.logger.info("disconnected", metadata: ["circle.reason": "\(self.endReason)"])
    }

    /// Starts the close handshake; drops the connection if the client does not answer in time.
    func close(code: WebSocketCloseCode, reason: String) {
        guard let context, !self.closing else { return }
        self.closing = true
        self.endReason = "closed by the server: \(code.rawValue) \(reason)"
        let channel = context.channel
        let eventLoop = context.eventLoop
        // A slow consumer's close frame waits behind its queued posts: the grace for the
        // client's answer starts once the frame reached the socket, and a hard cap covers a
        // client that never reads again.
        let hardCap = eventLoop.scheduleTask(in: Self.closeHardCap) { channel.close(promise: nil) }
        channel.closeFuture.whenComplete { _ in hardCap.cancel() }
        if let frame = self.protocolState.close(code: code, reason: reason) {
            context.writeAndFlush(self.wrapOutboundOut(frame)).whenComplete { _ in
                eventLoop.scheduleTask(in: Self.closeGrace) { channel.close(promise: nil) }
            }
        } else {
            eventLoop.scheduleTask(in: Self.closeGrace) { channel.close(promise: nil) }
        }
    }

    // MARK: Inbound

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        self.lastRead = .now()
        let frame = self.unwrapInboundIn(data)
        switch self.protocolState.receive(frame, allocator: context.channel.allocator) {
        case .none, .pong:
            break
        case .reply(let reply):
            context.writeAndFlush(self.wrapOutboundOut(reply), promise: nil)
        case .deliver(.text(let text)):
            self.enqueue(text)
        case .deliver(.binary):
            self.send(.error(id: nil, code: .badRequest, message: "circle.v1 requests are JSON text frames, not binary"))
        case .peerClosed(let code, let reason, let reply):
            self.closing = true
            self.endReason = "closed by the client: \(code.rawValue)\(reason.isEmpty ? "" : " \(reason)")"
            if let reply {
                let channel = context.channel
                context.writeAndFlush(self.wrapOutboundOut(reply)).whenComplete { _ in channel.close(promise: nil) }
            } else {
                context.close(promise: nil)
            }
        case .fail(let code, let error):
            self.logger.debug("protocol failure", metadata: ["error": "\(error)"])
            self.services.metrics.error("ws_\(code.rawValue)")
            self.close(code: code, reason: error.message)
        }
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        switch error {
        case NIOWebSocketError.invalidFrameLength:
            self.services.metrics.error("ws_1009")
            self.close(code: .messageTooBig, reason: "message larger than \(self.services.configuration.limits.maxMessageBytes) bytes")
        case is NIOWebSocketError:
            self.close(code: .protocolError, reason: "\(error)")
        case ByteToMessageDecoderError.dataReceivedInErrorState:
            // The frame decoder failed earlier (an oversized frame, say) and the close is under
            // way. What the peer still sends (the rest of that frame, its close frame) is read and
            // dropped: closing the socket with it unread would send a reset, and the peer would
            // lose the close frame that says why (1009).
            break
        default:
            self.endReason = "connection error: \(error)"
            context.close(promise: nil)
        }
    }

    func channelWritabilityChanged(context: ChannelHandlerContext) {
        guard context.channel.isWritable else { return }
        for (circle, membership) in self.memberships where membership.waitingForWritability {
            self.memberships[circle]?.waitingForWritability = false
            self.replay(circle)
        }
        self.drainRequests()
        context.fireChannelWritabilityChanged()
    }

    // MARK: Backpressure

    func read(context: ChannelHandlerContext) {
        if self.hasCapacity && !self.hasQueuedRequests {
            context.read()
        } else {
            self.readPending = true
        }
    }

    private var hasCapacity: Bool {
        guard let context else { return false }
        return context.channel.isWritable && self.requestsInFlight < self.services.configuration.limits.maxRequestsInFlight
    }

    private func enqueue(_ text: String) {
        guard !self.closing else { return }
        if !self.hasQueuedRequests && self.hasCapacity {
            self.handle(text)
            return
        }
        guard self.queuedRequests.count - self.queuedStart < Self.maxQueuedRequests else {
            self.services.metrics.limitHit("ws_request_queue")
            self.close(code: .tryAgainLater, reason: "too many requests waiting; read the replies")
            return
        }
        self.queuedRequests.append(text)
    }

    /// Takes waiting requests while there is capacity, then resumes reading.
    private func drainRequests() {
        while !self.closing, self.hasCapacity, self.hasQueuedRequests {
            let text = self.queuedRequests[self.queuedStart]
            self.queuedStart += 1
            if !self.hasQueuedRequests {
                self.queuedRequests = []
                self.queuedStart = 0
            }
            self.handle(text)
        }
        if self.readPending, self.hasCapacity, !self.hasQueuedRequests, let context {
            self.readPending = false
            context.read()
        }
    }

    private func storeReadStarted() {
        self.requestsInFlight += 1
    }

    private func storeReadFinished() {
        self.requestsInFlight -= 1
        self.drainRequests()
    }

    private func handle(_ text: String) {
        let request: CircleRequest
        switch CircleRequest.decode(text.utf8) {
        case .success(let decoded):
            request = decoded
        case .failure(let failure):
            self.fail(id: failure.id, failure.code, failure.message)
            return
        }
        guard !self.closing else { return }
        switch request.action {
        case .join: self.join(request)
        case .leave: self.leave(request)
        case .post: self.post(request)
        case .history: self.history(request)
        case .typing: self.typing(request)
        case .ping: self.send(.ack(id: request.id, seq: nil, time: Int64(Date().timeIntervalSince1970 * 1000), duplicate: false))
        }
    }

    // MARK: Actions

    private func join(_ request: CircleRequest) {
        let circle = request.circle
        if let membership = self.memberships[circle] {
            if membership.confirmed {
                // Already joined: nothing to replay that was not sent; confirm where it stands.
                self.send(.ack(id: request.id, seq: membership.lastSent, time: nil, duplicate: false))
            } else {
                // The first join is still being checked: answer this one with its outcome.
                self.memberships[circle]?.pendingJoins.append(request.id)
            }
            return
        }
        guard self.memberships.count < self.services.configuration.limits.maxJoinedCircles else {
            self.fail(id: request.id, .badRequest, "one connection may join at most \(self.services.configuration.limits.maxJoinedCircles) circles")
            return
        }
        guard let subscriber else { return }
        // Subscribe first, so nothing committed from now on can slip past the replay.
        self.memberships[circle] = Membership(lastSent: request.since ?? 0, replaying: true, pendingJoins: [request.id], quiet: request.quiet == true)
        self.services.hub.subscribe(subscriber, to: circle)
        let user = self.user.name
        let store = self.services.store
        self.storeReadStarted()
        self.onLoop({ () async throws -> (CircleInfo?, Bool) in
            guard let info = try await store.circle(named: circle) else { return (nil, false) }
            let allowed = !info.isPrivate ? true : try await store.isMember(user, of: circle)
            return (info, allowed)
        }) { handler, result in
            handler.joinChecked(request, result)
            handler.storeReadFinished()
        }
    }

    private func joinChecked(_ request: CircleRequest, _ result: Result<(CircleInfo?, Bool), any Error>) {
        let circle = request.circle
        guard let subscriber else { return }
        guard let membership = self.memberships[circle], membership.pendingJoins.first == request.id else {
            // Left (or left and joined again) while this join was being checked.
            self.fail(id: request.id, .badRequest, "left \"\(circle)\" before the join completed")
            return
        }
        let joinIDs = membership.pendingJoins
        self.memberships[circle]?.pendingJoins = []
        let refusal: (CircleErrorCode, String)?
        switch result {
        case .success((nil, _)): refusal = (.notFound, "no circle \"\(circle)\"")
        case .success((_?, false)): refusal = (.forbidden, "\"\(circle)\" is private and you are not a member")
        case .success: refusal = nil
        case .failure(let error): refusal = (.internalError, "could not read the circle: \(error)")
        }
        if let refusal {
            let held = self.memberships[circle]?.heldPosts ?? []
            self.memberships[circle] = nil
            self.services.hub.unsubscribe(subscriber, from: circle)
            for id in joinIDs { self.fail(id: id, refusal.0, refusal.1) }
            for post in held {
                self.fail(id: post.id, .forbidden, "the join of \"\(circle)\" was refused: \(refusal.1)")
            }
            return
        }
        guard case .success((let info?, _)) = result else { return }
        let held = self.memberships[circle]?.heldPosts ?? []
        self.memberships[circle]?.heldPosts = []
        self.memberships[circle]?.confirmed = true
        self.services.metrics.joins.increment()
        if request.since == nil || request.since! > info.lastSeq {
            // Live only (or a cursor from the future, which must not swallow coming posts):
            // start after the newest stored post.
            self.memberships[circle]?.lastSent = info.lastSeq
        }
        for id in joinIDs { self.send(.ack(id: id, seq: info.lastSeq, time: nil, duplicate: false)) }
        if self.memberships[circle]?.quiet != true, self.services.hub.arrive(self.user.name, in: circle) {
            self.announce(.joined(circle: circle, user: self.user.name), in: circle, except: subscriber)
        }
        self.replay(circle)
        for post in held { self.post(post) }
    }

    /// Sends stored posts after `lastSent` page by page, then the live posts that queued meanwhile.
    private func replay(_ circle: String) {
        guard let membership = self.memberships[circle], membership.replaying, let context else { return }
        guard context.channel.isWritable else {
            self.memberships[circle]?.waitingForWritability = true
            return
        }
        if let first = membership.pending.first, first.seq <= membership.lastSent + 1 {
            // The live queue continues where we are: no store read needed.
            self.finishReplay(circle)
            return
        }
        let after = membership.lastSent
        let store = self.services.store
        self.onLoop({ try await store.posts(in: circle, after: after, limit: Self.replayPage) }) { handler, result in
            handler.replayPage(circle, after: after, result)
        }
    }

    private func replayPage(_ circle: String, after: Int64, _ result: Result<[CirclePost], any Error>) {
        guard var membership = self.memberships[circle], membership.replaying, membership.lastSent == after else { return }
        switch result {
        case .failure(let error):
            self.logger.error("replay failed", metadata: ["circle": "\(circle)", "error": "\(error)"])
            self.close(code: .internalError, reason: "could not replay the circle; reconnect with since")
            return
        case .success(let posts):
            for post in posts where post.seq == membership.lastSent + 1 {
                self.write(self.services.hub.encode(.post(post)), flush: false)
                membership.lastSent = post.seq
            }
            self.context?.flush()
            self.memberships[circle] = membership
            if posts.count == Self.replayPage {
                self.replay(circle)
            } else {
                self.finishReplay(circle)
            }
        }
    }

    private func finishReplay(_ circle: String) {
        guard var membership = self.memberships[circle] else { return }
        membership.pending.sort { $0.seq < $1.seq }
        var index = 0
        while index < membership.pending.count {
            let (seq, payload) = membership.pending[index]
            if seq <= membership.lastSent {
                index += 1
                continue
            }
            guard seq == membership.lastSent + 1 else { break }
            self.write(payload, flush: false)
            membership.lastSent = seq
            index += 1
        }
        membership.pending.removeFirst(index)
        self.context?.flush()
        if membership.pending.isEmpty {
            membership.replaying = false
            self.memberships[circle] = membership
        } else {
            // A hole between what was sent and the queue: read it from the store.
            self.memberships[circle] = membership
            self.replay(circle)
        }
    }

    private func leave(_ request: CircleRequest) {
        guard let membership = self.memberships.removeValue(forKey: request.circle), let subscriber else {
            self.fail(id: request.id, .badRequest, "not joined to \"\(request.circle)\"")
            return
        }
        self.services.hub.unsubscribe(subscriber, from: request.circle)
        // Requests that waited for the join's check are answered, not dropped.
        for id in membership.pendingJoins { self.fail(id: id, .badRequest, "left \"\(request.circle)\" before the join completed") }
        for post in membership.heldPosts { self.fail(id: post.id, .forbidden, "left \"\(request.circle)\" before the join was confirmed") }
        self.send(.ack(id: request.id, seq: nil, time: nil, duplicate: false))
        if membership.confirmed && !membership.quiet {
            self.departed(request.circle, except: subscriber)
        }
    }

    /// The user was removed from a private circle while connected: no more events or posts there.
    private func revoke(_ circle: String) {
        guard let membership = self.memberships.removeValue(forKey: circle), let subscriber else { return }
        self.services.hub.unsubscribe(subscriber, from: circle)
        self.send(.left(circle: circle, user: self.user.name))
        if membership.confirmed && !membership.quiet {
            self.departed(circle, except: subscriber)
        }
    }

    /// An announced membership ended: the circle hears `left` when it was the user's last.
    private func departed(_ circle: String, except sender: HubSubscriber?) {
        if self.services.hub.depart(self.user.name, from: circle) {
            self.announce(.left(circle: circle, user: self.user.name), in: circle, except: sender)
        }
    }

    /// Tells the circle's other members that this user joined or left (already subscribed or
    /// unsubscribed), in circles small enough for presence (`Limits.presenceLimit`). A leaver
    /// counts as still there, so that circles on the limit announce the leaves of the members
    /// whose joins they announced.
    private func announce(_ message: CircleServerMessage, in circle: String, except sender: HubSubscriber?) {
        var limit = self.services.configuration.limits.presenceLimit
        if case .left = message { limit -= 1 }
        self.services.hub.broadcast(message, in: circle, except: sender, limit: limit)
    }

    private func post(_ request: CircleRequest) {
        let limits = self.services.configuration.limits
        guard let membership = self.memberships[request.circle] else {
            self.fail(id: request.id, .forbidden, "join \"\(request.circle)\" before posting in it")
            return
        }
        guard membership.confirmed else {
            guard membership.heldPosts.count < Self.maxHeldPosts else {
                self.fail(id: request.id, .rateLimited, "too many posts before the join of \"\(request.circle)\" was confirmed")
                return
            }
            self.memberships[request.circle]?.heldPosts.append(request)
            return
        }
        if let text = request.text, text.utf8.count > limits.maxPostBytes {
            self.fail(id: request.id, .tooLarge, "the text has \(text.utf8.count) bytes; the limit is \(limits.maxPostBytes)")
            return
        }
        guard self.bucket.take(now: .now()) else {
            self.fail(id: request.id, .rateLimited, "more than \(limits.postsPerSecond.rounded() == limits.postsPerSecond ? String(Int(limits.postsPerSecond)) : String(limits.postsPerSecond)) posts per second; slow down and retry")
            return
        }
        let post = NewPost(
            circle: request.circle,
            author: self.user.name,
            clientID: request.id,
            text: request.text,
            attachment: request.attachment,
            time: Int64(Date().timeIntervalSince1970 * 1000)
        )
        guard let eventLoop = self.context?.eventLoop else { return }
        let loopBound = NIOLoopBound(self, eventLoop: eventLoop)
        self.services.committer.submit(post) { result in
            eventLoop.execute { loopBound.value.posted(request.id, result) }
        }
    }

    private func posted(_ id: String, _ result: Result<PostOutcome, any Error>) {
        switch result {
        case .success(.stored(let post)):
            self.send(.ack(id: id, seq: post.seq, time: post.time, duplicate: false))
        case .success(.duplicate(let post)):
            self.services.metrics.duplicatePosts.increment()
            self.send(.ack(id: id, seq: post.seq, time: post.time, duplicate: true))
        case .success(.noSuchCircle):
            self.fail(id: id, .notFound, "the circle no longer exists")
        case .failure(let error as InvalidAttachment):
            self.fail(id: id, .invalidAttachment, "\"\(error.media)\" is not the id of media you uploaded (POST /v1/media)")
        case .failure(let error as StoreError) where error.code == .unavailable:
            self.fail(id: id, .unavailable, "\(error.message); retry")
        case .failure(let error):
            self.fail(id: id, .internalError, "the post was not stored (\(error)); retry with the same id")
        }
    }

    private enum HistoryAnswer: Sendable {
        case notFound
        case forbidden
        case page([CirclePost], more: Bool)
    }

    private func history(_ request: CircleRequest) {
        let circle = request.circle
        let user = self.user.name
        let limit = request.limit ?? 50
        let store = self.services.store
        self.storeReadStarted()
        self.onLoop({ () async throws -> HistoryAnswer in
            guard let info = try await store.circle(named: circle) else { return .notFound }
            if info.isPrivate, try await !store.isMember(user, of: circle) { return .forbidden }
            if let after = request.after {
                let page = try await store.posts(in: circle, after: after, limit: limit + 1)
                return .page(Array(page.prefix(limit)), more: page.count > limit)
            }
            let page = try await store.posts(in: circle, before: request.before, limit: limit + 1)
            return .page(Array(page.suffix(limit)), more: page.count > limit)
        }) { handler, result in
            switch result {
            case .success(.notFound):
                handler.fail(id: request.id, .notFound, "no circle \"\(circle)\"")
            case .success(.forbidden):
                handler.fail(id: request.id, .forbidden, "\"\(circle)\" is private and you are not a member")
            case .success(.page(let posts, let more)):
                handler.send(.history(id: request.id, circle: circle, posts: posts, more: more))
            case .failure(let error):
                handler.fail(id: request.id, .internalError, "could not read the history: \(error)")
            }
            handler.storeReadFinished()
        }
    }

    private func typing(_ request: CircleRequest) {
        guard self.memberships[request.circle]?.confirmed == true else {
            self.fail(id: request.id, .forbidden, "join \"\(request.circle)\" first")
            return
        }
        // At most one typing event a second per circle reaches the others; the rest are acked only.
        let now = NIODeadline.now()
        if let last = self.memberships[request.circle]?.lastTyping, now - last < .seconds(1) {
            self.send(.ack(id: request.id, seq: nil, time: nil, duplicate: false))
            return
        }
        self.memberships[request.circle]?.lastTyping = now
        self.services.hub.broadcast(.typing(circle: request.circle, user: self.user.name), in: request.circle, except: self.subscriber)
        self.send(.ack(id: request.id, seq: nil, time: nil, duplicate: false))
    }

    // MARK: Outbound

    /// From the hub, on this event loop.
    private func receive(_ event: HubEvent) {
        guard let context, !self.closing else { return }
        switch event {
        case .revoke(let circle):
            self.revoke(circle)
        case .ephemeral(let circle, let payload):
            guard self.memberships[circle] != nil else { return }
            if !context.channel.isWritable { self.flushDeliveries() }
            guard context.channel.isWritable else { return }
            self.write(payload, flush: false)
            self.unflushed = true
        case .post(let circle, let seq, let payload):
            guard var membership = self.memberships[circle] else { return }
            if membership.replaying {
                membership.pending.append((seq, payload))
                self.memberships[circle] = membership
                if membership.pending.count > Self.maxPendingDuringReplay {
                    self.slowConsumer()
                }
                return
            }
            guard seq > membership.lastSent else { return }
            // Deliveries of a batch wait for one flush at its end, but a large batch must not
            // look like a slow consumer: hand what is buffered to the socket first.
            if !context.channel.isWritable { self.flushDeliveries() }
            guard context.channel.isWritable else {
                self.slowConsumer()
                return
            }
            guard seq == membership.lastSent + 1 else {
                // Should not happen (posts are published in order), but never skip: fill the hole.
                membership.pending.append((seq, payload))
                membership.replaying = true
                self.memberships[circle] = membership
                self.replay(circle)
                return
            }
            membership.lastSent = seq
            self.memberships[circle] = membership
            self.write(payload, flush: false)
            self.unflushed = true
        }
    }

    private func flushDeliveries() {
        guard self.unflushed else { return }
        self.unflushed = false
        self.context?.flush()
    }

    private func slowConsumer() {
        self.services.metrics.error("slow_consumer")
        if !self.closing { self.logger.info("closing a slow consumer") }
        self.close(code: .tryAgainLater, reason: "too slow to keep up; reconnect with since")
    }

    /// Writes a reply. Replies go out past the writability mark (the request was taken while
    /// there was room), but not without bound: past the slow-consumer mark the connection closes.
    private func send(_ message: CircleServerMessage) {
        if let context, !context.channel.isWritable {
            let buffered = (try? context.channel.syncOptions?.getOption(.bufferedWritableBytes)) ?? 0
            if buffered > Self.slowConsumerFactor * self.services.configuration.limits.outboundQueueBytes {
                self.slowConsumer()
                return
            }
        }
        self.write(self.services.hub.encode(message), flush: true)
    }

    private func fail(id: String?, _ code: CircleErrorCode, _ message: String) {
        self.services.metrics.error(code.rawValue)
        self.send(.error(id: id, code: code, message: message))
    }

    private func write(_ payload: ByteBuffer, flush: Bool) {
        guard let context, self.protocolState.canSend else { return }
        let frame = WebSocketFrame(fin: true, opcode: .text, data: payload)
        if flush {
            context.writeAndFlush(self.wrapOutboundOut(frame), promise: nil)
        } else {
            context.write(self.wrapOutboundOut(frame), promise: nil)
        }
    }

    /// Runs store work off the event loop and continues on it with the result.
    private func onLoop<T: Sendable>(
        _ work: @escaping @Sendable () async throws -> T,
        then: @escaping (CircleSessionHandler, Result<T, any Error>) -> Void
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

extension TimeAmount {
    /// `seconds` as a time amount when it is within `0...horizon` (negative counts as zero);
    /// `nil` beyond the horizon or when not finite. Never traps, whatever the input.
    init?(clampedSeconds seconds: Double, horizon: TimeAmount) {
        guard seconds.isFinite, seconds <= Double(horizon.nanoseconds) / 1e9 else { return nil }
        self = .nanoseconds(Int64(max(seconds, 0) * 1e9))
    }
}

/// Posts allowed per connection: `burst` at once, refilled at `rate` per second.
struct TokenBucket {
    let rate: Double
    let burst: Double
    private var tokens: Double
    private var updated: NIODeadline?

    init(rate: Double, burst: Double) {
        self.rate = rate
        self.burst = burst
        self.tokens = burst
    }

    mutating func take(now: NIODeadline) -> Bool {
        if let updated {
            let elapsed = Double((now - updated).nanoseconds) / 1e9
            self.tokens = min(self.burst, self.tokens + elapsed * self.rate)
        }
        self.updated = now
        guard self.tokens >= 1 else { return false }
        self.tokens -= 1
        return true
    }
}
