import CircleClient
import CircleWire
import Foundation
import CircleTestSupport
import NIOConcurrencyHelpers

/// A fresh state file path in the temporary directory, named after `prefix`.
func temporaryStateFile(_ prefix: String) -> String {
    FileManager.default.temporaryDirectory.appendingPathComponent("\(prefix)-\(UUID().uuidString).sqlite").path
}

/// Removes a state file and its WAL and shared-memory files.
func removeStateFile(_ path: String) {
    for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: path + suffix) }
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
