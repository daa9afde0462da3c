import CircleSocket
import NIOCore

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
    /// The commit loop's answer to the post this session submitted with request id `id`
    /// (``PostCommitter/submit(_:answering:)``): handed over before the posts of its batch, so
    /// that the ack and the batch's posts leave in one flush.
    case answered(id: String, Result<PostOutcome, any Error>)
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
