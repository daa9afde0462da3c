import CircleClient
import Testing

/// A point on a fake timeline: tests move time by hand, nothing sleeps.
struct FakeInstant: InstantProtocol, Hashable {
    var offset: Duration
    func advanced(by duration: Duration) -> FakeInstant { FakeInstant(offset: self.offset + duration) }
    func duration(to other: FakeInstant) -> Duration { other.offset - self.offset }
    static func < (lhs: FakeInstant, rhs: FakeInstant) -> Bool { lhs.offset < rhs.offset }
    static let zero = FakeInstant(offset: .zero)
    static func at(_ seconds: Double) -> FakeInstant { FakeInstant(offset: .milliseconds(Int64(seconds * 1000))) }
}

typealias Machine = ConnectionStateMachine<FakeInstant>

@Suite("Reconnect backoff")
struct ReconnectPolicyTests {
    @Test("full jitter: the ceiling doubles from the base up to the cap")
    func ceilings() {
        let policy = ReconnectPolicy(base: .milliseconds(500), cap: .seconds(30))
        let top = 0.999_999
        #expect(policy.delay(attempt: 1, random: top) < .milliseconds(500))
        #expect(policy.delay(attempt: 1, random: top) > .milliseconds(499))
        #expect(policy.delay(attempt: 2, random: top) > .milliseconds(999))
        #expect(policy.delay(attempt: 3, random: top) > .milliseconds(1999))
        #expect(policy.delay(attempt: 7, random: top) > .milliseconds(29_999))
        #expect(policy.delay(attempt: 7, random: top) <= .seconds(30))
        #expect(policy.delay(attempt: 1000, random: top) <= .seconds(30))
        #expect(policy.delay(attempt: 5, random: 0) == .zero)
        #expect(policy.delay(attempt: 3, random: 0.5) == .seconds(1))
    }
}

@Suite("Connection state machine")
struct ConnectionStateMachineTests {
    @Test("connect, drop, back off, reconnect on the timer")
    func dropAndReconnect() {
        var machine = Machine(policy: .init(), serverCount: 1)
        #expect(machine.start() == .connect(server: 0))
        #expect(machine.state == .connecting(attempt: 1, server: 0))
        #expect(machine.connected() == .none)
        #expect(machine.state == .connected(server: 0))
        // A dropped connection retries its own server after up to base (0.5 s).
        #expect(machine.ended(.transient, now: .at(10), random: 0.5) == .scheduleTimer(.at(10.25)))
        #expect(machine.state == .waiting(until: .at(10.25), attempt: 1, server: 0))
        // Early timer: keep waiting.
        #expect(machine.timerFired(now: .at(10.1)) == .scheduleTimer(.at(10.25)))
        #expect(machine.timerFired(now: .at(10.25)) == .connect(server: 0))
        // That attempt fails: the ceiling doubles (1 s).
        #expect(machine.ended(.transient, now: .at(11), random: 0.5) == .scheduleTimer(.at(11.5)))
        #expect(machine.timerFired(now: .at(11.5)) == .connect(server: 0))
        #expect(machine.ended(.transient, now: .at(12), random: 0.5) == .scheduleTimer(.at(13)))
        #expect(machine.timerFired(now: .at(13)) == .connect(server: 0))
        #expect(machine.connected() == .none)
        // Success resets the backoff.
        #expect(machine.ended(.transient, now: .at(20), random: 0.5) == .scheduleTimer(.at(20.25)))
    }

    @Test("failed attempts rotate through the servers; 1001 moves on promptly")
    func failover() {
        var machine = Machine(policy: .init(goingAwayJitter: .milliseconds(200)), serverCount: 3)
        _ = machine.start()
        #expect(machine.ended(.transient, now: .zero, random: 0) == .scheduleTimer(.zero))
        #expect(machine.timerFired(now: .zero) == .connect(server: 1))
        _ = machine.connected()
        #expect(machine.ended(.goingAway, now: .at(5), random: 0.5) == .scheduleTimer(.at(5.1)))
        #expect(machine.state == .waiting(until: .at(5.1), attempt: 1, server: 2))
        #expect(machine.timerFired(now: .at(5.1)) == .connect(server: 2))
    }

    @Test("reconnectNow skips the wait")
    func reconnectNow() {
        var machine = Machine(policy: .init(), serverCount: 1)
        _ = machine.start()
        _ = machine.ended(.transient, now: .zero, random: 0.9)
        #expect(machine.reconnectNow() == .connect(server: 0))
        // The first attempt failed, so this is the second.
        #expect(machine.state == .connecting(attempt: 2, server: 0))
        #expect(machine.reconnectNow() == .none)
    }

