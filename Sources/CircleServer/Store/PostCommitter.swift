import CircleHTTPClient
import CircleWire
import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOCore
import Tracing

/// Group commit: posts from all connections queue here; one loop commits whatever has queued
/// in a single durable transaction, publishes the stored posts to the hub in order, and
/// answers each poster (a connection through the hub, as one more delivery to it, handed to
/// its loop's inbox before the batch's posts: the ack and the posts leave in one flush). Under
/// load the batches grow, so fsyncs per post fall.
final class PostCommitter: Sendable {
    typealias Completion = @Sendable (Result<PostOutcome, any Error>) -> Void

    /// How a queued post is answered.
    private enum Reply: Sendable {
        /// A call, on an arbitrary thread (the HTTP routes, erasure).
        case call(Completion)
        /// A session, through the hub: ``HubEvent/answered(id:_:)`` for request id `id`.
        case delivery(HubSubscriber, id: String)
    }

    /// A queued post: how to answer it, and its trace when the server has a tracer.
    private struct Queued {
        var post: NewPost
        var reply: Reply
        var trace: PostTrace?
    }

    private struct State {
        /// The queued posts; the idle loop parks here (resumed with whether to go on).
        var pending = WakingQueue<Queued, CheckedContinuation<Bool, Never>>()
        var accepting = true
        /// ``run()`` has started and not yet returned.
        var loopRunning = false
        /// ``finish()`` callers, resumed when the loop has answered everything and returned.
        var waiters: [CheckedContinuation<Void, Never>] = []
    }

    private let store: any CircleStore
    private let hub: Hub
    private let metrics: ServerMetrics
    private let logger: Logger
    private let maxBatch: Int
    /// Called after each batch that stored entries: what the commit set off (webhook
    /// deliveries) may be due.
    private let committed: @Sendable (_ stored: [CirclePost]) -> Void
    /// Posts and edits of circles with a publish hook wait there before they queue.
    private let hooks: PublishHookGate?
    private let state = NIOLockedValueBox(State())
    /// Where the posts' spans go (``PostTrace``); `nil`: none are made.
    private let tracer: (any Tracer)?

    init(
        store: any CircleStore,
        hub: Hub,
        metrics: ServerMetrics,
        logger: Logger,
        maxBatch: Int = 512,
        hooks: PublishHookGate? = nil,
        tracer: (any Tracer)? = nil,
        committed: @escaping @Sendable (_ stored: [CirclePost]) -> Void = { _ in }
    ) {
        self.store = store
        self.tracer = tracer
        self.hooks = hooks
        self.hub = hub
        self.metrics = metrics
        self.logger = logger
        self.maxBatch = maxBatch
        self.committed = committed
    }

    /// Queues a post for ``run()``; `completion` runs once, on an arbitrary thread.
    func submit(_ post: NewPost, completion: @escaping Completion) {
        self.submit(post, reply: .call(completion))
    }

    /// Queues a post for ``run()``; its answer reaches `session` once, as a hub delivery
    /// (``HubEvent/answered(id:_:)`` with the post's `clientID`) on the session's event loop.
    func submit(_ post: NewPost, answering session: HubSubscriber) {
        self.submit(post, reply: .delivery(session, id: post.clientID))
    }

    private func submit(_ post: NewPost, reply: Reply) {
        let trace = self.tracer.map { PostTrace(post, tracer: $0) }
        // A circle with a publish hook (or read-only): the entry waits for its verdict outside
        // the batch (and off the caller's event loop); the rest queue at once.
        if let hooks = self.hooks, hooks.needsCheck(post) {
            hooks.check(post) { verdict in
                switch verdict {
                case .commit(let post): self.enqueue(Queued(post: post, reply: reply, trace: trace))
                case .answer(let result):
                    trace?.span.end()
                    self.answer(reply, result)
                }
            }
            return
        }
        self.enqueue(Queued(post: post, reply: reply, trace: trace))
    }

