@testable import CircleClient
import CircleTestSupport
import CircleWire
import Foundation
import Testing

/// The SDK's promises checked on its state values, without a socket, a store or a clock:
/// every post resolves exactly once, is written only after it was saved as sent, and is written
/// again with the same id where it may not have arrived; each request is answered once; a join's
/// replay and the live posts leave no gap and no duplicate.
@Suite("Outbox state machine")
struct OutboxStateMachineTests {
    typealias Outbox = OutboxStateMachine<FakeInstant>

    static func entry(_ id: String, text: String = "hi", circle: String = "c") -> OutboxEntry {
        OutboxEntry(id: id, circle: circle, text: text, createdAt: 0)
    }

    /// The ids of the entries an action list writes.
    static func sent(_ actions: [Outbox.Action]) -> [String] {
        actions.flatMap { action -> [String] in
            if case .send(let entries) = action { return entries.map(\.id) }
            return []
        }
    }

    static func marks(_ actions: [Outbox.Action]) -> [String] {
        actions.flatMap { action -> [String] in
            if case .markSent(let ids) = action { return ids }
            return []
        }
    }

    @Test("a post is saved as sent, written, written again on the next connection, and resolved once by its ack")
    func resolvesOnceAcrossReconnects() throws {
        var outbox = Outbox()
        outbox.enqueued(Self.entry("a"), sent: false)
        let r1 = outbox.wait(for: "a", until: .at(10))
        #expect(r1 == [])  // no connection: nothing to write
        let r2 = outbox.connected(1)
        #expect(r2 == [.markSent(["a"])])
        let r3 = outbox.flush()
        #expect(r3 == [])  // nothing is written while the mark is saved
        let r4 = outbox.marked(["a"])
        #expect(Self.sent(r4) == ["a"])
        let r5 = outbox.flush()
        #expect(r5 == [])  // written once per connection
        outbox.disconnected()
        let r6 = outbox.connected(2)
        #expect(Self.sent(r6) == ["a"])  // the same id again; no new mark
        let r7 = outbox.acked("a", seq: 7, time: 100, duplicate: true)
        let action = try #require(r7)
        #expect(action == .resolve(Self.entry("a"), .success(PostReceipt(id: "a", circle: "c", seq: 7, time: 100, duplicate: true)), waited: true))
        let r8 = outbox.acked("a", seq: 7, time: 100, duplicate: true)
        #expect(r8 == nil)
        let r9 = outbox.deadlinePassed(now: .at(60), timeout: .seconds(10))
        #expect(r9 == [])
        #expect(outbox.entries.isEmpty)
    }

    @Test("a restored outbox: entries saved as sent are written at once, the others are saved first")
    func restart() {
        var outbox = Outbox(restored: [Self.entry("a"), Self.entry("b"), Self.entry("c")], sent: ["a", "c"])
        #expect(outbox.slots.map(\.phase) == [.marked, .queued, .marked])
        #expect(!outbox.isWaited("a"))
        let r10 = outbox.connected(1)
        #expect(r10 == [.markSent(["b"])])
        // Outbox order on the wire: none is written before "b" is saved.
        let r11 = outbox.marked(["b"])
        #expect(Self.sent(r11) == ["a", "b", "c"])
        // Nobody in this process waits: an ack resolves them without a waiter.
        let r12 = outbox.acked("b", seq: 1, time: 1, duplicate: false)
        #expect(r12.map { if case .resolve(_, _, let waited) = $0 { waited } else { true } } == false)
    }

    @Test("cancel and replace work only before the entry is saved as sent")
    func cancelAndReplace() throws {
        var outbox = Outbox()
        outbox.enqueued(Self.entry("a"), sent: false)
        outbox.enqueued(Self.entry("b"), sent: false)
        outbox.enqueued(Self.entry("c"), sent: true)
        let r13 = outbox.replaceText("a", with: "new")
        #expect(r13)
        let r14 = outbox.replaceText("c", with: "new")
        #expect(!r14)
        let r15 = outbox.cancel("b")
        let cancelled = try #require(r15)
        guard case .resolve(let entry, .failure(let error), false) = cancelled else {
            Issue.record("expected a cancellation, got \(cancelled)")
            return
        }
        #expect(entry.id == "b" && error.code == .cancelled)
        let r16 = outbox.cancel("b")
        #expect(r16 == nil)  // resolved once
        let r17 = outbox.cancel("c")
        #expect(r17 == nil)
        let r18 = outbox.connected(1)
        #expect(r18 == [.markSent(["a"])])
        let r19 = outbox.cancel("a")
        #expect(r19 == nil)  // being saved: it may be written next
        let r20 = outbox.replaceText("a", with: "newer")
        #expect(!r20)
        let written = outbox.marked(["a"])
        #expect(written == [.send([Self.entry("a", text: "new"), Self.entry("c")])])
    }

