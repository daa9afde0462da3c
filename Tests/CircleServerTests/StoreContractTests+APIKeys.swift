import CircleTestSupport
import Foundation
import Testing

@testable import CircleServer

/// ``APIKeyStore``'s guarantees, on both stores: keys are kept with their scopes, ids are
/// unique, a revocation keeps its first time, a use only moves forward.
extension StoreContractTests {
    @Test(arguments: StoreKind.allCases) func apiKeys(_ kind: StoreKind) async throws {
        try await self.withStore(kind) { store in
            #expect(try await store.apiKeys().isEmpty)
            let key = APIKey(id: "k1", name: "deploys", secretHash: "h1", bot: "deploy-bot", scopes: [.postAsBot, .read], createdBy: "ada", createdAt: 10)
            try await store.createAPIKey(key)
            try await store.createAPIKey(APIKey(id: "k2", name: "everything", secretHash: "h2", bot: "ops", scopes: Set(APIKeyScope.allCases), createdBy: "ada", createdAt: 20))
            let taken = await #expect(throws: StoreError.self) {
                try await store.createAPIKey(APIKey(id: "k1", name: "again", secretHash: "h3", bot: "x", scopes: [.read], createdBy: "ada", createdAt: 30))
            }
            #expect(taken?.code == .conflict)

            #expect(try await store.apiKey(id: "k1") == key)
            #expect(try await store.apiKey(id: "nope") == nil)
            #expect(try await store.apiKeys().map(\.id) == ["k1", "k2"])
            #expect(try await store.apiKey(id: "k2")?.scopes == Set(APIKeyScope.allCases))

            try await store.touchAPIKey(id: "k1", at: 100)
            try await store.touchAPIKey(id: "k1", at: 50)
            #expect(try await store.apiKey(id: "k1")?.lastUsedAt == 100, "a use never moves back")
            try await store.touchAPIKey(id: "nope", at: 100)

            #expect(try await store.revokeAPIKey(id: "k1", at: 200))
            #expect(try await store.revokeAPIKey(id: "k1", at: 300), "revoking again is not an error")
            #expect(try await store.apiKey(id: "k1")?.revokedAt == 200, "the first revocation's time stays")
            #expect(try await !store.revokeAPIKey(id: "nope", at: 200))
            #expect(try await store.apiKey(id: "k2")?.revokedAt == nil)
        }
    }

    @Test(arguments: StoreKind.allCases) func moderatedDeletes(_ kind: StoreKind) async throws {
        try await self.withStore(kind) { store in
            _ = try await store.createCircle(name: "general", owner: "alice", isPrivate: false, createdAt: 1)
            _ = try await store.commit([NewPost(circle: "general", author: "bo", clientID: "p1", text: "spam", attachment: nil, time: 2)])
            let refused = try await store.commit([
                NewPost(circle: "general", author: "mod-bot", clientID: "d1", text: nil, attachment: nil, time: 3, change: .delete, target: 1)
            ])
            guard case .rejected(.notAuthor, _)? = refused.first else {
                Issue.record("a delete of someone else's post without moderated: \(refused)")
                return
            }
            let moderated = try await store.commit([
                NewPost(circle: "general", author: "mod-bot", clientID: "d2", text: nil, attachment: nil, time: 4, change: .delete, target: 1, moderated: true)
            ])
            guard case .stored(let entry)? = moderated.first else {
                Issue.record("a moderated delete: \(moderated)")
                return
            }
            #expect(entry.seq == 2 && entry.author == "mod-bot" && entry.change == .delete && entry.target == 1)
            let page = try await store.history(in: "general", before: nil, after: nil, limit: 10, viewer: "alice")
            #expect(page.count == 1 && page[0].deleted == true && page[0].text == nil, "\(page)")
            let twice = try await store.commit([
                NewPost(circle: "general", author: "mod-bot", clientID: "d3", text: nil, attachment: nil, time: 5, change: .delete, target: 1, moderated: true)
            ])
            guard case .rejected(.postDeleted, _)? = twice.first else {
                Issue.record("a second moderated delete: \(twice)")
                return
            }
        }
    }
}
