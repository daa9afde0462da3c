@testable import CircleServer
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
        guard case .post(_, let seq, _) = event else { return self.journal.add("\(self.name) other") }
        self.journal.add("\(self.name) post \(seq)")
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

@Suite("LoopInbox")
struct LoopInboxTests {
    @Test("a loop that keeps up drains each batch on its own: answers, deliveries, then the flushes")
    func oneBatchPerDrain() {
        let loop = EmbeddedEventLoop()
        let journal = Journal()
        let alice = subscriber("alice", on: loop, journal: journal)
        let inbox = LoopInbox(eventLoop: loop)

        inbox.post(.run { journal.add("ack 1") })
        inbox.post(.deliver([(alice, post(1))]))
        inbox.post(.atEnd { journal.add("answer flush 1") })
        #expect(journal.all.isEmpty, "nothing runs off the loop")
        loop.run()
        #expect(journal.all == ["ack 1", "alice post 1", "alice flush", "answer flush 1"])

        inbox.post(.deliver([(alice, post(2))]))
        loop.run()
        #expect(journal.all.suffix(2) == ["alice post 2", "alice flush"], "a drain that ran leaves the next post a drain of its own")
    }

    @Test("batches handed over while a drain waits join it: every write in order, then one flush pass")
    func laterBatchesJoinAWaitingDrain() {
        let loop = EmbeddedEventLoop()
        let journal = Journal()
        let alice = subscriber("alice", on: loop, journal: journal)
        let bob = subscriber("bob", on: loop, journal: journal)
        let inbox = LoopInbox(eventLoop: loop)

        for seq in Int64(1)...3 {
            inbox.post(.run { journal.add("ack \(seq)") })
            inbox.post(.deliver([(alice, post(seq)), (bob, post(seq))]))
            inbox.post(.atEnd { journal.add("answer flush \(seq)") })
        }
        loop.run()
        let entries = journal.all
        let writes = entries.prefix { !$0.contains("flush") }
        #expect(Array(writes) == [
            "ack 1", "alice post 1", "bob post 1",
            "ack 2", "alice post 2", "bob post 2",
            "ack 3", "alice post 3", "bob post 3",
        ])
        let rest = entries.dropFirst(writes.count)
        #expect(rest.allSatisfy { $0.contains("flush") }, "no write after the first flush: \(entries)")
        #expect(Array(rest.suffix(3)) == ["answer flush 1", "answer flush 2", "answer flush 3"], "the answers' flushes come last")
    }

    @Test("a revocation keeps its place among the posts")
    func runKeepsItsPlace() {
        let loop = EmbeddedEventLoop()
        let journal = Journal()
        let alice = subscriber("alice", on: loop, journal: journal)
        let inbox = LoopInbox(eventLoop: loop)

        inbox.post(.deliver([(alice, post(1))]))
        inbox.post(.run { alice.receive(.revoke(circle: "c")) })
        inbox.post(.deliver([(alice, post(2))]))
        loop.run()
        #expect(Array(journal.all.prefix(3)) == ["alice post 1", "alice other", "alice post 2"])
    }

    @Test("work posted with held wakes waits for the wake, then the whole batch drains once, in order")
    func heldWakesDrainOnce() {
        let loop = EmbeddedEventLoop()
        let journal = Journal()
        let alice = subscriber("alice", on: loop, journal: journal)
        let inbox = LoopInbox(eventLoop: loop)
        let other = LoopInbox(eventLoop: loop)

        var wakes = InboxWakes()
        inbox.post(.run { journal.add("ack 1") }, wakes: &wakes)
        loop.run()
        #expect(journal.all.isEmpty, "no drain before the wake, even when the loop runs in between")
        inbox.post(.deliver([(alice, post(1))]), wakes: &wakes)
        loop.run()
        inbox.post(.atEnd { journal.add("answer flush 1") }, wakes: &wakes)
        other.post(.run { journal.add("other loop") }, wakes: &wakes)
        #expect(wakes.count == 2, "one wake per inbox, however much was posted to it")
        loop.run()
        #expect(journal.all.isEmpty)

        wakes.wake()
        #expect(wakes.count == 0)
        loop.run()
        #expect(journal.all == ["ack 1", "alice post 1", "alice flush", "answer flush 1", "other loop"])

        // Work posted by others while a wake is held joins the held drain.
        inbox.post(.deliver([(alice, post(2))]), wakes: &wakes)
        inbox.post(.deliver([(alice, post(3))]))
        loop.run()
        #expect(journal.all.count == 5, "the plain post joined the drain that waits for the held wake")
        wakes.wake()
        loop.run()
        // (The subscriber's flush is called once per delivery batch; the second finds nothing.)
        #expect(Array(journal.all.dropFirst(5)) == ["alice post 2", "alice post 3", "alice flush", "alice flush"])
    }
}