    @Test("a failed save leaves the entries cancellable; the next flush saves them again")
    func markFailed() {
        var outbox = Outbox()
        outbox.enqueued(Self.entry("a"), sent: false)
        let r21 = outbox.connected(1)
        #expect(r21 == [.markSent(["a"])])
        outbox.markFailed(["a"])
        #expect(outbox.slots.map(\.phase) == [.queued])
        let r22 = outbox.flush()
        #expect(r22 == [.markSent(["a"])])
        let r23 = outbox.marked(["a"])
        #expect(Self.sent(r23) == ["a"])
    }

    @Test("`unavailable` keeps the entry, which is written again with the same id and resolved once")
    func unavailable() {
        var outbox = Outbox()
        outbox.enqueued(Self.entry("a"), sent: true)
        _ = outbox.wait(for: "a", until: .at(10))
        let r24 = outbox.connected(1)
        #expect(Self.sent(r24) == ["a"])
        let r25 = outbox.refused("a", code: .unavailable, message: "going away")
        #expect(r25 == nil)
        #expect(outbox.contains("a"))
        outbox.disconnected()
        let r26 = outbox.connected(2)
        #expect(Self.sent(r26) == ["a"])
        let r27 = outbox.acked("a", seq: 3, time: 3, duplicate: false)
        #expect(r27 != nil)
        let r28 = outbox.refused("a", code: .forbidden, message: "late")
        #expect(r28 == nil)
    }

    @Test("a refusal resolves the entry with the server's code")
    func refused() {
        var outbox = Outbox()
        outbox.enqueued(Self.entry("a"), sent: true)
        _ = outbox.wait(for: "a", until: .at(10))
        _ = outbox.connected(1)
        let action = outbox.refused("a", code: .forbidden, message: "no")
        #expect(action == .resolve(Self.entry("a"), .failure(CircleClientError(.server(.forbidden), "no")), waited: true))
    }

    @Test("a deadline resolves the entry once, as timed out; a late ack finds nothing")
    func timesOutOnce() {
        var outbox = Outbox()
        outbox.enqueued(Self.entry("a"), sent: true)
        outbox.enqueued(Self.entry("b"), sent: true)
        _ = outbox.wait(for: "a", until: .at(10))
        _ = outbox.wait(for: "b", until: .at(20))
        #expect(outbox.nextDeadline == .at(10))
        _ = outbox.connected(1)
        let r29 = outbox.deadlinePassed(now: .at(9), timeout: .seconds(10))
        #expect(r29 == [])
        let expired = outbox.deadlinePassed(now: .at(10), timeout: .seconds(10))
        #expect(expired.count == 1)
        guard case .resolve(let entry, .failure(let error), true)? = expired.first else {
            Issue.record("expected a timeout, got \(expired)")
            return
        }
        #expect(entry.id == "a" && error.code == .timedOut)
        let r30 = outbox.deadlinePassed(now: .at(11), timeout: .seconds(10))
        #expect(r30 == [])
        let r31 = outbox.acked("a", seq: 1, time: 1, duplicate: false)
        #expect(r31 == nil)
        #expect(outbox.nextDeadline == .at(20))
    }

    @Test("a client that stops: with a state file the entries stay and their callers fail; without, they fail")
    func stopped() {
        let error = CircleClientError(.stopped, "stopped")
        var kept = Outbox(restored: [Self.entry("old")], sent: ["old"])
        kept.enqueued(Self.entry("a"), sent: false)
        _ = kept.wait(for: "a", until: .at(10))
        let r32 = kept.stopped(error, keeping: true)
        #expect(r32 == [.abandon("a", error)])
        #expect(kept.entries.map(\.id) == ["old", "a"])
        #expect(!kept.isWaited("a"))
        let r33 = kept.deadlinePassed(now: .at(100), timeout: .seconds(10))
        #expect(r33 == [])

        var dropped = Outbox()
        dropped.enqueued(Self.entry("a"), sent: false)
        _ = dropped.wait(for: "a", until: .at(10))
        let r34 = dropped.stopped(error, keeping: false)
        #expect(r34 == [.resolve(Self.entry("a"), .failure(error), waited: true)])
        #expect(dropped.entries.isEmpty)
    }

