import Testing

@testable import CircleServer

/// The away rule as a value: who a claimed push may go to (``PushPresence``).
@Suite("Push presence")
struct PushPresenceTests {
    /// 30 s away, refreshed every 10 s (so a connected mark older than 30 s is a dead node's).
    let rule = PushPresence(awayAfter: 30_000, interval: 10_000)
    let now: Int64 = 1_000_000

    func mark(_ connections: Int, ago: Int64, node: String = "n1") -> ConnectionMark {
        ConnectionMark(node: node, connections: connections, seenAt: self.now - ago)
    }

    @Test("never connected, or long ago: away")
    func noMarks() {
        #expect(self.rule.isAway([], now: self.now))
        #expect(self.rule.isAway([self.mark(0, ago: 30_001)], now: self.now))
    }

    @Test("connected now, on any node: not away")
    func connected() {
        #expect(!self.rule.isAway([self.mark(1, ago: 0)], now: self.now))
        #expect(!self.rule.isAway([self.mark(0, ago: 90_000), self.mark(3, ago: 25_000, node: "n2")], now: self.now))
    }

    @Test("left within awayAfter: not away; just past it: away")
    func leftRecently() {
        #expect(!self.rule.isAway([self.mark(0, ago: 29_999)], now: self.now))
        #expect(!self.rule.isAway([self.mark(0, ago: 30_000)], now: self.now))
        #expect(self.rule.isAway([self.mark(0, ago: 30_001)], now: self.now))
    }

    @Test("a connected mark its node stopped refreshing counts from its time")
    func deadNode() {
        // Stale (over 3 × 10 s) but within awayAfter of its time? 30 s is the stale bound too:
        // past it, the user is away.
        #expect(!self.rule.isAway([self.mark(2, ago: 30_000)], now: self.now))
        #expect(self.rule.isAway([self.mark(2, ago: 30_001)], now: self.now))
        let long = PushPresence(awayAfter: 120_000, interval: 10_000)
        #expect(!long.isAway([self.mark(2, ago: 100_000)], now: self.now))
        #expect(long.isAway([self.mark(2, ago: 120_001)], now: self.now))
    }

    @Test("awayAfter 0: whoever is not connected now")
    func zero() {
        let rule = PushPresence(awayAfter: 0, interval: 10_000)
        #expect(!rule.isAway([self.mark(1, ago: 5_000)], now: self.now))
        #expect(rule.isAway([self.mark(0, ago: 1)], now: self.now))
    }

    @Test("marks are forgotten only once they say nothing")
    func forget() {
        let cutoff = self.rule.forgetBefore(now: self.now)
        let oldest = ConnectionMark(node: "n1", connections: 1, seenAt: cutoff)
        #expect(self.rule.isAway([oldest], now: self.now))
        #expect(cutoff < self.now - 30_000)
    }

    @Test("claimed pushes split by recipient, in order")
    func partition() {
        func push(_ id: Int64, _ user: String) -> PendingPush {
            PendingPush(
                id: id, subscription: PushSubscription(user: user, endpoint: "https://push.example.net/\(user)", p256dh: "", auth: "", createdAt: 0),
                circle: "den", seq: id, kind: .mention, attempts: 0, createdAt: 0
            )
        }
        let pushes = [push(1, "bob"), push(2, "carol"), push(3, "bob"), push(4, "dave")]
        let marks = ["bob": [self.mark(1, ago: 0)], "dave": [self.mark(0, ago: 60_000)]]
        let (present, away) = self.rule.partition(pushes, marks: marks, now: self.now)
        #expect(present.map(\.id) == [1, 3])
        #expect(away.map(\.id) == [2, 4])
    }
}
