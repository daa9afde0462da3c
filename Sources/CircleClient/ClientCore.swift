import CircleSocket
import CircleWire
import Foundation
import Logging
import NIOCore

/// A page of posts as ``ClientCore/history(_:before:after:limit:)`` returns it.
struct HistoryPage: Sendable, Hashable {
    var posts: [CirclePost]
    /// Whether further pages exist (in the direction paged).
    var more: Bool
    /// The newest entry seq the posts reflect (the server's snapshot; the cache's timeline
    /// offline); `nil` from servers older than this field, and offline without a cache.
    var lastSeq: Int64?
}

/// The client's state and I/O, serialized by the actor. The decisions about when to connect,
/// back off and ping are made by the state machines; this type performs them.
///
/// The actor runs on the event loop its connections use, and the task that reads a connection
/// prefers that loop too, so an inbound message reaches the actor without a thread hop and a
/// request is written from the actor without one.
actor ClientCore {
    private struct Circle {
        /// The last sequence number delivered to the app (and kept in the state store).
        var cursor: Int64?
        var events = StreamFanOut<CircleEvent>()
        /// The offline cache (with a state file and a cache limit), current state.
        var timeline: CircleTimeline?
        /// The app wants this circle's events (not only to post in it).
        var wanted: Bool { !self.events.isEmpty }
    }

    typealias Instant = ContinuousClock.Instant

    private let configuration: CircleClientConfiguration
    private let store: any ClientStateStore
    private var logger: Logger
    private var machine: ConnectionStateMachine<Instant>
    private var heartbeat: HeartbeatStateMachine<Instant>
    /// Renews the open connection's token before it expires (`auth`).
    private var renewal: TokenRenewalStateMachine
    private(set) var state: ConnectionState = .disconnected
    private var stateStreams = StreamFanOut<ConnectionState>()
    private var outboxStreams = StreamFanOut<OutboxEvent>()
    private var circleListStreams = StreamFanOut<CircleListEvent>()
    /// Set by ``finishStreams()`` (the client shut down): every stream has ended, and streams
    /// asked for later end at once.
    private var streamsFinished = false

    private var socket: WebSocket?
    private var generation = 0
    private var token: String?

    /// The one timer, armed for the earliest of the deadlines below and of the outbox's and
    /// the requests' (``armTimer(at:)``); when it fires, every deadline passed is handled.
    private var timer: (deadline: Instant, number: Int, task: Task<Void, Never>)?
    private var timersArmed = 0
    /// The connection machine's timer (a backoff's end).
    private var connectionDeadline: Instant?
    /// The heartbeat machine's timer (the next ping, or the pong's deadline).
    private var heartbeatDeadline: Instant?
    /// When the token renewal machine looks at the token again.
    private var renewalDeadline: Instant?

    private var circles: [String: Circle] = [:]
    /// Every entry's state and its caller's deadline (``OutboxStateMachine``).
    private var outbox: OutboxStateMachine<Instant>
    /// The callers of this process waiting for an entry, by its id: resumed when the outbox
    /// resolves or abandons it.
    private var postWaiters: [String: CheckedContinuation<PostReceipt, any Error>] = [:]
    /// The connection's requests, the circles' joins, and their deadlines (``RequestTable``).
    private var requests = RequestTable<Instant>()
    /// The callers of ``request(_:)`` and of ``waitForJoin(_:)``, resumed when the table
    /// answers, expires or drops their request.
    private var callWaiters: [String: CheckedContinuation<CircleServerMessage, any Error>] = [:]
    private var joinWaiters: [UUID: CheckedContinuation<Void, any Error>] = [:]
    /// Removals from the state store still on their way, by entry id, each with its number:
    /// a resolved entry's removal is not waited for, and the next write of the same id (a
    /// retry, a photo post queued again) waits for it, so that a removal never reaches the store
    /// after the entry was queued again under that id.
    private var removals: [String: (number: UInt64, task: Task<Void, Never>)] = [:]
    private var removalsStarted: UInt64 = 0
    /// How many times a write waited for a removal of its id (the tests watch this).
    private(set) var waitsForRemoval = 0
    /// Cursors set but not yet in the state store; one writer task saves them (the newest per circle).
    private var unsavedCursors: [String: Int64] = [:]
    /// Circles whose cache changed since it was last saved (written by the cursor writer).
    private var unsavedCaches: Set<String> = []
    private var cursorWriter: Task<Void, Never>?
    /// The user in the token's `sub` claim, once a token was fetched.
    private(set) var user: String?
    /// Whether received posts are kept (a state file and a non-zero cache limit).
    private let caching: Bool

    /// The event loop of this client's connections and the actor's executor.
    private let eventLoop: any EventLoop
    nonisolated var unownedExecutor: UnownedSerialExecutor { self.eventLoop.executor.asUnownedSerialExecutor() }

    init(
        configuration: CircleClientConfiguration,
        store: any ClientStateStore,
        outbox: [OutboxEntry],
        sent: Set<String> = [],
        cursors: [String: Int64],
        caches: [String: CachedCircle] = [:]
    ) {
        self.configuration = configuration
        self.store = store
        self.logger = configuration.logger
        self.machine = ConnectionStateMachine(policy: configuration.reconnect, serverCount: configuration.servers.count)
        self.heartbeat = HeartbeatStateMachine(policy: configuration.heartbeat)
        self.renewal = TokenRenewalStateMachine(policy: configuration.tokenRenewal)
        self.outbox = OutboxStateMachine(restored: outbox, sent: sent)
        self.eventLoop = WebSocket.defaultEventLoop()
        for (circle, seq) in cursors { self.circles[circle] = Circle(cursor: seq) }
        self.caching = configuration.stateFile != nil && configuration.cacheLimit > 0
        if self.caching {
            for (circle, cache) in caches {
                // The cache is saved before its cursor: resume from what the cache holds, so a
                // crash between the two writes costs a replay, never a hole in the cache.
                self.circles[circle, default: Circle()].cursor = cache.upTo
                var timeline = CircleTimeline(posts: cache.posts)
                // The posts show every entry up to `upTo`: pages older than that are stale.
                timeline.follow(from: cache.upTo)
                timeline.trim(keepingNewest: configuration.cacheLimit)
                self.circles[circle]?.timeline = timeline
            }
        }
    }

    static func newID() -> String { UUID().uuidString.lowercased() }

    static func nowMillis() -> Int64 { Int64(Date().timeIntervalSince1970 * 1000) }

    /// Remembers the token's user (`sub`, not verified: the server does that), and makes it the
    /// viewer of every cache, which recomputes `me` on the cached posts (saved for whoever the
    /// viewer was then, or none). Timelines made later start with it.
    private func learnUser(from token: String) {
        guard let user = Self.subject(of: token), user != self.user else { return }
        self.user = user
        for name in self.circles.keys { self.circles[name]?.timeline?.viewer = user }
    }

    /// The `sub` claim of a JWT, unverified (the server's reading of tokens, ``UnverifiedJWT``).
    static func subject(of token: String) -> String? {
        UnverifiedJWT.parse(token)?.subject
    }

    // MARK: Connection

    func start() {
        self.perform(self.machine.start())
    }

    func stop() {
        self.perform(self.machine.stopRequested())
        if case .stopped(let reason) = self.machine.state { self.stopped(reason) }
    }

    func reconnectNow() {
        self.perform(self.machine.reconnectNow())
    }

    private func perform(_ action: ConnectionStateMachine<ContinuousClock.Instant>.Action) {
        switch action {
        case .none:
            break
        case .connect(let server):
            self.connectionDeadline = nil
            if case .connecting(let attempt, _) = self.machine.state { self.publish(.connecting(attempt: attempt)) }
            Task { await self.open(server: server) }
        case .refreshToken:
            self.token = nil
            Task { await self.refreshToken() }
        case .scheduleTimer(let instant):
            self.connectionDeadline = instant
            self.armTimer(at: instant)
        case .closeConnection(let thenTimer):
            self.dropConnection()
            self.connectionDeadline = thenTimer
            if let thenTimer { self.armTimer(at: thenTimer) }
        case .report(let reason):
            self.stopped(reason)
        }
        self.publish(self.publicState)
    }

    /// The machine's state as the app sees it.
    private var publicState: ConnectionState {
        switch self.machine.state {
        case .idle: return .disconnected
        case .connecting(let attempt, _), .refreshingToken(let attempt, _): return .connecting(attempt: attempt)
        case .connected: return .connected
        case .waiting(let until, let attempt, _): return .waitingToReconnect(until: until, attempt: attempt)
        case .stopped(let reason): return .closed(reason)
        }
    }

    // MARK: The timer

    /// Makes the timer fire at `deadline` at the latest (a new deadline was set). It is armed
    /// for one deadline at a time, the earliest; one that was cleared since leaves it early,
    /// which costs a wake-up that finds nothing due.
    private func armTimer(at deadline: Instant) {
        if let timer = self.timer, timer.deadline <= deadline { return }
        self.timer?.task.cancel()
        self.timersArmed += 1
        let number = self.timersArmed
        self.timer = (
            deadline, number,
            Task {
                try? await Task.sleep(until: deadline, clock: .continuous)
                guard !Task.isCancelled else { return }
                self.timerFired(number)
            }
        )
    }

    /// Handles every deadline that passed, then arms the timer for the next.
    private func timerFired(_ number: Int) {
        guard self.timer?.number == number else { return }
        self.timer = nil
        let now = Instant.now
        if let deadline = self.connectionDeadline, deadline <= now {
            self.connectionDeadline = nil
            self.perform(self.machine.timerFired(now: now))
        }
        if let deadline = self.heartbeatDeadline, deadline <= now {
            self.heartbeatDeadline = nil
            self.performHeartbeat(self.heartbeatTimer(), generation: self.generation)
        }
        if let deadline = self.renewalDeadline, deadline <= now {
            self.renewalDeadline = nil
            self.performRenewal(self.renewal.timerFired(now: Self.wallNow()), generation: self.generation)
        }
        self.run(self.outbox.deadlinePassed(now: now, timeout: self.configuration.postTimeout))
        let expired = self.requests.deadlinePassed(now: now)
        let timeout = self.configuration.requestTimeout
        for id in expired.calls {
            self.callWaiters.removeValue(forKey: id)?.resume(throwing: CircleClientError(.timedOut, "no reply within \(timeout)"))
        }
        for (waiter, circle) in expired.joinWaits {
            self.joinWaiters.removeValue(forKey: waiter)?.resume(
                throwing: CircleClientError(.timedOut, "the join of \(circle) was not answered within \(timeout)")
            )
        }
        let next = [self.connectionDeadline, self.heartbeatDeadline, self.renewalDeadline, self.outbox.nextDeadline, self.requests.nextDeadline]
        if let deadline = next.compactMap({ $0 }).min() { self.armTimer(at: deadline) }
    }

    private func refreshToken() async {
        do {
            let token = try await self.configuration.tokenProvider()
            self.token = token
            self.learnUser(from: token)
            self.perform(self.machine.tokenRefreshed())
        } catch {
            self.logger.warning("token provider failed", metadata: ["error": "\(error)"])
            self.perform(self.machine.tokenRefreshFailed("\(error)", now: .now, random: .random(in: 0..<1)))
        }
    }

    private func open(server: Int) async {
        guard case .connecting = self.machine.state else { return }
        let url = self.configuration.servers[server]
        do {
            let token: String
            if let cached = self.token {
                token = cached
            } else {
                token = try await self.configuration.tokenProvider()
                self.token = token
                self.learnUser(from: token)
            }
            var socketConfiguration = self.configuration.socket
            socketConfiguration.subprotocols = [circleSubprotocol]
            socketConfiguration.headers.replaceOrAdd(name: "Authorization", value: "Bearer \(token)")
            let socket = try await WebSocket.connect(
                to: url, configuration: socketConfiguration, eventLoopGroup: self.eventLoop, logger: self.logger
            )
            guard case .connecting = self.machine.state else {
                await socket.close()
                return
            }
            self.connected(socket)
        } catch let error as WebSocketError {
            self.logger.debug("connect failed", metadata: ["url": "\(url)", "error": "\(error)"])
            let end: ConnectionEnd =
                if error.code == .handshakeRefused, let status = error.httpStatus {
                    .httpStatus(status, body: error.httpBody ?? "")
                } else {
                    .transient
                }
            self.perform(self.machine.ended(end, now: .now, random: .random(in: 0..<1)))
        } catch {
            // The token provider failed: treat like a refused token, which backs off.
            self.logger.warning("token provider failed", metadata: ["error": "\(error)"])
            self.perform(self.machine.ended(.transient, now: .now, random: .random(in: 0..<1)))
        }
    }

    private func connected(_ socket: WebSocket) {
        self.generation += 1
        let generation = self.generation
        self.socket = socket
        self.perform(self.machine.connected())
        Task(executorPreference: socket.taskExecutor) { await self.read(socket, generation: generation) }
        self.performHeartbeat(self.heartbeat.connected(now: .now), generation: generation)
        if let token = self.token {
            self.performRenewal(self.renewal.connected(token: token, now: Self.wallNow()), generation: generation)
        }
        // Re-join what the app reads and what the outbox needs (while its entries are saved as
        // sent, if they must be), then write the outbox in order.
        for (name, circle) in self.circles where circle.wanted { self.join(name) }
        for entry in self.outbox.entries { self.join(entry.circle) }
        self.run(self.outbox.connected(generation))
    }

    private func read(_ socket: WebSocket, generation: Int) async {
        var failure: (any Error)?
        do {
            for try await message in socket.messages {
                guard case .text(let text) = message else { continue }
                self.receive(text, generation: generation)
            }
        } catch {
            failure = error
        }
        let info = await socket.closeInfo
        self.connectionEnded(generation: generation, info: info, failure: failure)
    }

    private func connectionEnded(generation: Int, info: WebSocketCloseInfo, failure: (any Error)?) {
        guard generation == self.generation else { return }
        self.socket = nil
        self.outbox.disconnected()
        self.heartbeatDeadline = nil
        self.heartbeat.disconnected()
        self.stopRenewal()
        self.failRequests(CircleClientError(.notConnected, "the connection closed before the reply"))
        // No close frame from the server (1006): the network or the server died; retry.
        let end: ConnectionEnd =
            info.code == .abnormalClosure ? .transient : .closeCode(Int(info.code.rawValue), reason: info.reason)
        self.logger.debug("connection ended", metadata: ["close": "\(info)", "error": "\(failure.map { "\($0)" } ?? "none")"])
        self.perform(self.machine.ended(end, now: .now, random: .random(in: 0..<1)))
    }

    private func dropConnection() {
        self.generation += 1
        self.outbox.disconnected()
        self.heartbeatDeadline = nil
        self.heartbeat.disconnected()
        self.stopRenewal()
        self.failRequests(CircleClientError(.notConnected, "the connection was closed"))
        if let socket = self.socket {
            self.socket = nil
            Task { await socket.close(code: .goingAway, reason: "client closing") }
            // A dead connection may never answer the close: don't wait for it.
            socket.abort()
        }
    }

    private func stopped(_ reason: StopReason) {
        self.connectionDeadline = nil
        self.dropConnection()
        let error = CircleClientError(.stopped, "the client stopped: \(reason)")
        self.run(self.outbox.stopped(error, keeping: self.configuration.stateFile != nil))
    }

    // MARK: Heartbeat

    private func performHeartbeat(_ action: HeartbeatStateMachine<Instant>.Action, generation: Int) {
        guard generation == self.generation, self.socket != nil else { return }
        switch action {
        case .none:
            self.heartbeatDeadline = nil
        case .scheduleTimer(let at):
            self.heartbeatDeadline = at
            self.armTimer(at: at)
        case .sendPing(let then):
            self.ping(generation: generation)
            self.heartbeatDeadline = then
            self.armTimer(at: then)
        case .declareDead:
            self.heartbeatDeadline = nil
            self.dead(generation: generation)
        }
    }

    private func heartbeatTimer() -> HeartbeatStateMachine<Instant>.Action {
        // Each heartbeat also looks at the wall clock for the token's renewal (a process that
        // was suspended finds its timers late).
        self.performRenewal(self.renewal.timerFired(now: Self.wallNow()), generation: self.generation)
        return self.heartbeat.timerFired(now: .now)
    }

    // MARK: Token renewal

    static func wallNow() -> Double { Date().timeIntervalSince1970 }

    private func stopRenewal() {
        self.renewalDeadline = nil
        self.renewal.disconnected()
    }

    private func performRenewal(_ action: TokenRenewalStateMachine.Action, generation: Int) {
        guard generation == self.generation, self.socket != nil else { return }
        switch action {
        case .none:
            break
        case .scheduleTimer(let delay):
            let deadline = Instant.now + delay
            self.renewalDeadline = deadline
            self.armTimer(at: deadline)
        case .fetchToken:
            self.renewalDeadline = nil
            let provider = self.configuration.tokenProvider
            Task {
                do {
                    let token = try await provider()
                    self.renewalFetched(.success(token), generation: generation)
                } catch {
                    self.renewalFetched(.failure(error), generation: generation)
                }
            }
        case .sendAuth(let token):
            Task {
                var accepted = false
                do {
                    if case .ack = try await self.request({ .auth(token: token, id: $0) }) { accepted = true }
                } catch {
                    self.logger.warning("the server refused the renewed token; reconnecting", metadata: ["error": "\(error)"])
                }
                self.renewalAnswered(token: token, accepted: accepted, generation: generation)
            }
        case .reconnect:
            self.token = nil
            self.dropConnection()
            self.perform(self.machine.ended(.closeCode(Int(CircleCloseCode.tokenExpired), reason: "auth refused"), now: .now, random: .random(in: 0..<1)))
        }
    }

    private func renewalFetched(_ result: Result<String, any Error>, generation: Int) {
        guard generation == self.generation else { return }
        switch result {
        case .success(let token):
            self.performRenewal(self.renewal.tokenFetched(token, now: Self.wallNow()), generation: generation)
        case .failure(let error):
            self.logger.warning("token provider failed while renewing", metadata: ["error": "\(error)"])
            self.performRenewal(self.renewal.tokenFetchFailed(now: Self.wallNow()), generation: generation)
        }
    }

    private func renewalAnswered(token: String, accepted: Bool, generation: Int) {
        guard generation == self.generation else { return }
        if accepted {
            self.token = token
            self.logger.debug("renewed the connection's token")
            self.performRenewal(self.renewal.authAccepted(now: Self.wallNow()), generation: generation)
        } else {
            self.performRenewal(self.renewal.authRefused(now: Self.wallNow()), generation: generation)
        }
    }

    private func ping(generation: Int) {
        guard let socket = self.socket, generation == self.generation else { return }
        let timeout = self.configuration.heartbeat.timeout
        Task {
            // The heartbeat machine decides about death; the socket's own timeout only bounds the wait.
            if (try? await socket.ping(timeout: timeout + .seconds(1))) != nil {
                self.pong(generation: generation)
            }
        }
    }

    private func pong(generation: Int) {
        guard generation == self.generation else { return }
        _ = self.heartbeat.pongReceived(now: .now)
    }

    private func dead(generation: Int) {
        guard generation == self.generation else { return }
        self.logger.info("no pong within the heartbeat timeout; reconnecting")
        self.perform(self.machine.ended(.heartbeatTimeout, now: .now, random: .random(in: 0..<1)))
    }

    // MARK: Inbound

    private func receive(_ text: String, generation: Int) {
        guard generation == self.generation else { return }
        let message: CircleServerMessage
        do {
            message = try CircleServerMessage.decode(text)
        } catch {
            self.logger.warning("unreadable server message", metadata: ["text": "\(text.prefix(200))"])
            return
        }
        switch message {
        case .ack(let id, let seq, let time, let duplicate):
            // An id is an outbox entry's (a UUID) or a request's ("c1"), never both.
            if let action = self.outbox.acked(id, seq: seq, time: time, duplicate: duplicate) {
                self.run([action])
                return
            }
            switch self.requests.answered(id, accepted: true) {
            case nil:
                break
            case .call?:
                self.callWaiters.removeValue(forKey: id)?.resume(returning: message)
            case .join(let circle, let waiters)?:
                if let seq { self.follow(circle, from: seq) }
                if self.circles[circle]?.cursor == nil, let seq {
                    // A first join is live-only: start after the newest post at join time.
                    self.setCursor(seq, for: circle)
                }
                for waiter in waiters { self.joinWaiters.removeValue(forKey: waiter)?.resume() }
            }
        case .error(let id?, let code, let text):
            let error = CircleClientError(.server(code), text)
            if let action = self.outbox.refused(id, code: code, message: text) {
                self.run([action])
                return
            }
            switch self.requests.answered(id, accepted: false) {
            case nil:
                break
            case .call?:
                self.callWaiters.removeValue(forKey: id)?.resume(throwing: error)
            case .join(let circle, let waiters)?:
                self.circles[circle]?.events.finish(forever: false)
                for waiter in waiters { self.joinWaiters.removeValue(forKey: waiter)?.resume(throwing: error) }
                self.logger.warning("join refused", metadata: ["circle": "\(circle)", "code": "\(code)", "message": "\(text)"])
            }
        case .error(nil, let code, let text):
            self.logger.warning("server error without id", metadata: ["code": "\(code)", "message": "\(text)"])
        case .post(let post):
            self.deliver(post)
        case .history(let id, _, _, _, _), .circles(let id, _), .search(let id, _):
            if self.requests.answered(id, accepted: true) == .call {
                self.callWaiters.removeValue(forKey: id)?.resume(returning: message)
            }
        case .read(let circle, let seq):
            self.broadcast(.read(seq: seq), in: circle)
        case .notify(let circle, let level):
            self.broadcast(.notify(level: level), in: circle)
        case .added(let circle):
            self.circleListStreams.yield(.added(circle))
        case .joined(let circle, let user):
            self.broadcast(.joined(user: user), in: circle)
        case .left(let circle, let user):
            self.broadcast(.left(user: user), in: circle)
        case .typing(let circle, let user):
            self.broadcast(.typing(user: user), in: circle)
        case .gap(let circle, let from, let to):
            self.broadcast(.gap(from: from, to: to), in: circle)
            if (self.circles[circle]?.cursor ?? 0) < to {
                self.follow(circle, from: to)
                self.setCursor(to, for: circle)
            }
        }
    }

    /// The stream of `circle` continues after `seq` (a join's ack, a gap's end): the cache's
    /// timeline counts the entries up to it as applied, so a history page read before them is
    /// known to be stale (see ``history``). With a cache, every joined circle gets a timeline
    /// here, so history pages can fill it before any post arrives live.
    private func follow(_ circle: String, from seq: Int64) {
        guard self.caching else { return }
        if self.circles[circle]?.timeline == nil {
            var timeline = CircleTimeline(viewer: self.user)
            if let cursor = self.circles[circle]?.cursor { timeline.follow(from: cursor) }
            self.circles[circle]?.timeline = timeline
        }
        self.circles[circle]?.timeline?.follow(from: seq)
    }

    private func deliver(_ post: CirclePost) {
        guard let circle = self.circles[post.circle] else { return }
        switch StreamCursor.arrival(of: post.seq, after: circle.cursor) {
        case .delivered:
            return
        case .next:
            break
        case .afterGap(let from, let to):
            // The server never skips; if posts are missing anyway, say so instead of hiding it.
            self.broadcast(.gap(from: from, to: to), in: post.circle)
        }
        if self.caching {
            if self.circles[post.circle]?.timeline == nil {
                self.circles[post.circle]?.timeline = CircleTimeline(viewer: self.user)
            }
            self.circles[post.circle]?.timeline?.apply(post, keepingNewest: self.configuration.cacheLimit)
        }
        self.setCursor(post.seq, for: post.circle)
        self.broadcast(.post(post), in: post.circle)
    }

    private func setCursor(_ seq: Int64, for circle: String) {
        self.circles[circle, default: Circle()].cursor = seq
        self.unsavedCursors[circle] = seq
        // The saved cache names the cursor it goes with: it is saved whenever the cursor moves.
        if self.circles[circle]?.timeline != nil { self.unsavedCaches.insert(circle) }
        if self.cursorWriter == nil {
            self.cursorWriter = Task { await self.saveCursors() }
        }
    }

    /// Saves the unsaved cursors until none are left: a burst of deliveries costs one write per
    /// circle, and a circle's cursor is never overwritten by an older one.
    ///
    /// A circle's cache is saved in the same pass, before its cursor, as the snapshot that goes
    /// with that cursor (see ``init``): a burst costs one cache save per circle too, and the store
    /// writes only the posts it changed.
    private func saveCursors() async {
        while !self.unsavedCursors.isEmpty || !self.unsavedCaches.isEmpty {
            let batch = self.unsavedCursors
            let caches = self.unsavedCaches
            self.unsavedCursors = [:]
            self.unsavedCaches = []
            var snapshots: [(String, [CirclePost], Int64)] = []
            for circle in caches {
                guard let timeline = self.circles[circle]?.timeline, let cursor = self.circles[circle]?.cursor else { continue }
                snapshots.append((circle, timeline.posts, cursor))
            }
            for (circle, posts, cursor) in snapshots {
                try? await self.store.saveCache(posts, upTo: cursor, for: circle)
            }
            for (circle, seq) in batch {
                try? await self.store.setCursor(seq, for: circle)
            }
        }
        self.cursorWriter = nil
    }

    private func markCacheChanged(_ circle: String) {
        self.unsavedCaches.insert(circle)
        if self.cursorWriter == nil {
            self.cursorWriter = Task { await self.saveCursors() }
        }
    }

    private func broadcast(_ event: CircleEvent, in circle: String) {
        self.circles[circle]?.events.yield(event)
    }

    // MARK: Posts

    /// Queues a post and waits for it to resolve. With an `id` that is already in the outbox
    /// (a photo post queued again after a restart), waits for that entry instead.
    func post(text: String?, attachment: String?, to circle: String, id: String? = nil) async throws -> PostReceipt {
        try await self.enqueue(OutboxEntry(id: id ?? Self.newID(), circle: circle, action: .post, text: text, attachment: attachment, createdAt: Self.nowMillis()))
    }

    /// Queues an outbox entry (a post or a change) and waits for it to resolve. An entry whose
    /// id is already in the outbox is waited for, not queued again.
    func enqueue(_ entry: OutboxEntry) async throws -> PostReceipt {
        if case .stopped = self.machine.state {
            throw CircleClientError(.stopped, "the client is stopped; call connect() first")
        }
        if self.configuration.failFast && self.socket == nil {
            throw CircleClientError(.notConnected, "not connected, and failFast is on")
        }
        if self.outbox.isWaited(entry.id) {
            throw CircleClientError(.badRequest, "a post with id \(entry.id) is already waiting for its answer")
        }
        await self.removalsDone(entry.id)
        if !self.outbox.contains(entry.id) {
            // Connected, the entry goes out at once: it is marked in the same write (one fsync).
            // Should the connection close during the write, it counts as sent without having
            // been: it can no longer be cancelled, which is the safe side.
            let sent = self.socket != nil
            try await self.store.enqueue(entry, sent: sent)
            self.outbox.enqueued(entry, sent: sent)
            self.emit(.queued(entry))
        }
        return try await withCheckedThrowingContinuation { continuation in
            // Nothing ran since the checks above but the state store's write, which may have
            // let a second call with the same id in: the first one waits, the second is refused.
            let deadline = Instant.now + self.configuration.postTimeout
            guard self.postWaiters[entry.id] == nil, let actions = self.outbox.wait(for: entry.id, until: deadline) else {
                continuation.resume(throwing: CircleClientError(.badRequest, "a post with id \(entry.id) is already waiting for its answer"))
                return
            }
            self.postWaiters[entry.id] = continuation
            self.armTimer(at: deadline)
            self.join(entry.circle)
            self.run(actions)
        }
    }

    /// Removes an entry that was never sent (``OutboxStateMachine/Phase/queued``).
    func cancelOutboxEntry(_ id: String) async -> Bool {
        guard let action = self.outbox.cancel(id) else { return false }
        self.run([action])
        await self.removals[id]?.task.value
        return true
    }

    /// Replaces the text of a post or edit that was never sent (``OutboxStateMachine/Phase/queued``).
    func replaceOutboxText(_ id: String, with text: String) async -> Bool {
        guard self.outbox.replaceText(id, with: text) else { return false }
        do {
            try await self.store.replaceText(id: id, text: text)
        } catch {
            self.logger.warning("could not save the replaced text", metadata: ["id": "\(id)", "error": "\(error)"])
        }
        return true
    }

    /// Carries out the outbox's actions.
    private func run(_ actions: [OutboxStateMachine<Instant>.Action]) {
        for action in actions {
            switch action {
            case .markSent(let ids):
                Task { await self.markSent(ids) }
            case .send(let entries):
                guard let socket = self.socket else { continue }
                for entry in entries {
                    self.join(entry.circle)
                    self.emit(.sending(entry))
                    self.send(entry.request, on: socket)
                }
            case .resolve(let entry, let result, _):
                // The id may be queued again (a retry, a photo post after a restart): its
                // removal from the store is ordered before that write (``removalsDone``).
                self.removeFromStore(entry.id)
                let waiter = self.postWaiters.removeValue(forKey: entry.id)
                switch result {
                case .success(let receipt):
                    self.emit(.sent(entry, receipt))
                    waiter?.resume(returning: receipt)
                case .failure(let error):
                    self.emit(.failed(entry, error))
                    waiter?.resume(throwing: error)
                }
            case .abandon(let id, let error):
                self.postWaiters.removeValue(forKey: id)?.resume(throwing: error)
            }
        }
    }

    /// Saves that `ids` may reach the server, then writes the outbox. The actor ran other work
    /// during the save: the connection may have closed or been replaced, and entries may have
    /// been resolved; the outbox writes to the connection open now, if any, only what it holds.
    private func markSent(_ ids: [String]) async {
        do {
            try await self.store.markSent(ids)
        } catch {
            self.logger.warning("could not mark outbox entries as sent", metadata: ["error": "\(error)"])
            self.outbox.markFailed(ids)
            return
        }
        self.run(self.outbox.marked(ids))
    }

    /// Removes entry `id` from the state store, after any earlier removal of it; returns the
    /// removal, for a caller that waits (``removalsDone(_:)`` is how a later write waits).
    @discardableResult
    private func removeFromStore(_ id: String) -> Task<Void, Never> {
        self.removalsStarted += 1
        let number = self.removalsStarted
        let earlier = self.removals[id]?.task
        let store = self.store
        let task = Task {
            await earlier?.value
            try? await store.remove(id: id)
            self.removalFinished(id, number: number)
        }
        self.removals[id] = (number, task)
        return task
    }

    private func removalFinished(_ id: String, number: UInt64) {
        if self.removals[id]?.number == number { self.removals[id] = nil }
    }

    /// Returns once no removal of `id` is on its way to the state store.
    private func removalsDone(_ id: String) async {
        while let pending = self.removals[id] {
            self.waitsForRemoval += 1
            await pending.task.value
            self.removalFinished(id, number: pending.number)
        }
    }

    var outboxEntries: [OutboxEntry] { self.outbox.entries }

    // MARK: Circles and requests

    /// `after`: where the reader's own view of the circle ends (a history page's `lastSeq`);
    /// used as the cursor when the client has none for the circle and has not asked to join it.
    func subscribe(_ circle: String, after: Int64? = nil) -> AsyncStream<CircleEvent> {
        if let after, after >= 0, self.circles[circle]?.cursor == nil, self.requests.joinState(of: circle) == .none {
            self.circles[circle, default: Circle()].cursor = after
        }
        guard !self.streamsFinished else { return AsyncStream { $0.finish() } }
        // The cache first, in current state, then what follows its cursor: no gap, no overlap.
        let cached = (self.circles[circle]?.timeline?.posts ?? []).map(CircleEvent.post)
        let stream = self.circles[circle, default: Circle()].events.makeStream(bufferingPolicy: .unbounded, first: cached) { id in
            Task { await self.unsubscribe(circle, id) }
        }
        self.join(circle)
        return stream
    }

    private func unsubscribe(_ circle: String, _ id: UUID) {
        self.circles[circle]?.events.forget(id)
    }

    /// Asks the open connection to join `circle`, unless it is asked for or joined already.
    private func join(_ circle: String) {
        guard let socket = self.socket, let id = self.requests.join(circle) else { return }
        // A circle's posts are delivered only to circles it holds (``deliver``).
        if self.circles[circle] == nil { self.circles[circle] = Circle() }
        let quiet: Bool? = self.configuration.announcesPresence ? nil : true
        self.send(.join(circle, id: id, since: self.circles[circle]?.cursor, quiet: quiet), on: socket)
    }

    func leave(_ circle: String) async throws {
        self.circles[circle]?.events.finish(forever: false)
        self.requests.left(circle)
        _ = try await self.request { .leave(circle, id: $0) }
    }

    /// How many times ``history`` asks for a page while each answer is older than the cache
    /// (the circle changed between the page's read and its arrival, every time).
    static let historyAttempts = 3

    /// A page of posts: from the server when connected, else from the offline cache.
    ///
    /// With a cache, a page from the server goes into it too: its posts replace the held ones
    /// and are added when not held, then the newest `cacheLimit` are kept. A page older than
    /// the cache is not taken and is asked for again, up to ``historyAttempts`` times in all;
    /// the last page is returned either way. A page without `lastSeq` (an older server) is not
    /// taken: nothing tells how old it is.
    ///
    /// Why a page taken this way leaves no post without a change: a page is taken only when its
    /// `lastSeq` is at least the timeline's, and the timeline's `lastSeq` is at least the
    /// circle's cursor, since the stream is followed from there (the saved cache's `up_to` on
    /// start, each join's ack — on a first join, which is live only, the ack's seq becomes the
    /// cursor — and a gap's end), and every delivered entry moves both. So each post of the page
    /// shows every entry up to the page's `lastSeq`, and every entry after that is after the
    /// cursor too and reaches the timeline through the stream, applied on top (entries between
    /// the cursor and the page's `lastSeq` are applied a second time, which leaves a post as the
    /// stream leaves it). On a first join, a page read before the ack (its `lastSeq` below the
    /// ack's seq) lacks the changes committed between its read and the ack, which the live-only
    /// stream never sends: after `follow(from:)` at the ack that page is stale, and although
    /// `merge` would add its posts anyway, it is merged into a copy that is dropped, and asked
    /// for again. The new request goes out after the ack was handled, so the server reads it
    /// after the join, at or past the ack's seq. A page that arrives before a first join's ack
    /// finds no timeline (it is made at the ack) and is not cached at all.
    func history(_ circle: String, before: Int64?, after: Int64?, limit: Int) async throws -> HistoryPage {
        if self.socket == nil, self.caching {
            let timeline = self.circles[circle]?.timeline
            let cache = timeline ?? CircleTimeline()
            let page = after.map { cache.page(after: $0, limit: limit) } ?? cache.page(before: before, limit: limit)
            return HistoryPage(posts: page.posts, more: page.more, lastSeq: timeline?.lastSeq)
        }
        var attempt = 1
        while true {
            let reply = try await self.request { .history(of: circle, id: $0, before: before, after: after, limit: limit) }
            guard case .history(_, _, let posts, let more, let lastSeq) = reply else {
                throw CircleClientError(.badRequest, "unexpected reply \(reply)")
            }
            let page = HistoryPage(posts: posts, more: more, lastSeq: lastSeq)
            if self.cache(page, of: circle) || attempt == Self.historyAttempts { return page }
            attempt += 1
        }
    }

    /// Takes a page into `circle`'s cache, if the client keeps one for it; `false` when the page
    /// is older than the cache (ask again).
    private func cache(_ page: HistoryPage, of circle: String) -> Bool {
        guard self.caching, let lastSeq = page.lastSeq else { return true }
        switch self.circles[circle]?.timeline?.takePage(page.posts, asOf: lastSeq, keepingNewest: self.configuration.cacheLimit) {
        case nil:
            return true
        case true?:
            self.markCacheChanged(circle)
            return true
        case false?:
            return false
        }
    }

    /// A page for ``CircleModel``, which keeps its own timeline fed by `messages(in:)`.
    /// Connected, it is asked once the circle is joined on the connection. `follows` is the
    /// cursor when the page arrived: the model's stream has given it the entries up to there
    /// (or the cached posts they changed; on a first join, the stream starts there) and will
    /// give it every later one, so the model's timeline follows from it before taking the page
    /// (the argument of ``history``).
    func pageForFollower(_ circle: String, before: Int64?, limit: Int) async throws -> (page: HistoryPage, follows: Int64?) {
        if self.socket != nil { try await self.waitForJoin(circle) }
        let page = try await self.history(circle, before: before, after: nil, limit: limit)
        return (page, self.circles[circle]?.cursor)
    }

    func markRead(_ circle: String, upTo seq: Int64) async throws -> Int64 {
        try await self.waitForJoin(circle)
        let reply = try await self.request { .read(circle, upTo: seq, id: $0) }
        guard case .ack(_, let stored, _, _) = reply, let stored else {
            throw CircleClientError(.badRequest, "unexpected reply \(reply)")
        }
        return stored
    }

    func circleSummaries() async throws -> [CircleSummary] {
        let reply = try await self.request { .circles(id: $0) }
        guard case .circles(_, let circles) = reply else {
            throw CircleClientError(.badRequest, "unexpected reply \(reply)")
        }
        return circles
    }

    /// A search: asked on the connection, or answered from the offline cache when there is none.
    func search(_ request: HTTPAPI.SearchRequest) async throws -> CircleSearchResults {
        if self.socket == nil, self.caching {
            guard let query = CachedSearch(request) else {
                throw CircleClientError(.server(.nothingToFind), "give a word or a \"phrase\" to search for")
            }
            let offset = request.cursor.flatMap { $0.hasPrefix("cache:") ? Int($0.dropFirst(6)) : nil } ?? 0
            let limit = min(max(request.limit ?? HTTPAPI.SearchRequest.defaultLimit, 1), HTTPAPI.SearchRequest.maxLimit)
            let posts = self.circles.values.flatMap { $0.timeline?.posts ?? [] }
            let page = query.hits(in: posts, offset: max(0, offset), limit: limit)
            return CircleSearchResults(hits: page.hits, next: page.more ? "cache:\(max(0, offset) + page.hits.count)" : nil, fromCache: true)
        }
        let reply = try await self.request { .search(request, id: $0) }
        guard case .search(_, let results) = reply else {
            throw CircleClientError(.badRequest, "unexpected reply \(reply)")
        }
        return CircleSearchResults(hits: results.hits, next: results.next)
    }

    func cachedPosts(in circle: String) -> [CirclePost] {
        self.circles[circle]?.timeline?.posts ?? []
    }

    /// Joins the circle on the current connection if needed, and waits for the join's ack.
    func waitForJoin(_ circle: String) async throws {
        guard self.socket != nil else {
            throw CircleClientError(.notConnected, "not connected; try again when the state is connected")
        }
        self.join(circle)
        let waiter = UUID()
        let deadline = Instant.now + self.configuration.requestTimeout
        guard self.requests.waitForJoin(circle, waiter: waiter, until: deadline) else { return }
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
            self.joinWaiters[waiter] = continuation
            self.armTimer(at: deadline)
        }
    }

    func typing(_ circle: String) async throws {
        _ = try await self.request { .typing(in: circle, id: $0) }
    }

    private func request(_ make: (String) -> CircleRequest) async throws -> CircleServerMessage {
        guard let socket = self.socket else {
            throw CircleClientError(.notConnected, "not connected; try again when the state is connected")
        }
        let deadline = Instant.now + self.configuration.requestTimeout
        let request = make(self.requests.call(until: deadline))
        return try await withCheckedThrowingContinuation { continuation in
            self.callWaiters[request.id] = continuation
            self.armTimer(at: deadline)
            self.send(request, on: socket)
        }
    }

    /// Every request of the connection fails with `error`, and every call waiting for a join.
    private func failRequests(_ error: CircleClientError) {
        let dropped = self.requests.connectionEnded()
        for id in dropped.calls { self.callWaiters.removeValue(forKey: id)?.resume(throwing: error) }
        for waiter in dropped.joinWaits { self.joinWaiters.removeValue(forKey: waiter)?.resume(throwing: error) }
    }

    /// Sends in order, without waiting: the socket queues the frame (written and flushed with
    /// the others of the same burst). Requests are bounded by their waiters and the outbox.
    private func send(_ request: CircleRequest, on socket: WebSocket) {
        let text: String
        do {
            text = String(decoding: try JSONEncoder().encode(request), as: UTF8.self)
        } catch {
            return
        }
        // A failed send means the connection is gone; the reader notices and reconnects,
        // and the outbox re-sends what was not acknowledged.
        try? socket.sendWithoutWaiting(.text(text))
    }

    // MARK: Observation

    func cursor(of circle: String) -> Int64? { self.circles[circle]?.cursor }

    private func publish(_ state: ConnectionState) {
        guard state != self.state else { return }
        self.state = state
        self.stateStreams.yield(state)
    }

    /// Starts with the current state.
    func stateStream() -> AsyncStream<ConnectionState> {
        self.stateStreams.makeStream(bufferingPolicy: .bufferingNewest(32), first: [self.state]) { id in
            Task { await self.forgetStateStream(id) }
        }
    }

    private func forgetStateStream(_ id: UUID) { self.stateStreams.forget(id) }

    func outboxStream() -> AsyncStream<OutboxEvent> {
        self.outboxStreams.makeStream(bufferingPolicy: .unbounded) { id in Task { await self.forgetOutboxStream(id) } }
    }

    private func forgetOutboxStream(_ id: UUID) { self.outboxStreams.forget(id) }

    func circleListStream() -> AsyncStream<CircleListEvent> {
        self.circleListStreams.makeStream(bufferingPolicy: .unbounded) { id in Task { await self.forgetCircleListStream(id) } }
    }

    private func forgetCircleListStream(_ id: UUID) { self.circleListStreams.forget(id) }

    private func emit(_ event: OutboxEvent) {
        self.outboxStreams.yield(event)
    }

    /// Ends every stream handed out (messages, states, outbox events) after what they already
    /// hold, and those asked for later: the client shut down, so a `for await` over them ends.
    func finishStreams() {
        self.streamsFinished = true
        for circle in self.circles.keys { self.circles[circle]?.events.finish(forever: true) }
        self.stateStreams.finish(forever: true)
        self.outboxStreams.finish(forever: true)
        self.circleListStreams.finish(forever: true)
    }

    func closeStore() async {
        self.timer?.task.cancel()
        self.timer = nil
        await self.cursorWriter?.value
        for pending in self.removals.values { await pending.task.value }
        await self.store.close()
    }
}
