import Testing

@testable import CircleServer

/// The burst rule as a value (``PushBurst``): one push per device and circle per interval, the newest.
@Suite("Push bursts")
struct PushBurstTests {
    let rule = PushBurst(interval: 10_000)
    let now: Int64 = 1_000_000

    func push(_ id: Int64, seq: Int64, device: String = "d1", circle: String = "den") -> PendingPush {
        PendingPush(
            id: id, subscription: PushSubscription(user: "bob", endpoint: "https://push.example.net/\(device)", p256dh: "", auth: "", createdAt: 0),
            circle: circle, seq: seq, kind: .mention, attempts: 0, createdAt: 0
        )
    }

    @Test("nothing sent recently: each device and circle's newest goes, the older are folded into it")
    func foldsToNewest() {
        let pushes = [self.push(1, seq: 5), self.push(2, seq: 7), self.push(3, seq: 6), self.push(4, seq: 5, device: "d2"), self.push(5, seq: 8, circle: "yard")]
        let plan = self.rule.plan(pushes, lastSent: [:], now: self.now)
        #expect(plan.send.map(\.id) == [2, 4, 5])
        #expect(plan.folded.map(\.id).sorted() == [1, 3])
        #expect(plan.deferred.isEmpty)
    }

    @Test("sent within the interval: the newest waits until the interval is over; at it, it goes")
    func waitsForTheInterval() {
        let key = PushBurstKey(endpoint: "https://push.example.net/d1", circle: "den")
        let plan = self.rule.plan([self.push(1, seq: 5), self.push(2, seq: 6)], lastSent: [key: self.now - 4_000], now: self.now)
        #expect(plan.send.isEmpty)
        #expect(plan.folded.map(\.id) == [1])
        #expect(plan.deferred.map(\.push.id) == [2])
        #expect(plan.deferred.map(\.until) == [self.now + 6_000])
        let later = self.rule.plan([self.push(2, seq: 6)], lastSent: [key: self.now - 10_000], now: self.now)
        #expect(later.send.map(\.id) == [2])
        // Another device or circle is not held up.
        let other = self.rule.plan([self.push(3, seq: 7, device: "d2"), self.push(4, seq: 7, circle: "yard")], lastSent: [key: self.now], now: self.now)
        #expect(other.send.map(\.id) == [3, 4])
    }
}
