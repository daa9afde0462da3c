import CircleSocket
import CircleWire
import NIOConcurrencyHelpers
import NIOCore

/// In-memory fan-out: who is subscribed to which circle on this node.
///
/// Posts come from this node's commits (``publish(_:wakes:)``) and, when several nodes share the
/// store, from what the others say (``receive(_:)``, the poll's ``advanced(_:to:)``); a
/// ``FeedSequencer`` puts each circle's posts in sequence order before they are delivered.
///
/// A post is encoded once and the same bytes are written to every subscriber; deliveries are
/// grouped by event loop so that one batch costs one hop per loop, not one per subscriber.
/// Everything the hub hands to sessions (posts, ephemeral events, user events, revocations)
/// and the commit loop's answers to their posts' authors go through the ``LoopInbox`` of the session's event loop, which runs it in the order it
/// was handed over; posts of a circle are published in sequence order, so every subscriber
/// sees them in order, and a revocation is never overtaken by a later post.
///
/// ## Lock order
///
/// `sequencer` is the only lock held while another is taken. While it is held (`sequence`, for
/// one circle's step), the hub takes, one at a time, each released before the next:
/// `subscriptions` (the subscriber count, then `deliver`'s lookup), the ``SharedDeflaters``'
/// `NIOLock` (one deflate per post and shared setting, in ``payload(for:sharedCompression:)``),
/// `inboxes` (``inbox(for:)``) and, after `inboxes` is released, that ``LoopInbox``'s queue
/// (``LoopInbox/deliver(_:wakes:)``). So: `sequencer` → `subscriptions`, deflaters, `inboxes`,
/// an inbox's queue; nothing is taken while one of those four is held.
///
/// No other two locks are ever held together. `connections`, `presence` and `accountObserver`
/// are taken alone (the observer is called after its lock is released); outside the sequencer,
/// `subscriptions` or `connections`, then `inboxes`, then an inbox's queue are taken one after
/// the other (the targets are copied out first). No hub lock is held while a drain is
/// scheduled (``InboxWakes/wake()``), while a drain runs the sessions' code, or while
/// ``NodeLink`` is called (its signals and read requests are sent after `sequencer` is released).
final class Hub: Sendable {
    private let subscriptions = NIOLockedValueBox([String: Set<HubSubscriber>]())
    /// Every connection of this node, by user (for events addressed to a user: read markers).
    private let connections = NIOLockedValueBox([String: Set<HubSubscriber>]())
    /// Per circle, per user: how many of the user's connections on this node are joined and
    /// announced (not quiet). Presence is per user: the first announces `joined`, the last `left`.
    private let presence = NIOLockedValueBox([String: [String: Int]]())
    private let allocator = ByteBufferAllocator()
    private let deflaters = SharedDeflaters()
    /// One inbox per event loop, for everything handed to the sessions on it.
    private let inboxes = NIOLockedValueBox([ObjectIdentifier: LoopInbox]())
    /// Orders each circle's posts, whichever node stored them; its lock is also held while a
    /// circle's deliveries are handed to the event loops, so they leave in order.
    private let sequencer = NIOLockedValueBox(FeedSequencer())
    /// Store reads for holes, and the signals to and from other nodes.
    let link: NodeLink
    private let accountObserver = NIOLockedValueBox<(@Sendable (String) -> Void)?>(nil)

    init(link: NodeLink = NodeLink()) {
        self.link = link
    }

    func register(_ subscriber: HubSubscriber) {
        self.connections.withLockedValue { _ = $0[subscriber.user, default: []].insert(subscriber) }
    }

    /// Forgets a connection and all its subscriptions.
    func unregister(_ subscriber: HubSubscriber, circles: some Sequence<String>) {
        self.connections.withLockedValue { table in
            table[subscriber.user]?.remove(subscriber)
            if table[subscriber.user]?.isEmpty == true { table[subscriber.user] = nil }
        }
        self.subscriptions.withLockedValue { table in
            for circle in circles {
                table[circle]?.remove(subscriber)
                if table[circle]?.isEmpty == true { table[circle] = nil }
            }
        }
    }

    func subscribe(_ subscriber: HubSubscriber, to circle: String) {
        self.subscriptions.withLockedValue { _ = $0[circle, default: []].insert(subscriber) }
    }

