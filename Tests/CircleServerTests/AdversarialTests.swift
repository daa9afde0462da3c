import CircleServer
import CircleSocket
import CircleTestSupport
import CircleWire
import Foundation
import Crypto
import NIOCore
import Testing

/// A member who posts and reads throughout an attack: every post must come back acked and
/// delivered, within a bound, however the attacker behaves.
final class Canary: @unchecked Sendable {
    // @unchecked: used by one test task at a time.
    private let client: TestClient
    private let circle: String
    private var posted = 0

    init(_ server: TestServer, circle: String = "canary") async throws {
        try await server.createCircle(circle, owner: "canary")
        self.client = try await TestClient.connect(server, user: "canary")
        self.circle = circle
        let joined = try await self.client.request { .join(circle, id: $0) }
        #expect(joined.ackSeq != nil, "canary join: \(joined)")
    }

    /// Posts once and waits (at most 10 s a message) for the ack and the post's delivery.
    func check(_ moment: String) async throws {
        self.posted += 1
        let text = "canary \(self.posted)"
        let request = CircleRequest.post(text, to: self.circle, id: "canary-\(self.posted)")
        try await self.client.send(request)
        let (reply, others) = try await self.client.reply(to: request.id)
        #expect(reply.ackSeq == Int64(self.posted), "canary ack \(moment): \(reply)")
        var delivered = others.contains { $0.post?.text == text }
        while !delivered, let message = try await self.client.next(timeout: .seconds(10)) {
            delivered = message.post?.text == text
        }
        #expect(delivered, "canary post not delivered \(moment)")
    }

    func close() async {
        await self.client.close()
    }
}

