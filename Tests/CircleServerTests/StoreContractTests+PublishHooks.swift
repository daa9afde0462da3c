import CircleTestSupport
import Foundation
import Testing

@testable import CircleServer

/// ``PublishHookStore``'s guarantees, on both stores: one hook per circle, replaced whole;
/// deleting reports whether there was one; an entry is found by its idempotency key.
extension StoreContractTests {
    @Test(arguments: StoreKind.allCases) func publishHooks(_ kind: StoreKind) async throws {
        try await self.withStore(kind) { store in
            _ = try await store.createCircle(name: "general", owner: "alice", isPrivate: false, createdAt: 1)
            _ = try await store.createCircle(name: "quiet", owner: "alice", isPrivate: true, createdAt: 1)
            #expect(try await store.publishHooks().isEmpty)
            let hook = PublishHook(circle: "general", url: "https://example.com/a", secret: "whsec_one", createdBy: "ada", createdAt: 10)
            try await store.setPublishHook(hook)
            try await store.setPublishHook(
                PublishHook(circle: "quiet", url: "https://example.com/q", secret: "whsec_q", timeoutMilliseconds: 150, onFailure: .accept, createdBy: "ops", createdAt: 11)
            )
            #expect(try await store.publishHooks() == [
                hook,
                PublishHook(circle: "quiet", url: "https://example.com/q", secret: "whsec_q", timeoutMilliseconds: 150, onFailure: .accept, createdBy: "ops", createdAt: 11),
            ])
            var replaced = hook
            replaced.url = "https://example.com/b"
            replaced.timeoutMilliseconds = 5000
            replaced.onFailure = .accept
            try await store.setPublishHook(replaced)
            #expect(try await store.publishHooks().first == replaced, "a second hook for a circle replaces the first")
            #expect(try await store.publishHooks().count == 2)
            #expect(try await store.deletePublishHook(circle: "general"))
            #expect(try await !store.deletePublishHook(circle: "general"))
            #expect(try await !store.deletePublishHook(circle: "nowhere"))
            #expect(try await store.publishHooks().map(\.circle) == ["quiet"])
        }
    }

    @Test(arguments: StoreKind.allCases) func entriesByIdempotencyKey(_ kind: StoreKind) async throws {
        try await self.withStore(kind) { store in
            _ = try await store.createCircle(name: "general", owner: "alice", isPrivate: false, createdAt: 1)
            _ = try await store.commit([
                NewPost(circle: "general", author: "bo", clientID: "p1", text: "first", attachment: nil, time: 2),
                NewPost(circle: "general", author: "bo", clientID: "p2", text: "second", attachment: nil, time: 2),
            ])
            let found = try await store.storedEntry(circle: "general", author: "bo", clientID: "p2")
            #expect(found?.seq == 2 && found?.text == "second" && found?.id == "p2")
            #expect(try await store.storedEntry(circle: "general", author: "alice", clientID: "p2") == nil, "another author's key")
            #expect(try await store.storedEntry(circle: "general", author: "bo", clientID: "p3") == nil)
            #expect(try await store.storedEntry(circle: "nowhere", author: "bo", clientID: "p1") == nil)
        }
    }

    @Test(arguments: StoreKind.allCases) func readOnlyCirclesAndKeyExpiry(_ kind: StoreKind) async throws {
        try await self.withStore(kind) { store in
            _ = try await store.createCircle(name: "news", owner: "alice", isPrivate: false, createdAt: 1)
            _ = try await store.createCircle(name: "chat", owner: "alice", isPrivate: false, createdAt: 1)
            #expect(try await store.readOnlyCircles().isEmpty)
            try await store.setReadOnly("news", true, by: "ada", at: 2)
            try await store.setReadOnly("news", true, by: "ada", at: 3)
            try await store.setReadOnly("chat", true, by: "ada", at: 3)
            #expect(try await store.readOnlyCircles() == ["chat", "news"])
            try await store.setReadOnly("chat", false, by: "ada", at: 4)
            try await store.setReadOnly("chat", false, by: "ada", at: 5)
            #expect(try await store.readOnlyCircles() == ["news"])

            let key = APIKey(id: "k1", name: "soon", secretHash: "h", bot: "b", scopes: [.read], createdBy: "ada", createdAt: 10, expiresAt: 99)
            try await store.createAPIKey(key)
            try await store.createAPIKey(APIKey(id: "k2", name: "never", secretHash: "h2", bot: "b", scopes: [.read], createdBy: "ada", createdAt: 10))
            #expect(try await store.apiKey(id: "k1") == key)
            #expect(try await store.apiKey(id: "k2")?.expiresAt == nil)

            // A disconnect is logged for the other nodes of a shared store.
            let shared = store as? any SharedCircleStore
            let cursor = try await shared?.accountEvents(after: nil).newest
            try await store.logDisconnect(of: "bo", at: 20)
            if let shared, let cursor {
                #expect(try await shared.accountEvents(after: cursor).events == [AccountEvent(user: "bo", session: nil)])
            }
        }
    }
}
