import CircleSocket
import CircleWire
import NIOCore

/// A moment as a session sees it. The session reads no clock: whoever feeds it events passes
/// the time in, so that tests can choose it.
struct SessionInstant: Sendable, Hashable {
    /// Monotonic time: post rates, typing throttle, idle time, token expiry.
    var uptime: NIODeadline
    /// Wall-clock time in milliseconds since 1970: the time stamp of posts and `ping` acks.
    var wallMilliseconds: Int64

    init(uptime: NIODeadline, wallMilliseconds: Int64) {
        self.uptime = uptime
        self.wallMilliseconds = wallMilliseconds
    }
}

/// The outcome of a join's access check, read from the store.
enum JoinAccess: Sendable, Hashable {
    case allowed(CircleInfo)
    case noSuchCircle
    case notMember
    case failed(String)

    /// The join's outcome by the visibility rule.
    init(_ visibility: CircleVisibility) {
        switch visibility {
        case .visible(let circle): self = .allowed(circle)
        case .noSuchCircle: self = .noSuchCircle
        case .notMember: self = .notMember
        }
    }
}

/// The outcome of a `history` request's store read.
enum HistoryAnswer: Sendable, Hashable {
    /// The circle may not be seen (``CircleVisibility``).
    case refused(CircleVisibility.Refusal)
    case page([CirclePost], more: Bool, lastSeq: Int64)
}

/// One `circle.v1` connection as a value: what it has joined, where each circle's replay
/// stands, which requests wait, and the post rate. Events go in (a request decoded, a store
/// read finished, a post delivered by the hub, a commit's result, the socket's writability, a
/// timer); the actions to perform come out (send, write, subscribe, read the store, submit a
/// post, close). It does no I/O and reads no clock, so every ordering can be tested directly;
/// ``SessionHandler`` owns one and performs its actions.
///
/// **Gapless resume.** A join subscribes to the hub *before* the store is read, and live posts
/// wait in `pending` while the replay runs; afterwards only posts above the last one sent go
/// out, in sequence order. So a member who joins with `since` sees every post once and in order,
/// including those committed during the replay.
///
/// **Backpressure.** Requests are taken only while the socket is writable and fewer than
/// `maxRequestsInFlight` store reads are under way; otherwise socket reads stop and decoded
/// requests wait in order (at most `maxQueuedRequests`, then 1013). A live post that finds the
/// socket unwritable, or more than `maxPendingDuringReplay` posts waiting behind a replay,
/// closes the connection as a slow consumer (1013).
struct SessionState {
    /// The limits a session enforces, taken from the server's configuration.
    struct Settings: Sendable {
        var user: String
        /// The server session the connection signed in with (a cookie, a device credential, a
        /// personal token); `nil` for a JWT.
        var session: String?
        var maxPostBytes: Int
        var maxJoinedCircles: Int
        var maxRequestsInFlight: Int
        var postsPerSecond: Double
        var postBurst: Double
        var idleTimeout: TimeAmount
        var replayPage = 256
        var maxPendingDuringReplay = 10_000
        var maxHeldPosts = 100
        /// Requests decoded but waiting for capacity, at most (the rest of one read, with reads held).
        var maxQueuedRequests = 4096

        init(user: String, limits: CircleServerConfiguration.Limits) {
            self.user = user
            self.maxPostBytes = limits.maxPostBytes
            self.maxJoinedCircles = limits.maxJoinedCircles
            self.maxRequestsInFlight = limits.maxRequestsInFlight
            self.postsPerSecond = limits.postsPerSecond
            self.postBurst = limits.postBurst
            self.idleTimeout = limits.idleTimeout
        }
    }

    /// Counters the owner adds to the server's metrics.
    enum Metric: Sendable, Hashable {
        case join
        case duplicatePost
        case slowConsumer
        case requestQueueFull
    }

