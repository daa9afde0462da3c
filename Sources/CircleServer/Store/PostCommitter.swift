import CircleHTTPClient
import CircleWire
import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOCore
import Tracing

/// Group commit: posts from all connections queue here; one loop commits whatever has queued
/// in a single durable transaction, publishes the stored posts to the hub in order, and
/// answers each poster (for connections, through the hub's inbox of their event loop: the acks
/// written before the batch's deliveries, flushed after them). Under load the batches grow, so
/// fsyncs per post fall.
final class PostCommitter: Sendable {
    typealias Completion = @Sendable (Result<PostOutcome, any Error>) -> Void

    /// A post's answer for a connection on `eventLoop`. The answers of one batch on one loop go
    /// to that loop's ``LoopInbox`` before the batch's deliveries: `write` writes the ack without
    /// flushing; `flush` runs at the end of the inbox's drain, after the deliveries, so an ack
    /// and the events of the same batch usually leave in one write.
    struct LoopAnswer: Sendable {
        var eventLoop: any EventLoop
        var write: Completion
        var flush: @Sendable () -> Void
    }

    /// How a queued post is answered.
    private enum Reply: Sendable {
        case call(Completion)
        case onLoop(LoopAnswer)

        /// Answers one post on its own (not part of a batch's grouped answers).
        func answer(_ result: Result<PostOutcome, any Error>) {
            switch self {
            case .call(let completion):
                completion(result)
            case .onLoop(let answer):
                answer.eventLoop.execute {
                    answer.write(result)
                    answer.flush()
                }
            }
        }
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
    private let committed: @Sendable () -> Void
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
        committed: @escaping @Sendable () -> Void = {}
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

    /// Queues a post for ``run()``; `answer.write`, then `answer.flush`, run once each, on
    /// `answer.eventLoop`.
    func submit(_ post: NewPost, answer: LoopAnswer) {
        self.submit(post, reply: .onLoop(answer))
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
                    reply.answer(result)
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
            entry.reply.answer(.failure(StoreError(.unavailable, "the server is shutting down")))
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
                        entry.reply.answer(.failure(InvalidAttachment(media: media)))
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
                // The answers, the deliveries and the answers' flushes reach each loop with one
                // wake-up (see `InboxWakes`).
                var wakes = InboxWakes()
                let answers = self.answer(zip(batch.map(\.reply), outcomes.map { Result<PostOutcome, any Error>.success($0) }), wakes: &wakes)
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
                answers.finish(wakes: &wakes)
                if !stored.isEmpty { self.committed() }
            } catch {
                self.logger.error("commit failed", metadata: ["error": "\(error)", "batch": "\(batch.count)"])
                var wakes = InboxWakes()
                PostTrace.fail(batch.map(\.trace), error: error)
                self.answer(batch.map { ($0.reply, .failure(error)) }, wakes: &wakes).finish(wakes: &wakes)
            }
        }
    }

    /// The answers of a batch on connections' event loops, posted to the loops' inboxes to be
    /// written but not yet flushed; ``finish(wakes:)`` posts their flushes, wakes the loops and
    /// calls the other completions.
    private struct PendingAnswers {
        var flushes: [(inbox: LoopInbox, flushes: [@Sendable () -> Void])] = []
        var completions: [(Completion, Result<PostOutcome, any Error>)] = []

        func finish(wakes: inout InboxWakes) {
            for group in self.flushes {
                let flushes = group.flushes
                group.inbox.post(.atEnd {
                    for flush in flushes { flush() }
                }, wakes: &wakes)
            }
            wakes.wake()
            for (completion, result) in self.completions { completion(result) }
        }
    }

    /// Posts the loop answers' writes, one piece of work per event loop, in batch order; the
    /// loops wake when `wakes` does.
    private func answer(_ replies: some Sequence<(Reply, Result<PostOutcome, any Error>)>, wakes: inout InboxWakes) -> PendingAnswers {
        var pending = PendingAnswers()
        var perLoop: [ObjectIdentifier: Int] = [:]
        var writes: [[(Completion, Result<PostOutcome, any Error>)]] = []
        for (reply, result) in replies {
            switch reply {
            case .call(let completion):
                pending.completions.append((completion, result))
            case .onLoop(let answer):
                let key = ObjectIdentifier(answer.eventLoop)
                let index: Int
                if let known = perLoop[key] {
                    index = known
                } else {
                    index = pending.flushes.count
                    perLoop[key] = index
                    pending.flushes.append((self.hub.inbox(for: answer.eventLoop), []))
                    writes.append([])
                }
                writes[index].append((answer.write, result))
                pending.flushes[index].flushes.append(answer.flush)
            }
        }
        for (group, writes) in zip(pending.flushes, writes) {
            group.inbox.post(.run {
                for (write, result) in writes { write(result) }
            }, wakes: &wakes)
        }
        return pending
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
                orphan.reply.answer(.failure(StoreError(.unavailable, "the server is shutting down")))
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
