import CircleHTTPClient
import CircleWire
import Foundation
import Logging
import NIOConcurrencyHelpers

/// The hub's work beyond its own commits: the store reads that fill holes in a circle's feed,
/// and, when several nodes share the store (``SharedCircleStore``), the signals this node sends
/// and receives and the poll that makes good any signal lost on the way.
///
/// ``run(hub:store:pollInterval:logger:)`` does the I/O; the server's `run()` runs it.
final class NodeLink: Sendable {
    struct ReadRequest: Sendable {
        var circle: String
        var after: Int64
    }

    private struct Outbox {
        /// Signals are sent only while a shared store's link runs.
        var enabled = false
        /// The signals; the sending task parks here when there are none.
        var signals = WakingQueue<NodeSignal.Kind, CheckedContinuation<Void, Never>>()
        /// Signals dropped (the oldest) since the last take.
        var dropped = 0
    }

    /// This process's id among the nodes (its own signals come back to it and are ignored).
    let node: String
    /// How this node's signals begin (``NodeSignal/prefix(of:)``): they are ignored undecoded.
    private let ownPrefix: String?
    /// At most this many signals wait to be sent; beyond, the oldest are dropped (the poll and
    /// the revocation log make good what dropped posts and revocations would have said).
    let outboxLimit: Int
    private let reads: AsyncStream<ReadRequest>
    private let readRequests: AsyncStream<ReadRequest>.Continuation
    private let outbox = NIOLockedValueBox(Outbox())

    init(node: String = UUID().uuidString, outboxLimit: Int = 10_000) {
        self.node = node
        self.ownPrefix = NodeSignal.prefix(of: node)
        self.outboxLimit = outboxLimit
        (self.reads, self.readRequests) = AsyncStream.makeStream(of: ReadRequest.self)
    }

    /// Asks ``run(hub:store:pollInterval:logger:)`` to read a circle's posts after `after`.
    func requestRead(circle: String, after: Int64) {
        self.readRequests.yield(ReadRequest(circle: circle, after: after))
    }

    /// Queues a signal for the other nodes; nothing when the store is not shared.
    func send(_ signal: @autoclosure () -> NodeSignal.Kind) {
        let waiting = self.outbox.withLockedValue { outbox -> CheckedContinuation<Void, Never>? in
            guard outbox.enabled else { return nil }
            let waiting = outbox.signals.append(signal())
            outbox.dropped += outbox.signals.dropOldest(keeping: self.outboxLimit)
            return waiting
        }
        waiting?.resume()
    }

    /// Reads for holes, and with a shared store: sends signals, listens for the other nodes'
    /// and polls every `pollInterval`. Until cancelled.
    func run(hub: Hub, store: any CircleStore, pollInterval: Duration, metrics: ServerMetrics, logger: Logger) async {
        await withDiscardingTaskGroup { group in
            group.addTask { await self.serveReads(hub: hub, store: store, metrics: metrics, logger: logger) }
            guard let shared = store as? any SharedCircleStore else { return }
            self.outbox.withLockedValue { $0.enabled = true }
            let poll = Poll(hub: hub, store: shared, metrics: metrics, logger: logger)
            group.addTask { await self.sendSignals(store: shared, metrics: metrics, logger: logger) }
            group.addTask {
                await shared.listen(
                    connected: { await poll.run() },
                    receive: { text in
                        if let own = self.ownPrefix, text.utf8.starts(with: own.utf8) { return }
                        guard let signal = NodeSignal(notification: text) else {
                            logger.debug("ignored a notification that is not a node signal")
                            return
                        }
                        guard signal.node != self.node else { return }
                        metrics.nodeSignalsReceived.increment()
                        metrics.deliveries.increment(by: hub.receive(signal))
                    }
                )
            }
            group.addTask {
                while !Task.isCancelled {
                    try? await Task.sleep(for: pollInterval)
                    if Task.isCancelled { break }
                    await poll.run()
                }
            }
        }
        let waiting = self.outbox.withLockedValue { outbox -> CheckedContinuation<Void, Never>? in
            outbox.enabled = false
            outbox.signals.removeAll()
            return outbox.signals.unpark()
        }
        waiting?.resume()
    }

