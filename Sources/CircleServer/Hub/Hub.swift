import CircleSocket
import CircleWire
import NIOConcurrencyHelpers
import NIOCore

/// An event as the hub hands it out: the encoded JSON of a text frame and, for subscribers
/// that compress every message on its own (RFC 7692 without context takeover), the same bytes
/// deflated once per compression setting, so that a fan-out to many such subscribers compresses
/// once instead of once per subscriber.
///
/// Each also comes as a whole WebSocket frame (``framed``; a server's frames are not masked, so
/// the bytes are the same for every subscriber): a session writes it below the frame encoder,
/// so a fan-out to N subscribers frames once instead of N times, and each delivery is one
/// buffer (one iovec) rather than a header buffer allocated per subscriber plus the payload.
struct HubPayload: Sendable {
    var text: ByteBuffer
    /// `text` as one unfragmented, uncompressed text frame.
    var framed: ByteBuffer?
    var deflated: [(setting: PerMessageDeflate.SharedCompression, payload: ByteBuffer, framed: ByteBuffer)] = []

    init(text: ByteBuffer, framed: ByteBuffer? = nil) {
        self.text = text
        self.framed = framed
    }

    /// `text` with its text frame made once.
    static func framing(_ text: ByteBuffer, allocator: ByteBufferAllocator) -> HubPayload {
        HubPayload(text: text, framed: ServerFrame.text(text, compressed: false, allocator: allocator))
    }

    /// `message` encoded once into a buffer with room for the frame's header in front: the text
    /// and the frame are two views of the same bytes, with no copy.
    static func framed(_ message: CircleServerMessage, allocator: ByteBufferAllocator) -> HubPayload {
        let room = ServerFrame.maxHeaderSize
        var buffer = allocator.buffer(capacity: 256)
        buffer.moveWriterIndex(forwardBy: room)
        buffer.moveReaderIndex(forwardBy: room)
        message.writeJSON(into: &buffer)
        let length = buffer.readableBytes
        let start = room - ServerFrame.headerSize(length: length)
        ServerFrame.setHeader(compressed: false, length: length, in: &buffer, at: start)
        let text = buffer
        buffer.moveReaderIndex(to: start)
        return HubPayload(text: text, framed: buffer)
    }

    /// The deflated copy made for `setting`, if the hub made one.
    func deflated(for setting: PerMessageDeflate.SharedCompression) -> ByteBuffer? {
        for copy in self.deflated where copy.setting == setting { return copy.payload }
        return nil
    }

    /// The deflated copy made for `setting` as a whole frame (RSV1 set), if the hub made one.
    func framedDeflated(for setting: PerMessageDeflate.SharedCompression) -> ByteBuffer? {
        for copy in self.deflated where copy.setting == setting { return copy.framed }
        return nil
    }
}

/// The bytes of a server's WebSocket frame (RFC 6455 §5.2): FIN, the opcode, RSV1 when the
/// payload is deflated (RFC 7692), the length in 7, 16 or 64 bits, no mask.
enum ServerFrame {
    static let maxHeaderSize = 10

    static func text(_ payload: ByteBuffer, compressed: Bool, allocator: ByteBufferAllocator) -> ByteBuffer {
        let length = payload.readableBytes
        var frame = allocator.buffer(capacity: length + Self.maxHeaderSize)
        Self.writeHeader(compressed: compressed, length: length, into: &frame)
        frame.writeImmutableBuffer(payload)
        return frame
    }

    /// `message` as one uncompressed frame in one buffer (header, then payload), or `nil` when
    /// the frame would be over `maxBytes`.
    ///
    /// For `/v1/echo`: written below the frame encoder like the chat's frames, it is one NIO
    /// pending write and one `write`, where a `WebSocketFrame` through the encoder costs a header
    /// buffer of its own, two pending writes and a `writev`. The payload is copied, so large
    /// messages keep the encoder's way (``WebSocketFrameWriter/headerInCopyLimit``).
    static func frame(of message: WebSocketMessage, maxBytes: Int, allocator: ByteBufferAllocator) -> ByteBuffer? {
        switch message {
        case .text(let text):
            let length = text.utf8.count
            guard Self.headerSize(length: length) + length <= maxBytes else { return nil }
            var frame = allocator.buffer(capacity: Self.headerSize(length: length) + length)
            Self.writeHeader(first: textFirstByte, length: length, into: &frame)
            frame.writeString(text)
            return frame
        case .binary(let payload):
            let length = payload.readableBytes
            guard Self.headerSize(length: length) + length <= maxBytes else { return nil }
            var frame = allocator.buffer(capacity: Self.headerSize(length: length) + length)
            Self.writeHeader(first: binaryFirstByte, length: length, into: &frame)
            frame.writeImmutableBuffer(payload)
            return frame
        }
    }

