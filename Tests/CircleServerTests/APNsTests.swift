import CircleTestSupport
import CircleWire
import Crypto
import Foundation
import JWTKit
import Testing

@testable import CircleServer

/// APNs (docs/OPERATIONS.md, "APNs"): the settings' checks, the device registration parser, the
/// provider token, the request Apple's contract asks for and what its answers come to, without
/// I/O. scripts/apns-test sends through a real HTTP/2 server.
@Suite struct APNsTests {
    static let key = P256.Signing.PrivateKey()

    func settings(keyPEM: String = Self.key.pemRepresentation, keyID: String = "ABC123DEFG", teamID: String = "DEF123GHIJ", topic: String = "com.example.chat")
        -> APNsSettings
    {
        APNsSettings(keyPEM: keyPEM, keyID: keyID, teamID: teamID, topic: topic)
    }

    func pending(circle: String = "lobby", kind: PushKind = .mention, id: Int64 = 7, token: String = String(repeating: "ab", count: 32)) -> PendingPush {
        PendingPush(
            id: id, subscription: PushSubscription(user: "bob", endpoint: APNsDevice(token: token, environment: .development).endpoint, p256dh: "", auth: "", createdAt: 0),
            circle: circle, seq: 3, kind: kind, attempts: 0, createdAt: 0
        )
    }

    /// A P-256 key, ids of letters and digits and a bundle id pass; a P-384 key, an RSA or garbage
    /// key, a bad id, topic, URL or CA are refused with a sentence naming the flag.
    @Test func settingsChecks() {
        #expect(APNsSettings.problem(self.settings()) == nil)
        let p384 = APNsSettings.problem(self.settings(keyPEM: P384.Signing.PrivateKey().pemRepresentation))
        #expect(p384?.contains("--apns-key-file") == true && p384?.contains("P-384") == true, "\(p384 ?? "")")
        #expect(APNsSettings.problem(self.settings(keyPEM: "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----"))?.contains("P-256") == true)
        #expect(APNsSettings.problem(self.settings(keyPEM: Self.key.publicKey.pemRepresentation))?.contains("--apns-key-file") == true)
        #expect(APNsSettings.problem(self.settings(keyID: "ABC 123"))?.contains("--apns-key-id") == true)
        #expect(APNsSettings.problem(self.settings(keyID: ""))?.contains("--apns-key-id") == true)
        #expect(APNsSettings.problem(self.settings(teamID: "DEF/123"))?.contains("--apns-team-id") == true)
        #expect(APNsSettings.problem(self.settings(topic: "com.example chat"))?.contains("--apns-topic") == true)
        var url = self.settings()
        url.url = "http://127.0.0.1:8443"
        #expect(APNsSettings.problem(url)?.contains("--apns-url") == true)
        url.url = "https://127.0.0.1:8443/"
        #expect(APNsSettings.problem(url) == nil)
        #expect(url.origin(.production) == "https://127.0.0.1:8443")
        #expect(self.settings().origin(.production) == "https://api.push.apple.com")
        #expect(self.settings().origin(.development) == "https://api.sandbox.push.apple.com")
        var ca = self.settings()
        ca.caPEM = "not a certificate"
        #expect(APNsSettings.problem(ca)?.contains("--apns-ca-file") == true)
    }