    private func serveReads(hub: Hub, store: any CircleStore, metrics: ServerMetrics, logger: Logger) async {
        for await request in self.reads {
            do {
                metrics.nodeReads.increment()
                let posts = try await store.posts(in: request.circle, after: request.after, limit: FeedSequencer.readLimit)
                metrics.deliveries.increment(by: hub.readCompleted(request.circle, after: request.after, posts))
            } catch {
                if !Task.isCancelled {
                    logger.warning("could not read a circle's new posts; the poll retries", metadata: ["circle": "\(request.circle)", "error": "\(error)"])
                }
                hub.readCompleted(request.circle, after: request.after, nil)
            }
        }
    }

    /// Sends what has queued, all of it in one round trip.
    private func sendSignals(store: any SharedCircleStore, metrics: ServerMetrics, logger: Logger) async {
        while !Task.isCancelled {
            let (signals, dropped) = await self.nextSignals()
            if dropped > 0 {
                logger.warning("dropped node signals while the store was slow; the poll makes good what they said", metadata: ["dropped": "\(dropped)"])
            }
            guard !signals.isEmpty else { continue }
            let texts = signals.compactMap { NodeSignal(node: self.node, kind: $0).encoded() }
            do {
                try await store.notify(texts)
                metrics.nodeSignalsSent.increment(by: texts.count)
            } catch where !Task.isCancelled {
                logger.warning("could not signal the other nodes; their poll catches up", metadata: ["error": "\(error)", "signals": "\(texts.count)"])
            } catch {}
        }
    }

    /// Waits until signals are queued (or the task is cancelled) and takes them all.
    private func nextSignals() async -> ([NodeSignal.Kind], Int) {
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let ready = self.outbox.withLockedValue { outbox -> Bool in
                    if !outbox.enabled || Task.isCancelled { return true }
                    return !outbox.signals.parkIfEmpty(continuation)
                }
                if ready { continuation.resume() }
            }
        } onCancel: {
            self.outbox.withLockedValue { $0.signals.unpark() }?.resume()
        }
        return self.outbox.withLockedValue { outbox in
            defer { outbox.dropped = 0 }
            return (outbox.signals.take(), outbox.dropped)
        }
    }
}

/// The bounded poll: which followed circles advanced, and which members were removed, since
/// the last look. It makes good every signal lost on the way (a restarted database, a dropped
/// listening connection, an outbox that overflowed).
private final class Poll: Sendable {
    let hub: Hub
    let store: any SharedCircleStore
    let metrics: ServerMetrics
    let logger: Logger
    /// The newest revocation applied; `nil` until the first poll, which starts from the log's end.
    private let revocationCursor = NIOLockedValueBox<Int64?>(nil)
    /// The same for the account log (ended sessions, disabled accounts).
    private let accountCursor = NIOLockedValueBox<Int64?>(nil)
    /// One poll at a time.
    private let running = NIOLockedValueBox(false)

    init(hub: Hub, store: any SharedCircleStore, metrics: ServerMetrics, logger: Logger) {
        self.hub = hub
        self.store = store
        self.metrics = metrics
        self.logger = logger
    }

    func run() async {
        guard self.running.withLockedValue({ running in
            defer { running = true }
            return !running
        }) else { return }
        defer { self.running.withLockedValue { $0 = false } }
        do {
            let cursor = self.revocationCursor.withLockedValue { $0 }
            let (revoked, newest) = try await self.store.revocations(after: cursor)
            if cursor != nil {
                // A user removed and added again since the last look keeps their connections.
                for revocation in revoked where try await !self.store.isMember(revocation.user, of: revocation.circle) {
                    self.hub.revokeHere(user: revocation.user, from: revocation.circle)
                }
            }
            self.revocationCursor.withLockedValue { $0 = max($0 ?? newest, newest) }
            let accountCursor = self.accountCursor.withLockedValue { $0 }
            let (events, newestEvent) = try await self.store.accountEvents(after: accountCursor)
            if accountCursor != nil {
                for event in events { self.hub.endConnectionsHere(of: event.user, session: event.session) }
            }
            self.accountCursor.withLockedValue { $0 = max($0 ?? newestEvent, newestEvent) }
            let circles = self.hub.subscribedCircles
            guard !circles.isEmpty else { return }
            for (circle, last) in try await self.store.lastSeqs(of: circles) {
                self.metrics.deliveries.increment(by: self.hub.advanced(circle, to: last))
            }
        } catch where !Task.isCancelled {
            self.logger.warning("the poll of the shared store failed; next time", metadata: ["error": "\(error)"])
        } catch {}
    }
}
