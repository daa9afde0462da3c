import CircleWire

/// The outbox as a value: events in (the app's calls, a connection opened or closed, an answer,
/// a deadline passed), actions out. It performs no I/O and reads no clock; ``ClientCore``
/// interprets its actions, and the tests drive it by hand.
///
/// What it keeps, whatever the order of events:
/// - every entry leaves the outbox exactly once, through one ``Action/resolve(_:_:waited:)``
///   (acked, refused, timed out, cancelled, or dropped when a client without a state file stops);
/// - an entry is written to a connection only after it was saved as sent (``Phase/marked``), and
///   from then on it can no longer be cancelled or changed, since it may have reached the server;
/// - entries are written in outbox order, each once per connection (again after the server said
///   `unavailable`, with the same id, so the server stores it once).
struct OutboxStateMachine<Instant: InstantProtocol & Sendable>: Sendable where Instant.Duration == Duration {
    /// An entry's life, from queued to written; resolving removes it.
    enum Phase: Sendable, Hashable {
        /// Never written anywhere: it may still be cancelled or its text replaced.
        case queued
        /// Being saved as sent (``Action/markSent(_:)``); nothing is written before that is done.
        case marking
        /// Saved as sent, not written on the open connection (none is open, or it was written on
        /// an earlier one, or the server answered `unavailable`).
        case marked
        /// Written on connection `connection`, waiting for its answer there.
        case sent(connection: Int)
    }

    struct Slot: Sendable, Hashable {
        var entry: OutboxEntry
        var phase: Phase
        /// When the caller of this process that waits for the entry gives up; `nil` when nobody
        /// in this process waits for it (an entry restored from the state file).
        var deadline: Instant?
    }

    enum Action: Sendable, Hashable {
        /// Save that these entries may reach the server, then report ``marked(_:)`` or
        /// ``markFailed(_:)``.
        case markSent([String])
        /// Write these entries on the open connection, in this order.
        case send([OutboxEntry])
        /// The entry left the outbox with this result: remove it from the state store, tell the
        /// observers, and resume its waiter (there is one when `waited`).
        case resolve(OutboxEntry, Result<PostReceipt, CircleClientError>, waited: Bool)
        /// The client stopped: the waiter of this entry gets the error; the entry stays queued
        /// (the state file keeps it for the next start).
        case abandon(String, CircleClientError)
    }

    private(set) var slots: [Slot]
    /// The open connection's number, if one is open.
    private var connection: Int?
    /// A ``Action/markSent(_:)`` is on its way.
    private var marking = false

    /// The outbox restored from the state file: `sent` are the entries saved as sent.
    init(restored: [OutboxEntry] = [], sent: Set<String> = []) {
        self.slots = restored.map { Slot(entry: $0, phase: sent.contains($0.id) ? .marked : .queued, deadline: nil) }
    }

    var entries: [OutboxEntry] { self.slots.map(\.entry) }

    func contains(_ id: String) -> Bool { self.index(of: id) != nil }

    /// Whether a caller of this process waits for entry `id`.
    func isWaited(_ id: String) -> Bool {
        guard let index = self.index(of: id) else { return false }
        return self.slots[index].deadline != nil
    }

    /// The earliest deadline of a waiting caller.
    var nextDeadline: Instant? { self.slots.lazy.compactMap(\.deadline).min() }

    private func index(of id: String) -> Int? { self.slots.firstIndex { $0.entry.id == id } }

    // MARK: The app's calls

    /// Appends an entry (already in the state store, saved as sent when `sent`). An id already in
    /// the outbox is not added again.
    mutating func enqueued(_ entry: OutboxEntry, sent: Bool) {
        guard !self.contains(entry.id) else { return }
        self.slots.append(Slot(entry: entry, phase: sent ? .marked : .queued, deadline: nil))
    }

    /// A caller waits for entry `id` until `deadline`; with a connection open, the outbox is
    /// written. Returns `nil` when there is no such entry.
    mutating func wait(for id: String, until deadline: Instant) -> [Action]? {
        guard let index = self.index(of: id) else { return nil }
        self.slots[index].deadline = deadline
        return self.flush()
    }

    /// Removes an entry that was never written (``Phase/queued``); `nil` when it may have been.
    mutating func cancel(_ id: String) -> Action? {
        guard let index = self.index(of: id), self.slots[index].phase == .queued else { return nil }
        let slot = self.slots.remove(at: index)
        return .resolve(slot.entry, .failure(CircleClientError(.cancelled, "the entry was cancelled before it was sent")), waited: slot.deadline != nil)
    }