    /// Tokens are 64 to 200 hex digits, stored lowercase; the endpoint names the device again;
    /// everything else is a sentence for the route's 400.
    @Test func deviceRegistration() throws {
        func parse(_ text: String) -> Result<APNsDevice, PushSubscription.Problem> { APNsDevice.parse(Array(text.utf8)) }
        let upper = String(repeating: "AB", count: 32)
        let device = try parse(#"{"token":"\#(upper)"}"#).get()
        #expect(device == APNsDevice(token: upper.lowercased(), environment: .production))
        #expect(device.endpoint == "apns:production:" + upper.lowercased())
        #expect(APNsDevice(endpoint: device.endpoint) == device)
        #expect(try parse(#"{"token":"\#(String(repeating: "0f", count: 100))","environment":"development"}"#).get().environment == .development)
        #expect(APNsDevice(endpoint: "https://push.example.net/x") == nil)
        #expect(APNsDevice(endpoint: "apns:staging:" + upper) == nil)
        #expect(APNsDevice(endpoint: "apns:production:xyz") == nil)
        let refused = [
            "not json", "{}", #"{"token":12}"#,
            #"{"token":"\#(String(repeating: "a", count: 62))"}"#,  // too short
            #"{"token":"\#(String(repeating: "a", count: 202))"}"#,  // too long
            #"{"token":"\#(String(repeating: "a", count: 65))"}"#,  // odd
            #"{"token":"\#(String(repeating: "g", count: 64))"}"#,  // not hex
            #"{"token":"\#(String(repeating: "ab", count: 32))","environment":"staging"}"#,
            String(repeating: " ", count: APNsDevice.maximumBodyBytes + 1),
        ]
        for body in refused {
            guard case .failure(let problem) = parse(body) else {
                Issue.record("accepted \(body.prefix(80))")
                continue
            }
            #expect(!problem.description.isEmpty)
        }
    }

    /// The provider token: ES256 with the key id, `iss` the team and `iat` now; verified here with
    /// jwt-kit and the public key; reused for 40 minutes, then made anew; made anew at once after
    /// APNs calls it expired.
    @Test func providerToken() async throws {
        let provider = try await APNsProviderToken(settings: self.settings())
        let first = try await provider.token(now: 1_800_000_000)
        let verifier = JWTKeyCollection()
        await verifier.add(ecdsa: try ES256PublicKey(backing: Self.key.publicKey), kid: "ABC123DEFG")
        let claims = try await verifier.verify(first, as: APNsProviderClaims.self)
        #expect(claims.iss.value == "DEF123GHIJ")
        #expect(Int64(claims.iat.value.timeIntervalSince1970) == 1_800_000_000)
        let header = try #require(Base64URL.decode(String(first.split(separator: ".")[0])))
        let fields = try #require(try JSONSerialization.jsonObject(with: Data(header)) as? [String: Any])
        #expect(fields["alg"] as? String == "ES256" && fields["kid"] as? String == "ABC123DEFG", "\(fields)")

        #expect(try await provider.token(now: 1_800_000_000 + 39 * 60) == first)
        let renewed = try await provider.token(now: 1_800_000_000 + 40 * 60)
        #expect(renewed != first)
        provider.expire(first)  // an older token: the current one stays
        #expect(try await provider.token(now: 1_800_000_000 + 41 * 60) == renewed)
        provider.expire(renewed)
        let fresh = try await provider.token(now: 1_800_000_000 + 41 * 60)
        #expect(fresh != renewed)
        #expect(Int64(try await verifier.verify(fresh, as: APNsProviderClaims.self).iat.value.timeIntervalSince1970) == 1_800_000_000 + 41 * 60)
    }

    /// The request: `/3/device/<token>` at the device's environment, Apple's headers, an alert
    /// payload with the preview rules of Web Push, a collapse id per circle, an id per push.
    @Test func request() throws {
        let entry = CirclePost(circle: "lobby", seq: 3, author: "alice", text: "@bob " + String(repeating: "é", count: 300), attachment: nil, time: 1, id: "p")
        let push = self.pending()
        let device = try #require(APNsDevice(endpoint: push.subscription.endpoint))
        let request = APNsRequest.make(push, device: device, entry: entry, direct: false, settings: self.settings(), pushSettings: PushSettings(), jwt: "J", now: 1_000_000)
        #expect(request.url == "https://api.sandbox.push.apple.com/3/device/" + String(repeating: "ab", count: 32))
        let headers = Dictionary(request.headers, uniquingKeysWith: { first, _ in first })
        #expect(headers["authorization"] == "bearer J")
        #expect(headers["apns-topic"] == "com.example.chat")
        #expect(headers["apns-push-type"] == "alert")
        #expect(headers["apns-priority"] == "10")
        #expect(headers["apns-expiration"] == "\(1000 + 24 * 3600)")
        #expect(headers["apns-collapse-id"] == "lobby")
        let id = try #require(headers["apns-id"])
        #expect(UUID(uuidString: id) != nil && id == id.lowercased())
        #expect(APNsRequest.id(push) == id)
        #expect(APNsRequest.id(self.pending(id: 8)) != id)

        let body = try #require(try JSONSerialization.jsonObject(with: Data(request.body)) as? [String: Any])
        let aps = try #require(body["aps"] as? [String: Any])
        let alert = try #require(aps["alert"] as? [String: Any])
        #expect(alert["title"] as? String == "#lobby")
        let line = try #require(alert["body"] as? String)
        #expect(line.hasPrefix("alice: @bob ") && line.hasSuffix("…") && line.utf8.count <= PushPayload.maxTextBytes + "alice: ".utf8.count)
        #expect(aps["thread-id"] as? String == "lobby" && aps["sound"] as? String == "default")
        #expect(body["circle"] as? String == "lobby" && body["seq"] as? Int == 3 && body["kind"] as? String == "mention" && body["direct"] == nil)

        // Content-free: no author, no text; a post in a circle has priority 5.
        let quiet = APNsRequest.body(self.pending(kind: .post), entry: entry, direct: true, contentFree: true)
        let text = String(decoding: quiet, as: UTF8.self)
        #expect(!text.contains("alice") && !text.contains("bob") && text.contains(#""direct":true"#), "\(text)")
        let post = APNsRequest.make(self.pending(kind: .post), device: device, entry: nil, direct: false, settings: self.settings(), pushSettings: PushSettings(), jwt: "J", now: 0)
        #expect(post.headers.first { $0.0 == "apns-priority" }?.1 == "5")

        // A circle name longer than APNs' 64-byte collapse id is hashed; every body fits in 4096 bytes.
        let long = String(repeating: "c", count: 100)
        #expect(APNsRequest.collapseID(circle: long) == PushTopic.topic(circle: long))
        #expect(APNsRequest.collapseID(circle: long).utf8.count <= APNsRequest.maximumCollapseIDBytes)
        // (Circle names have at most 64 characters; DMs' are shorter.)
        let widest = CirclePost(circle: long, seq: 3, author: String(repeating: "👩‍👩‍👧", count: 64), text: String(repeating: "\u{1F600}", count: 400), attachment: nil, time: 1, id: "p")
        let huge = APNsRequest.body(self.pending(circle: String(repeating: "x", count: 64)), entry: widest, direct: false, contentFree: false)
        #expect(huge.count <= APNsRequest.maximumBodyBytes)
    }

    /// Apple's answers: 200 sent; 410 and the token reasons of a 400 delete the device; 429, 5xx,
    /// no answer and an expired provider token retry with Web Push's backoff; the rest drop.
    @Test func answers() {
        let policy = WebhookRetryPolicy(first: .seconds(5), longest: .seconds(600), jitter: 0, giveUpAfter: .seconds(3600))
        func result(_ status: Int?, _ reason: String? = nil, now: Int64 = 1000) -> PushResult {
            APNsAttempt.result(status: status, reason: reason, retryAfter: nil, push: self.pending(), now: now, policy: policy, random: 0.5)
        }
        #expect(result(200) == .delivered)
        #expect(result(410, "Unregistered") == .gone)
        #expect(result(400, "BadDeviceToken") == .gone)
        #expect(result(400, "DeviceTokenNotForTopic") == .gone)
        #expect(result(400, "BadCollapseId") == .dropped)
        #expect(result(400) == .dropped)
        #expect(result(404, "BadPath") == .dropped)  // not a gone device, unlike Web Push's 404
        #expect(result(403, "InvalidProviderToken") == .dropped)
        #expect(result(403, "ExpiredProviderToken") == .retry(at: 1000 + 5000))
        #expect(result(429, "TooManyRequests") == .retry(at: 1000 + 5000))
        #expect(result(503, "ServiceUnavailable") == .retry(at: 1000 + 5000))
        #expect(result(nil) == .retry(at: 1000 + 5000))
        #expect(result(500, now: 3_600_000) == .dropped)

        #expect(APNsAttempt.reason(Array(#"{"reason":"BadDeviceToken","timestamp":1}"#.utf8)) == "BadDeviceToken")
        #expect(APNsAttempt.reason(Array(#"{"reason":"Bad Device"}"#.utf8)) == nil)
        #expect(APNsAttempt.reason(Array(#"{"reason":""}"#.utf8)) == nil)
        #expect(APNsAttempt.reason(Array("not json".utf8)) == nil)
        #expect(APNsAttempt.reason([UInt8](repeating: 32, count: APNsAttempt.maximumReplyBytes + 1)) == nil)
    }
}

/// The APNs device routes (docs/API.md, "APNs devices") against a live server whose canary must
/// keep being served: registered, listed, replaced, removed; bad input a documented 4xx.
@Suite("Adversarial inputs: APNs devices", .serialized, .timeLimit(.minutes(3)))
struct AdversarialAPNsTests {
    private func json(_ text: String) -> [String: Any] {
        (try? JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any]) ?? [:]
    }

