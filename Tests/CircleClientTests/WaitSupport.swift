import CircleClient
import CircleWire
import Foundation
import NIOConcurrencyHelpers

/// Polls `condition` every few milliseconds until it holds or `timeout` passed; whether it held.
func eventually(timeout: Duration = .seconds(30), _ condition: () async throws -> Bool) async rethrows -> Bool {
    let deadline = ContinuousClock.now + timeout
    while ContinuousClock.now < deadline {
        if try await condition() { return true }
        try? await Task.sleep(for: .milliseconds(5))
    }
    return try await condition()
}

/// A fresh state file path in the temporary directory, named after `prefix`.
func temporaryStateFile(_ prefix: String) -> String {
    FileManager.default.temporaryDirectory.appendingPathComponent("\(prefix)-\(UUID().uuidString).sqlite").path
}

/// Removes a state file and its WAL and shared-memory files.
func removeStateFile(_ path: String) {
    for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: path + suffix) }
}

/// What `body` returns, or `nil` when it has not returned within `timeout` (it is then cancelled).
func within<T: Sendable>(_ timeout: Duration, _ body: @escaping @Sendable () async -> T) async -> T? {
    await withTaskGroup(of: T?.self) { group in
        group.addTask { await body() }
        group.addTask {
            try? await Task.sleep(for: timeout)
            return nil
        }
        let first = await group.next() ?? nil
        group.cancelAll()
        return first
    }
}

/// How many elements `stream` yields before it ends, or `nil` when it has not ended within 30 s.
func countToEnd<T: Sendable>(_ stream: AsyncStream<T>) async -> Int? {
    await within(.seconds(30)) { await stream.reduce(0) { count, _ in count + 1 } }
}

/// Folds the values of `stream` into `initial` until `add` says the result is complete; the
/// result so far when `timeout` passed first or the stream ended. The one collector the tests'
/// conveniences below are made of.
func collect<T: Sendable, Result: Sendable>(
    _ stream: AsyncStream<T>,
    into initial: Result,
    timeout: Duration,
    _ add: @escaping @Sendable (inout Result, T) -> Bool
) async -> Result {
    let result = NIOLockedValueBox(initial)
    _ = await within(timeout) {
        for await value in stream {
            if result.withLockedValue({ add(&$0, value) }) { return }
        }
    }
    return result.withLockedValue { $0 }
}

/// Collects the values of `stream` until `done` holds for all collected so far, or `timeout` passed.
func collect<T: Sendable>(
    _ stream: AsyncStream<T>,
    timeout: Duration = .seconds(30),
    until done: @escaping @Sendable ([T]) -> Bool
) async -> [T] {
    await collect(stream, into: [], timeout: timeout) { values, value in
        values.append(value)
        return done(values)
    }
}

/// What one subscriber got of a circle from an SDK stream.
struct Delivery: Sendable {
    var posts: [CirclePost] = []
    var gaps: [ClosedRange<Int64>] = []
    /// Whether the collection ended because it was complete (not by its timeout).
    var finished = false
}

/// Collects a circle's posts and gaps from an SDK stream, in a task started now, until `done`
/// holds for what arrived or `timeout` passed.
func collectDelivery(
    _ stream: AsyncStream<CircleEvent>,
    timeout: Duration,
    until done: @escaping @Sendable (Delivery) -> Bool
) -> Task<Delivery, Never> {
    Task {
        await collect(stream, into: Delivery(), timeout: timeout) { delivery, event in
            switch event {
            case .post(let post): delivery.posts.append(post)
            case .gap(let from, let to): delivery.gaps.append(from...max(from, to))
            default: return false
            }
            delivery.finished = done(delivery)
            return delivery.finished
        }
    }
}

/// Collects a circle's posts in a task until `count` arrived or the time is up.
func collect(_ stream: AsyncStream<CircleEvent>, count: Int, timeout: Duration = .seconds(60)) -> Task<[CirclePost], Never> {
    let delivery = collectDelivery(stream, timeout: timeout) { $0.posts.count >= count }
    return Task { await delivery.value.posts }
}