    /// FIN and the opcode; RSV1 is added for a deflated payload.
    private static let textFirstByte: UInt8 = 0x81
    private static let binaryFirstByte: UInt8 = 0x82
    private static let rsv1: UInt8 = 0x40

    /// The header of a final text frame of `length` payload bytes, written at the end.
    static func writeHeader(compressed: Bool, length: Int, into frame: inout ByteBuffer) {
        Self.writeHeader(first: compressed ? Self.textFirstByte | Self.rsv1 : Self.textFirstByte, length: length, into: &frame)
    }

    private static func writeHeader(first: UInt8, length: Int, into frame: inout ByteBuffer) {
        let size = Self.headerSize(length: length)
        frame.reserveCapacity(minimumWritableBytes: size)
        Self.setHeader(first: first, length: length, in: &frame, at: frame.writerIndex)
        frame.moveWriterIndex(forwardBy: size)
    }

    /// `messages` as uncompressed text frames back to back, in buffers of at most about
    /// `maxBytes` each (a larger message gets a buffer of its own).
    ///
    /// For a replay page: its posts go to the socket as a few buffers rather than one frame each
    /// (two NIO pending writes each: the header's buffer and the JSON). NIO's pending-writes
    /// queue grows to what waits for a flush and never shrinks, so a page of 256 posts written
    /// one by one left every resumed connection about 32 KB larger for the rest of its life
    /// (`benchmarks/idle.py --history 256`: 38 KB per connection, 6 KB with this).
    static func frames(of messages: some Sequence<CircleServerMessage>, maxBytes: Int, allocator: ByteBufferAllocator) -> [ByteBuffer] {
        var buffers: [ByteBuffer] = []
        var scratch = allocator.buffer(capacity: 512)
        var batch = allocator.buffer(capacity: 0)
        for message in messages {
            scratch.clear()
            message.writeJSON(into: &scratch)
            let size = Self.headerSize(length: scratch.readableBytes) + scratch.readableBytes
            if batch.readableBytes > 0, batch.readableBytes + size > maxBytes {
                buffers.append(batch)
                batch = allocator.buffer(capacity: 0)
            }
            if batch.capacity == 0 { batch.reserveCapacity(min(maxBytes, max(size, 4096))) }
            Self.writeHeader(compressed: false, length: scratch.readableBytes, into: &batch)
            batch.writeImmutableBuffer(scratch)
        }
        if batch.readableBytes > 0 { buffers.append(batch) }
        return buffers
    }

    static func headerSize(length: Int) -> Int {
        length < 126 ? 2 : (length <= Int(UInt16.max) ? 4 : 10)
    }

    /// Sets the header of a final text frame of `length` payload bytes at `index` (within the
    /// buffer's capacity); returns its size.
    @discardableResult
    static func setHeader(compressed: Bool, length: Int, in frame: inout ByteBuffer, at index: Int) -> Int {
        Self.setHeader(first: compressed ? Self.textFirstByte | Self.rsv1 : Self.textFirstByte, length: length, in: &frame, at: index)
    }

    @discardableResult
    private static func setHeader(first: UInt8, length: Int, in frame: inout ByteBuffer, at index: Int) -> Int {
        frame.setInteger(first, at: index)
        let size = Self.headerSize(length: length)
        switch size {
        case 2:
            frame.setInteger(UInt8(length), at: index + 1)
        case 4:
            frame.setInteger(UInt8(126), at: index + 1)
            frame.setInteger(UInt16(length), at: index + 2)
        default:
            frame.setInteger(UInt8(127), at: index + 1)
            frame.setInteger(UInt64(length), at: index + 2)
        }
        return size
    }
}

/// Posts of one circle that a commit (or another node) published together, in sequence order,
/// each encoded once, with their frames back to back in one buffer.
///
/// A subscriber that is live in the circle and has every post before the run gets the whole run
/// as that one buffer: one write, one `iovec`, one state update per subscriber and batch, instead
/// of one per post (`perf` of `benchmarks/fanout.py`: the per-delivery handling, retains and
/// pending-write entries were most of the server's user time). Others take the posts one by one.
///
/// Only small runs are made (at most ``maxBytes`` of frames, with no gap in the sequence
/// numbers): a session checks its socket's writability once per event, so a run may overshoot
/// the outbound queue's mark by that much. Larger batches go out as one event per post.
final class HubPostRun: Sendable {
    static let maxBytes = 16 * 1024

