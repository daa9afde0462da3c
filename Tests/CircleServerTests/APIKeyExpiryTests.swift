import CircleTestSupport
import CircleWire
import Foundation
import Testing

@testable import CircleServer

/// API keys with `expiresAt` (docs/API.md, "API keys"): the limits on creation, and an expired
/// key answered `401 key_expired` while an unexpired one works.
@Suite("API key expiry", .serialized, .timeLimit(.minutes(3)))
struct APIKeyExpiryTests {
    @Test("expiresAt: kept and shown; in the past or over five years ahead refused; an expired key gets 401 key_expired")
    func expiry() async throws {
        try await withCanaryServer { server, canary in
            let link = try #require(server.server?.setupLink)
            let setup = try await server.http(
                "POST", HTTPAPI.Path.authSetup, json: #"{"token":"\#(link.split(separator: "#setup=")[1])","name":"ada","password":"correct horse battery"}"#
            )
            #expect(setup.status == 201, "\(setup.body)")
            let admin = try await server.token("ada")
            let now = Identity.now
            let tomorrow = now + 86_400_000
            let made = try await server.http(
                "POST", HTTPAPI.Path.adminAPIKeys, token: admin, json: #"{"name":"soon","bot":"soon-bot","scopes":["read"],"expiresAt":\#(tomorrow)}"#
            )
            #expect(made.status == 201, "\(made.body)")
            let info = try JSONDecoder().decode(HTTPAPI.APIKeyInfo.self, from: Data(made.body.utf8))
            #expect(info.expiresAt == tomorrow)
            let key = try #require(info.key)
            #expect(try await server.http("GET", HTTPAPI.Path.circles, token: key).status == 200, "not expired yet")
            #expect(try await server.http("GET", HTTPAPI.Path.adminAPIKeys, token: admin).body.contains(#""expiresAt":\#(tomorrow)"#))

            for expiry in ["\(now - 1000)", "0", "\(now + Int64(HTTPAPI.maxAPIKeyLifetimeDays + 1) * 86_400_000)", #""tomorrow""#] {
                let refused = try await server.http(
                    "POST", HTTPAPI.Path.adminAPIKeys, token: admin, json: #"{"name":"bad","bot":"soon-bot","scopes":["read"],"expiresAt":\#(expiry)}"#
                )
                #expect(refused.status == 400, "\(expiry): \(refused)")
            }

            // A key that has expired (made in the store, as time would have made it).
            let store = try #require(server.server?.services.store)
            let secret = APIKey.prefix + "gone." + Identity.randomSecret(bytes: 32)
            try await store.createAPIKey(
                APIKey(
                    id: "gone", name: "expired", secretHash: Identity.hash(secret), bot: "soon-bot", scopes: [.read], createdBy: "ada", createdAt: now - 10_000,
                    expiresAt: now - 1
                )
            )
            let expired = try await server.http("GET", HTTPAPI.Path.circles, token: secret)
            #expect(expired.status == 401 && expired.body.contains("key_expired"), "\(expired)")
            #expect(try await store.apiKey(id: "gone")?.expiresAt == now - 1, "the store keeps expiresAt")
            try await canary.check("after an expired key")
        }
    }
}