    /// What the owner must do, in order.
    enum Action {
        /// Send a reply or event and flush.
        case send(CircleServerMessage)
        /// Count an error in the metrics, then send it and flush.
        case fail(id: String?, code: CircleErrorCode, message: String)
        /// Write posts read from the store, in order, without flushing.
        case writePosts([CirclePost])
        /// Write an event the hub delivered, without flushing.
        case write(HubPayload)
        /// Write every post of a run the hub delivered, without flushing.
        case writeRun(HubPostRun)
        case flush
        case subscribe(String)
        case unsubscribe(String)
        /// Count this connection in the circle's presence; the circle hears `joined` if it is the user's first.
        case arrive(String)
        /// Count this connection out of the circle's presence; the circle hears `left` if it was the user's last.
        case depart(String)
        /// Tell the circle's other members that the user is typing.
        case broadcastTyping(String)
        /// Read whether the join may proceed, then feed ``SessionState/accessChecked(_:_:now:)``.
        case checkAccess(CircleRequest)
        /// Read stored posts after `after`, then feed ``SessionState/replayRead(circle:after:_:)``.
        case readReplay(circle: String, after: Int64, limit: Int)
        /// Read a history page, then feed ``SessionState/historyRead(_:_:now:)``.
        case readHistory(CircleRequest)
        /// Hand the post to the committer; its answer comes back as a hub delivery
        /// (``HubEvent/answered(id:_:)``, fed to ``SessionState/hubEvent(_:)``).
        case submit(NewPost)
        /// Move the user's read marker, then feed ``SessionState/readMarked(_:_:now:)``.
        case markRead(CircleRequest)
        /// Read the user's circle list, then feed ``SessionState/circlesListed(_:_:now:)``.
        case listCircles(CircleRequest)
        /// Answer a `search` (``SearchAnswer``), then feed ``SessionState/searchAnswered(_:_:now:)``.
        case search(CircleRequest)
        /// Verify `auth`'s token with the server's token check, then feed
        /// ``SessionState/tokenVerified(_:_:now:)``.
        case verifyToken(CircleRequest)
        /// The connection's token expiry changed (`auth`): re-arm the expiry timer for it.
        case expiryChanged(NIODeadline?)
        /// Tell the user's other connections (on every node) where their read marker now stands.
        case broadcastRead(circle: String, seq: Int64)
        /// Resume reading from the socket.
        case read
        /// Start the close handshake.
        case close(WebSocketCloseCode, reason: String)
        case count(Metric)
        case logReplayFailure(circle: String, error: String)
        /// Forget the connection in the hub, with the circles it was subscribed to.
        case unregister(circles: [String])
    }

    private struct Membership {
        /// The last sequence number sent to this client.
        var lastSent: Int64
        /// While replaying from the store: live posts wait in `pending`.
        var replaying: Bool
        var pending: [(seq: Int64, payload: HubPayload)] = []
        /// Replay paused until the socket is writable again.
        var waitingForWritability = false
        /// Whether the join's access check passed; until then posts wait in `heldPosts`, so a
        /// client may pipeline join and post without a post slipping past the check.
        var confirmed = false
        var heldPosts: [CircleRequest] = []
        /// Join requests waiting for the access check (a repeated join is answered with the first).
        var pendingJoins: [String] = []
        /// When the last typing event was passed on (typing is throttled to one a second).
        var lastTyping: NIODeadline?
        /// Joined with `"quiet": true`: this connection is not announced (`joined`/`left`).
        var quiet = false
    }

    let settings: Settings
    /// Whether the socket takes more writes; the owner keeps it current.
    var isWritable = true
    private(set) var isClosing = false
    private var memberships = JoinedCircles<Membership>()
    private var bucket: TokenBucket
    private var lastRead: NIODeadline
    /// When the token expires; an `auth` request replaces it.
    private(set) var expires: NIODeadline?
    /// Requests that wait for capacity, in arrival order: `queued[queuedStart...]`. An array,
    /// so that an idle connection holds no buffer.
    private var queued: [Result<CircleRequest, CircleRequest.DecodingFailure>] = []
    private var queuedStart = 0
    /// Store reads under way for requests (`join` checks, `history`).
    private(set) var requestsInFlight = 0
    private var readPending = false

    /// - Parameters:
    ///   - expires: when the token expires, or `nil` when it does not within the connection's life.
    init(settings: Settings, now: SessionInstant, expires: NIODeadline?) {
        self.settings = settings
        self.bucket = TokenBucket(rate: settings.postsPerSecond, burst: settings.postBurst)
        self.lastRead = now.uptime
        self.expires = expires
    }

    /// The circles this connection has joined or is joining.
    var circles: [String] { self.memberships.circles }

    /// Whether `circle` is joined and its access check passed.
    func isConfirmed(_ circle: String) -> Bool { self.memberships[circle]?.confirmed == true }

