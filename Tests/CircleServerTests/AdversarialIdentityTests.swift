import CircleServer
import CircleTestSupport
import CircleWire
import Foundation
import Testing

/// Bad input to sign-in and identity, each against a live server whose canary member must keep
/// being served (docs/SECURITY.md, "Sign-in and identity").
@Suite("Adversarial inputs: sign-in and identity", .serialized, .timeLimit(.minutes(3)))
struct AdversarialIdentityTests {
    /// A server whose public URL is http://localhost (passkeys on), with its first admin.
    private func withIdentityServer(
        configure: (inout CircleServerConfiguration) -> Void = { _ in },
        _ body: (TestServer, Canary, CookieClient) async throws -> Void
    ) async throws {
        try await withCanaryServer(configure: {
            $0.identity.publicURL = "http://localhost"
            configure(&$0)
        }) { server, canary in
            let link = try #require(server.server?.setupLink)
            let admin = CookieClient(base: server.httpBase)
            admin.origin = "http://localhost"
            let made = try await admin.call(
                "POST", HTTPAPI.Path.authSetup, #"{"token":"\#(link.split(separator: "#setup=")[1])","name":"ada","password":"correct horse battery"}"#
            )
            #expect(made.status == 201, "\(made.body)")
            try await body(server, canary, admin)
        }
    }

    private func browser(_ server: TestServer) -> CookieClient {
        let browser = CookieClient(base: server.httpBase)
        browser.origin = "http://localhost"
        return browser
    }

