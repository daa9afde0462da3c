@testable import CircleServer
import CircleWire
import NIOConcurrencyHelpers
import NIOCore
import NIOEmbedded
import Testing

/// What the inbox did, in order, as the subscribers and closures saw it.
private final class Journal: Sendable {
    private let entries = NIOLockedValueBox([String]())

    func add(_ entry: String) { self.entries.withLockedValue { $0.append(entry) } }
    var all: [String] { self.entries.withLockedValue { $0 } }
}

/// A subscriber that writes what reaches it into the journal.
private final class JournalSink: HubSubscriberSink {
    let name: String
    let journal: Journal
    init(name: String, journal: Journal) {
        self.name = name
        self.journal = journal
    }
    func receive(_ event: HubEvent) {
        switch event {
        case .post(_, let seq, _): self.journal.add("\(self.name) post \(seq)")
        case .answered(let id, _): self.journal.add("\(self.name) answer \(id)")
        case .revoke: self.journal.add("\(self.name) revoke")
        default: self.journal.add("\(self.name) other")
        }
    }
    func flushDeliveries() { self.journal.add("\(self.name) flush") }
    func shutDown() {}
}

private func subscriber(_ name: String, on loop: EmbeddedEventLoop, journal: Journal) -> HubSubscriber {
    HubSubscriber(eventLoop: loop, user: name, sink: JournalSink(name: name, journal: journal))
}

private func post(_ seq: Int64) -> HubEvent {
    .post(circle: "c", seq: seq, payload: HubPayload(text: ByteBuffer(string: "post \(seq)")))
}

private func answer(_ id: String) -> HubEvent {
    .answered(id: id, .success(.noSuchCircle))
}

@Suite("LoopInbox")
struct LoopInboxTests {
    @Test("a loop that keeps up drains each hand-over on its own: the writes, then the flushes")
    func oneBatchPerDrain() {
        let loop = EmbeddedEventLoop()
        let journal = Journal()
        let alice = subscriber("alice", on: loop, journal: journal)
        let bob = subscriber("bob", on: loop, journal: journal)
        let inbox = LoopInbox(eventLoop: loop)

        inbox.deliver([(alice, answer("p1")), (alice, post(1)), (bob, post(1))])
        #expect(journal.all.isEmpty, "nothing runs off the loop")
        loop.run()
        #expect(journal.all == ["alice answer p1", "alice post 1", "bob post 1", "alice flush", "alice flush", "bob flush"])

        inbox.deliver([(alice, post(2))])
        loop.run()
        #expect(journal.all.suffix(2) == ["alice post 2", "alice flush"], "a drain that ran leaves the next post a drain of its own")
    }

    @Test("hand-overs made while a drain waits join it: every write in order, then only flushes")
    func laterBatchesJoinAWaitingDrain() {
        let loop = EmbeddedEventLoop()
        let journal = Journal()
        let alice = subscriber("alice", on: loop, journal: journal)
        let bob = subscriber("bob", on: loop, journal: journal)
        let inbox = LoopInbox(eventLoop: loop)

        for seq in Int64(1)...3 {
            inbox.deliver([(alice, answer("p\(seq)"))])
            inbox.deliver([(alice, post(seq)), (bob, post(seq))])
        }
        loop.run()
        let entries = journal.all
        let writes = entries.prefix { !$0.contains("flush") }
        #expect(Array(writes) == [
            "alice answer p1", "alice post 1", "bob post 1",
            "alice answer p2", "alice post 2", "bob post 2",
            "alice answer p3", "alice post 3", "bob post 3",
        ])
        let rest = entries.dropFirst(writes.count)
        #expect(rest.allSatisfy { $0.contains("flush") }, "no write after the first flush: \(entries)")
        #expect(Set(rest) == ["alice flush", "bob flush"], "every subscriber handed something is flushed")
    }

    @Test("a revocation keeps its place among the posts")
    func revocationKeepsItsPlace() {
        let loop = EmbeddedEventLoop()
        let journal = Journal()
        let alice = subscriber("alice", on: loop, journal: journal)
        let inbox = LoopInbox(eventLoop: loop)

        inbox.deliver([(alice, post(1))])
        inbox.deliver([(alice, .revoke(circle: "c"))])
        inbox.deliver([(alice, post(2))])
        loop.run()
        #expect(Array(journal.all.prefix(3)) == ["alice post 1", "alice revoke", "alice post 2"])
    }

    @Test("work handed over with held wakes waits for the wake, then the whole batch drains once, in order")
    func heldWakesDrainOnce() {
        let loop = EmbeddedEventLoop()
        let journal = Journal()
        let alice = subscriber("alice", on: loop, journal: journal)
        let bob = subscriber("bob", on: loop, journal: journal)
        let inbox = LoopInbox(eventLoop: loop)
        let other = LoopInbox(eventLoop: loop)

        var wakes = InboxWakes()
        inbox.deliver([(alice, answer("p1"))], wakes: &wakes)
        loop.run()
        #expect(journal.all.isEmpty, "no drain before the wake, even when the loop runs in between")
        inbox.deliver([(alice, post(1))], wakes: &wakes)
        other.deliver([(bob, post(1))], wakes: &wakes)
        #expect(wakes.count == 2, "one wake per inbox, however much was handed to it")
        loop.run()
        #expect(journal.all.isEmpty)

        wakes.wake()
        #expect(wakes.count == 0)
        loop.run()
        #expect(journal.all == ["alice answer p1", "alice post 1", "alice flush", "alice flush", "bob post 1", "bob flush"])

        // Work handed over by others while a wake is held joins the held drain.
        inbox.deliver([(alice, post(2))], wakes: &wakes)
        inbox.deliver([(alice, post(3))])
        loop.run()
        #expect(journal.all.count == 6, "the plain hand-over joined the drain that waits for the held wake")
        wakes.wake()
        loop.run()
        // (The subscriber's flush is called once per hand-over; the second finds nothing.)
        #expect(Array(journal.all.dropFirst(6)) == ["alice post 2", "alice post 3", "alice flush", "alice flush"])
    }
}
