@testable import CircleClient
import CircleServer
import CircleTestSupport
import Foundation
import NIOConcurrencyHelpers
import Testing

/// A state store whose first cursor write waits until the test opens the gate, and which
/// records every cursor write.
private actor GatedCursorStore: ObservedStateStore {
    private(set) var cursorWrites: [Int64] = []
    private var gate: CheckedContinuation<Void, Never>?
    private var gateOpen = false

    func setCursor(_ seq: Int64, for circle: String) async throws {
        self.cursorWrites.append(seq)
        if self.cursorWrites.count == 1 && !self.gateOpen {
            await withCheckedContinuation { self.gate = $0 }
        }
    }

    func open() {
        self.gateOpen = true
        self.gate?.resume()
        self.gate = nil
    }
}

@Suite("CircleClient cursor writes", .serialized)
struct CursorWriteTests {
    @Test("cursors of a burst of deliveries are written together, newest last, and flushed by shutdown")
    func coalesced() async throws {
        let server = TestServer(limits: .init(postsPerSecond: 10_000, postBurst: 10_000))
        defer { server.remove() }
        try await server.start()
        try await server.createCircle("general", owner: "alice")
        func configuration(_ user: String) -> CircleClientConfiguration {
            .init(servers: [server.wsURL], tokenProvider: { try await server.token(user, ttl: .seconds(3600)) })
        }
        let store = GatedCursorStore()
        let bob = try await CircleClient(configuration: configuration("bob"), store: store)
        let alice = try await CircleClient(configuration: configuration("alice"))
        let events = await bob.messages(in: "general")
        await bob.connect()
        await alice.connect()
        // bob's join is acknowledged once its cursor is set (the first write, held at the gate).
        let deadline = ContinuousClock.now + .seconds(30)
        while await store.cursorWrites.isEmpty && ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(10))
        }
        #expect(await store.cursorWrites.count == 1)
        let count = 50
        var last: Int64 = 0
        for index in 0..<count {
            last = try await alice.post("p\(index)", to: "general").seq
        }
        var delivered = 0
        for await event in events {
            if case .post = event { delivered += 1 }
            if delivered == count { break }
        }
        #expect(await bob.cursor(of: "general") == last)
        // All 50 deliveries happened while the first write waited: they make one more write.
        await store.open()
        await bob.shutdown()
        await alice.shutdown()
        let writes = await store.cursorWrites
        #expect(writes.count == 2)
        #expect(writes.last == last)
        await server.stop()
    }
}