    var queuedRequestCount: Int { self.queued.count - self.queuedStart }
    private var hasQueuedRequests: Bool { self.queuedStart < self.queued.count }
    private var hasCapacity: Bool { self.isWritable && self.requestsInFlight < self.settings.maxRequestsInFlight }

    // MARK: Events from the socket

    /// Any frame arrived (the idle timeout counts from the last).
    mutating func frameArrived(now: SessionInstant) {
        self.lastRead = now.uptime
    }

    /// A text message was decoded (or failed to decode) as a request.
    mutating func received(_ request: Result<CircleRequest, CircleRequest.DecodingFailure>, now: SessionInstant) -> [Action] {
        var actions: [Action] = []
        guard !self.isClosing else { return actions }
        if !self.hasQueuedRequests && self.hasCapacity {
            self.handle(request, now: now, into: &actions)
            return actions
        }
        guard self.queuedRequestCount < self.settings.maxQueuedRequests else {
            actions.append(.count(.requestQueueFull))
            self.close(.tryAgainLater, "too many requests waiting; read the replies", into: &actions)
            return actions
        }
        self.queued.append(request)
        return actions
    }

    /// A binary message arrived, which `circle.v1` does not use.
    mutating func receivedBinary() -> [Action] {
        guard !self.isClosing else { return [] }
        return [.send(.error(id: nil, code: .badRequest, message: "circle.v1 requests are JSON text frames, not binary"))]
    }

    /// The pipeline asks for more inbound data: `true` to read now; otherwise the read waits
    /// until there is capacity again (and comes out as ``Action/read``).
    mutating func readRequested() -> Bool {
        if self.hasCapacity && !self.hasQueuedRequests { return true }
        self.readPending = true
        return false
    }

    mutating func writabilityChanged(isWritable: Bool, now: SessionInstant) -> [Action] {
        self.isWritable = isWritable
        var actions: [Action] = []
        guard isWritable else { return actions }
        for (circle, membership) in self.memberships where membership.waitingForWritability {
            self.memberships[circle]?.waitingForWritability = false
            self.replay(circle, into: &actions)
        }
        self.drain(now: now, into: &actions)
        return actions
    }

    /// The idle or expiry timer fired.
    mutating func timerFired(now: SessionInstant) -> [Action] {
        var actions: [Action] = []
        if let expires, now.uptime >= expires {
            self.close(WebSocketCloseCode(CircleCloseCode.tokenExpired), "token expired", into: &actions)
        } else if now.uptime - self.lastRead > self.settings.idleTimeout {
            self.close(WebSocketCloseCode(CircleCloseCode.idleTimeout), "idle timeout", into: &actions)
        }
        return actions
    }

    /// A reply found the socket's buffer over the slow-consumer mark.
    mutating func slowConsumer() -> [Action] {
        var actions: [Action] = []
        self.slowConsumer(into: &actions)
        return actions
    }

    /// The server is shutting down: close with 1001.
    mutating func shutDown() -> [Action] {
        var actions: [Action] = []
        self.close(.goingAway, "server shutting down", into: &actions)
        return actions
    }

    /// The close handshake began outside the session (the peer's close, a protocol failure):
    /// nothing more is taken or sent.
    mutating func closeStarted() {
        self.isClosing = true
    }

    /// The connection is gone: leave the hub and tell the circles.
    mutating func ended() -> [Action] {
        self.isClosing = true
        var actions: [Action] = [.unregister(circles: self.circles)]
        for (circle, membership) in self.memberships where membership.confirmed && !membership.quiet {
            actions.append(.depart(circle))
        }
        self.memberships = JoinedCircles()
        self.queued = []
        self.queuedStart = 0
        return actions
    }

    // MARK: Events from the store, the committer and the hub

    mutating func accessChecked(_ request: CircleRequest, _ access: JoinAccess, now: SessionInstant) -> [Action] {
        var actions: [Action] = []
        self.joinChecked(request, access, now: now, into: &actions)
        self.requestsInFlight -= 1
        self.drain(now: now, into: &actions)
        return actions
    }