/// Signs a token with the test secret and arbitrary claims (a foreign issuer's tokens).
func signedToken(_ claims: String) throws -> String {
    func base64URL(_ bytes: some Sequence<UInt8>) -> String {
        Data(bytes).base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }
    let header = base64URL(Array(#"{"alg":"HS256","typ":"JWT"}"#.utf8))
    let payload = base64URL(Array(claims.utf8))
    let key = SymmetricKey(data: Data(testSecret.utf8))
    let signature = HMAC<SHA256>.authenticationCode(for: Data("\(header).\(payload)".utf8), using: key)
    return "\(header).\(payload).\(base64URL(signature))"
}

/// Runs `body` against a fresh server on which a canary member posts before (joining), during
/// (where `body` calls ``Canary/check(_:)``) and after it; every canary post must be acked and
/// delivered.
func withCanaryServer(
    _ limits: CircleServerConfiguration.Limits = .init(),
    echo: Bool = false,
    configure: (inout CircleServerConfiguration) -> Void = { _ in },
    _ body: (TestServer, Canary) async throws -> Void
) async throws {
    let server = TestServer(limits: limits, echo: echo)
    configure(&server.configuration)
    defer { server.remove() }
    try await server.start()
    let canary = try await Canary(server)
    try await body(server, canary)
    try await canary.check("at the end")
    await canary.close()
    await server.stop()
}

/// Live adversarial tests: each finding of the hardening review, reproduced against a real
/// server, with a canary member that must keep being served.
@Suite("Adversarial inputs", .timeLimit(.minutes(3)))
struct AdversarialTests {
    private func withServer(
        _ limits: CircleServerConfiguration.Limits = .init(),
        _ body: (TestServer, Canary) async throws -> Void
    ) async throws {
        try await withCanaryServer(limits, body)
    }

    // MARK: Finding 1: far-future token expiry

    @Test("a validly signed token with exp 1e16 or 1e300 connects; the server does not trap")
    func farFutureExpiry() async throws {
        try await self.withServer { server, canary in
            for exp in ["1e16", "1e300", "9223372036854775807"] {
                let token = try signedToken(#"{"sub":"forever","exp":\#(exp)}"#)
                let client = try await TestClient(url: server.wsURL, token: token)
                let reply = try await client.request { .join("canary", id: $0) }
                #expect(reply.ackSeq != nil, "exp \(exp): \(reply)")
                await client.close()
                try await canary.check("after a token with exp \(exp)")
            }
        }
    }

    @Test("a token with a negative exp is refused with a readable date, not a nonsense year")
    func negativeExpiry() async throws {
        let authority = try await TokenAuthority(.hs256(secret: testSecret))
        for exp in ["-1e14", "-1e300"] {
            do {
                _ = try await authority.verify(try signedToken(#"{"sub":"alice","exp":\#(exp)}"#))
                Issue.record("exp \(exp) was accepted")
            } catch let error as TokenError {
                #expect(error.code == .tokenExpired)
                #expect(error.message.contains("long ago"), "\(error.message)")
            }
        }
    }

    @Test("user names mixing look-alike scripts are refused; single-script and CJK-with-Latin names are not")
    func mixedScriptNames() async throws {
        #expect(!TokenAuthority.isValidUserName("\u{0430}lice"))  // Cyrillic а + Latin
        #expect(!TokenAuthority.isValidUserName("p\u{0430}ypal"))
        #expect(!TokenAuthority.isValidUserName("\u{03BF}scar"))  // Greek ο + Latin
        #expect(TokenAuthority.isValidUserName("alice"))
        #expect(TokenAuthority.isValidUserName("\u{0430}\u{043B}\u{0438}\u{0441}\u{0430}"))  // all Cyrillic
        #expect(TokenAuthority.isValidUserName("taro_\u{592A}\u{90CE}"))  // Latin + Han
        #expect(TokenAuthority.isValidUserName("bob.2024@example"))
        let authority = try await TokenAuthority(.hs256(secret: testSecret))
        do {
            _ = try await authority.verify(try signedToken(#"{"sub":"\u0430lice","exp":1e10}"#))
            Issue.record("a mixed-script subject was accepted")
        } catch let error as TokenError {
            #expect(error.code == .unauthorized)
        }
    }

    // MARK: Findings 2 and 3: HTTP timeouts, parser errors, Connection: close

    @Test("idle, half-sent and kept-alive HTTP connections are closed by the server's timeouts")
    func httpTimeouts() async throws {
        let limits = CircleServerConfiguration.Limits(
            requestHeadTimeout: .milliseconds(500),
            requestBodyTimeout: .milliseconds(500),
            keepAliveTimeout: .milliseconds(500)
        )
        try await self.withServer(limits) { server, canary in
            let idle = try RawTCP(port: server.port)
            let partialHead = try RawTCP(port: server.port)
            partialHead.send("GET /healthz HTTP/1.1\r\nHost: x\r\n")
            let partialBody = try RawTCP(port: server.port)
            partialBody.send("POST /v1/circles HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"na")
            let keptAlive = try RawTCP(port: server.port)
            keptAlive.send("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            // A byte every 200 ms does not keep a request head alive.
            let trickle = try RawTCP(port: server.port)
            let trickling = Task.detached {
                for byte in "GET /healthz HTTP/1.1\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa".utf8 {
                    trickle.send([byte])
                    try await Task.sleep(for: .milliseconds(200))
                }
            }
            for (name, connection) in [("idle", idle), ("partial head", partialHead), ("partial body", partialBody), ("kept alive", keptAlive), ("trickle", trickle)] {
                let (bytes, ending) = await connection.readToEnd(timeout: .seconds(20))
                if name == "trickle" {
                    // Its next byte may reach the closed socket first and come back as a reset.
                    #expect(ending != .timedOut, "\(name): \(ending)")
                } else {
                    #expect(ending == .closed, "\(name): \(ending)")
                }
                if name == "kept alive" {
                    #expect(String(decoding: bytes, as: UTF8.self).hasPrefix("HTTP/1.1 200"), "\(name)")
                }
            }
            trickling.cancel()
            let metrics = try await server.http("GET", "/metrics").body
            for reason in ["http_request_head_timeout", "http_body_timeout", "http_keep_alive_timeout"] {
                #expect(metrics.contains(#"circle_limit_hits_total{limit="\#(reason)"}"#), "\(reason) missing from /metrics")
            }
            try await canary.check("after the timeouts")
        }
    }

    @Test("a request the parser refuses gets 400 and the connection is closed; so does Connection: close")
    func parserErrorsClose() async throws {
        try await self.withServer { server, canary in
            let requests = [
                "BREW /healthz HTTP/1.1\r\nHost: x\r\n\r\n",
                "GET /healthz HTTP/9.9 extra\r\n\r\n",
                "GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n",
                "this is not http at all\r\n\r\n",
            ]
            for request in requests {
                let connection = try RawTCP(port: server.port)
                connection.send(request)
                let (bytes, ending) = await connection.readToEnd(timeout: .seconds(15))
                #expect(String(decoding: bytes, as: UTF8.self).hasPrefix("HTTP/1.1 400"), "\(request.debugDescription)")
                #expect(ending == .closed, "\(request.debugDescription): \(ending)")
            }
            let close = try RawTCP(port: server.port)
            close.send("GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            let (bytes, ending) = await close.readToEnd(timeout: .seconds(15))
            #expect(String(decoding: bytes, as: UTF8.self).hasPrefix("HTTP/1.1 200"))
            #expect(ending == .closed, "Connection: close: \(ending)")
            try await canary.check("after the parser errors")
        }
    }

    @Test("connections not yet upgraded are bounded per address: others are still served")
    func admissionPerAddress() async throws {
        try await self.withServer(.init(maxPendingConnectionsPerAddress: 8)) { server, canary in
            // The canary's WebSocket is upgraded, so it does not count against 127.0.0.1.
            var held: [RawTCP] = []
            for _ in 0..<30 { held.append(try RawTCP(port: server.port)) }
            var refused = 0
            for connection in held {
                let (_, ending) = await connection.readToEnd(timeout: .milliseconds(300))
                if ending == .closed || ending == .reset { refused += 1 }
            }
            #expect(refused >= 22, "only \(refused) of 30 were refused")
            // Another address is not affected (127.0.0.1 is full: the test's own HTTP client would
            // be refused too, so it asks from 127.0.0.2).
            let other = try RawTCP(port: server.port, source: "127.0.0.2")
            other.send("GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            let (bytes, _) = await other.readToEnd(timeout: .seconds(10))
            let metrics = String(decoding: bytes, as: UTF8.self)
            #expect(metrics.hasPrefix("HTTP/1.1 200"))
            #expect(metrics.contains(#"circle_limit_hits_total{limit="pending_connections_per_address"}"#))
            try await canary.check("with the address's connections held")
            held.removeAll()
        }
    }

    // MARK: Finding 5: duplicate keys, and the envelope's corner cases

    @Test("duplicate keys are refused before any check or use; scalars and huge numbers get documented errors")
    func duplicateKeys() async throws {
        try await self.withServer { server, canary in
            try await server.createCircle("general", owner: "mallory")
            let client = try await TestClient.connect(server, user: "mallory")
            _ = try await client.request { .join("general", id: $0) }
            let longID = String(repeating: "x", count: 60_000)
            try await client.sendRaw(#"{"action":"post","id":"\#(longID)","id":"short","circle":"general","text":"hi"}"#)
            let error = try await client.next()
            #expect(error?.errorCode == .badRequest)
            if case .error(let id, _, let message)? = error {
                #expect(id == nil)
                #expect(message == #"the key "id" appears twice"#)
            }
            for scalar in ["42", "null", "true", #""x""#, "[]"] {
                try await client.sendRaw(scalar)
                if case .error(nil, .badRequest, let message)? = try await client.next() {
                    #expect(message == "a request must be a JSON object", "\(scalar)")
                } else {
                    Issue.record("no bad_request for \(scalar)")
                }
            }
            try await client.sendRaw(#"{"action":"join","id":"big","circle":"general","since":1e400}"#)
            if case .error(let id, .badRequest, let message)? = try await client.next() {
                #expect(id == "big")
                #expect(message.contains("\"since\" must be a whole number"), "\(message)")
            } else {
                Issue.record("no bad_request for since 1e400")
            }
            let deep = String(repeating: "[", count: 10_000)
            try await client.sendRaw(#"{"action":"post","id":"deep","circle":"general","x":\#(deep)}"#)
            if case .error(_, .badRequest, let message)? = try await client.next() {
                #expect(message == "the frame is not valid JSON")
            } else {
                Issue.record("no bad_request for deep nesting")
            }
            let history = try await server.http("GET", "/v1/circles/general/messages", token: try await server.token("mallory"))
            #expect(!history.body.contains(longID), "the 60,000-byte id was stored")
            #expect(history.body.contains(#""posts":[]"#), "\(history.body)")
            await client.close()
            try await canary.check("after the malformed requests")
        }
    }

    // MARK: Lesser findings

    /// A chat connection upgraded over a bare socket, for frames the WebSocket client would not send.
    static func rawChatConnection(_ server: TestServer, token: String) async throws -> RawTCP {
        let connection = try RawTCP(port: server.port)
        connection.send(
            "GET /v1/ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"
                + "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Protocol: circle.v1\r\nAuthorization: Bearer \(token)\r\n\r\n"
        )
        let upgraded = await connection.read(until: { String(decoding: $0, as: UTF8.self).contains("\r\n\r\n") }, timeout: .seconds(10))
        #expect(String(decoding: upgraded, as: UTF8.self).hasPrefix("HTTP/1.1 101"))
        return connection
    }

    /// The code of the close frame `bytes` begin with (0x88, a length, then the code), if they do.
    static func closeCode(_ bytes: [UInt8]) -> Int? {
        bytes.count >= 4 && bytes[0] == 0x88 ? Int(bytes[2]) << 8 | Int(bytes[3]) : nil
    }

    @Test("an oversized frame sent in one write is answered with close 1009, never a reset")
    func oversizedFrameCloses1009() async throws {
        try await self.withServer { server, canary in
            let token = try await server.token("big")
            for attempt in 0..<6 {
                let connection = try await Self.rawChatConnection(server, token: token)
                // 65,537 bytes of payload, masked, header and payload in one write.
                let length = 65_537
                var frame: [UInt8] = [0x81, 0x80 | 127]
                frame += withUnsafeBytes(of: UInt64(length).bigEndian, Array.init)
                frame += [1, 2, 3, 4]
                frame += (0..<length).map { UInt8(truncatingIfNeeded: $0) ^ [1, 2, 3, 4][$0 % 4] }
                connection.send(frame)
                let (bytes, ending) = await connection.readToEnd(timeout: .seconds(15))
                #expect(Self.closeCode(bytes) == 1009, "attempt \(attempt): \(bytes.prefix(8)) \(ending)")
                #expect(ending != .reset, "attempt \(attempt) ended in a reset")
            }
            try await canary.check("after the oversized frames")
        }
    }

    /// The chat socket parses a text frame's bytes once, checking UTF-8 as it goes: bytes that
    /// are not UTF-8 anywhere in a frame (inside a JSON string, after a whole JSON value, in a
    /// frame that is not JSON) close the connection with 1007, not an error reply.
    @Test(
        "a chat text frame that is not UTF-8 is answered with close 1007 wherever the bad bytes are",
        arguments: [
            Array(#"{"action":"join","id":"j1","circle":"caf"#.utf8) + [0xC3, 0x28] + Array(#""}"#.utf8),
            Array(#"{"action":"join","id":"j1","circle":"x"}"#.utf8) + [0xFF],
            [0x7B, 0xE2, 0x82],
            [0xC0, 0xAF],
        ]
    )
    func invalidTextCloses1007(payload: [UInt8]) async throws {
        try await self.withServer { server, canary in
            let token = try await server.token("bytes")
            let connection = try await Self.rawChatConnection(server, token: token)
            let mask: [UInt8] = [9, 8, 7, 6]
            connection.send([0x81, 0x80 | UInt8(payload.count)] + mask + payload.enumerated().map { $0.element ^ mask[$0.offset % 4] })
            let (bytes, ending) = await connection.readToEnd(timeout: .seconds(15))
            #expect(Self.closeCode(bytes) == 1007, "\(bytes.prefix(16)) \(ending)")
            try await canary.check("after a frame that is not UTF-8")
        }
    }

    @Test("the data directory is 0700 and the database, its WAL and the token secret 0600")
    func privateFiles() async throws {
        try await self.withServer { server, _ in
            func mode(_ path: String) -> Int? {
                (try? FileManager.default.attributesOfItem(atPath: path)[.posixPermissions] as? NSNumber)?.intValue
            }
            #expect(mode(server.dataDirectory) == 0o700)
            let database = server.dataDirectory + "/circle.sqlite"
            #expect(mode(database) == 0o600)
            #expect(mode(database + "-wal") == 0o600)
            #expect(mode(server.dataDirectory + "/media") == 0o700)
        }
    }
}