    /// Replaces the text of a post or edit that was never written; `false` when it may have been.
    mutating func replaceText(_ id: String, with text: String) -> Bool {
        guard let index = self.index(of: id), self.slots[index].phase == .queued, self.slots[index].entry.action.hasText else {
            return false
        }
        self.slots[index].entry.text = text
        return true
    }

    // MARK: The connection

    /// Connection `number` opened: the outbox is written on it.
    mutating func connected(_ number: Int) -> [Action] {
        self.connection = number
        return self.flush()
    }

    /// The open connection closed: what was written on it is written again on the next one.
    mutating func disconnected() {
        self.connection = nil
    }

    /// What to do so that every entry is written on the open connection: save the unsaved ones
    /// as sent first (all in one write), or else write those not yet written on it. Nothing is
    /// written while a save is on its way, so the order on the wire stays the outbox order.
    mutating func flush() -> [Action] {
        guard let connection = self.connection, !self.marking else { return [] }
        var unsaved: [String] = []
        for index in self.slots.indices where self.slots[index].phase == .queued {
            self.slots[index].phase = .marking
            unsaved.append(self.slots[index].entry.id)
        }
        if !unsaved.isEmpty {
            self.marking = true
            return [.markSent(unsaved)]
        }
        var written: [OutboxEntry] = []
        for index in self.slots.indices where self.slots[index].phase != .sent(connection: connection) {
            self.slots[index].phase = .sent(connection: connection)
            written.append(self.slots[index].entry)
        }
        return written.isEmpty ? [] : [.send(written)]
    }

    /// The entries of a ``Action/markSent(_:)`` were saved: they are written.
    mutating func marked(_ ids: [String]) -> [Action] {
        self.marking = false
        self.setPhase(of: ids, from: .marking, to: .marked)
        return self.flush()
    }

    /// The save failed: they were not written, so they stay cancellable; the next flush (the
    /// next connection or post) tries again.
    mutating func markFailed(_ ids: [String]) {
        self.marking = false
        self.setPhase(of: ids, from: .marking, to: .queued)
    }

    private mutating func setPhase(of ids: [String], from old: Phase, to new: Phase) {
        let ids = Set(ids)
        for index in self.slots.indices where self.slots[index].phase == old && ids.contains(self.slots[index].entry.id) {
            self.slots[index].phase = new
        }
    }

    // MARK: Answers and deadlines

    /// The server acknowledged entry `id`; `nil` when it is not in the outbox.
    mutating func acked(_ id: String, seq: Int64?, time: Int64?, duplicate: Bool) -> Action? {
        guard let index = self.index(of: id) else { return nil }
        let slot = self.slots.remove(at: index)
        let receipt = PostReceipt(id: id, circle: slot.entry.circle, seq: seq ?? 0, time: time ?? 0, duplicate: duplicate)
        return .resolve(slot.entry, .success(receipt), waited: slot.deadline != nil)
    }

    /// The server refused entry `id`; `unavailable` (the server is going away) keeps it, to be
    /// written again with the same id. `nil` when it is not in the outbox (or kept).
    mutating func refused(_ id: String, code: CircleErrorCode, message: String) -> Action? {
        guard let index = self.index(of: id) else { return nil }
        if code == .unavailable {
            if case .sent = self.slots[index].phase { self.slots[index].phase = .marked }
            return nil
        }
        let slot = self.slots.remove(at: index)
        return .resolve(slot.entry, .failure(CircleClientError(.server(code), message)), waited: slot.deadline != nil)
    }

    /// The entries whose caller's deadline passed are resolved as timed out (they may or may not
    /// be stored: the server may still commit them, and their removal from the state file means
    /// they are not sent again).
    mutating func deadlinePassed(now: Instant, timeout: Duration) -> [Action] {
        var actions: [Action] = []
        self.slots.removeAll { slot in
            guard let deadline = slot.deadline, deadline <= now else { return false }
            let error = CircleClientError(.timedOut, "no ack within \(timeout); the post may or may not be stored")
            actions.append(.resolve(slot.entry, .failure(error), waited: true))
            return true
        }
        return actions
    }

    /// The client stopped: every waiting caller gets `error`. With a state file (`keeping`) the
    /// entries stay for the next start; without one they are dropped, as failed.
    mutating func stopped(_ error: CircleClientError, keeping: Bool) -> [Action] {
        self.connection = nil
        var actions: [Action] = []
        if keeping {
            for index in self.slots.indices where self.slots[index].deadline != nil {
                self.slots[index].deadline = nil
                actions.append(.abandon(self.slots[index].entry.id, error))
            }
        } else {
            self.slots.removeAll { slot in
                guard slot.deadline != nil else { return false }
                actions.append(.resolve(slot.entry, .failure(error), waited: true))
                return true
            }
        }
        return actions
    }
}