    mutating func replayRead(circle: String, after: Int64, _ result: Result<[CirclePost], any Error>) -> [Action] {
        var actions: [Action] = []
        guard !self.isClosing, var membership = self.memberships[circle], membership.replaying, membership.lastSent == after else {
            return actions
        }
        switch result {
        case .failure(let error):
            actions.append(.logReplayFailure(circle: circle, error: "\(error)"))
            self.close(.internalError, "could not replay the circle; reconnect with since", into: &actions)
        case .success(let posts):
            var page: [CirclePost] = []
            page.reserveCapacity(posts.count)
            if let first = posts.first, first.seq > membership.lastSent + 1 {
                // The store keeps no entry between: a retention policy removed them
                // (RetentionSweeper), the only way entries leave a circle. Say so, go on after.
                actions.append(.send(.gap(circle: circle, from: membership.lastSent + 1, to: first.seq - 1)))
                membership.lastSent = first.seq - 1
            }
            for post in posts where post.seq == membership.lastSent + 1 {
                page.append(post)
                membership.lastSent = post.seq
            }
            if !page.isEmpty { actions.append(.writePosts(page)) }
            actions.append(.flush)
            self.memberships[circle] = membership
            if posts.count == self.settings.replayPage {
                self.replay(circle, into: &actions)
            } else {
                self.finishReplay(circle, into: &actions)
            }
        }
        return actions
    }

    mutating func historyRead(_ request: CircleRequest, _ result: Result<HistoryAnswer, any Error>, now: SessionInstant) -> [Action] {
        var actions: [Action] = []
        let circle = request.circle
        switch result {
        case .success(.refused(let refusal)):
            self.fail(request.id, refusal.code, refusal.message, into: &actions)
        case .success(.page(let posts, let more, let lastSeq)):
            actions.append(.send(.history(id: request.id, circle: circle, posts: posts, more: more, lastSeq: lastSeq)))
        case .failure(let error):
            self.fail(request.id, .internalError, "could not read the history: \(error)", into: &actions)
        }
        self.requestsInFlight -= 1
        self.drain(now: now, into: &actions)
        return actions
    }

    /// The store's answer to a `read` request: the marker as stored. The user's other
    /// connections hear of it only when it moved.
    mutating func readMarked(_ request: CircleRequest, _ result: Result<ReadMarker, any Error>, now: SessionInstant) -> [Action] {
        var actions: [Action] = []
        switch result {
        case .success(let marker):
            actions.append(.send(.ack(id: request.id, seq: marker.seq, time: nil, duplicate: false)))
            if marker.moved { actions.append(.broadcastRead(circle: request.circle, seq: marker.seq)) }
        case .failure(let error as StoreError) where error.code == .notFound:
            let refusal = CircleVisibility.Refusal.noSuchCircle(request.circle)
            self.fail(request.id, refusal.code, refusal.message, into: &actions)
        case .failure(let error):
            self.fail(request.id, .internalError, "the read marker was not stored (\(error)); retry", into: &actions)
        }
        self.requestsInFlight -= 1
        self.drain(now: now, into: &actions)
        return actions
    }

    /// The answer to a `search` request: a page, or a refusal with its documented code.
    mutating func searchAnswered(_ request: CircleRequest, _ result: Result<HTTPAPI.SearchResults, any Error>, now: SessionInstant) -> [Action] {
        var actions: [Action] = []
        switch result {
        case .success(let results):
            actions.append(.send(.search(id: request.id, results: results)))
        case .failure(let refusal as SearchRefusal):
            self.fail(request.id, refusal.code, refusal.message, into: &actions)
        case .failure(let error):
            self.fail(request.id, .unavailable, "the search could not be answered now (\(error)); retry", into: &actions)
        }
        self.requestsInFlight -= 1
        self.drain(now: now, into: &actions)
        return actions
    }

    /// The store's answer to a `circles` request.
    mutating func circlesListed(_ request: CircleRequest, _ result: Result<[CircleSummary], any Error>, now: SessionInstant) -> [Action] {
        var actions: [Action] = []
        switch result {
        case .success(let circles):
            actions.append(.send(.circles(id: request.id, circles: circles)))
        case .failure(let error):
            self.fail(request.id, .internalError, "could not list the circles: \(error)", into: &actions)
        }
        self.requestsInFlight -= 1
        self.drain(now: now, into: &actions)
        return actions
    }

    /// What the token check said about an `auth` request's token: `expires` is the new token's
    /// expiry on the monotonic clock (`nil`: not within the connection's life). A token for
    /// another user is refused with `user_mismatch`; a refused token leaves the old expiry.
    mutating func tokenVerified(_ request: CircleRequest, _ result: Result<(user: String, expires: NIODeadline?), TokenError>, now: SessionInstant) -> [Action] {
        var actions: [Action] = []
        self.requestsInFlight -= 1
        switch result {
        case .success(let verified) where verified.user == self.settings.user:
            if !self.isClosing {
                self.expires = verified.expires
                actions.append(.expiryChanged(verified.expires))
                actions.append(.send(.ack(id: request.id, seq: nil, time: now.wallMilliseconds, duplicate: false)))
            }
        case .success:
            self.fail(request.id, .userMismatch, "the token names another user than this connection's; reconnect to change users", into: &actions)
        case .failure(let error):
            self.fail(request.id, error.code, error.message, into: &actions)
        }
        self.drain(now: now, into: &actions)
        return actions
    }

