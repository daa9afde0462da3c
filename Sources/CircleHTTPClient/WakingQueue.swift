/// Items handed from any thread to one consumer that takes them in batches, and the one rule of
/// waking it: the consumer parks when it finds nothing to do, and the first item after that
/// unparks it — exactly one wake per park, none lost, none while it is busy.
///
/// A value, kept under its owner's lock with the rest of the owner's state (so one lock covers
/// both). Four queues use it: the loop inboxes of the hub and the send side of a WebSocket
/// (the consumer is a drain task on an event loop; parking is "no drain scheduled", the wake
/// schedules one) and the commit loop and the node link's signals (the consumer is a task; it
/// parks its continuation, the wake resumes it).
///
/// `@inlinable`: the queues are on the post and fan-out paths, in other modules.
package struct WakingQueue<Item, Parked> {
    @usableFromInline var items: [Item] = []
    @usableFromInline var parked: Parked?

    /// A queue whose consumer starts parked with `consumer` (an event loop's drain: `()`), or
    /// busy (a task that parks when it first finds nothing).
    @inlinable
    package init(parked consumer: Parked? = nil) {
        self.parked = consumer
    }

    @inlinable package var isEmpty: Bool { self.items.isEmpty }
    @inlinable package var count: Int { self.items.count }

    /// Queues `item`; the parked consumer, which the caller wakes (outside the lock), if it was parked.
    @inlinable
    package mutating func append(_ item: Item) -> Parked? {
        self.items.append(item)
        return self.unpark()
    }

    /// Takes up to `limit` items, oldest first.
    @inlinable
    package mutating func take(upTo limit: Int = .max) -> [Item] {
        if limit >= self.items.count {
            defer { self.items = [] }
            return self.items
        }
        let batch = Array(self.items.prefix(limit))
        self.items.removeFirst(limit)
        return batch
    }

    /// Takes every item and parks the consumer in one step (under the owner's lock): the next
    /// item wakes it again. For a consumer that is done once it took (an event loop's drain).
    @inlinable
    package mutating func takeAll(parking consumer: Parked) -> [Item] {
        self.parked = consumer
        return self.take()
    }

    /// Parks the consumer when nothing waits (`true`); `false` when items wait and it goes on.
    @inlinable
    package mutating func parkIfEmpty(_ consumer: Parked) -> Bool {
        guard self.items.isEmpty else { return false }
        self.parked = consumer
        return true
    }

    /// The parked consumer, now unparked, to wake (on shutdown, or after an append).
    @inlinable
    package mutating func unpark() -> Parked? {
        defer { self.parked = nil }
        return self.parked
    }

    /// Drops the oldest items beyond `limit`; how many were dropped.
    @inlinable
    package mutating func dropOldest(keeping limit: Int) -> Int {
        let excess = self.items.count - limit
        guard excess > 0 else { return 0 }
        self.items.removeFirst(excess)
        return excess
    }

    /// Drops every item (the consumer stays as it is); how many were dropped.
    @inlinable
    @discardableResult
    package mutating func removeAll() -> Int {
        defer { self.items = [] }
        return self.items.count
    }
}

extension WakingQueue: Sendable where Item: Sendable, Parked: Sendable {}