    func unsubscribe(_ subscriber: HubSubscriber, from circle: String) {
        self.subscriptions.withLockedValue { table in
            table[circle]?.remove(subscriber)
            if table[circle]?.isEmpty == true { table[circle] = nil }
        }
    }

    /// Counts one more announced connection of `user` in `circle`; `true` when it is the user's
    /// first there (then the circle hears `joined`).
    func arrive(_ user: String, in circle: String) -> Bool {
        self.presence.withLockedValue { table in
            let count = table[circle, default: [:]][user, default: 0] + 1
            table[circle, default: [:]][user] = count
            return count == 1
        }
    }

    /// Counts one announced connection of `user` in `circle` fewer; `true` when it was the
    /// user's last there (then the circle hears `left`).
    func depart(_ user: String, from circle: String) -> Bool {
        self.presence.withLockedValue { table in
            guard let count = table[circle]?[user] else { return false }
            if count > 1 {
                table[circle]?[user] = count - 1
                return false
            }
            table[circle]?[user] = nil
            if table[circle]?.isEmpty == true { table[circle] = nil }
            return true
        }
    }

    var connectionCount: Int { self.connections.withLockedValue { $0.values.reduce(0) { $0 + $1.count } } }

    func subscriberCount(of circle: String) -> Int {
        self.subscriptions.withLockedValue { $0[circle]?.count ?? 0 }
    }

    /// Fans out posts committed through this node; `posts` must be in commit order. Returns the
    /// number of deliveries made at once (posts held for a hole are delivered when it is filled).
    /// Other nodes sharing the store hear that the circles advanced.
    ///
    /// The loops' inboxes get the deliveries at once but are woken through `wakes`, so that the
    /// caller can hand over the rest of its batch first (see ``InboxWakes``).
    @discardableResult
    func publish(_ posts: [CirclePost], wakes: inout InboxWakes) -> Int {
        guard !posts.isEmpty else { return 0 }
        var count = 0
        for run in Self.runs(of: posts) {
            count += self.sequence(run[0].circle, wakes: &wakes) { $0.stored(run) }
            self.link.send(.posts(circle: run[0].circle, first: run[0].seq, last: run[run.count - 1].seq, posts: run))
        }
        return count
    }

    /// What another node sharing the store said. Returns the number of post deliveries.
    @discardableResult
    func receive(_ signal: NodeSignal) -> Int {
        switch signal.kind {
        case .posts(let circle, let first, let last, let posts):
            if let posts, !posts.isEmpty, posts.allSatisfy({ $0.circle == circle }) {
                return self.sequence(circle) { $0.stored(posts.sorted { $0.seq < $1.seq }) }
            }
            return self.sequence(circle) { $0.advanced(circle, first: first, last: last) }
        case .ephemeral(let circle, let json, let limit):
            self.broadcastHere(.framing(self.allocator.buffer(string: json), allocator: self.allocator), in: circle, except: nil, limit: limit)
        case .user(let user, let json):
            self.sendHere(.framing(self.allocator.buffer(string: json), allocator: self.allocator), toUser: user, except: nil)
            return 0
        case .revoke(let circle, let user):
            self.revokeHere(user: user, from: circle)
            return 0
        case .end(let user, let session):
            self.endConnectionsHere(of: user, session: session)
        }
        return 0
    }

    /// The poll's news: `circle`'s newest stored post is `last`. Returns the number of deliveries.
    @discardableResult
    func advanced(_ circle: String, to last: Int64) -> Int {
        self.sequence(circle) { $0.advanced(circle, first: nil, last: last) }
    }

    /// The answer to a read the sequencer asked for (`nil`: the read failed). Returns the
    /// number of deliveries.
    @discardableResult
    func readCompleted(_ circle: String, after: Int64, _ posts: [CirclePost]?) -> Int {
        self.sequence(circle) { $0.read(circle, after: after, posts) }
    }

    /// Circles with subscribers on this node.
    var subscribedCircles: [String] {
        self.subscriptions.withLockedValue { Array($0.keys) }
    }

    /// Posts split into runs of one circle each, in order.
    private static func runs(of posts: [CirclePost]) -> [[CirclePost]] {
        var runs: [[CirclePost]] = []
        var byCircle: [String: Int] = [:]
        for post in posts {
            if let index = byCircle[post.circle] {
                runs[index].append(post)
            } else {
                byCircle[post.circle] = runs.count
                runs.append([post])
            }
        }
        return runs
    }