    /// The committer's answer for the post with request id `id` (``HubEvent/answered(id:_:)``).
    private mutating func postCommitted(id: String, _ result: Result<PostOutcome, any Error>) -> [Action] {
        var actions: [Action] = []
        guard !self.isClosing else { return actions }
        switch result {
        case .success(.stored(let post)):
            actions.append(.send(.ack(id: id, seq: post.seq, time: post.time, duplicate: false)))
        case .success(.duplicate(let post)):
            actions.append(.count(.duplicatePost))
            actions.append(.send(.ack(id: id, seq: post.seq, time: post.time, duplicate: true)))
        case .success(.noSuchCircle):
            self.fail(id, .notFound, "the circle no longer exists", into: &actions)
        case .success(.rejected(let code, let message)):
            self.fail(id, code, message, into: &actions)
        case .success(.applied):
            // Only a membership change (``NewPost/event``) is answered so; a session sends none.
            self.fail(id, .internalError, "the entry was taken for a membership change; retry with the same id", into: &actions)
        case .failure(let error as InvalidAttachment):
            self.fail(id, .invalidAttachment, "\"\(error.media)\" is not the id of media you uploaded (POST /v1/media)", into: &actions)
        case .failure(let error as StoreError) where error.code == .unavailable:
            self.fail(id, .unavailable, "\(error.message); retry", into: &actions)
        case .failure(let error):
            self.fail(id, .internalError, "the post was not stored (\(error)); retry with the same id", into: &actions)
        }
        return actions
    }

    /// An event from the hub. The owner flushes what it wrote before when the socket looks
    /// full, and sets ``isWritable`` after that.
    mutating func hubEvent(_ event: HubEvent) -> [Action] {
        var actions: [Action] = []
        guard !self.isClosing else { return actions }
        switch event {
        case .answered(let id, let result):
            return self.postCommitted(id: id, result)
        case .revoke(let circle):
            self.revoke(circle, into: &actions)
        case .end(let session):
            if session == nil || session == self.settings.session {
                self.close(WebSocketCloseCode(CircleCloseCode.accessEnded), session == nil ? "signed out everywhere or account disabled" : "signed out", into: &actions)
            }
        case .user(let payload):
            guard self.isWritable else { return actions }
            actions.append(.write(payload))
        case .ephemeral(let circle, let payload):
            guard self.memberships[circle] != nil, self.isWritable else { return actions }
            actions.append(.write(payload))
        case .post(let circle, let seq, let payload):
            self.livePost(circle: circle, seq: seq, payload: payload, into: &actions)
        case .posts(let circle, let run):
            // The usual case first: live in the circle and the run follows what was sent. Then
            // the whole run is one write, and the membership is updated in place.
            let isWritable = self.isWritable
            let whole = self.memberships.update(circle) { membership -> Bool in
                guard !membership.replaying, isWritable, run.firstSeq == membership.lastSent + 1 else { return false }
                membership.lastSent = run.lastSeq
                return true
            }
            switch whole {
            case nil:
                break
            case true?:
                actions.append(.writeRun(run))
            case false?:
                for (seq, payload) in run.posts where !self.isClosing {
                    self.livePost(circle: circle, seq: seq, payload: payload, into: &actions)
                }
            }
        }
        return actions
    }

    /// One post from the hub for a joined circle: written when it is the next one, held while
    /// the circle replays, and a hole (which should not happen) starts a replay.
    private mutating func livePost(circle: String, seq: Int64, payload: HubPayload, into actions: inout [Action]) {
        guard var membership = self.memberships[circle] else { return }
        if membership.replaying {
            membership.pending.append((seq, payload))
            self.memberships[circle] = membership
            if membership.pending.count > self.settings.maxPendingDuringReplay {
                self.slowConsumer(into: &actions)
            }
            return
        }
        guard seq > membership.lastSent else { return }
        guard self.isWritable else {
            self.slowConsumer(into: &actions)
            return
        }
        guard seq == membership.lastSent + 1 else {
            // Should not happen (posts are published in order), but never skip: fill the hole.
            membership.pending.append((seq, payload))
            membership.replaying = true
            self.memberships[circle] = membership
            self.replay(circle, into: &actions)
            return
        }
        membership.lastSent = seq
        self.memberships[circle] = membership
        actions.append(.write(payload))
    }