    @Test("1000 ends the session; policy violations stop and report")
    func terminalCloses() {
        var machine = Machine(policy: .init(), serverCount: 1)
        _ = machine.start()
        _ = machine.connected()
        #expect(machine.ended(.closeCode1000, now: .zero, random: 0) == .report(.serverClosed))
        #expect(machine.timerFired(now: .at(100)) == .none)

        _ = machine.start()
        _ = machine.connected()
        let end = ConnectionEnd.closeCode(1008, reason: "banned")
        #expect(machine.ended(end, now: .zero, random: 0) == .report(.rejected(code: 1008, reason: "banned")))
        #expect(ConnectionEnd.httpStatus(403, body: "no") == .rejected(code: 403, reason: "no"))
        #expect(ConnectionEnd.httpStatus(503, body: "") == .transient)
        #expect(ConnectionEnd.closeCode(1013, reason: "") == .transient)
        #expect(ConnectionEnd.closeCode(1012, reason: "") == .goingAway)
        // A session that ended (signed out, banned) is a token to refresh, once, as after 4001.
        #expect(ConnectionEnd.closeCode(4005, reason: "signed out") == .tokenRejected("signed out"))
        #expect(ConnectionEnd.httpStatus(403, body: "account_disabled") == .rejected(code: 403, reason: "account_disabled"))
    }

    @Test("an expired token is refreshed once; a second refusal right after stops")
    func tokenRefresh() {
        var machine = Machine(policy: .init(), serverCount: 1)
        _ = machine.start()
        _ = machine.connected()
        #expect(machine.ended(.closeCode(4001, reason: "token expired"), now: .zero, random: 0) == .refreshToken)
        #expect(machine.tokenRefreshed() == .connect(server: 0))
        #expect(machine.ended(.tokenRejected("still bad"), now: .zero, random: 0) == .report(.unauthorized("still bad")))

        // A refresh that works followed by a successful connect resets the rule.
        _ = machine.start()
        #expect(machine.ended(.tokenRejected("expired"), now: .zero, random: 0) == .refreshToken)
        _ = machine.tokenRefreshed()
        _ = machine.connected()
        #expect(machine.ended(.tokenRejected("expired again later"), now: .zero, random: 0) == .refreshToken)
        // The provider itself failing backs off instead of giving up.
        #expect(machine.tokenRefreshFailed("backend down", now: .at(1), random: 0.5) == .scheduleTimer(.at(1.25)))
        #expect(machine.timerFired(now: .at(1.25)) == .connect(server: 0))
    }

    @Test("maxAttempts gives up; stop is final until start")
    func giveUpAndStop() {
        var machine = Machine(policy: .init(maxAttempts: 2), serverCount: 1)
        _ = machine.start()
        _ = machine.ended(.transient, now: .zero, random: 0)
        _ = machine.timerFired(now: .zero)
        #expect(machine.ended(.transient, now: .zero, random: 0) == .report(.gaveUp(attempts: 2)))

        _ = machine.start()
        _ = machine.connected()
        #expect(machine.stopRequested() == .closeConnection(thenTimer: nil))
        #expect(machine.state == .stopped(.requested))
        #expect(machine.ended(.transient, now: .zero, random: 0) == .none)
        #expect(machine.stopRequested() == .none)
    }

    @Test("a dead connection is closed and retried after the backoff")
    func heartbeatTimeout() {
        var machine = Machine(policy: .init(), serverCount: 1)
        _ = machine.start()
        _ = machine.connected()
        #expect(machine.ended(.heartbeatTimeout, now: .at(30), random: 0.5) == .closeConnection(thenTimer: .at(30.25)))
        #expect(machine.timerFired(now: .at(30.25)) == .connect(server: 0))
    }
}

@Suite("Heartbeat state machine")
struct HeartbeatStateMachineTests {
    @Test("ping every interval; dead when the pong is later than the timeout")
    func pingAndTimeout() {
        var heartbeat = HeartbeatStateMachine<FakeInstant>(policy: .init(interval: .seconds(20), timeout: .seconds(10)))
        #expect(heartbeat.connected(now: .zero) == .scheduleTimer(.at(20)))
        #expect(heartbeat.timerFired(now: .at(19)) == .scheduleTimer(.at(20)))
        #expect(heartbeat.timerFired(now: .at(20)) == .sendPing(thenTimer: .at(30)))
        #expect(heartbeat.pongReceived(now: .at(20.05)) == .scheduleTimer(.at(40.05)))
        #expect(heartbeat.pongReceived(now: .at(21)) == .none)  // unsolicited
        #expect(heartbeat.timerFired(now: .at(30)) == .scheduleTimer(.at(40.05)))  // stale timer
        #expect(heartbeat.timerFired(now: .at(40.05)) == .sendPing(thenTimer: .at(50.05)))
        #expect(heartbeat.timerFired(now: .at(45)) == .scheduleTimer(.at(50.05)))
        // Dead within interval + timeout of the last pong.
        #expect(heartbeat.timerFired(now: .at(50.05)) == .declareDead)
        #expect(heartbeat.timerFired(now: .at(60)) == .none)
        heartbeat.disconnected()
        #expect(heartbeat.connected(now: .at(61)) == .scheduleTimer(.at(81)))
    }
}

extension ConnectionEnd {
    static let closeCode1000 = ConnectionEnd.closeCode(1000, reason: "")
}