    let posts: [(seq: Int64, payload: HubPayload)]
    /// Every post's uncompressed frame, in order.
    let framed: ByteBuffer

    /// Nil for fewer than two posts, a gap in the sequence numbers, a post without its frame or
    /// more than ``maxBytes`` of frames.
    init?(_ posts: [(seq: Int64, payload: HubPayload)], allocator: ByteBufferAllocator) {
        guard posts.count > 1, zip(posts, posts.dropFirst()).allSatisfy({ $1.seq == $0.seq + 1 }) else { return nil }
        let frames = posts.compactMap(\.payload.framed)
        let size = frames.reduce(0) { $0 + $1.readableBytes }
        guard frames.count == posts.count, size <= Self.maxBytes else { return nil }
        var buffer = allocator.buffer(capacity: size)
        for frame in frames { buffer.writeImmutableBuffer(frame) }
        self.posts = posts
        self.framed = buffer
    }

    var firstSeq: Int64 { self.posts[0].seq }
    var lastSeq: Int64 { self.posts[self.posts.count - 1].seq }
}

/// What the hub hands to a subscribed session, on the session's event loop.
enum HubEvent: Sendable {
    /// A committed post, already encoded as the payload of a text frame.
    case post(circle: String, seq: Int64, payload: HubPayload)
    /// Committed posts of one circle, published together (see ``HubPostRun``).
    case posts(circle: String, run: HubPostRun)
    /// An ephemeral event (typing, joined, left), already encoded.
    case ephemeral(circle: String, payload: HubPayload)
    /// The user lost access to the circle (removed from a private circle).
    case revoke(circle: String)
    /// An event for the connection's user, whatever circles it joined (a read marker moved).
    case user(HubPayload)
    /// The connection's session ended (`session` names it), or all of the user's did (`nil`:
    /// signed out everywhere, deactivated, banned): the connection closes with 4005.
    case end(session: String?)
}

/// What a subscriber's deliveries go to: the session, called on its event loop only.
protocol HubSubscriberSink: AnyObject {
    /// One event; what it writes may stay unflushed until ``flushDeliveries()``.
    func receive(_ event: HubEvent)
    /// After every batch of `receive` calls (more than once is harmless): flush. One flush per
    /// batch instead of one per event saves a syscall per event when a group commit publishes
    /// several posts at once.
    func flushDeliveries()
    /// Close with 1001 (server shutting down).
    func shutDown()
}

/// A session as the hub sees it: where it runs and how to reach it there.
///
/// It holds its session as one protocol reference rather than three closures: that is about
/// 300 bytes less for every connection (benchmarks/idle.py, docs/bench/idle.md).
final class HubSubscriber: Sendable, Hashable {
    let eventLoop: any EventLoop
    let user: String
    /// Set when the session compresses each message on its own: the hub then deflates posts for
    /// it once per setting, shared with every subscriber that has the same.
    let sharedCompression: PerMessageDeflate.SharedCompression?
    private let sink: NIOLoopBound<any HubSubscriberSink>

    init(eventLoop: any EventLoop, user: String, sharedCompression: PerMessageDeflate.SharedCompression? = nil, sink: any HubSubscriberSink) {
        self.eventLoop = eventLoop
        self.user = user
        self.sharedCompression = sharedCompression
        self.sink = NIOLoopBound(sink, eventLoop: eventLoop)
    }

    /// Call on `eventLoop` only.
    func receive(_ event: HubEvent) { self.sink.value.receive(event) }
    /// Call on `eventLoop` only, after a batch of `receive` calls (more than once is harmless).
    func flush() { self.sink.value.flushDeliveries() }
    /// Call on `eventLoop` only: close with 1001 (server shutting down).
    func shutDown() { self.sink.value.shutDown() }

    static func == (lhs: HubSubscriber, rhs: HubSubscriber) -> Bool { lhs === rhs }
    func hash(into hasher: inout Hasher) { hasher.combine(ObjectIdentifier(self)) }
}