    // MARK: Requests

    private mutating func drain(now: SessionInstant, into actions: inout [Action]) {
        while !self.isClosing, self.hasCapacity, self.hasQueuedRequests {
            let request = self.queued[self.queuedStart]
            self.queuedStart += 1
            if !self.hasQueuedRequests {
                self.queued = []
                self.queuedStart = 0
            }
            self.handle(request, now: now, into: &actions)
        }
        // Reading goes on while closing too: the peer's close frame must still be read.
        if self.readPending, self.hasCapacity, !self.hasQueuedRequests {
            self.readPending = false
            actions.append(.read)
        }
    }

    private mutating func handle(
        _ decoded: Result<CircleRequest, CircleRequest.DecodingFailure>,
        now: SessionInstant,
        into actions: inout [Action]
    ) {
        let request: CircleRequest
        switch decoded {
        case .success(let value):
            request = value
        case .failure(let failure):
            self.fail(failure.id, failure.code, failure.message, into: &actions)
            return
        }
        guard !self.isClosing else { return }
        switch request.action {
        case .join: self.join(request, into: &actions)
        case .leave: self.leave(request, into: &actions)
        case .post, .edit, .delete, .react, .unreact: self.post(request, now: now, into: &actions)
        case .read:
            guard self.memberships[request.circle]?.confirmed == true else {
                self.fail(request.id, .forbidden, "join \"\(request.circle)\" first", into: &actions)
                return
            }
            self.requestsInFlight += 1
            actions.append(.markRead(request))
        case .circles:
            self.requestsInFlight += 1
            actions.append(.listCircles(request))
        case .auth:
            self.requestsInFlight += 1
            actions.append(.verifyToken(request))
        case .history:
            self.requestsInFlight += 1
            actions.append(.readHistory(request))
        case .search:
            self.requestsInFlight += 1
            actions.append(.search(request))
        case .typing: self.typing(request, now: now, into: &actions)
        case .ping: actions.append(.send(.ack(id: request.id, seq: nil, time: now.wallMilliseconds, duplicate: false)))
        }
    }

    private mutating func join(_ request: CircleRequest, into actions: inout [Action]) {
        let circle = request.circle
        if let membership = self.memberships[circle] {
            if membership.confirmed {
                // Already joined: nothing to replay that was not sent; confirm where it stands.
                actions.append(.send(.ack(id: request.id, seq: membership.lastSent, time: nil, duplicate: false)))
            } else {
                // The first join is still being checked: answer this one with its outcome.
                self.memberships[circle]?.pendingJoins.append(request.id)
            }
            return
        }
        guard self.memberships.count < self.settings.maxJoinedCircles else {
            self.fail(request.id, .badRequest, "one connection may join at most \(self.settings.maxJoinedCircles) circles", into: &actions)
            return
        }
        // Subscribe first, so nothing committed from now on can slip past the replay.
        self.memberships[circle] = Membership(
            lastSent: request.since ?? 0,
            replaying: true,
            pendingJoins: [request.id],
            quiet: request.quiet == true
        )
        actions.append(.subscribe(circle))
        self.requestsInFlight += 1
        actions.append(.checkAccess(request))
    }

