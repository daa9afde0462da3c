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
}
