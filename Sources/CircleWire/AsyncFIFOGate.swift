/// A first-come, first-served async lock, held across suspension points: waiters are resumed in
/// arrival order and the gate passes straight to the next one, so nobody barges in. Once closed,
/// every later ``enter()`` fails at once (a store that was closed).
///
/// Waiting is not cancellable: every holder's work is short. The one gate of the package, used
/// by the server's SQLite store and the client's state file.
package actor AsyncFIFOGate {
    private var isHeld = false
    private var isClosed = false
    private var waiters: [CheckedContinuation<Void, Never>] = []

    package init() {}

    /// Waits for the gate and holds it; `false` (not holding it) when the gate was closed.
    package func enter() async -> Bool {
        if self.isHeld {
            await withCheckedContinuation { self.waiters.append($0) }
            // Resumed by `leave`, which handed the gate over.
        } else {
            self.isHeld = true
        }
        if self.isClosed {
            self.leave()
            return false
        }
        return true
    }

    /// Hands the gate to the next waiter, or frees it; `closing` makes every later entry fail.
    package func leave(closing: Bool = false) {
        if closing { self.isClosed = true }
        if self.waiters.isEmpty {
            self.isHeld = false
        } else {
            self.waiters.removeFirst().resume()
        }
    }
}