    private mutating func joinChecked(_ request: CircleRequest, _ access: JoinAccess, now: SessionInstant, into actions: inout [Action]) {
        let circle = request.circle
        // Left (or revoked, or left and joined again) while this join was checked: the leave
        // (or the revoke) already answered it.
        guard !self.isClosing, let membership = self.memberships[circle], membership.pendingJoins.first == request.id else { return }
        let joinIDs = membership.pendingJoins
        let held = membership.heldPosts
        let refusal: (CircleErrorCode, String)?
        switch access {
        case .noSuchCircle: refusal = CircleVisibility.Refusal.noSuchCircle(circle).pair
        case .notMember: refusal = CircleVisibility.Refusal.notMember(circle).pair
        case .failed(let error): refusal = (.internalError, "could not read the circle: \(error)")
        case .allowed: refusal = nil
        }
        if let refusal {
            self.memberships[circle] = nil
            actions.append(.unsubscribe(circle))
            for id in joinIDs { self.fail(id, refusal.0, refusal.1, into: &actions) }
            for post in held {
                self.fail(post.id, .forbidden, "the join of \"\(circle)\" was refused: \(refusal.1)", into: &actions)
            }
            return
        }
        guard case .allowed(let info) = access else { return }
        self.memberships[circle]?.pendingJoins = []
        self.memberships[circle]?.heldPosts = []
        self.memberships[circle]?.confirmed = true
        actions.append(.count(.join))
        if let since = request.since, since <= info.lastSeq {
            // Resume: the replay sends what came after `since`.
        } else {
            // Live only (or a cursor from the future, which must not swallow coming posts):
            // start after the newest stored post.
            self.memberships[circle]?.lastSent = info.lastSeq
        }
        for id in joinIDs { actions.append(.send(.ack(id: id, seq: info.lastSeq, time: nil, duplicate: false))) }
        if !membership.quiet { actions.append(.arrive(circle)) }
        self.replay(circle, into: &actions)
        for post in held { self.post(post, now: now, into: &actions) }
    }

    /// Sends stored posts after `lastSent` page by page, then the live posts that queued meanwhile.
    private mutating func replay(_ circle: String, into actions: inout [Action]) {
        guard let membership = self.memberships[circle], membership.replaying else { return }
        guard self.isWritable else {
            self.memberships[circle]?.waitingForWritability = true
            return
        }
        if let first = membership.pending.first, first.seq <= membership.lastSent + 1 {
            // The live queue continues where we are: no store read needed.
            self.finishReplay(circle, into: &actions)
            return
        }
        actions.append(.readReplay(circle: circle, after: membership.lastSent, limit: self.settings.replayPage))
    }

