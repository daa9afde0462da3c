import CircleHTTPClient
import NIOConcurrencyHelpers
import NIOCore

/// The send side of one connection, shared by ``WebSocket`` (any thread) and its
/// ``WebSocketChannelHandler`` (the event loop).
///
/// Messages sent from off the event loop wait here until one task on the loop writes them all
/// and flushes once, so a burst of sends costs one hop onto the loop instead of one per message.
/// Messages sent on the loop are written at once and flushed once per burst the same way (see
/// ``WebSocketChannelHandler/send(_:fragmentSize:)``). A sender waits (backpressure) while the
/// channel is not writable or while too many bytes wait here.
final class WebSocketOutbound: Sendable {
    struct Queued {
        var message: WebSocketMessage
        var fragmentSize: Int?
    }

    struct State {
        /// Messages sent off the loop; the consumer is parked while no task on the loop is
        /// scheduled to write them (one hop for a burst).
        var queued = WakingQueue<Queued, Void>(parked: ())
        var queuedBytes = 0
        /// The channel's writability, as last reported on the loop.
        var writable = true
        /// Why nothing more can be sent (the close handshake began, or the connection ended).
        var closed: WebSocketError?
        var waiters: [CheckedContinuation<Void, any Error>] = []

        /// Whether a sender has to wait before returning.
        var mustWait: Bool { self.closed == nil && (!self.writable || self.queuedBytes > WebSocketOutbound.queueLimit) }
    }

    /// Bytes that may wait here before senders off the loop are held back.
    static let queueLimit = 64 * 1024

    let state = NIOLockedValueBox(State())

    /// Queues a message sent from off the loop; returns whether the caller must schedule the drain.
    func enqueue(_ message: WebSocketMessage, fragmentSize: Int?) throws -> Bool {
        try self.state.withLockedValue { state in
            if let closed = state.closed { throw closed }
            state.queuedBytes += message.byteCount
            return state.queued.append(Queued(message: message, fragmentSize: fragmentSize)) != nil
        }
    }

    /// Takes what was queued off the loop (on the loop).
    func takeQueued() -> [Queued] {
        self.state.withLockedValue { state in
            state.queuedBytes = 0
            return state.queued.takeAll(parking: ())
        }
    }

    /// Waits while the channel is not writable or the queue is over its limit; returns at once
    /// otherwise. Throws ``WebSocketError/Code/notOpen`` when the connection closes meanwhile.
    func waitUntilWritable() async throws {
        guard self.state.withLockedValue({ $0.mustWait }) else { return }
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
            let ready: Result<Void, any Error>? = self.state.withLockedValue { state in
                if let closed = state.closed { return .failure(closed) }
                if !state.mustWait { return .success(()) }
                state.waiters.append(continuation)
                return nil
            }
            if let ready { continuation.resume(with: ready) }
        }
    }

    /// Records the channel's writability (on the loop) and releases the senders that may go on.
    func setWritable(_ writable: Bool) {
        let released = self.state.withLockedValue { state -> [CheckedContinuation<Void, any Error>] in
            state.writable = writable
            guard !state.mustWait else { return [] }
            defer { state.waiters = [] }
            return state.waiters
        }
        for waiter in released { waiter.resume() }
    }

    /// After a drain: releases the senders that waited for the queue to empty.
    func drained() {
        self.setWritable(self.state.withLockedValue { $0.writable })
    }

    /// Nothing more can be sent: later sends throw `error`, waiting senders get it too, and
    /// messages still queued are dropped (they are returned for the record).
    @discardableResult
    func close(_ error: WebSocketError) -> Int {
        let (waiters, dropped) = self.state.withLockedValue { state -> ([CheckedContinuation<Void, any Error>], Int) in
            if state.closed == nil { state.closed = error }
            defer {
                state.waiters = []
                state.queuedBytes = 0
            }
            return (state.waiters, state.queued.removeAll())
        }
        for waiter in waiters { waiter.resume(throwing: error) }
        return dropped
    }
}
