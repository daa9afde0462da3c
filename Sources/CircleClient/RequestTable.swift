import Foundation

/// The open connection's requests waiting for an answer, each circle's join, and the calls
/// waiting for a join, as a value with its deadlines as data. It performs no I/O and reads no
/// clock: ``ClientCore`` sends what it names and runs one timer for ``nextDeadline``.
///
/// What it keeps: each request is answered exactly once — by its reply, by its deadline, or by
/// the connection closing, whichever comes first; the later ones find nothing (``answered(_:)``
/// returns `nil`) — and a circle is joined at most once per connection.
struct RequestTable<Instant: InstantProtocol & Sendable>: Sendable where Instant.Duration == Duration {
    /// A circle's join on the open connection.
    enum JoinState: Sendable, Hashable {
        /// Not asked for on this connection.
        case none
        /// Asked for by request `id`, not answered yet.
        case requested(id: String)
        /// The server acknowledged it: the circle's events flow.
        case joined
    }

    /// What a request id stands for.
    enum Pending: Sendable, Hashable {
        /// A call whose caller waits until `deadline`.
        case call(deadline: Instant)
        /// The join of `circle` (its callers wait in ``joinWaits``, each with a deadline).
        case join(circle: String)
    }

    /// How a reply was taken.
    enum Answer: Sendable, Hashable {
        /// The reply to call `id`: its caller gets it.
        case call
        /// The join of `circle` was answered: the calls `waiters` waited for it.
        case join(circle: String, waiters: [UUID])
    }

    private var pending: [String: Pending] = [:]
    private(set) var joins: [String: JoinState] = [:]
    /// Calls waiting for a circle's join (``ClientCore``'s `markRead`), each until its deadline.
    private var joinWaits: [UUID: (circle: String, deadline: Instant)] = [:]
    private var counter = 0

    /// The earliest deadline of a call or of a call waiting for a join.
    var nextDeadline: Instant? {
        let calls = self.pending.values.lazy.compactMap { pending -> Instant? in
            if case .call(let deadline) = pending { return deadline }
            return nil
        }
        return [calls.min(), self.joinWaits.values.lazy.map(\.deadline).min()].compactMap { $0 }.min()
    }

    func joinState(of circle: String) -> JoinState { self.joins[circle] ?? .none }

    private mutating func nextID() -> String {
        self.counter += 1
        return "c\(self.counter)"
    }

    /// A new call, answered by its reply or given up at `deadline`; returns its id.
    mutating func call(until deadline: Instant) -> String {
        let id = self.nextID()
        self.pending[id] = .call(deadline: deadline)
        return id
    }

    /// The id of a join request to send for `circle`; `nil` when it is asked for or joined already.
    mutating func join(_ circle: String) -> String? {
        guard self.joinState(of: circle) == .none else { return nil }
        let id = self.nextID()
        self.pending[id] = .join(circle: circle)
        self.joins[circle] = .requested(id: id)
        return id
    }

    /// The app left `circle`: it is joined again when asked for.
    mutating func left(_ circle: String) {
        self.joins[circle] = JoinState.none
    }

    /// Call `waiter` waits for `circle`'s join until `deadline`; `false` when it is joined already.
    mutating func waitForJoin(_ circle: String, waiter: UUID, until deadline: Instant) -> Bool {
        guard self.joinState(of: circle) != .joined else { return false }
        self.joinWaits[waiter] = (circle, deadline)
        return true
    }

    /// A reply (an ack, a page, an error) named request `id`. `joined`: whether it accepted
    /// (an ack) or refused (an error) a join. `nil` when nothing waits for `id` any more.
    mutating func answered(_ id: String, accepted: Bool) -> Answer? {
        switch self.pending.removeValue(forKey: id) {
        case nil:
            return nil
        case .call?:
            return .call
        case .join(let circle)?:
            // Answered for the join that is current; a join asked for before a `leave` that is
            // answered after it still sets the state (the server joined it).
            self.joins[circle] = accepted ? .joined : JoinState.none
            return .join(circle: circle, waiters: self.takeJoinWaits(of: circle))
        }
    }

    private mutating func takeJoinWaits(of circle: String) -> [UUID] {
        let waiters = self.joinWaits.filter { $0.value.circle == circle }.map(\.key)
        for waiter in waiters { self.joinWaits[waiter] = nil }
        return waiters
    }

    /// The calls and join waits whose deadline passed; each is forgotten, so a late reply finds nothing.
    mutating func deadlinePassed(now: Instant) -> (calls: [String], joinWaits: [(UUID, String)]) {
        var calls: [String] = []
        for (id, pending) in self.pending {
            if case .call(let deadline) = pending, deadline <= now { calls.append(id) }
        }
        for id in calls { self.pending[id] = nil }
        let waits = self.joinWaits.filter { $0.value.deadline <= now }.map { ($0.key, $0.value.circle) }
        for (waiter, _) in waits { self.joinWaits[waiter] = nil }
        return (calls, waits)
    }

    /// The connection closed (or a new one opened): every call and join wait fails, and every
    /// circle is to be joined again.
    mutating func connectionEnded() -> (calls: [String], joinWaits: [UUID]) {
        let calls = self.pending.compactMap { id, pending -> String? in
            if case .call = pending { return id }
            return nil
        }
        let waits = Array(self.joinWaits.keys)
        self.pending = [:]
        self.joinWaits = [:]
        self.joins = [:]
        return (calls, waits)
    }
}