    private mutating func finishReplay(_ circle: String, into actions: inout [Action]) {
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
            actions.append(.write(payload))
            membership.lastSent = seq
            index += 1
        }
        membership.pending.removeFirst(index)
        actions.append(.flush)
        if membership.pending.isEmpty {
            membership.pending = []
            membership.replaying = false
            self.memberships[circle] = membership
        } else {
            // A hole between what was sent and the queue: read it from the store.
            self.memberships[circle] = membership
            self.replay(circle, into: &actions)
        }
    }

    private mutating func leave(_ request: CircleRequest, into actions: inout [Action]) {
        let circle = request.circle
        guard let membership = self.memberships.remove(circle) else {
            self.fail(request.id, .badRequest, "not joined to \"\(circle)\"", into: &actions)
            return
        }
        actions.append(.unsubscribe(circle))
        // Requests that waited for the join's check are answered, not dropped.
        for id in membership.pendingJoins {
            self.fail(id, .badRequest, "left \"\(circle)\" before the join completed", into: &actions)
        }
        for post in membership.heldPosts {
            self.fail(post.id, .forbidden, "left \"\(circle)\" before the join was confirmed", into: &actions)
        }
        actions.append(.send(.ack(id: request.id, seq: nil, time: nil, duplicate: false)))
        if membership.confirmed && !membership.quiet { actions.append(.depart(circle)) }
    }

    /// The user was removed from a private circle while connected: no more events or posts there.
    private mutating func revoke(_ circle: String, into actions: inout [Action]) {
        guard let membership = self.memberships.remove(circle) else { return }
        actions.append(.unsubscribe(circle))
        // A join still being checked is answered as refused, and the posts held behind it too.
        let refusal = CircleVisibility.Refusal.notMember(circle).message
        for id in membership.pendingJoins { self.fail(id, .forbidden, refusal, into: &actions) }
        for post in membership.heldPosts {
            self.fail(post.id, .forbidden, "the join of \"\(circle)\" was refused: \(refusal)", into: &actions)
        }
        actions.append(.send(.left(circle: circle, user: self.settings.user)))
        if membership.confirmed && !membership.quiet { actions.append(.depart(circle)) }
    }

    private mutating func post(_ request: CircleRequest, now: SessionInstant, into actions: inout [Action]) {
        let circle = request.circle
        guard let membership = self.memberships[circle] else {
            let what = request.action == .post ? "posting" : "changing posts"
            self.fail(request.id, .forbidden, "join \"\(circle)\" before \(what) in it", into: &actions)
            return
        }
        guard membership.confirmed else {
            guard membership.heldPosts.count < self.settings.maxHeldPosts else {
                self.fail(request.id, .rateLimited, "too many posts before the join of \"\(circle)\" was confirmed", into: &actions)
                return
            }
            self.memberships[circle]?.heldPosts.append(request)
            return
        }
        if let text = request.text, text.utf8.count > self.settings.maxPostBytes {
            self.fail(request.id, .tooLarge, "the text has \(text.utf8.count) bytes; the limit is \(self.settings.maxPostBytes)", into: &actions)
            return
        }
        guard self.bucket.take(now: now.uptime) else {
            let rate = self.settings.postsPerSecond
            let shown = rate.rounded() == rate ? String(Int(rate)) : String(rate)
            self.fail(request.id, .rateLimited, "more than \(shown) posts per second; slow down and retry", into: &actions)
            return
        }
        actions.append(
            .submit(
                NewPost(
                    circle: circle,
                    author: self.settings.user,
                    clientID: request.id,
                    text: request.text,
                    attachment: request.attachment,
                    time: now.wallMilliseconds,
                    change: request.action.change,
                    target: request.target,
                    emoji: request.emoji,
                    replyTo: request.replyTo
                )
            )
        )
    }

    private mutating func typing(_ request: CircleRequest, now: SessionInstant, into actions: inout [Action]) {
        let circle = request.circle
        guard self.memberships[circle]?.confirmed == true else {
            self.fail(request.id, .forbidden, "join \"\(circle)\" first", into: &actions)
            return
        }
        // At most one typing event a second per circle reaches the others; the rest are acked only.
        if let last = self.memberships[circle]?.lastTyping, now.uptime - last < .seconds(1) {
            actions.append(.send(.ack(id: request.id, seq: nil, time: nil, duplicate: false)))
            return
        }
        self.memberships[circle]?.lastTyping = now.uptime
        actions.append(.broadcastTyping(circle))
        actions.append(.send(.ack(id: request.id, seq: nil, time: nil, duplicate: false)))
    }

    // MARK: Helpers

    private mutating func fail(_ id: String?, _ code: CircleErrorCode, _ message: String, into actions: inout [Action]) {
        actions.append(.fail(id: id, code: code, message: message))
    }

    private mutating func slowConsumer(into actions: inout [Action]) {
        actions.append(.count(.slowConsumer))
        self.close(.tryAgainLater, "too slow to keep up; reconnect with since", into: &actions)
    }

    private mutating func close(_ code: WebSocketCloseCode, _ reason: String, into actions: inout [Action]) {
        guard !self.isClosing else { return }
        self.isClosing = true
        actions.append(.close(code, reason: reason))
    }
}

/// The circles one connection joined, with a value each, in join order: an array searched from
/// the front instead of a dictionary. A connection joins a few circles (at most
/// `maxJoinedCircles`, 100 by default), and for one circle a dictionary's storage takes about
/// twice the bytes (232 against about 128 per idle connection, benchmarks/idle.py).
struct JoinedCircles<Value>: Sequence {
    private var entries: [(circle: String, value: Value)] = []

    var count: Int { self.entries.count }
    var circles: [String] { self.entries.map(\.circle) }

    /// Reading gives nil for a circle not joined; setting nil removes it, setting a value for a
    /// new circle appends it.
    subscript(circle: String) -> Value? {
        get {
            guard let index = self.index(of: circle) else { return nil }
            return self.entries[index].value
        }
        set {
            switch (self.index(of: circle), newValue) {
            case (let index?, let value?): self.entries[index].value = value
            case (let index?, nil): self.entries.remove(at: index)
            case (nil, let value?): self.entries.append((circle, value))
            case (nil, nil): break
            }
        }
    }

    /// Runs `body` on `circle`'s value in place; nil when the circle was not joined.
    mutating func update<Result>(_ circle: String, _ body: (inout Value) -> Result) -> Result? {
        guard let index = self.index(of: circle) else { return nil }
        return body(&self.entries[index].value)
    }

    /// Removes `circle`; returns its value, nil when it was not joined.
    mutating func remove(_ circle: String) -> Value? {
        guard let index = self.index(of: circle) else { return nil }
        return self.entries.remove(at: index).value
    }

    func makeIterator() -> IndexingIterator<[(circle: String, value: Value)]> { self.entries.makeIterator() }

    private func index(of circle: String) -> Int? { self.entries.firstIndex { $0.circle == circle } }
}
