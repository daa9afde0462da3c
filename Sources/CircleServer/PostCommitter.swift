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
        var running = false
        var accepting = true
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

    /// Queues a post; `completion` runs once, on an arbitrary thread.
    func submit(_ post: NewPost, completion: @escaping Completion) {
        let start = self.state.withLockedValue { state -> Bool? in
            guard state.accepting else { return nil }
            state.pending.append((post, completion))
            if state.running { return false }
            state.running = true
            return true
        }
        switch start {
        case nil:
            completion(.failure(StoreError(.unavailable, "the server is shutting down")))
        case true?:
            Task { await self.drain() }
        case false?:
            break
        }
    }

    private func drain() async {
        while true {
            let (taken, waiters) = self.state.withLockedValue { state -> ([(NewPost, Completion)], [CheckedContinuation<Void, Never>]) in
                let batch = Array(state.pending.prefix(self.maxBatch))
                state.pending.removeFirst(batch.count)
                guard batch.isEmpty else { return (batch, []) }
                state.running = false
                defer { state.waiters = [] }
                return (batch, state.waiters)
            }
            if taken.isEmpty {
                for waiter in waiters { waiter.resume() }
                return
            }
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

    /// Stops taking posts and waits until every queued one is committed and answered.
    func finish() async {
        await withCheckedContinuation { continuation in
            let busy = self.state.withLockedValue { state -> Bool in
                state.accepting = false
                if state.running { state.waiters.append(continuation) }
                return state.running
            }
            if !busy { continuation.resume() }
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
