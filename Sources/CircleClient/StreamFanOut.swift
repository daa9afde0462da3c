import Foundation

/// The streams handed out for one kind of event, each given every element yielded while it is
/// read: the one place where the client's streams (connection states, outbox events, the circle
/// list, each circle's events) are made, fed, ended and forgotten. A value kept by the actor
/// that owns it.
struct StreamFanOut<Element: Sendable> {
    private var continuations: [UUID: AsyncStream<Element>.Continuation] = [:]
    /// Set by ``finish(forever:)``: streams made later end at once, after their first elements.
    private var finished = false

    /// Whether no stream is being read.
    var isEmpty: Bool { self.continuations.isEmpty }

    /// A stream that starts with `first`, then gets what is yielded until it is finished. When
    /// its reader stops, `stopped` is called with its id, off the owner: the owner then calls
    /// ``forget(_:)``.
    mutating func makeStream(
        bufferingPolicy: AsyncStream<Element>.Continuation.BufferingPolicy,
        first: [Element] = [],
        stopped: @escaping @Sendable (UUID) -> Void
    ) -> AsyncStream<Element> {
        let (stream, continuation) = AsyncStream.makeStream(of: Element.self, bufferingPolicy: bufferingPolicy)
        for element in first { continuation.yield(element) }
        guard !self.finished else {
            continuation.finish()
            return stream
        }
        let id = UUID()
        self.continuations[id] = continuation
        continuation.onTermination = { _ in stopped(id) }
        return stream
    }

    /// The stream `id`'s reader stopped.
    mutating func forget(_ id: UUID) {
        self.continuations[id] = nil
    }

    func yield(_ element: Element) {
        for continuation in self.continuations.values { continuation.yield(element) }
    }

    /// Ends every stream after what it holds; `forever`: those made later too.
    mutating func finish(forever: Bool) {
        let ending = self.continuations.values
        self.continuations = [:]
        if forever { self.finished = true }
        for continuation in ending { continuation.finish() }
    }
}
