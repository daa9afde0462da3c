import CircleServer
import CircleSocket
import CircleTestSupport
import CircleWire
import Crypto
import Foundation
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import Testing

/// An identity provider for tests: P-256 keys by kid, a JWKS document of them, and ES256 tokens
/// signed with swift-crypto (the JWS signature is the raw r‖s).
struct TestIssuer {
    var issuer: String
    var keys: [String: P256.Signing.PrivateKey] = [:]

    init(_ issuer: String, kids: [String]) {
        self.issuer = issuer
        for kid in kids { self.keys[kid] = P256.Signing.PrivateKey() }
    }

    static func base64URL(_ bytes: some Sequence<UInt8>) -> String {
        Data(bytes).base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }

    static func jwk(_ kid: String, _ key: P256.Signing.PublicKey) -> String {
        let raw = Array(key.rawRepresentation)
        return #"{"kty":"EC","crv":"P-256","kid":"\#(kid)","use":"sig","x":"\#(base64URL(raw[0..<32]))","y":"\#(base64URL(raw[32..<64]))"}"#
    }

    func jwks(_ kids: [String]? = nil) -> String {
        let listed = (kids ?? self.keys.keys.sorted()).compactMap { kid in self.keys[kid].map { Self.jwk(kid, $0.publicKey) } }
        return #"{"keys":[\#(listed.joined(separator: ","))]}"#
    }

    /// A token signed with `kid`'s key (or `signer`'s), with `claims` as given or the defaults.
    func token(kid: String, user: String = "dora", ttl: TimeInterval = 3600, claims: String? = nil, signer: P256.Signing.PrivateKey? = nil, header: String? = nil) throws -> String {
        let exp = Int(Date().timeIntervalSince1970 + ttl)
        let payload = claims ?? #"{"iss":"\#(self.issuer)","sub":"\#(user)","exp":\#(exp),"aud":"circle"}"#
        let head = header ?? #"{"alg":"ES256","typ":"JWT","kid":"\#(kid)"}"#
        let input = "\(Self.base64URL(Array(head.utf8))).\(Self.base64URL(Array(payload.utf8)))"
        let key = signer ?? self.keys[kid] ?? P256.Signing.PrivateKey()
        let signature = try key.signature(for: Data(input.utf8))
        return "\(input).\(Self.base64URL(signature.rawRepresentation))"
    }
}

/// A TCP listener on loopback that accepts connections and never answers (a JWKS that hangs).
final class SilentListener: @unchecked Sendable {
    // @unchecked: `channel` is set once in `start()` before use.
    private var channel: (any Channel)?
    private let connections = NIOLockedValueBox(0)
    var port: Int { self.channel?.localAddress?.port ?? 0 }
    /// Connections accepted so far.
    var accepted: Int { self.connections.withLockedValue { $0 } }

    func start() async throws {
        let connections = self.connections
        self.channel = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .childChannelInitializer { channel in
                connections.withLockedValue { $0 += 1 }
                return channel.eventLoop.makeSucceededVoidFuture()
            }
            .bind(host: "127.0.0.1", port: 0).get()
    }

    func stop() async {
        try? await self.channel?.close()
    }
}

