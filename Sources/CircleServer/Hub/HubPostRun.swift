import NIOCore

/// Posts of one circle that a commit (or another node) published together, in sequence order,
/// each encoded once, with their frames back to back in one buffer.
///
/// A subscriber that is live in the circle and has every post before the run gets the whole run
/// as that one buffer: one write, one `iovec`, one state update per subscriber and batch, instead
/// of one per post (`perf` of `benchmarks/fanout.py`: the per-delivery handling, retains and
/// pending-write entries were most of the server's user time). Others take the posts one by one.
///
/// Only small runs are made (at most ``maxBytes`` of frames, with no gap in the sequence
/// numbers): a session checks its socket's writability once per event, so a run may overshoot
/// the outbound queue's mark by that much. Larger batches go out as one event per post.
final class HubPostRun: Sendable {
    static let maxBytes = 16 * 1024

    let posts: [(seq: Int64, payload: HubPayload)]
    /// Every post's uncompressed frame, in order.
    let framed: ByteBuffer

    /// Nil for fewer than two posts, a gap in the sequence numbers, a post without its frame or
    /// more than ``maxBytes`` of frames.
    init?(_ posts: [(seq: Int64, payload: HubPayload)], allocator: ByteBufferAllocator) {
        guard posts.count > 1, zip(posts, posts.dropFirst()).allSatisfy({ $1.seq == $0.seq + 1 }) else { return nil }
        let frames = posts.compactMap(\.payload.framed)
        let size = frames.reduce(0) { $0 + $1.readableBytes }
        guard frames.count == posts.count, size <= Self.maxBytes else { return nil }
        var buffer = allocator.buffer(capacity: size)
        for frame in frames { buffer.writeImmutableBuffer(frame) }
        self.posts = posts
        self.framed = buffer
    }

    var firstSeq: Int64 { self.posts[0].seq }
    var lastSeq: Int64 { self.posts[self.posts.count - 1].seq }
}