    @Test("password brute force: 429 with Retry-After for the name and for the address; unknown names alike")
    func bruteForce() async throws {
        try await self.withIdentityServer { server, canary, _ in
            let attacker = self.browser(server)
            var statuses: [Int] = []
            for attempt in 0..<8 {
                statuses.append(try await attacker.call("POST", HTTPAPI.Path.authSignIn, #"{"name":"ada","password":"guess \#(attempt)xxxxx"}"#).status)
            }
            // (TestServer makes the first wait two minutes, so no attempt here outlasts it.)
            #expect(statuses == [401, 401, 401, 401, 401, 429, 429, 429], "\(statuses)")
            try await canary.check("during a password guessing run")
            // Across names from one address: the address's count stops it too.
            var last = 0
            for name in 0..<25 {
                last = try await attacker.call("POST", HTTPAPI.Path.authSignIn, #"{"name":"user\#(name)","password":"guess xxxxxxxx"}"#).status
            }
            #expect(last == 429)
            // A password of a megabyte is not hashed: refused like any wrong one.
            let huge = String(repeating: "x", count: 1 << 20)
            let answer = try await self.browser(server).call("POST", HTTPAPI.Path.authSignIn, #"{"name":"bo","password":"\#(huge)"}"#)
            #expect(answer.status == 413 || answer.status == 401, "\(answer.status)")
        }
    }

    @Test("revoked, used-up and forged invites and setup links: invite_invalid, nothing created")
    func invites() async throws {
        try await self.withIdentityServer { server, canary, admin in
            let made = try await admin.call("POST", HTTPAPI.Path.adminInvites, #"{"uses":1}"#)
            let token = try #require(made.json()["token"] as? String)
            let id = try #require(made.json()["id"] as? String)
            #expect(try await admin.call("DELETE", HTTPAPI.Path.adminInvite(id)).status == 204)
            for invite in [token, "forged-invite", String(repeating: "A", count: 5000), ""] {
                let answer = try await self.browser(server).call(
                    "POST", HTTPAPI.Path.authSignUp, #"{"invite":"\#(invite)","name":"mallory","password":"a long password 1"}"#
                )
                #expect(answer.status == 404 && answer.code == "invite_invalid", "\(answer.body)")
            }
            let bad = [
                #"{"hours":0}"#, #"{"hours":721}"#, #"{"uses":0}"#, #"{"uses":1001}"#, #"{"circles":["nope"]}"#,
                #"{"circles":["canary","canary"]}"#, #"{"hours":"many"}"#,
            ]
            for body in bad {
                let answer = try await admin.call("POST", HTTPAPI.Path.adminInvites, body)
                #expect([400, 404].contains(answer.status), "\(body): \(answer.body)")
            }
            let setup = try await self.browser(server).call("POST", HTTPAPI.Path.authSetup, #"{"token":"guess","name":"mallory","password":"a long password 1"}"#)
            #expect(setup.status == 404)
            let users = try await admin.call("GET", HTTPAPI.Path.adminUsers)
            #expect(!users.body.contains("mallory"))
            try await canary.check("after bad invites")
        }
    }

    @Test("malformed passkey answers: bad base64, oversized and deeply nested CBOR, unknown challenges")
    func passkeyGarbage() async throws {
        try await self.withIdentityServer { server, canary, admin in
            func register(_ attestation: String, clientData: String = "e30") async throws -> CookieClient.Answer {
                let options = try await admin.call("POST", HTTPAPI.Path.passkeyRegisterOptions, "{}")
                let challenge = try #require(options.json()["challengeId"] as? String)
                return try await admin.call(
                    "POST", HTTPAPI.Path.passkeyRegister,
                    #"{"challengeId":"\#(challenge)","credential":{"id":"x","response":{"clientDataJSON":"\#(clientData)","attestationObject":"\#(attestation)"}}}"#
                )
            }
            func base64URL(_ bytes: [UInt8]) -> String {
                Data(bytes).base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
                    .replacingOccurrences(of: "=", with: "")
            }
            let nested = base64URL(Array(repeating: 0x81, count: 5000) + [0x00])  // 5000 arrays deep
            let hugeMap = base64URL([0xBB, 0x00, 0x00, 0x00, 0x00, 0xFF, 0xFF, 0xFF, 0xFF])  // a map of 4 billion pairs
            let oversized = base64URL(Array(repeating: 0x00, count: 200_000))
            for (what, attestation) in [("not base64", "%%%"), ("deep", nested), ("huge map", hugeMap), ("oversized", oversized)] {
                let answer = try await register(attestation)
                #expect(answer.status == 400 || answer.status == 413, "\(what): \(answer.status) \(answer.body.prefix(200))")
            }
            try await canary.check("after malformed passkeys")
            // A challenge is used once, and an unknown one starts nothing.
            let unknown = try await admin.call(
                "POST", HTTPAPI.Path.passkeySignIn,
                #"{"challengeId":"nope","credential":{"id":"x","response":{"clientDataJSON":"e30","authenticatorData":"AA","signature":"AA"}}}"#
            )
            #expect(unknown.status == 400)
            let list = try await admin.call("GET", HTTPAPI.Path.passkeys)
            #expect(list.json()["passkeys"] as? [Any] == nil || (list.json()["passkeys"] as? [Any])?.isEmpty == true)
            try await canary.check("after unknown ceremonies")
        }
    }

    @Test("forged, malformed and oversized session credentials: 401, the canary is served")
    func forgedSessions() async throws {
        try await self.withIdentityServer { server, canary, admin in
            for cookie in ["circle_session=circle_forged", "circle_session=", "circle_session=\(String(repeating: "a", count: 6000))", "a=b; ; =;;"] {
                let forged = self.browser(server)
                forged.cookie = cookie
                let answer = try await forged.call("GET", HTTPAPI.Path.circles)
                #expect([400, 401, 431].contains(answer.status), "\(cookie.prefix(40)): \(answer.status)")
            }
            for bearer in ["circle_", "circle_\(String(repeating: "z", count: 4000))", admin.cookie!.replacingOccurrences(of: "circle_session=", with: "")] {
                let answer = try await server.http("GET", HTTPAPI.Path.circles, token: bearer)
                #expect(answer.status == 401, "a page session is not a bearer credential, nor is a forgery: \(answer.status)")
            }
            try await canary.check("after forged sessions")
        }
    }

    @Test("a flood of ceremony starts: 429 with Retry-After per address, 503 when the store holds its limit")
    func ceremonyFlood() async throws {
        try await self.withIdentityServer(configure: { $0.identity.ceremonyLimits = CeremonyLimits(burst: 5, perMinute: 1, outstanding: 8) }) {
            server, canary, admin in
            let attacker = self.browser(server)
            var statuses: [Int] = []
            var retryAfter: String?
            for index in 0..<12 {
                // Passkey sign-in options and device codes draw on the same allowance.
                let answer =
                    index.isMultiple(of: 2)
                    ? try await attacker.call("POST", HTTPAPI.Path.passkeySignInOptions, "{}")
                    : try await attacker.call("POST", HTTPAPI.Path.deviceStart, #"{"device":"flood \#(index)"}"#)
                statuses.append(answer.status)
                if answer.status == 429 {
                    #expect(answer.code == "rate_limited")
                    retryAfter = answer.headers["retry-after"]
                }
            }
            #expect(statuses == [200, 201, 200, 201, 200] + Array(repeating: 429, count: 7), "\(statuses)")
            let seconds = try #require(retryAfter.flatMap { Int($0) }, "429 says when to come back")
            #expect((1...60).contains(seconds), "one start a minute: \(seconds) s")
            try await canary.check("during a flood of ceremony starts")
        }
        // Every client here is 127.0.0.1: the store's cap shows with a large per-address allowance.
        try await self.withIdentityServer(configure: { $0.identity.ceremonyLimits = CeremonyLimits(burst: 100, perMinute: 100, outstanding: 3) }) {
            server, canary, _ in
            var statuses: [Int] = []
            for _ in 0..<5 {
                let answer = try await self.browser(server).call("POST", HTTPAPI.Path.passkeySignInOptions, "{}")
                statuses.append(answer.status)
                if answer.status == 503 {
                    #expect(answer.code == "unavailable" && answer.headers["retry-after"] == "60", "\(answer.body)")
                }
            }
            #expect(statuses == [200, 200, 200, 503, 503], "\(statuses)")
            try await canary.check("with the ceremonies at their limit")
        }
    }
}
