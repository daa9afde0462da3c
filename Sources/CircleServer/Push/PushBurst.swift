/// A device and a circle: what the burst rule counts pushes by.
public struct PushBurstKey: Sendable, Hashable {
    public var endpoint: String
    public var circle: String

    public init(endpoint: String, circle: String) {
        self.endpoint = endpoint
        self.circle = circle
    }

    init(_ push: PendingPush) {
        self.init(endpoint: push.subscription.endpoint, circle: push.circle)
    }
}

/// A burst in one circle becomes one notification per device per interval (docs/API.md, "Push
/// notifications"), decided when pushes are claimed: of the claimed pushes for one device and
/// circle only the newest may go, the older are folded into it (deleted); it goes now if that
/// device was last pushed about the circle at least `interval` ago (or never), else it waits
/// until then — and pushes queued meanwhile wait with it, to be folded then. Pure, tested
/// without I/O.
struct PushBurst: Sendable, Hashable {
    /// ``PushSettings/burstInterval`` in milliseconds.
    var interval: Int64

    struct Plan: Equatable {
        var send: [PendingPush] = []
        var folded: [PendingPush] = []
        var deferred: [(push: PendingPush, until: Int64)] = []

        static func == (a: Plan, b: Plan) -> Bool {
            a.send == b.send && a.folded == b.folded && a.deferred.map(\.push) == b.deferred.map(\.push)
                && a.deferred.map(\.until) == b.deferred.map(\.until)
        }
    }

    /// `lastSent`: when each device was last pushed about each circle (absent: not recently).
    func plan(_ pushes: [PendingPush], lastSent: [PushBurstKey: Int64], now: Int64) -> Plan {
        var plan = Plan()
        var newest: [PushBurstKey: PendingPush] = [:]
        for push in pushes {
            let key = PushBurstKey(push)
            if let kept = newest[key] {
                let (older, newer) = (kept.seq, kept.id) < (push.seq, push.id) ? (kept, push) : (push, kept)
                plan.folded.append(older)
                newest[key] = newer
            } else {
                newest[key] = push
            }
        }
        for push in pushes {
            let key = PushBurstKey(push)
            guard newest[key]?.id == push.id else { continue }
            if let last = lastSent[key], now - last < self.interval {
                plan.deferred.append((push, last + self.interval))
            } else {
                plan.send.append(push)
            }
        }
        return plan
    }
}