    /// Runs the sequencer for one circle and performs its actions, under the sequencer's lock
    /// so that deliveries of a circle leave in sequence order whoever publishes.
    @discardableResult
    private func sequence(_ circle: String, _ step: (inout FeedSequencer) -> [FeedSequencer.Action]) -> Int {
        var wakes = InboxWakes()
        defer { wakes.wake() }
        return self.sequence(circle, wakes: &wakes, step)
    }

    private func sequence(_ circle: String, wakes: inout InboxWakes, _ step: (inout FeedSequencer) -> [FeedSequencer.Action]) -> Int {
        var reads: [(String, Int64)] = []
        let count = self.sequencer.withLockedValue { sequencer -> Int in
            // Circles are followed while they have subscribers here.
            if self.subscriberCount(of: circle) == 0 {
                sequencer.unfollow(circle)
                return 0
            }
            sequencer.follow(circle)
            var delivered = 0
            for action in step(&sequencer) {
                switch action {
                case .publish(let posts): delivered += self.deliver(posts, wakes: &wakes)
                case .read(let circle, let after): reads.append((circle, after))
                }
            }
            return delivered
        }
        for (circle, after) in reads { self.link.requestRead(circle: circle, after: after) }
        return count
    }

    /// Hands posts of one circle, ascending (a ``FeedSequencer/Action/publish(_:)``: ``publish(_:wakes:)``
    /// split its batch by circle already), to the circle's subscribers, one hop per event loop.
    private func deliver(_ posts: [CirclePost], wakes: inout InboxWakes) -> Int {
        guard let circle = posts.first?.circle else { return 0 }
        assert(posts.allSatisfy { $0.circle == circle }, "a publish action holds one circle's posts")
        // Under the lock only the lookup; encoding and compressing happen outside it.
        let found = self.subscriptions.withLockedValue { table -> (Set<HubSubscriber>, [PerMessageDeflate.SharedCompression])? in
            guard let subscribers = table[circle], !subscribers.isEmpty else { return nil }
            var shared: [PerMessageDeflate.SharedCompression] = []
            for subscriber in subscribers {
                if let setting = subscriber.sharedCompression, !shared.contains(setting) { shared.append(setting) }
            }
            return (subscribers, shared)
        }
        guard let (subscribers, shared) = found else { return 0 }
        let payloads = posts.map { ($0.seq, self.payload(for: .post($0), sharedCompression: shared)) }
        let events: [HubEvent]
        if let run = HubPostRun(payloads, allocator: self.allocator) {
            events = [.posts(circle: circle, run: run)]
        } else {
            events = payloads.map { .post(circle: circle, seq: $0.0, payload: $0.1) }
        }
        var perLoop: [ObjectIdentifier: (loop: any EventLoop, deliveries: [(HubSubscriber, HubEvent)])] = [:]
        for subscriber in subscribers {
            for event in events {
                perLoop[ObjectIdentifier(subscriber.eventLoop), default: (subscriber.eventLoop, [])].deliveries.append((subscriber, event))
            }
        }
        for (_, group) in perLoop {
            self.inbox(for: group.loop).deliver(group.deliveries, wakes: &wakes)
        }
        return subscribers.count * posts.count
    }

    /// `loop`'s inbox: post deliveries go through it, and so do the commit loop's answers, so
    /// that a batch's acks come before its posts on each loop and leave with them.
    func inbox(for loop: any EventLoop) -> LoopInbox {
        let key = ObjectIdentifier(loop)
        return self.inboxes.withLockedValue { inboxes in
            if let inbox = inboxes[key] { return inbox }
            let inbox = LoopInbox(eventLoop: loop)
            inboxes[key] = inbox
            return inbox
        }
    }

    /// Sends an ephemeral event to the circle's subscribers except `sender`, here and on the
    /// other nodes sharing the store. With `limit`, nothing is sent where the circle has more
    /// subscribers than that (on each node, counting that node's subscribers).
    func broadcast(_ message: CircleServerMessage, in circle: String, except sender: HubSubscriber?, limit: Int? = nil) {
        let payload = HubPayload.framed(message, allocator: self.allocator)
        self.broadcastHere(payload, in: circle, except: sender, limit: limit)
        self.link.send(.ephemeral(circle: circle, json: String(buffer: payload.text), limit: limit))
    }