@Suite("JWKS documents, token headers and the outbound address policy")
struct JWKSUnitTests {
    @Test("a JWKS over 64 KiB, with more than 100 keys, not JSON or without keys is refused whole")
    func documentLimits() {
        let one = TestIssuer.jwk("k", P256.Signing.PrivateKey().publicKey)
        let tooMany = #"{"keys":[\#(Array(repeating: one, count: JWKSDocument.maxKeys + 1).joined(separator: ","))]}"#
        let huge = #"{"keys":[\#(one)],"pad":"\#(String(repeating: "x", count: JWKSDocument.maxBytes))"}"#
        for (text, expected) in [
            (tooMany, "more than the limit of 100"),
            (huge, "more than the limit of 65536"),
            (#"{"keys": [}"#, "not valid JSON"),
            (#"{"keys": {}}"#, "no \"keys\" array"),
            (#"[]"#, "no \"keys\" array"),
            (#"{"keys":[],"keys":[]}"#, "not valid JSON"),
        ] {
            guard case .failure(let failure) = JWKSDocument.parse(Array(text.utf8)) else {
                Issue.record("accepted: \(text.prefix(60))")
                continue
            }
            #expect(failure.message.contains(expected), "\(failure)")
        }
    }

    @Test("keys that cannot verify ES256/RS256/PS256/EdDSA tokens are skipped with a note; the rest are kept")
    func skippedKeys() {
        let good = TestIssuer.jwk("good", P256.Signing.PrivateKey().publicKey)
        let rsa1024 = #"{"kty":"RSA","kid":"small","n":"\#(TestIssuer.base64URL([UInt8](repeating: 0xC1, count: 128)))","e":"AQAB"}"#
        let text = """
            {"keys":[\(good),
            {"kty":"oct","kid":"hmac","k":"c2VjcmV0"},
            {"kty":"EC","crv":"P-384","kid":"p384","x":"AA","y":"AA"},
            {"kty":"EC","crv":"P-256","kid":"enc","use":"enc","x":"AA","y":"AA"},
            {"kty":"EC","crv":"P-256","kid":"hs","alg":"HS256","x":"\(TestIssuer.base64URL([UInt8](repeating: 1, count: 32)))","y":"\(TestIssuer.base64URL([UInt8](repeating: 1, count: 32)))"},
            {"kty":"EC","crv":"P-256","x":"AA","y":"AA"},
            \(rsa1024),
            \(good)]}
            """
        guard case .success(let document) = JWKSDocument.parse(Array(text.utf8)) else {
            Issue.record("refused")
            return
        }
        #expect(document.keys.map(\.id) == ["good"])
        #expect(document.keys.first?.algorithms == ["ES256"])
        #expect(document.notes.count == 7, "\(document.notes)")
        #expect(document.notes.contains { $0.contains("\"alg\" \"HS256\" does not fit") })
        #expect(document.notes.contains { $0.contains("1024 bits") })
        #expect(document.notes.contains { $0.contains("repeats a kid") })
    }

    @Test("token headers: three base64url parts, JSON objects, a string alg; crit, duplicate keys and odd kids refused")
    func headers() throws {
        let issuer = TestIssuer("https://id.test", kids: ["k1"])
        let token = try issuer.token(kid: "k1")
        let parsed = UnverifiedJWT.parse(token)
        #expect(parsed?.algorithm == "ES256")
        #expect(parsed?.keyID == "k1")
        #expect(parsed?.issuer == "https://id.test")
        for header in [#"{"alg":"ES256","alg":"HS256","kid":"k1"}"#, #"{"alg":"ES256","kid":"k1","crit":["exp"]}"#, #"{"alg":1}"#, #"{"alg":"ES256","kid":7}"#, #"[]"#] {
            #expect(UnverifiedJWT.parse(try issuer.token(kid: "k1", header: header)) == nil, "\(header)")
        }
        for text in ["", "a.b", "a.b.c.d", "!!.e30.c", "e30.e30.", String(repeating: "a", count: UnverifiedJWT.maxTokenBytes + 1)] {
            #expect(UnverifiedJWT.parse(text) == nil, "\(text.prefix(20))")
        }
    }

    @Test(
        "outbound address policy: private, loopback, link-local, unspecified and mapped addresses refused; public allowed",
        arguments: [
            ("127.0.0.1", false), ("10.1.2.3", false), ("172.16.0.1", false), ("172.32.0.1", true), ("192.168.1.1", false),
            ("169.254.169.254", false), ("0.0.0.0", false), ("100.64.0.1", false), ("224.0.0.1", false), ("8.8.8.8", true),
            ("93.184.216.34", true), ("::1", false), ("::", false), ("fe80::1", false), ("fc00::1", false), ("fd12::1", false),
            ("::ffff:127.0.0.1", false), ("::ffff:10.0.0.1", false), ("::ffff:8.8.8.8", true), ("64:ff9b::a00:1", false),
            ("2606:4700::1111", true), ("ff02::1", false),
        ]
    )
    func addressPolicy(address: String, allowed: Bool) throws {
        let socketAddress = try SocketAddress(ipAddress: address, port: 443)
        let refusal = OutboundAddressPolicy.publicOnly.refusal(of: socketAddress)
        #expect((refusal == nil) == allowed, "\(address): \(refusal ?? "allowed")")
        #expect(OutboundAddressPolicy.any.refusal(of: socketAddress) == nil)
    }

    @Test("an outbound fetch to a loopback name is refused before connecting")
    func outboundRefusesLoopback() async throws {
        let http = OutboundHTTP(policy: .publicOnly, timeout: .seconds(5), maxBodyBytes: 1024)
        do {
            _ = try await http.get("http://localhost:9/jwks.json")
            Issue.record("fetched")
        } catch {
            #expect(error.message.contains("outbound address policy"), "\(error)")
        }
    }
}

/// Issuers with JWKS files and URLs, against a real server.
@Suite("Tokens from identity providers (JWKS), live", .serialized, .timeLimit(.minutes(2)))
struct JWKSLiveTests {
    static func configure(_ configuration: inout CircleServerConfiguration, issuers: [TokenIssuer]) {
        configuration.tokenIssuers = issuers
        configuration.allowPrivateOutbound = true
        configuration.jwks.fetchTimeout = .seconds(1)
        configuration.jwks.unknownKeyRefreshInterval = .zero
    }

    @Test("ES256 from a JWKS file: accepted, rotated (new kid after a refresh, removed kid refused), issuers never share keys, auth on a WebSocket")
    func fileIssuers() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("circle-jwks-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        var a = TestIssuer("https://a.test", kids: ["k1", "shared"])
        let b = TestIssuer("https://b.test", kids: ["b1", "shared"])
        let aFile = directory.appendingPathComponent("a.json").path
        let bFile = directory.appendingPathComponent("b.json").path
        try a.jwks().write(toFile: aFile, atomically: true, encoding: .utf8)
        try b.jwks().write(toFile: bFile, atomically: true, encoding: .utf8)

        let server = TestServer()
        defer { server.remove() }
        Self.configure(&server.configuration, issuers: [
            TokenIssuer(issuer: a.issuer, audiences: ["circle"], keys: .file(aFile)),
            TokenIssuer(issuer: b.issuer, keys: .file(bFile)),
        ])
        try await server.start()
        func status(_ token: String) async throws -> (Int, String) {
            let answer = try await server.http("GET", "/v1/circles", token: token)
            return (answer.status, answer.body)
        }
        #expect(try await status(a.token(kid: "k1")).0 == 200)
        #expect(try await status(b.token(kid: "b1", claims: #"{"iss":"https://b.test","sub":"bob","exp":9999999999}"#)).0 == 200)
        // Issuer A's iss with B's key, under B's kid and under the kid both publish.
        #expect(try await status(a.token(kid: "b1", signer: b.keys["b1"])).0 == 401)
        #expect(try await status(a.token(kid: "shared", signer: b.keys["shared"])).0 == 401)
        #expect(try await status(a.token(kid: "shared")).0 == 200)
        #expect(try await status(a.token(kid: "k1", claims: #"{"iss":"https://a.test","sub":"dora","exp":9999999999,"aud":"other"}"#)).0 == 401)
        #expect(try await status(a.token(kid: "k1", header: #"{"alg":"HS256","kid":"k1"}"#)).1.contains("must be signed with RS256, PS256, ES256 or EdDSA"))

        // Rotation: k2 added and k1 removed in one step.
        a.keys["k2"] = P256.Signing.PrivateKey()
        try a.jwks(["k2", "shared"]).write(toFile: aFile, atomically: true, encoding: .utf8)
        #expect(try await status(a.token(kid: "k1")).0 == 200, "not refreshed yet: k1 still known")
        #expect(try await status(a.token(kid: "k2")).0 == 200, "k2 after the refresh it triggers")
        let refused = try await status(a.token(kid: "k1"))
        #expect(refused.0 == 401 && refused.1.contains("has no key \\\"k1\\\""), "\(refused)")

        // A connection with a JWKS token renews it with another (same user, via `auth`).
        let client = try await TestClient(url: server.wsURL, token: try a.token(kid: "k2", ttl: 60))
        let renewal = try a.token(kid: "shared", ttl: 7200)
        let ack = try await client.request { .auth(token: renewal, id: $0) }
        #expect(ack.errorCode == nil, "\(ack)")
        let otherUser = try a.token(kid: "k2", user: "mallory")
        let mismatch = try await client.request { .auth(token: otherUser, id: $0) }
        #expect(mismatch.errorCode == .userMismatch, "\(mismatch)")
        await client.close()
        await server.stop()
    }
}

extension AdversarialTests {
    @Test("JWKS that hang, are huge, malformed or list too many keys: tokens with unknown kids get a prompt 401, the canary keeps being served")
    func hostileJWKS() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("circle-jwks-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let listener = SilentListener()
        try await listener.start()
        let one = TestIssuer.jwk("k", P256.Signing.PrivateKey().publicKey)
        let documents = [
            "huge": #"{"keys":[\#(one)],"pad":"\#(String(repeating: "x", count: 70_000))"}"#,
            "malformed": #"{"keys":[{"kty":"EC""#,
            "many": #"{"keys":[\#(Array(repeating: one, count: 101).joined(separator: ","))]}"#,
            "deep": String(repeating: "[", count: 10_000),
        ]
        var issuers = [TokenIssuer(issuer: "https://hang.test", keys: .url("http://127.0.0.1:\(listener.port)/jwks.json"))]
        for (name, text) in documents {
            let path = directory.appendingPathComponent("\(name).json").path
            try text.write(toFile: path, atomically: true, encoding: .utf8)
            issuers.append(TokenIssuer(issuer: "https://\(name).test", keys: .file(path)))
        }
        try await withCanaryServer(configure: { JWKSLiveTests.configure(&$0, issuers: issuers) }) { server, canary in
            for name in ["hang", "huge", "malformed", "many", "deep"] {
                let issuer = TestIssuer("https://\(name).test", kids: ["k"])
                let started = ContinuousClock.now
                let answer = try await server.http("GET", "/v1/circles", token: try issuer.token(kid: "k"))
                #expect(answer.status == 401 && answer.body.contains("unauthorized"), "\(name): \(answer)")
                print("JWKS \(name): 401 after \(ContinuousClock.now - started)")
                let socket = try? await TestClient(url: server.wsURL, token: try issuer.token(kid: "k"))
                #expect(socket == nil, "\(name): the upgrade was accepted")
                try await canary.check("after a token for the \(name) JWKS")
            }
            // Hostile token headers for a configured issuer.
            let hang = TestIssuer("https://hang.test", kids: ["k"])
            for header in [
                #"{"alg":"ES256","kid":"\#(String(repeating: "k", count: 8_000))"}"#,
                #"{"alg":"none","kid":"k"}"#,
                #"{"alg":"HS256","kid":"k"}"#,
                #"{"alg":"ES256"}"#,
                String(repeating: "{\"a\":", count: 2_000) + "1" + String(repeating: "}", count: 2_000),
            ] {
                let answer = try await server.http("GET", "/v1/circles", token: try hang.token(kid: "k", header: header))
                #expect(answer.status == 401, "\(header.prefix(40)): \(answer)")
            }
            try await canary.check("after hostile token headers")
        }
        await listener.stop()
    }
}