    private func enqueue(_ entry: Queued) {
        let queued = self.state.withLockedValue { state -> (Bool, CheckedContinuation<Bool, Never>?) in
            guard state.accepting else { return (false, nil) }
            return (true, state.pending.append(entry))
        }
        guard queued.0 else {
            entry.trace?.span.end()
            self.answer(entry.reply, .failure(StoreError(.unavailable, "the server is shutting down")))
            return
        }
        queued.1?.resume(returning: true)
    }

    /// The commit loop: waits for posts, commits what has queued, until ``finish()`` (or
    /// cancellation) and everything queued is answered. The server's `run()` runs it.
    func run() async {
        self.state.withLockedValue { $0.loopRunning = true }
        while true {
            let more = await withTaskCancellationHandler {
                await withCheckedContinuation { (continuation: CheckedContinuation<Bool, Never>) in
                    let now = self.state.withLockedValue { state -> Bool? in
                        if !state.accepting && state.pending.isEmpty { return false }
                        return state.pending.parkIfEmpty(continuation) ? nil : true
                    }
                    if let now { continuation.resume(returning: now) }
                }
            } onCancel: {
                let wake = self.state.withLockedValue { state -> CheckedContinuation<Bool, Never>? in
                    state.accepting = false
                    return state.pending.unpark()
                }
                wake?.resume(returning: false)
            }
            guard more else { break }
            await self.drain()
        }
        let waiters = self.state.withLockedValue { state -> [CheckedContinuation<Void, Never>] in
            state.loopRunning = false
            defer { state.waiters = [] }
            return state.waiters
        }
        for waiter in waiters { waiter.resume() }
    }

    private func drain() async {
        while true {
            let taken = self.state.withLockedValue { $0.pending.take(upTo: self.maxBatch) }
            if taken.isEmpty { return }
            var batch = taken
            let started = ContinuousClock.now
            let traceStarted = DefaultTracerClock.now
            // Posts carry their commit time: one time per batch, so times follow sequence order.
            let commitTime = Int64(Date().timeIntervalSince1970 * 1000)
            do {
                // An attachment must be media its author uploaded (docs/MEDIA.md). Media is never
                // deleted, so a check before the transaction stays true inside it.
                var attachmentChecks: [AttachmentKey: Bool] = [:]
                for post in batch.map(\.post) {
                    guard let media = post.attachment else { continue }
                    let key = AttachmentKey(author: post.author, media: media)
                    if attachmentChecks[key] == nil {
                        attachmentChecks[key] = try await self.store.isUploader(post.author, of: media)
                    }
                }
                if attachmentChecks.values.contains(false) {
                    batch = batch.filter { entry in
                        guard let media = entry.post.attachment, attachmentChecks[AttachmentKey(author: entry.post.author, media: media)] == false else {
                            return true
                        }
                        entry.trace?.span.end()
                        self.answer(entry.reply, .failure(InvalidAttachment(media: media)))
                        return false
                    }
                    if batch.isEmpty { continue }
                }
                let outcomes = try await self.store.commit(batch.map { entry in
                    var post = entry.post
                    post.time = commitTime
                    return post
                })
                let traceCommitted = DefaultTracerClock.now
                self.metrics.commitLatency.recordNanoseconds(started.elapsedNanoseconds)
                self.metrics.commitBatchSize.record(batch.count)
                let stored = outcomes.compactMap { outcome -> CirclePost? in
                    if case .stored(let post) = outcome { return post }
                    return nil
                }
                // The answers, then the posts, reach each loop with one wake-up (see `InboxWakes`).
                var wakes = InboxWakes()
                let calls = self.answer(zip(batch.map(\.reply), outcomes.map { Result<PostOutcome, any Error>.success($0) }), wakes: &wakes)
                let fanoutStarted = ContinuousClock.now
                let deliveries = self.hub.publish(stored, wakes: &wakes)
                self.metrics.fanoutLatency.recordNanoseconds(fanoutStarted.elapsedNanoseconds)
                if self.tracer != nil {
                    PostTrace.finish(
                        batch.map(\.trace), outcomes: outcomes,
                        batch: .init(size: batch.count, commitBegan: traceStarted, committed: traceCommitted, fannedOut: DefaultTracerClock.now, deliveries: deliveries)
                    )
                }
                self.metrics.posts.increment(by: stored.count)
                self.metrics.deliveries.increment(by: deliveries)
                wakes.wake()
                calls()
                if !stored.isEmpty { self.committed(stored) }
            } catch {
                self.logger.error("commit failed", metadata: ["error": "\(error)", "batch": "\(batch.count)"])
                var wakes = InboxWakes()
                PostTrace.fail(batch.map(\.trace), error: error)
                let calls = self.answer(batch.map { ($0.reply, .failure(error)) }, wakes: &wakes)
                wakes.wake()
                calls()
            }
        }
    }

