import CircleServer
import CircleTestSupport
import CircleWire
import Foundation
import Testing

/// Push subscriptions (docs/API.md, "Push notifications") against a live server whose canary
/// member must keep being served: what works, and every bad input answered with a documented
/// 4xx, never a 500.
@Suite("Adversarial inputs: push subscriptions", .serialized, .timeLimit(.minutes(3)))
struct AdversarialPushTests {
    static let key = "BCVxsr7N_eNgVRqvHtD0zTZsEc6-VV-JvLexhqUzORcxaOzi6-AYWXvTBHm4bjyPjs7Vd8pZGH6SRpkNtoIAiw4"
    static let auth = "BTBZMqHH6r4Tts7J_aSIgg"

    private func json(_ text: String) -> [String: Any] {
        (try? JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any]) ?? [:]
    }

    private func errorCode(_ text: String) -> String? {
        (self.json(text)["error"] as? [String: Any])?["code"] as? String
    }

    private static func subscription(_ endpoint: String, key: String = Self.key, auth: String = Self.auth) -> String {
        #"{"endpoint":"\#(endpoint)","expirationTime":null,"keys":{"p256dh":"\#(key)","auth":"\#(auth)"}}"#
    }

    private func withPushServer(_ body: (TestServer, Canary) async throws -> Void) async throws {
        try await withCanaryServer(configure: { $0.push.contact = "mailto:ops@example.com" }, body)
    }

    @Test("the key is published once; a subscription is registered, listed, replaced, removed")
    func subscribeAndUnsubscribe() async throws {
        try await self.withPushServer { server, canary in
            let bob = try await server.token("bob")
            let key = try await server.http("GET", HTTPAPI.Path.pushKey, token: bob)
            #expect(key.status == 200 && self.json(key.body)["enabled"] as? Bool == true, "\(key.body)")
            let publicKey = try #require(self.json(key.body)["publicKey"] as? String)
            #expect(publicKey.count == 87 && publicKey.hasPrefix("B"))
            let again = try await server.http("GET", HTTPAPI.Path.pushKey, token: try await server.token("carol"))
            #expect(self.json(again.body)["publicKey"] as? String == publicKey)

            let endpoint = "https://push.example.net/send/abc"
            let made = try await server.http("POST", HTTPAPI.Path.pushSubscriptions, token: bob, json: Self.subscription(endpoint))
            #expect(made.status == 201 && self.json(made.body)["endpoint"] as? String == endpoint, "\(made.body)")
            let replaced = try await server.http("POST", HTTPAPI.Path.pushSubscriptions, token: bob, json: Self.subscription(endpoint))
            #expect(replaced.status == 201)
            let listed = try await server.http("GET", HTTPAPI.Path.pushSubscriptions, token: bob)
            #expect((self.json(listed.body)["subscriptions"] as? [[String: Any]])?.map { $0["endpoint"] as? String } == [endpoint], "\(listed.body)")
            let escaped = endpoint.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? ""
            let strangers = try await server.http("DELETE", HTTPAPI.Path.pushSubscriptions + "?endpoint=" + escaped, token: try await server.token("carol"))
            #expect(strangers.status == 404 && self.errorCode(strangers.body) == "not_found", "\(strangers.body)")
            #expect(try await server.http("DELETE", HTTPAPI.Path.pushSubscriptions + "?endpoint=" + escaped, token: bob).status == 204)
            #expect(try await server.http("DELETE", HTTPAPI.Path.pushSubscriptions + "?endpoint=" + escaped, token: bob).status == 404)
            let missing = try await server.http("DELETE", HTTPAPI.Path.pushSubscriptions, token: bob)
            #expect(missing.status == 400 && self.errorCode(missing.body) == "bad_request", "\(missing.body)")
            #expect(try await server.http("GET", HTTPAPI.Path.pushKey).status == 401)
            try await canary.check("after subscriptions")
        }
    }

    @Test(
        "bad subscriptions get 400 bad_request",
        arguments: [
            "not json",
            "{}",
            #"{"endpoint":"https://push.example.net/x"}"#,
            Self.subscription("http://push.example.net/x"),
            Self.subscription("ftp://push.example.net/x"),
            Self.subscription("https://user:pw@push.example.net/x"),
            Self.subscription("https://push.example.net/x#frag"),
            Self.subscription("https:///x"),
            Self.subscription("https://127.0.0.1/x"),
            Self.subscription("https://[::1]:8443/x"),
            Self.subscription("https://169.254.169.254/latest"),
            Self.subscription("https://10.0.0.1/x"),
            Self.subscription("https://push.example.net/" + String(repeating: "a", count: 1100)),
            Self.subscription("https://push.example.net/x", key: "BBBB"),
            Self.subscription("https://push.example.net/x", key: "B" + String(repeating: "_", count: 86)),
            Self.subscription("https://push.example.net/x", key: "not base64!"),
            Self.subscription("https://push.example.net/x", auth: "AAAA"),
            Self.subscription("https://push.example.net/x", auth: String(repeating: "A", count: 40)),
            #"{"endpoint":1,"keys":{"p256dh":"x","auth":"y"}}"#,
        ]
    )
    func badSubscriptions(_ body: String) async throws {
        try await self.withPushServer { server, canary in
            let answer = try await server.http("POST", HTTPAPI.Path.pushSubscriptions, token: try await server.token("bob"), json: body)
            #expect(answer.status == 400 && self.errorCode(answer.body) == "bad_request", "\(answer.status) \(answer.body)")
            try await canary.check("after a bad subscription")
        }
    }

    @Test("a body over 4 KiB is 413; with push off the key says so and subscribing is 404")
    func limitsAndOff() async throws {
        try await self.withPushServer { server, canary in
            let huge = Self.subscription("https://push.example.net/x") + String(repeating: " ", count: 5000)
            let answer = try await server.http("POST", HTTPAPI.Path.pushSubscriptions, token: try await server.token("bob"), json: huge)
            #expect(answer.status == 413 && self.errorCode(answer.body) == "too_large", "\(answer.body)")
            try await canary.check("after a huge subscription")
        }
        try await withCanaryServer { server, canary in
            let bob = try await server.token("bob")
            let key = try await server.http("GET", HTTPAPI.Path.pushKey, token: bob)
            #expect(key.status == 200 && self.json(key.body)["enabled"] as? Bool == false && self.json(key.body)["publicKey"] == nil, "\(key.body)")
            let off = try await server.http("POST", HTTPAPI.Path.pushSubscriptions, token: bob, json: Self.subscription("https://push.example.net/x"))
            #expect(off.status == 404 && self.errorCode(off.body) == "not_found", "\(off.body)")
            try await canary.check("with push off")
        }
    }
}
