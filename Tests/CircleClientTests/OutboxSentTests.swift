@testable import CircleClient
import CircleTestSupport
import Foundation
import Testing

/// A memory state store whose marking of sent entries waits until the test opens the gate, and
/// which records each marking.
private actor GatedMarkStore: ObservedStateStore {
    private(set) var markings: [[String]] = []
    private var gate: CheckedContinuation<Void, Never>?
    private var gateOpen = false

    func markSent(_ ids: [String]) async throws {
        self.markings.append(ids)
        if !self.gateOpen { await withCheckedContinuation { self.gate = $0 } }
    }

    func open() {
        self.gateOpen = true
        self.gate?.resume()
        self.gate = nil
    }
}

@Suite("CircleClient outbox: an entry that may have reached the server stays", .serialized)
struct OutboxSentTests {
    @Test("entries written to a server that never answers cannot be cancelled or replaced, also after a restart; a new one can")
    func sentEntriesStay() async throws {
        let silent = try await FakeCircleServer.start { _ in [] }
        let path = temporaryStateFile("circle-outbox")
        defer { removeStateFile(path) }
        let configuration = CircleClientConfiguration(servers: [silent.url], tokenProvider: { unsignedToken(for: "nina") }, stateFile: path)

        let first = try await CircleClient(configuration: configuration)
        // Queued before the connection (marked by the flush after the connect), then one queued
        // on the open connection (marked as it is stored).
        let offline = Task { try? await first.post("queued offline", to: "notes") }
        #expect(await eventually { await first.outbox.count == 1 })
        await first.connect()
        let arrived = await collect(silent.requests) { requests in requests.contains { $0.action == .post } }
        #expect(arrived.last?.text == "queued offline")
        let online = Task { try? await first.post("queued online", to: "notes") }
        let more = await collect(silent.requests) { requests in requests.contains { $0.action == .post } }
        #expect(more.last?.text == "queued online")
        let ids = await first.outbox.map(\.id)
        #expect(ids.count == 2)
        for id in ids {
            #expect(await first.cancelOutboxEntry(id) == false)
            #expect(await first.replaceOutboxText(id, with: "too late") == false)
        }
        await first.shutdown()
        _ = await (offline.value, online.value)

        let second = try await CircleClient(configuration: configuration)
        #expect(await second.outbox.map(\.id) == ids)
        #expect(await second.outbox.map(\.text) == ["queued offline", "queued online"])
        for id in ids {
            #expect(await second.cancelOutboxEntry(id) == false)
            #expect(await second.replaceOutboxText(id, with: "too late") == false)
        }
        // Never written anywhere: still the app's to take back.
        let unsent = Task { try await second.post("never sent", to: "notes") }
        #expect(await eventually { await second.outbox.count == 3 })
        let unsentID = try #require(await second.outbox.last?.id)
        #expect(await second.replaceOutboxText(unsentID, with: "never sent, corrected"))
        #expect(await second.cancelOutboxEntry(unsentID))
        await #expect(throws: CircleClientError.self) { try await unsent.value }
        #expect(await second.outbox.map(\.id) == ids)
        await second.shutdown()
        await silent.shutdown()
    }

    @Test("entries queued offline are marked in one write when a connection opens, refused to cancel from then on, and written only after it, in order")
    func markedBeforeWritten() async throws {
        let silent = try await FakeCircleServer.start { _ in [] }
        let store = GatedMarkStore()
        let configuration = CircleClientConfiguration(servers: [silent.url], tokenProvider: { unsignedToken(for: "nina") })
        let client = try await CircleClient(configuration: configuration, store: store)
        let calls = (0..<3).map { index in Task { try? await client.post("p\(index)", to: "notes") } }
        #expect(await eventually { await client.outbox.count == 3 })
        // The three tasks may reach the outbox in any order; the outbox's order is the one sent.
        let ids = await client.outbox.map(\.id)
        let texts = await client.outbox.map(\.text)
        #expect(Set(texts) == ["p0", "p1", "p2"])
        await client.connect()
        #expect(await eventually { await store.markings.count == 1 })
        // The mark is being saved: the entries are no longer the app's, and none is written yet.
        #expect(await client.cancelOutboxEntry(ids[0]) == false)
        #expect(await client.replaceOutboxText(ids[1], with: "changed") == false)
        // A request written now lands behind anything written before it: no post may precede it.
        let typing = Task { try? await client.typing(in: "notes") }
        let before = await collect(silent.requests) { $0.contains { $0.action == .typing } }
        #expect(before.map(\.action) == [.join, .typing])
        await store.open()
        let after = await collect(silent.requests) { requests in requests.count == 3 }
        #expect(after.map(\.id) == ids)
        #expect(after.map(\.text) == texts)
        #expect(await store.markings == [ids])
        await client.shutdown()
        await typing.value
        for call in calls { _ = await call.value }
        await silent.shutdown()
    }
}