/// In-memory fan-out: who is subscribed to which circle on this node.
///
/// Posts come from this node's commits (``publish(_:)``) and, when several nodes share the
/// store, from what the others say (``receive(_:)``, the poll's ``advanced(_:to:)``); a
/// ``FeedSequencer`` puts each circle's posts in sequence order before they are delivered.
///
/// A post is encoded once and the same bytes are written to every subscriber; deliveries are
/// grouped by event loop so that one batch costs one hop per loop, not one per subscriber.
/// Everything the hub hands to sessions (posts, ephemeral events, user events, revocations)
/// goes through the ``LoopInbox`` of the session's event loop, which runs it in the order it
/// was handed over; posts of a circle are published in sequence order, so every subscriber
/// sees them in order, and a revocation is never overtaken by a later post.
final class Hub: Sendable {
    private let subscriptions = NIOLockedValueBox([String: Set<HubSubscriber>]())
    /// Every connection of this node, by user (for events addressed to a user: read markers).
    private let connections = NIOLockedValueBox([String: Set<HubSubscriber>]())
    /// Per circle, per user: how many of the user's connections on this node are joined and
    /// announced (not quiet). Presence is per user: the first announces `joined`, the last `left`.
    private let presence = NIOLockedValueBox([String: [String: Int]]())
    private let allocator = ByteBufferAllocator()
    private let deflaters = SharedDeflaters()
    /// One inbox per event loop for post deliveries and the commit loop's answers.
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

    /// Hands posts to their circles' subscribers, one hop per event loop.
    private func deliver(_ posts: [CirclePost], wakes: inout InboxWakes) -> Int {
        // Under the lock only the lookup; encoding and compressing happen outside it.
        var targets: [(posts: [CirclePost], subscribers: Set<HubSubscriber>, shared: [PerMessageDeflate.SharedCompression])] = []
        let runs = Self.runs(of: posts)
        self.subscriptions.withLockedValue { table in
            for run in runs {
                guard let subscribers = table[run[0].circle], !subscribers.isEmpty else { continue }
                var shared: [PerMessageDeflate.SharedCompression] = []
                for subscriber in subscribers {
                    if let setting = subscriber.sharedCompression, !shared.contains(setting) { shared.append(setting) }
                }
                targets.append((run, subscribers, shared))
            }
        }
        var perLoop: [ObjectIdentifier: (loop: any EventLoop, deliveries: [(HubSubscriber, HubEvent)])] = [:]
        var count = 0
        for target in targets {
            let circle = target.posts[0].circle
            let payloads = target.posts.map { ($0.seq, self.payload(for: .post($0), sharedCompression: target.shared)) }
            let events: [HubEvent]
            if let run = HubPostRun(payloads, allocator: self.allocator) {
                events = [.posts(circle: circle, run: run)]
            } else {
                events = payloads.map { .post(circle: circle, seq: $0.0, payload: $0.1) }
            }
            for subscriber in target.subscribers {
                for event in events {
                    perLoop[ObjectIdentifier(subscriber.eventLoop), default: (subscriber.eventLoop, [])].deliveries.append((subscriber, event))
                }
            }
            count += target.subscribers.count * target.posts.count
        }
        for (_, group) in perLoop {
            self.inbox(for: group.loop).post(.deliver(group.deliveries), wakes: &wakes)
        }
        return count
    }

    /// `loop`'s inbox: post deliveries go through it, and so do the commit loop's answers, so
    /// that a batch's acks, its deliveries and their flushes keep their order on each loop.
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
            self.inbox(for: group.loop).post(.deliver(group.subscribers.map { ($0, event) }))
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
            self.inbox(for: subscriber.eventLoop).post(.run { subscriber.receive(.revoke(circle: circle)) })
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
            self.inbox(for: subscriber.eventLoop).post(.deliver([(subscriber, event)]))
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
            self.inbox(for: subscriber.eventLoop).post(.deliver([(subscriber, .end(session: session))]))
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

/// Work handed to one event loop by the hub and the commit loop, run there in the order it was
/// posted. Work posted while an earlier drain is still waiting to run joins that drain, so a
/// loop that falls behind (a large fan-out while commits keep coming) writes the deliveries of
/// several batches and then flushes each connection once: one `writev` per connection for all
/// of them instead of one per batch. A loop that keeps up drains each batch at once, as before.
final class LoopInbox: Sendable {
    enum Work: Sendable {
        /// Post events for subscribers on this loop; each is flushed at the end of the drain.
        case deliver([(HubSubscriber, HubEvent)])
        /// Runs in order with the deliveries (the commit loop's answers, written unflushed).
        case run(@Sendable () -> Void)
        /// Runs at the end of the drain, after the deliveries' flushes (the answers' flushes).
        case atEnd(@Sendable () -> Void)
    }