    /// A server as the outbox sees it: it stores each id once (its idempotency) and may answer
    /// or not; the outbox must resolve every entry exactly once, never write one before it was
    /// saved as sent, and keep the outbox order within each connection.
    @Test("random interleavings: each entry resolves exactly once, is written only after its save, in order", arguments: 0..<40)
    func randomInterleavings(seed: UInt64) {
        var random = SplitMix(seed: seed)
        var outbox = Outbox()
        var connection: Int?
        var connections = 0
        var pendingMarks: [[String]] = []
        var saved: Set<String> = []
        var resolved: [String: Int] = [:]
        var writtenOn: [Int: [String]] = [:]
        var queued: [String] = []
        var nextID = 0
        var now = FakeInstant.zero

        func take(_ actions: [Outbox.Action]) {
            for action in actions {
                switch action {
                case .markSent(let ids):
                    #expect(pendingMarks.isEmpty, "one save at a time")
                    pendingMarks.append(ids)
                case .send(let entries):
                    let connection = try! #require(connection)
                    for entry in entries {
                        #expect(saved.contains(entry.id), "\(entry.id) written before it was saved as sent")
                        writtenOn[connection, default: []].append(entry.id)
                    }
                case .resolve(let entry, _, _):
                    resolved[entry.id, default: 0] += 1
                case .abandon:
                    Issue.record("abandon without a stop")
                }
            }
        }

        for _ in 0..<300 {
            switch Int.random(in: 0..<10, using: &random) {
            case 0, 1:
                nextID += 1
                let id = "p\(nextID)"
                let sent = connection != nil
                if sent { saved.insert(id) }
                outbox.enqueued(Self.entry(id), sent: sent)
                queued.append(id)
                take(outbox.wait(for: id, until: now.advanced(by: .seconds(Int64.random(in: 5...60, using: &random)))) ?? [])
            case 2:
                if connection == nil {
                    connections += 1
                    connection = connections
                    take(outbox.connected(connections))
                } else {
                    connection = nil
                    outbox.disconnected()
                }
            case 3:
                if !pendingMarks.isEmpty {
                    let ids = pendingMarks.removeFirst()
                    if Bool.random(using: &random) {
                        saved.formUnion(ids)
                        take(outbox.marked(ids))
                    } else {
                        outbox.markFailed(ids)
                    }
                }
            case 4, 5:
                // The server answers one entry written on the open connection (maybe twice).
                if let connection, let id = writtenOn[connection]?.randomElement(using: &random) {
                    if let action = outbox.acked(id, seq: 1, time: 1, duplicate: false) { take([action]) }
                }
            case 6:
                if let connection, let id = writtenOn[connection]?.randomElement(using: &random) {
                    let code: CircleErrorCode = Bool.random(using: &random) ? .unavailable : .rateLimited
                    if let action = outbox.refused(id, code: code, message: "") { take([action]) }
                }
            case 7:
                if let id = queued.randomElement(using: &random), let action = outbox.cancel(id) {
                    #expect(!saved.contains(id), "\(id) cancelled after it was saved as sent")
                    take([action])
                }
            case 8:
                now = now.advanced(by: .seconds(Int64.random(in: 1...10, using: &random)))
                take(outbox.deadlinePassed(now: now, timeout: .seconds(60)))
            default:
                take(outbox.flush())
            }
        }
        // Whatever is left resolves by its deadline, once.
        take(outbox.deadlinePassed(now: now.advanced(by: .seconds(3600)), timeout: .seconds(60)))
        #expect(outbox.entries.isEmpty)
        #expect(resolved.count == nextID, "every entry resolved")
        #expect(resolved.values.allSatisfy { $0 == 1 }, "no entry resolved twice: \(resolved.filter { $0.value > 1 })")
        for (number, ids) in writtenOn {
            // Within a connection, the first writes of the entries follow the outbox order.
            var seen: Set<String> = []
            let firsts = ids.filter { seen.insert($0).inserted }
            let order = firsts.compactMap { Int($0.dropFirst()) }
            #expect(order == order.sorted(), "connection \(number) wrote \(firsts)")
        }
    }
}

@Suite("Request table")
struct RequestTableTests {
    typealias Table = RequestTable<FakeInstant>

    @Test("a call is answered once: by its reply, or by its deadline, and a late reply finds nothing")
    func callAnsweredOnce() {
        var table = Table()
        let a = table.call(until: .at(5))
        let b = table.call(until: .at(3))
        #expect(a != b)
        #expect(table.nextDeadline == .at(3))
        let r35 = table.answered(a, accepted: true)
        #expect(r35 == .call)
        let r36 = table.answered(a, accepted: true)
        #expect(r36 == nil)
        let r37 = table.deadlinePassed(now: .at(2))
        #expect(r37.calls.isEmpty)
        let r38 = table.deadlinePassed(now: .at(3))
        #expect(r38.calls == [b])
        let r39 = table.deadlinePassed(now: .at(100))
        #expect(r39.calls.isEmpty)
        let r40 = table.answered(b, accepted: true)
        #expect(r40 == nil)
        #expect(table.nextDeadline == nil)
    }

