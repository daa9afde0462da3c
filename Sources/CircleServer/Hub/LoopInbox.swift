import CircleHTTPClient
import NIOConcurrencyHelpers
import NIOCore

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

    let eventLoop: any EventLoop
    /// The work; the consumer is parked while no drain is queued on the loop.
    private let queue = NIOLockedValueBox(WakingQueue<Work, Void>(parked: ()))

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
        if self.queue.withLockedValue({ $0.append(work) }) != nil { wakes.inboxes.append(self) }
    }

    fileprivate func scheduleDrain() {
        self.eventLoop.execute { self.drain() }
    }

    /// On the loop: everything posted so far, in order, then one flush per subscriber.
    private func drain() {
        let work = self.queue.withLockedValue { $0.takeAll(parking: ()) }
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
