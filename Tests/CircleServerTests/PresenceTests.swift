import CircleServer
import CircleTestSupport
import CircleWire
import Foundation
import Testing

/// Presence is per user: the first announced connection of a user in a circle is `joined`, the
/// last one `left`; quiet joins (`"quiet": true`, one-shot clients) are never announced.
@Suite("presence per user, quiet joins", .serialized)
struct PresenceTests {
    /// The presence events alice received before the ack of a marker post, as "+user" / "-user".
    private func presenceSeen(by alice: TestClient, marker: String) async throws -> [String] {
        try await alice.send(.post(marker, to: "room", id: marker))
        let (reply, others) = try await alice.reply(to: marker)
        #expect(reply.ackSeq != nil, "\(reply)")
        return others.compactMap { message in
            switch message {
            case .joined(_, let user): "+\(user)"
            case .left(_, let user): "-\(user)"
            default: nil
            }
        }
    }

    /// Reads alice's messages until `event` ("+user" or "-user") arrives; returns the presence
    /// events seen on the way, that one included.
    private func waitForPresence(_ event: String, at alice: TestClient) async throws -> [String] {
        var seen: [String] = []
        while let message = try await alice.next(timeout: .seconds(10)) {
            switch message {
            case .joined(_, let user): seen.append("+\(user)")
            case .left(_, let user): seen.append("-\(user)")
            default: continue
            }
            if seen.last == event { return seen }
        }
        throw TestFailure("the connection ended before \(event); saw \(seen)")
    }

    @Test("a user's second connection is not announced; the last one to go is")
    func perUser() async throws {
        let server = TestServer()
        defer { server.remove() }
        try await server.start()
        try await server.createCircle("room", owner: "alice")
        let alice = try await TestClient.connect(server, user: "alice")
        try await alice.request { .join("room", id: $0) }

        let bobChat = try await TestClient.connect(server, user: "bob")
        let bobTab = try await TestClient.connect(server, user: "bob")
        try await bobChat.request { .join("room", id: $0) }
        try await bobTab.request { .join("room", id: $0) }
        #expect(try await self.presenceSeen(by: alice, marker: "m1") == ["+bob"])

        // One of bob's two connections goes: bob is still there.
        try await bobChat.request { .leave("room", id: $0) }
        #expect(try await self.presenceSeen(by: alice, marker: "m2") == [])

        // The last one goes (a disconnect, not a leave): now bob left.
        await bobTab.close()
        #expect(try await self.waitForPresence("-bob", at: alice) == ["-bob"])
        await bobChat.close()
        await alice.close()
        await server.stop()
    }

    @Test("a quiet join is not announced, neither its posts' coming nor its going; others are")
    func quietJoin() async throws {
        let server = TestServer()
        defer { server.remove() }
        try await server.start()
        try await server.createCircle("room", owner: "alice")
        let alice = try await TestClient.connect(server, user: "alice")
        try await alice.request { .join("room", id: $0) }

        // A one-shot poster: joins quietly, posts, leaves, disconnects.
        let script = try await TestClient.connect(server, user: "carol")
        #expect(try await script.request { .join("room", id: $0, quiet: true) }.ackSeq == 0)
        #expect(try await script.request { .post("deployed", to: "room", id: $0) }.ackSeq == 1)
        try await script.request { .leave("room", id: $0) }
        #expect(try await self.presenceSeen(by: alice, marker: "m1") == [])
        let again = try await TestClient.connect(server, user: "carol")
        try await again.request { .join("room", id: $0, quiet: true) }
        await again.close()
        await script.close()

        // A quiet connection does not count either: dave's chat joins and leaves as usual,
        // while dave's quiet script comes and goes in between.
        let daveChat = try await TestClient.connect(server, user: "dave")
        try await daveChat.request { .join("room", id: $0) }
        let daveScript = try await TestClient.connect(server, user: "dave")
        try await daveScript.request { .join("room", id: $0, quiet: true) }
        await daveScript.close()
        try await daveChat.request { .leave("room", id: $0) }
        #expect(try await self.waitForPresence("-dave", at: alice) == ["+dave", "-dave"])
        await daveChat.close()
        await alice.close()
        await server.stop()
    }

    @Test("the quiet field is optional, type-checked, and encoded only when set")
    func wireField() throws {
        #expect(!CircleRequest.join("room", id: "1").encodedJSONForTest.contains("quiet"))
        #expect(CircleRequest.join("room", id: "1", quiet: true).encodedJSONForTest.contains("\"quiet\":true"))
        guard case .success(let quiet) = CircleRequest.decode(Array(#"{"action":"join","id":"1","circle":"room","quiet":true}"#.utf8)) else {
            Issue.record("a join with quiet:true must decode")
            return
        }
        #expect(quiet.quiet == true)
        guard case .failure(let failure) = CircleRequest.decode(Array(#"{"action":"join","id":"2","circle":"room","quiet":"yes"}"#.utf8)) else {
            Issue.record("quiet must be a boolean")
            return
        }
        #expect(failure.code == .badRequest)
        #expect(failure.id == "2")
    }
}

extension CircleRequest {
    fileprivate var encodedJSONForTest: String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        return (try? encoder.encode(self)).map { String(decoding: $0, as: UTF8.self) } ?? ""
    }
}
