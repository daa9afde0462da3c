import CircleHTTPClient
import NIOConcurrencyHelpers
import NIOCore

/// Deliveries handed to one event loop by the hub and the commit loop (posts, their authors'
/// answers, ephemeral and user events, revocations), given to their subscribers there in the
/// order they were handed over, then each subscriber is flushed once. Deliveries handed over
/// while an earlier drain is still waiting to run join that drain, so a loop that falls behind
/// (a large fan-out while commits keep coming) writes the deliveries of several batches and then
/// flushes each connection once: one `writev` per connection for all of them instead of one per
/// batch. A loop that keeps up drains each batch at once.
final class LoopInbox: Sendable {
    typealias Delivery = (HubSubscriber, HubEvent)

    let eventLoop: any EventLoop
    /// The handed-over deliveries, one array per hand-over; the consumer is parked while no
    /// drain is queued on the loop.
    private let queue = NIOLockedValueBox(WakingQueue<[Delivery], Void>(parked: ()))

    init(eventLoop: any EventLoop) {
        self.eventLoop = eventLoop
    }

    func deliver(_ deliveries: [Delivery]) {
        var wakes = InboxWakes()
        self.deliver(deliveries, wakes: &wakes)
        wakes.wake()
    }

    /// Queues `deliveries`; when no drain is queued yet, one will be once `wakes` is woken.
    /// Until then later deliveries join the same drain, whoever hands them over.
    func deliver(_ deliveries: [Delivery], wakes: inout InboxWakes) {
        if self.queue.withLockedValue({ $0.append(deliveries) }) != nil { wakes.inboxes.append(self) }
    }

    fileprivate func scheduleDrain() {
        self.eventLoop.execute { self.drain() }
    }

    /// On the loop: everything handed over so far, in order, then one flush per subscriber.
    private func drain() {
        let handedOver = self.queue.withLockedValue { $0.takeAll(parking: ()) }
        for deliveries in handedOver {
            for (subscriber, event) in deliveries { subscriber.receive(event) }
        }
        // A subscriber in several hand-overs is flushed by the first call; the rest find nothing
        // unflushed.
        for deliveries in handedOver {
            for (subscriber, _) in deliveries { subscriber.flush() }
        }
    }
}

/// Inboxes that were handed work and must be woken: ``wake()`` queues one drain on each loop.
///
/// Why the wake is a separate step: the commit loop hands a batch's answers, then its posts, one
/// circle at a time, to the same loops one after the other. Woken at each hand-over, a loop on
/// the committer's core preempts the committer at once (the wake-up is an `eventfd` write),
/// drains what is there, and is woken again for the next part: several wake-ups, drains and
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