    private func errorCode(_ text: String) -> String? {
        (self.json(text)["error"] as? [String: Any])?["code"] as? String
    }

    @Test("a device is registered, listed, moved to whoever registers it, removed; bad tokens are 400, big bodies 413")
    func registerAndRemove() async throws {
        let settings = APNsSettings(keyPEM: APNsTests.key.pemRepresentation, keyID: "ABC123DEFG", teamID: "DEF123GHIJ", topic: "com.example.chat", url: "https://127.0.0.1:9")
        try await withCanaryServer(configure: { $0.push.apns = settings }) { server, canary in
            let bob = try await server.token("bob")
            let token = String(repeating: "A1", count: 32)
            let made = try await server.http("POST", HTTPAPI.Path.apnsDevices, token: bob, json: #"{"token":"\#(token)","environment":"development"}"#)
            #expect(made.status == 201 && self.json(made.body)["endpoint"] as? String == "apns:development:" + token.lowercased(), "\(made.body)")
            let listed = try await server.http("GET", HTTPAPI.Path.pushSubscriptions, token: bob)
            #expect((self.json(listed.body)["subscriptions"] as? [[String: Any]])?.compactMap { $0["endpoint"] as? String } == ["apns:development:" + token.lowercased()])

            // The same device signed in as carol: it is hers now.
            let carol = try await server.token("carol")
            #expect(try await server.http("POST", HTTPAPI.Path.apnsDevices, token: carol, json: #"{"token":"\#(token)","environment":"development"}"#).status == 201)
            #expect(try await server.http("DELETE", HTTPAPI.Path.apnsDevice(token), token: bob).status == 404)
            #expect(try await server.http("DELETE", HTTPAPI.Path.apnsDevice(token), token: carol).status == 204)
            #expect(try await server.http("DELETE", HTTPAPI.Path.apnsDevice(token), token: carol).status == 404)

            for body in ["nope", "{}", #"{"token":"abc"}"#, #"{"token":"\#(token)","environment":"beta"}"#, #"{"token":"\#(String(repeating: "z", count: 64))"}"#] {
                let refused = try await server.http("POST", HTTPAPI.Path.apnsDevices, token: bob, json: body)
                #expect(refused.status == 400 && self.errorCode(refused.body) == "bad_request", "\(body): \(refused.status) \(refused.body)")
            }
            let big = try await server.http("POST", HTTPAPI.Path.apnsDevices, token: bob, json: #"{"token":"\#(String(repeating: "a", count: 2000))"}"#)
            #expect(big.status == 413 && self.errorCode(big.body) == "too_large", "\(big.status) \(big.body)")
            let badPath = try await server.http("DELETE", HTTPAPI.Path.apnsDevice("not-a-token"), token: bob)
            #expect(badPath.status == 400 && self.errorCode(badPath.body) == "bad_request", "\(badPath.body)")
            #expect(try await server.http("POST", HTTPAPI.Path.apnsDevices, json: #"{"token":"\#(token)"}"#).status == 401)
            try await canary.check("after APNs registrations")
        }
    }

    @Test("with APNs off, registering a device is 404 not_found")
    func off() async throws {
        try await withCanaryServer(configure: { $0.push.contact = "mailto:ops@example.com" }) { server, canary in
            let off = try await server.http("POST", HTTPAPI.Path.apnsDevices, token: try await server.token("bob"), json: #"{"token":"\#(String(repeating: "ab", count: 32))"}"#)
            #expect(off.status == 404 && self.errorCode(off.body) == "not_found" && off.body.contains("APNs"), "\(off.body)")
            try await canary.check("after a registration with APNs off")
        }
    }
}