    private struct Queue {
        var work: [Work] = []
        /// A drain task is queued on the loop and has not yet taken the work.
        var drainQueued = false
    }

    let eventLoop: any EventLoop
    private let queue = NIOLockedValueBox(Queue())

    init(eventLoop: any EventLoop) {
        self.eventLoop = eventLoop
    }

    func post(_ work: Work) {
        var wakes = InboxWakes()
        self.post(work, wakes: &wakes)
        wakes.wake()
    }

    /// Queues `work`; when no drain is queued yet, one will be once `wakes` is woken. Until then
    /// later work joins the same drain, whoever posts it.
    func post(_ work: Work, wakes: inout InboxWakes) {
        let queueDrain = self.queue.withLockedValue { queue -> Bool in
            queue.work.append(work)
            defer { queue.drainQueued = true }
            return !queue.drainQueued
        }
        if queueDrain { wakes.inboxes.append(self) }
    }

    fileprivate func scheduleDrain() {
        self.eventLoop.execute { self.drain() }
    }

    /// On the loop: everything posted so far, in order, then one flush per subscriber.
    private func drain() {
        let work = self.queue.withLockedValue { queue -> [Work] in
            queue.drainQueued = false
            defer { queue.work = [] }
            return queue.work
        }
        var delivered: [[(HubSubscriber, HubEvent)]] = []
        var atEnd: [@Sendable () -> Void] = []
        for item in work {
            switch item {
            case .deliver(let deliveries):
                for (subscriber, event) in deliveries { subscriber.receive(event) }
                delivered.append(deliveries)
            case .run(let body):
                body()
            case .atEnd(let body):
                atEnd.append(body)
            }
        }
        // A subscriber in several batches is flushed by the first call; the rest find nothing
        // unflushed.
        for deliveries in delivered {
            for (subscriber, _) in deliveries { subscriber.flush() }
        }
        for body in atEnd { body() }
    }
}

/// Inboxes that were handed work and must be woken: ``wake()`` queues one drain on each loop.
///
/// Why the wake is a separate step: the commit loop hands a batch's answers, its deliveries and
/// the answers' flushes to the same loops one after the other. Woken at each hand-over, a loop
/// on the committer's core preempts the committer at once (the wake-up is an `eventfd` write),
/// drains what is there, and is woken again for the next part: three wake-ups, drains and
/// context switches per loop and batch where one does (`perf` of `postpath.py`;
/// docs/bench/postpath.md). So the committer collects the wakes of the whole batch and wakes each loop once.
/// Every `InboxWakes` that was posted through must be woken, or its inboxes stall.
struct InboxWakes {
    fileprivate var inboxes: [LoopInbox] = []

    /// Queues a drain on each inbox's loop, once; later calls find nothing to wake.
    mutating func wake() {
        for inbox in self.inboxes { inbox.scheduleDrain() }
        self.inboxes = []
    }

    /// How many inboxes wait for this wake (for tests).
    var count: Int { self.inboxes.count }
}

/// One compressor per shared compression setting, reset after every message, for the hub's
/// fan-outs. `@unchecked Sendable`: the compressors are only touched under `lock`.
final class SharedDeflaters: @unchecked Sendable {
    private let lock = NIOLock()
    private var compressors: [PerMessageDeflate.SharedCompression: PerMessageDeflate] = [:]

    /// The payload deflated as a connection with `setting` would (RFC 7692, no context
    /// takeover), or `nil` when that fails (the subscribers then compress for themselves).
    func deflate(_ payload: ByteBuffer, setting: PerMessageDeflate.SharedCompression, allocator: ByteBufferAllocator) -> ByteBuffer? {
        self.lock.withLock {
            let compressor: PerMessageDeflate
            if let existing = self.compressors[setting] {
                compressor = existing
            } else {
                var parameters = PerMessageDeflateParameters()
                parameters.serverNoContextTakeover = true
                parameters.serverMaxWindowBits = setting.windowBits
                guard let made = try? PerMessageDeflate(
                    parameters: parameters,
                    isClient: false,
                    compressionLevel: setting.compressionLevel,
                    minimumCompressedSize: setting.minimumCompressedSize
                ) else { return nil }
                self.compressors[setting] = made
                compressor = made
            }
            do {
                return try compressor.compress(payload, allocator: allocator)
            } catch {
                // A failed stream is not reused; the next message starts a fresh one.
                self.compressors[setting] = nil
                return nil
            }
        }
    }
}
