import CircleWire
import Foundation
import Logging
import NIOConcurrencyHelpers

/// Group commit: posts from all connections queue here; one loop commits whatever has queued
/// in a single durable transaction, publishes the stored posts to the hub in order, then
/// answers each poster. Under load the batches grow, so fsyncs per post fall.
final class PostCommitter: Sendable {
    typealias Completion = @Sendable (Result<PostOutcome, any Error>) -> Void

    private struct State {
        var pending: [(NewPost, Completion)] = []
        var accepting = true
        /// ``run()`` has started and not yet returned.
        var loopRunning = false
        /// The idle loop, waiting for posts.
        var wake: CheckedContinuation<Bool, Never>?
        /// ``finish()`` callers, resumed when the loop has answered everything and returned.
        var waiters: [CheckedContinuation<Void, Never>] = []
    }

    private let store: any CircleStore
    private let hub: Hub
    private let metrics: ServerMetrics
    private let logger: Logger
    private let maxBatch: Int
    private let state = NIOLockedValueBox(State())

    init(store: any CircleStore, hub: Hub, metrics: ServerMetrics, logger: Logger, maxBatch: Int = 512) {
        self.store = store
        self.hub = hub
        self.metrics = metrics
        self.logger = logger
        self.maxBatch = maxBatch
    }

    /// Queues a post for ``run()``; `completion` runs once, on an arbitrary thread.
    func submit(_ post: NewPost, completion: @escaping Completion) {
        let queued = self.state.withLockedValue { state -> (Bool, CheckedContinuation<Bool, Never>?) in
            guard state.accepting else { return (false, nil) }
            state.pending.append((post, completion))
            defer { state.wake = nil }
            return (true, state.wake)
        }
        guard queued.0 else {
            completion(.failure(StoreError(.unavailable, "the server is shutting down")))
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
                        if !state.pending.isEmpty { return true }
                        if !state.accepting { return false }
                        state.wake = continuation
                        return nil
                    }
                    if let now { continuation.resume(returning: now) }
                }
            } onCancel: {
                let wake = self.state.withLockedValue { state -> CheckedContinuation<Bool, Never>? in
                    state.accepting = false
                    defer { state.wake = nil }
                    return state.wake
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
            let taken = self.state.withLockedValue { state -> [(NewPost, Completion)] in
                let batch = Array(state.pending.prefix(self.maxBatch))
                state.pending.removeFirst(batch.count)
                return batch
            }
            if taken.isEmpty { return }
            var batch = taken
            let started = ContinuousClock.now
            // Posts carry their commit time: one time per batch, so times follow sequence order.
            let commitTime = Int64(Date().timeIntervalSince1970 * 1000)
            do {
                // An attachment must be media its author uploaded (docs/MEDIA.md). Media is never
                // deleted, so a check before the transaction stays true inside it.
                var attachmentChecks: [AttachmentKey: Bool] = [:]
                for (post, _) in batch {
                    guard let media = post.attachment else { continue }
                    let key = AttachmentKey(author: post.author, media: media)
                    if attachmentChecks[key] == nil {
                        attachmentChecks[key] = try await self.store.isUploader(post.author, of: media)
                    }
                }
                if attachmentChecks.values.contains(false) {
                    batch = batch.filter { entry in
                        guard let media = entry.0.attachment, attachmentChecks[AttachmentKey(author: entry.0.author, media: media)] == false else {
                            return true
                        }
                        entry.1(.failure(InvalidAttachment(media: media)))
                        return false
                    }
                    if batch.isEmpty { continue }
                }
                let outcomes = try await self.store.commit(batch.map { entry in
                    var post = entry.0
                    post.time = commitTime
                    return post
                })
                self.metrics.commitLatency.recordNanoseconds(started.elapsedNanoseconds)
                self.metrics.commitBatchSize.record(batch.count)
                let stored = outcomes.compactMap { outcome -> CirclePost? in
                    if case .stored(let post) = outcome { return post }
                    return nil
                }
                let fanoutStarted = ContinuousClock.now
                let deliveries = self.hub.publish(stored)
                self.metrics.fanoutLatency.recordNanoseconds(fanoutStarted.elapsedNanoseconds)
                self.metrics.posts.increment(by: stored.count)
                self.metrics.deliveries.increment(by: deliveries)
                for ((_, completion), outcome) in zip(batch, outcomes) { completion(.success(outcome)) }
            } catch {
                self.logger.error("commit failed", metadata: ["error": "\(error)", "batch": "\(batch.count)"])
                for (_, completion) in batch { completion(.failure(error)) }
            }
        }
    }

    /// Stops taking posts and waits until every queued one is committed and answered (by a
    /// running loop; without one, queued posts are answered "unavailable").
    func finish() async {
        let orphans = self.state.withLockedValue { state -> [(NewPost, Completion)]? in
            state.accepting = false
            guard !state.loopRunning else { return nil }
            defer { state.pending = [] }
            return state.pending
        }
        if let orphans {
            for (_, completion) in orphans { completion(.failure(StoreError(.unavailable, "the server is shutting down"))) }
            return
        }
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let (wake, done) = self.state.withLockedValue { state -> (CheckedContinuation<Bool, Never>?, Bool) in
                guard state.loopRunning else { return (nil, true) }
                state.waiters.append(continuation)
                defer { state.wake = nil }
                return (state.wake, false)
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