    /// Answers one post on its own (not as part of a batch).
    private func answer(_ reply: Reply, _ result: Result<PostOutcome, any Error>) {
        var wakes = InboxWakes()
        self.answer(CollectionOfOne((reply, result)), wakes: &wakes)()
        wakes.wake()
    }

    /// Hands the sessions' answers to their loops' inboxes, one hand-over per loop, in batch
    /// order; the loops drain them when `wakes` is woken. Returns the call that answers the
    /// rest (the completions), for after the wake.
    private func answer(_ replies: some Sequence<(Reply, Result<PostOutcome, any Error>)>, wakes: inout InboxWakes) -> () -> Void {
        var completions: [(Completion, Result<PostOutcome, any Error>)] = []
        var perLoop: [ObjectIdentifier: Int] = [:]
        var deliveries: [(loop: any EventLoop, deliveries: [LoopInbox.Delivery])] = []
        for (reply, result) in replies {
            switch reply {
            case .call(let completion):
                completions.append((completion, result))
            case .delivery(let session, let id):
                let key = ObjectIdentifier(session.eventLoop)
                let index: Int
                if let known = perLoop[key] {
                    index = known
                } else {
                    index = deliveries.count
                    perLoop[key] = index
                    deliveries.append((session.eventLoop, []))
                }
                deliveries[index].deliveries.append((session, .answered(id: id, result)))
            }
        }
        for group in deliveries {
            self.hub.inbox(for: group.loop).deliver(group.deliveries, wakes: &wakes)
        }
        return {
            for (completion, result) in completions { completion(result) }
        }
    }

    /// Stops taking posts and waits until every queued one is committed and answered (by a
    /// running loop; without one, queued posts are answered "unavailable").
    func finish() async {
        let orphans = self.state.withLockedValue { state -> [Queued]? in
            state.accepting = false
            guard !state.loopRunning else { return nil }
            return state.pending.take()
        }
        if let orphans {
            for orphan in orphans {
                orphan.trace?.span.end()
                self.answer(orphan.reply, .failure(StoreError(.unavailable, "the server is shutting down")))
            }
            return
        }
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let (wake, done) = self.state.withLockedValue { state -> (CheckedContinuation<Bool, Never>?, Bool) in
                guard state.loopRunning else { return (nil, true) }
                state.waiters.append(continuation)
                return (state.pending.unpark(), false)
            }
            wake?.resume(returning: false)
            if done { continuation.resume() }
        }
    }
}

private struct AttachmentKey: Hashable {
    var author: String
    var media: String
}

/// A post's attachment is not a media id its author uploaded.
struct InvalidAttachment: Error {
    var media: String
}

extension ContinuousClock.Instant {
    var elapsedNanoseconds: Int64 {
        let elapsed = ContinuousClock.now - self
        return elapsed.components.seconds * 1_000_000_000 + elapsed.components.attoseconds / 1_000_000_000
    }
}
