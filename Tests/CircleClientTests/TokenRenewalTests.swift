import CircleClient
import CircleServer
import CircleTestSupport
import Foundation
import NIOConcurrencyHelpers
import Testing

/// A JWT whose payload has these claims (unsigned: the renewal reads `exp` without verifying).
private func token(exp: Double?, iat: Double? = nil) -> String {
    var claims: [String] = [#""sub":"dora""#]
    if let exp { claims.append(#""exp":\#(exp)"#) }
    if let iat { claims.append(#""iat":\#(iat)"#) }
    let payload = Data("{\(claims.joined(separator: ","))}".utf8).base64EncodedString()
        .replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_").replacingOccurrences(of: "=", with: "")
    return "eyJhbGciOiJIUzI1NiJ9.\(payload).c2ln"
}

@Suite("TokenRenewalStateMachine")
struct TokenRenewalStateMachineTests {
    let start = 1_800_000_000.0

    @Test("renews at 80% of the lifetime or 60 s before exp, whichever is earlier, not before half the lifetime")
    func renewalTime() {
        let machine = TokenRenewalStateMachine()
        // One hour: 60 s before exp (3540 s) is later than 80% (2880 s): 80% wins.
        #expect(machine.renewalTime(of: token(exp: start + 3600, iat: start), now: start)?.renewAt == start + 2880)
        // Two minutes: 80% is 96 s, 60 s before exp is 60 s: the lead wins.
        #expect(machine.renewalTime(of: token(exp: start + 120, iat: start), now: start)?.renewAt == start + 60)
        // No iat: the lifetime counts from now.
        #expect(machine.renewalTime(of: token(exp: start + 1000), now: start)?.renewAt == start + 800)
        // Shorter than twice the lead: at half the lifetime, not at once.
        #expect(machine.renewalTime(of: token(exp: start + 10, iat: start), now: start)?.renewAt == start + 5)
        #expect(machine.renewalTime(of: token(exp: nil), now: start) == nil)
        #expect(machine.renewalTime(of: "not a token", now: start) == nil)
    }

    @Test("connected → timer → fetch → auth → accepted → next renewal from the new token")
    func happyPath() {
        var machine = TokenRenewalStateMachine(policy: .init(checkInterval: .seconds(15)))
        #expect(machine.connected(token: token(exp: start + 100, iat: start), now: start) == .scheduleTimer(after: .seconds(15)))
        #expect(machine.timerFired(now: start + 15) == .scheduleTimer(after: .seconds(15)))
        // 80% is 80 s, 60 s before exp is 40 s, half the lifetime 50 s: at 50 s.
        #expect(machine.timerFired(now: start + 49.5) == .scheduleTimer(after: .milliseconds(500)))
        #expect(machine.timerFired(now: start + 50) == .fetchToken)
        #expect(machine.timerFired(now: start + 41) == .none, "a fetch is under way")
        let next = token(exp: start + 200, iat: start + 41)
        #expect(machine.tokenFetched(next, now: start + 41) == .sendAuth(next))
        #expect(machine.authAccepted(now: start + 41) == .scheduleTimer(after: .seconds(15)))
        // The new token: 200 - 60 = 140 vs 41 + 0.8 × 159 = 168.2: renew at 140.
        #expect(machine.renewalTime(of: next, now: start + 41)?.renewAt == start + 140)
    }

    @Test("a process suspended past the renewal time renews on the first tick after it resumes")
    func resumeAfterSleep() {
        var machine = TokenRenewalStateMachine(policy: .init(checkInterval: .seconds(15)))
        _ = machine.connected(token: token(exp: start + 3600, iat: start), now: start)
        // The 15 s timer fires an hour and a half late (the laptop slept): past exp even.
        #expect(machine.timerFired(now: start + 5400) == .fetchToken)
    }

    @Test("a token already due at connect is renewed at once")
    func dueAtConnect() {
        var machine = TokenRenewalStateMachine()
        #expect(machine.connected(token: token(exp: start + 30, iat: start - 600), now: start) == .fetchToken)
    }

    @Test("a provider that hands back the same (or an equally old) token is retried later, not sent: no renewal loop")
    func sameTokenAgain() {
        var machine = TokenRenewalStateMachine(policy: .init(retryInterval: .seconds(10)))
        let old = token(exp: start + 100, iat: start)
        _ = machine.connected(token: old, now: start)
        #expect(machine.timerFired(now: start + 50) == .fetchToken)
        #expect(machine.tokenFetched(old, now: start + 50) == .scheduleTimer(after: .seconds(10)))
        #expect(machine.timerFired(now: start + 60) == .fetchToken)
        let fresh = token(exp: start + 200, iat: start + 60)
        #expect(machine.tokenFetched(fresh, now: start + 60) == .sendAuth(fresh))
    }

    @Test("a provider failure retries while the token is valid, then gives up (the server's 4001 reconnects)")
    func providerFailure() {
        var machine = TokenRenewalStateMachine(policy: .init(retryInterval: .seconds(10)))
        _ = machine.connected(token: token(exp: start + 100, iat: start), now: start)
        #expect(machine.timerFired(now: start + 50) == .fetchToken)
        #expect(machine.tokenFetchFailed(now: start + 50) == .scheduleTimer(after: .seconds(10)))
        #expect(machine.timerFired(now: start + 60) == .fetchToken)
        #expect(machine.tokenFetchFailed(now: start + 95) == .none)
        #expect(machine.timerFired(now: start + 200) == .none)
    }

    @Test("a refused auth reconnects; events for another state are ignored; disconnect stops everything")
    func refusedAndStale() {
        var machine = TokenRenewalStateMachine()
        #expect(machine.authAccepted(now: start) == .none)
        #expect(machine.tokenFetched("x", now: start) == .none)
        _ = machine.connected(token: token(exp: start + 100, iat: start), now: start)
        #expect(machine.timerFired(now: start + 50) == .fetchToken)
        let new = token(exp: start + 150, iat: start + 50)
        #expect(machine.tokenFetched(new, now: start + 50) == .sendAuth(new))
        #expect(machine.authRefused(now: start + 50) == .reconnect)
        #expect(machine.timerFired(now: start + 99) == .none)
        _ = machine.connected(token: token(exp: start + 100, iat: start), now: start)
        machine.disconnected()
        #expect(machine.timerFired(now: start + 99) == .none)
    }

    @Test("disabled, or a token without exp: no renewal")
    func disabled() {
        var off = TokenRenewalStateMachine(policy: .init(enabled: false))
        #expect(off.connected(token: token(exp: start + 100, iat: start), now: start) == .none)
        var noExp = TokenRenewalStateMachine()
        #expect(noExp.connected(token: token(exp: nil), now: start) == .none)
    }
}

@Suite("Token renewal against a real server", .serialized, .timeLimit(.minutes(2)))
struct TokenRenewalLiveClientTests {
    @Test("4 s tokens renewed with auth on the open connection: three renewals, one connection, no 4001")
    func renewsOnTheOpenConnection() async throws {
        let server = TestServer()
        defer { server.remove() }
        try await server.start()
        let calls = NIOLockedValueBox(0)
        let client = try await CircleClient(
            configuration: .init(
                servers: [server.wsURL],
                tokenProvider: {
                    calls.withLockedValue { $0 += 1 }
                    return try await server.token("dora", ttl: .seconds(4))
                },
                reconnect: .init(base: .milliseconds(100), cap: .seconds(1)),
                // A pong late by load is not this test's subject: only a renewal may end the connection.
                heartbeat: .init(interval: .seconds(20), timeout: .seconds(60)),
                tokenRenewal: .init(lifetimeFraction: 0.5, lead: .seconds(1), checkInterval: .milliseconds(200))
            )
        )
        let states = await client.states()
        let seen = Task { () -> [ConnectionState] in
            await within(.seconds(60)) { () -> [ConnectionState] in
                var seen: [ConnectionState] = []
                for await state in states {
                    seen.append(state)
                    if calls.withLockedValue({ $0 }) >= 4 { break }
                }
                return seen
            } ?? []
        }
        await client.connect()
        // Four tokens: the one of the connection and three renewals, the last one after the
        // first token's exp, when the server would have closed an unrenewed connection (4001).
        #expect(await eventually(timeout: .seconds(30)) { calls.withLockedValue { $0 } >= 4 })
        // Past the last renewal's ack: a request on the same connection still works.
        #expect(await eventually(timeout: .seconds(10)) { (try? await client.circleSummaries()) != nil })
        #expect(await client.state == .connected)
        await client.shutdown()
        let history = await seen.value
        let connects = history.filter { $0 == .connected }.count
        #expect(connects <= 1, "the client reconnected: \(history)")
        #expect(!history.contains { if case .waitingToReconnect = $0 { return true } else { return false } }, "\(history)")
        await server.stop()
    }
}