    @Test("a circle is joined once per connection; its ack wakes the calls waiting for it")
    func joinOncePerConnection() throws {
        var table = Table()
        let r41 = table.join("c")
        let id = try #require(r41)
        let r42 = table.join("c")
        #expect(r42 == nil)
        #expect(table.joinState(of: "c") == .requested(id: id))
        let waiter = UUID()
        let r43 = table.waitForJoin("c", waiter: waiter, until: .at(5))
        #expect(r43)
        let r44 = table.answered(id, accepted: true)
        #expect(r44 == .join(circle: "c", waiters: [waiter]))
        #expect(table.joinState(of: "c") == .joined)
        let r45 = table.join("c")
        #expect(r45 == nil)
        let r46 = table.waitForJoin("c", waiter: UUID(), until: .at(5))
        #expect(!r46)
        let r47 = table.deadlinePassed(now: .at(10))
        #expect(r47.joinWaits.isEmpty)
        // A new connection joins again.
        _ = table.connectionEnded()
        #expect(table.joinState(of: "c") == .none)
        let r48 = table.join("c")
        #expect(r48 != nil)
    }

    @Test("a refused join can be asked for again, and its waiters are told")
    func joinRefused() throws {
        var table = Table()
        let r49 = table.join("c")
        let id = try #require(r49)
        let waiter = UUID()
        let r50 = table.waitForJoin("c", waiter: waiter, until: .at(5))
        #expect(r50)
        let r51 = table.answered(id, accepted: false)
        #expect(r51 == .join(circle: "c", waiters: [waiter]))
        #expect(table.joinState(of: "c") == .none)
        let r52 = table.join("c")
        #expect(r52 != nil)
    }

    @Test("a join wait times out once; the join itself stays asked for")
    func joinWaitTimesOut() throws {
        var table = Table()
        let r53 = table.join("c")
        let id = try #require(r53)
        let waiter = UUID()
        let r54 = table.waitForJoin("c", waiter: waiter, until: .at(5))
        #expect(r54)
        #expect(table.nextDeadline == .at(5))
        let expired = table.deadlinePassed(now: .at(5))
        #expect(expired.joinWaits.map(\.0) == [waiter])
        let r55 = table.deadlinePassed(now: .at(6))
        #expect(r55.joinWaits.isEmpty)
        let r56 = table.answered(id, accepted: true)
        #expect(r56 == .join(circle: "c", waiters: []))
    }

    @Test("a closed connection fails every call and join wait, once")
    func connectionEnded() throws {
        var table = Table()
        let call = table.call(until: .at(5))
        let r57 = table.join("c")
        _ = try #require(r57)
        let waiter = UUID()
        _ = table.waitForJoin("c", waiter: waiter, until: .at(5))
        let dropped = table.connectionEnded()
        #expect(dropped.calls == [call])
        #expect(dropped.joinWaits == [waiter])
        let r58 = table.answered(call, accepted: true)
        #expect(r58 == nil)
        let r59 = table.connectionEnded()
        #expect(r59.calls.isEmpty)
        #expect(table.nextDeadline == nil)
    }
}

@Suite("Stream cursor")
struct StreamCursorTests {
    @Test("a join's replay and the live posts that overlap it are delivered once each, without a gap")
    func replayAndLive() {
        var cursor: Int64? = 5
        var delivered: [Int64] = []
        // The replay (6…8) and the live posts committed while it was read (7…10) interleave.
        for seq: Int64 in [6, 7, 7, 8, 8, 9, 6, 10] {
            switch StreamCursor.arrival(of: seq, after: cursor) {
            case .delivered:
                continue
            case .next:
                delivered.append(seq)
                cursor = seq
            case .afterGap(let from, let to):
                Issue.record("a gap \(from)…\(to) before \(seq)")
            }
        }
        #expect(delivered == [6, 7, 8, 9, 10])
    }

    @Test("a skipped seq is reported as a gap; without a cursor every post is next")
    func gap() {
        #expect(StreamCursor.arrival(of: 9, after: 5) == .afterGap(from: 6, to: 8))
        #expect(StreamCursor.arrival(of: 1, after: nil) == .next)
        #expect(StreamCursor.arrival(of: 5, after: 5) == .delivered)
    }
}