    /// ``broadcast(_:in:except:limit:)`` on this node only, one hop per event loop.
    private func broadcastHere(_ payload: HubPayload, in circle: String, except sender: HubSubscriber?, limit: Int?) {
        var perLoop: [ObjectIdentifier: (loop: any EventLoop, subscribers: [HubSubscriber])] = [:]
        self.subscriptions.withLockedValue { table in
            guard let subscribers = table[circle], subscribers.count <= (limit ?? .max) else { return }
            for subscriber in subscribers where subscriber !== sender {
                perLoop[ObjectIdentifier(subscriber.eventLoop), default: (subscriber.eventLoop, [])].subscribers.append(subscriber)
            }
        }
        guard !perLoop.isEmpty else { return }
        let event = HubEvent.ephemeral(circle: circle, payload: payload)
        for (_, group) in perLoop {
            self.inbox(for: group.loop).deliver(group.subscribers.map { ($0, event) })
        }
    }

    /// Takes `user` out of `circle` on every connection, on this node and the others sharing
    /// the store (which also learn it from the store's revocation log, should this signal be lost).
    func revoke(user: String, from circle: String) {
        self.revokeHere(user: user, from: circle)
        self.link.send(.revoke(circle: circle, user: user))
    }

    /// ``revoke(user:from:)`` on this node only.
    func revokeHere(user: String, from circle: String) {
        let targets = self.subscriptions.withLockedValue { $0[circle].map { Array($0) } ?? [] }
        for subscriber in targets where subscriber.user == user {
            self.inbox(for: subscriber.eventLoop).deliver([(subscriber, .revoke(circle: circle))])
        }
    }

    /// Sends `message` to every connection of `user` except `sender`, here and on the other
    /// nodes sharing the store.
    func send(_ message: CircleServerMessage, toUser user: String, except sender: HubSubscriber?) {
        let payload = HubPayload.framed(message, allocator: self.allocator)
        self.sendHere(payload, toUser: user, except: sender)
        self.link.send(.user(user: user, json: String(buffer: payload.text)))
    }

    /// ``send(_:toUser:except:)`` on this node only.
    func sendHere(_ payload: HubPayload, toUser user: String, except sender: HubSubscriber?) {
        let targets = self.connections.withLockedValue { $0[user].map { $0.filter { $0 !== sender } } ?? [] }
        let event = HubEvent.user(payload)
        for subscriber in targets {
            self.inbox(for: subscriber.eventLoop).deliver([(subscriber, event)])
        }
    }

    /// Closes the connections of `user` that signed in with `session` (all of them for `nil`)
    /// with 4005, here and on the other nodes (which also learn it from the store's account
    /// log, should the signal be lost).
    func endConnections(of user: String, session: String?) {
        self.endConnectionsHere(of: user, session: session)
        self.link.send(.end(user: user, session: session))
    }

    /// ``endConnections(of:session:)`` on this node only; an end of all of a user's connections
    /// also tells the account observer (the account's status may have changed).
    func endConnectionsHere(of user: String, session: String?) {
        let targets = self.connections.withLockedValue { $0[user].map { Array($0) } ?? [] }
        for subscriber in targets {
            self.inbox(for: subscriber.eventLoop).deliver([(subscriber, .end(session: session))])
        }
        if session == nil, let observer = self.accountObserver.withLockedValue({ $0 }) { observer(user) }
    }

    /// Called with a user's name when all of their connections end on the word of another node
    /// (the server re-reads the account: it may be banned now).
    func observeAccounts(_ observer: @escaping @Sendable (String) -> Void) {
        self.accountObserver.withLockedValue { $0 = observer }
    }

    /// Asks every connection to close with 1001.
    func shutDownAll() {
        let all = self.connections.withLockedValue { $0.values.flatMap { $0 } }
        for subscriber in all {
            subscriber.eventLoop.execute { subscriber.shutDown() }
        }
    }

    /// `message` encoded, and deflated once for each of `sharedCompression` whose threshold it reaches.
    func payload(for message: CircleServerMessage, sharedCompression: [PerMessageDeflate.SharedCompression]) -> HubPayload {
        var payload = HubPayload.framed(message, allocator: self.allocator)
        for setting in sharedCompression where payload.text.readableBytes >= setting.minimumCompressedSize {
            if let deflated = self.deflaters.deflate(payload.text, setting: setting, allocator: self.allocator) {
                payload.deflated.append((setting, deflated, ServerFrame.text(deflated, compressed: true, allocator: self.allocator)))
            }
        }
        return payload
    }
}
