@testable import CircleClient
import CircleTestSupport
import Foundation
import NIOConcurrencyHelpers
import Testing

/// A memory state store whose removals wait until the test opens the gate, and which keeps the
/// outbox it was told of and the order its writes finished in.
private actor GatedRemoveStore: ObservedStateStore {
    private(set) var stored: [String: String] = [:]
    private(set) var finished: [String] = []
    private(set) var removalsWaiting = 0
    private var gate: [CheckedContinuation<Void, Never>] = []
    private var gateOpen = false

    func enqueue(_ entry: OutboxEntry, sent: Bool) async throws {
        self.stored[entry.id] = entry.text
        self.finished.append("enqueue \(entry.text ?? "")")
    }
    func remove(id: String) async throws {
        if !self.gateOpen {
            self.removalsWaiting += 1
            await withCheckedContinuation { self.gate.append($0) }
        }
        self.stored[id] = nil
        self.finished.append("remove")
    }

    func open() {
        self.gateOpen = true
        for waiting in self.gate { waiting.resume() }
        self.gate = []
    }
}

@Suite("CircleClient outbox: removals reach the state store in order")
struct OutboxRemovalOrderTests {
    @Test("an entry queued again under the id of one just resolved stays in the state store (the removal goes first)")
    func removalBeforeRequeue() async throws {
        // The server answers the first post of an id and never the second.
        let answered = NIOLockedValueBox(Set<String>())
        let fake = try await FakeCircleServer.start { request in
            switch request.action {
            case .join:
                return [.ack(id: request.id, seq: 0, time: nil, duplicate: false)]
            case .post:
                guard answered.withLockedValue({ $0.insert(request.id).inserted }) else { return [] }
                return [.ack(id: request.id, seq: 1, time: 1, duplicate: false)]
            default:
                return []
            }
        }
        let store = GatedRemoveStore()
        let client = try await CircleClient(
            configuration: .init(servers: [fake.url], tokenProvider: { unsignedToken(for: "nina") }),
            store: store
        )
        await client.connect()
        let receipt = try await client.core.post(text: "first", attachment: nil, to: "notes", id: "photo-1")
        #expect(receipt.seq == 1)
        // Resolved: its removal is on its way to the store, held there.
        #expect(await eventually { await store.removalsWaiting == 1 })
        // The same id queued again (as a photo post is after a restart).
        let again = Task { try await client.core.post(text: "second", attachment: nil, to: "notes", id: "photo-1") }
        // Either the write waits for the removal (right), or it reached the store before it (wrong).
        let waitedOrWrote = await eventually {
            if await client.core.waitsForRemoval == 1 { return true }
            return await store.finished.contains("enqueue second")
        }
        #expect(waitedOrWrote)
        await store.open()
        #expect(await eventually { await client.outbox.map(\.text) == ["second"] })
        #expect(await store.finished == ["enqueue first", "remove", "enqueue second"])
        #expect(await store.stored == ["photo-1": "second"], "the entry queued again was removed from the state store by the earlier removal")
        await client.shutdown()
        again.cancel()
        _ = try? await again.value
        await fake.shutdown()
    }
}
