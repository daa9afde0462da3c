import CircleServer
import CircleTestSupport
import CircleWire
import Foundation
import Testing

/// A client frame: FIN, `opcode`, masked with a fixed key (clients must mask).
func maskedFrame(opcode: UInt8 = 0x1, _ payload: [UInt8]) -> [UInt8] {
    let key: [UInt8] = [0x37, 0xFA, 0x21, 0x3D]
    var frame: [UInt8] = [0x80 | opcode]
    switch payload.count {
    case ..<126: frame.append(0x80 | UInt8(payload.count))
    case ..<65536: frame += [0x80 | 126, UInt8(payload.count >> 8), UInt8(payload.count & 0xFF)]
    default: frame += [0x80 | 127] + withUnsafeBytes(of: UInt64(payload.count).bigEndian, Array.init)
    }
    frame += key
    frame += payload.enumerated().map { $0.element ^ key[$0.offset % 4] }
    return frame
}

/// An unmasked server frame's opcode and payload, from bytes that start with one.
func serverFrame(_ bytes: ArraySlice<UInt8>) -> (opcode: UInt8, payload: [UInt8], size: Int)? {
    guard bytes.count >= 2 else { return nil }
    let start = bytes.startIndex
    var length = Int(bytes[start + 1] & 0x7F)
    var offset = 2
    if length == 126 {
        guard bytes.count >= 4 else { return nil }
        length = Int(bytes[start + 2]) << 8 | Int(bytes[start + 3])
        offset = 4
    } else if length == 127 {
        guard bytes.count >= 10 else { return nil }
        length = bytes[(start + 2)..<(start + 10)].reduce(0) { $0 << 8 | Int($1) }
        offset = 10
    }
    guard bytes.count >= offset + length else { return nil }
    return (bytes[start] & 0x0F, Array(bytes[(start + offset)..<(start + offset + length)]), offset + length)
}

/// The frames after the 101's head, as far as they are complete.
func framesAfterUpgrade(_ bytes: [UInt8]) -> [(opcode: UInt8, payload: [UInt8])] {
    let text = String(decoding: bytes, as: UTF8.self)
    guard text.hasPrefix("HTTP/1.1 101"), let end = bytes.firstRange(of: Array("\r\n\r\n".utf8)) else { return [] }
    var rest = bytes[end.upperBound...]
    var frames: [(UInt8, [UInt8])] = []
    while let frame = serverFrame(rest) {
        frames.append((frame.opcode, frame.payload))
        rest = rest.dropFirst(frame.size)
    }
    return frames
}

/// The close code of the last close frame among `frames`.
func closeCode(_ frames: [(opcode: UInt8, payload: [UInt8])]) -> Int? {
    guard let close = frames.last(where: { $0.opcode == 0x8 }), close.payload.count >= 2 else { return nil }
    return Int(close.payload[0]) << 8 | Int(close.payload[1])
}

/// Issue 32: whatever arrives in the same read as an upgrade request that is accepted belongs to
/// the WebSocket (RFC 6455 §4.1): a valid frame is delivered, anything else closes with 1002 —
/// and the server never traps. Each case runs while a canary member must keep being served.
@Suite("Bytes that arrive with a WebSocket upgrade", .serialized, .timeLimit(.minutes(3)))
struct UpgradeBurstTests {
    static let upgradeHead =
        "Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"

    private func withServer(
        _ limits: CircleServerConfiguration.Limits = .init(),
        _ body: (TestServer, Canary) async throws -> Void
    ) async throws {
        try await withCanaryServer(limits, echo: true, body)
    }

    private func chatUpgrade(_ token: String) -> String {
        "GET /v1/ws HTTP/1.1\r\nHost: x\r\n\(Self.upgradeHead)Sec-WebSocket-Protocol: circle.v1\r\nAuthorization: Bearer \(token)\r\n\r\n"
    }

    private let echoUpgrade = "GET /v1/echo HTTP/1.1\r\nHost: x\r\n\(upgradeHead)\r\n"

    /// What follows the upgrade request in the same write, in each variant the outside test found.
    static let trailers: [(name: String, bytes: [UInt8])] = [
        ("a pipelined GET /healthz", Array("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n".utf8)),
        ("a partial second request", Array("GET /heal".utf8)),
        ("a 60 KB second request", Array(("GET /healthz HTTP/1.1\r\nHost: x\r\nX-Pad: " + String(repeating: "a", count: 60_000) + "\r\n\r\n").utf8)),
    ]

    @Test("HTTP bytes behind an accepted upgrade close the WebSocket with 1002; the server lives", arguments: ["chat", "echo"])
    func httpAfterUpgrade(endpoint: String) async throws {
        try await self.withServer { server, canary in
            let token = try await server.token("mallory")
            for trailer in Self.trailers {
                let connection = try RawTCP(port: server.port)
                let upgrade = endpoint == "chat" ? self.chatUpgrade(token) : self.echoUpgrade
                connection.send(Array(upgrade.utf8) + trailer.bytes)
                let (bytes, ending) = await connection.readToEnd(timeout: .seconds(15))
                #expect(String(decoding: bytes, as: UTF8.self).hasPrefix("HTTP/1.1 101"), "\(endpoint), \(trailer.name)")
                // "GET " read as a frame header: RSV bits set and a reserved opcode.
                #expect(closeCode(framesAfterUpgrade(bytes)) == 1002, "\(endpoint), \(trailer.name): \(framesAfterUpgrade(bytes).map(\.opcode))")
                #expect(ending == .closed, "\(endpoint), \(trailer.name): \(ending)")
                try await canary.check("after \(endpoint) with \(trailer.name)")
            }
        }
    }

    @Test("a frame sent in the same write as the upgrade is delivered: chat answers a join, echo echoes")
    func frameWithUpgrade() async throws {
        try await self.withServer { server, canary in
            try await server.createCircle("general", owner: "fast")
            let token = try await server.token("fast")
            let join = maskedFrame(Array(#"{"action":"join","id":"j1","circle":"general","since":0}"#.utf8))
            let chat = try RawTCP(port: server.port)
            chat.send(Array(self.chatUpgrade(token).utf8) + join)
            let answered = await chat.read(until: { bytes in
                framesAfterUpgrade(bytes).contains { String(decoding: $0.payload, as: UTF8.self).contains(#""id":"j1""#) }
            }, timeout: .seconds(15))
            let replies = framesAfterUpgrade(answered).map { String(decoding: $0.payload, as: UTF8.self) }
            #expect(replies.contains { $0.contains(#""id":"j1""#) && $0.contains(#""type":"ack""#) }, "\(replies)")
            try await canary.check("after the chat frame with the upgrade")

            let echo = try RawTCP(port: server.port)
            // Two frames, the second cut in half: the rest comes in a later write.
            let second = maskedFrame(Array("second".utf8))
            echo.send(Array(self.echoUpgrade.utf8) + maskedFrame(Array("first".utf8)) + second.prefix(5))
            let first = await echo.read(until: { framesAfterUpgrade($0).count >= 1 }, timeout: .seconds(15))
            #expect(framesAfterUpgrade(first).map { String(decoding: $0.payload, as: UTF8.self) } == ["first"])
            echo.send(Array(second.dropFirst(5)))
            let both = await echo.read(until: { framesAfterUpgrade(first + $0).count >= 2 }, timeout: .seconds(15))
            #expect(framesAfterUpgrade(first + both).map { String(decoding: $0.payload, as: UTF8.self) } == ["first", "second"])
            try await canary.check("after the echo frames with the upgrade")
        }
    }

    @Test("the attack repeated from many connections at once leaves the canary served")
    func manyAtOnce() async throws {
        try await self.withServer { server, canary in
            let token = try await server.token("mallory")
            let upgrade = Array(self.chatUpgrade(token).utf8) + Array("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n".utf8)
            // All sent before any is read; the reads then take turns (each read blocks a
            // Dispatch thread, which the in-process server's tasks need too).
            var attackers: [RawTCP] = []
            for _ in 0..<24 {
                let connection = try RawTCP(port: server.port)
                connection.send(upgrade)
                attackers.append(connection)
            }
            try await canary.check("while 24 attackers' upgrades are handled")
            var upgraded = 0
            for connection in attackers {
                let (bytes, ending) = await connection.readToEnd(timeout: .seconds(20))
                let text = String(decoding: bytes, as: UTF8.self)
                // 16 upgrade (the user's connection limit) and fail at once; the others get 429.
                if text.hasPrefix("HTTP/1.1 101") {
                    upgraded += 1
                    #expect(closeCode(framesAfterUpgrade(bytes)) == 1002, "\(text.prefix(300))")
                } else {
                    #expect(text.hasPrefix("HTTP/1.1 429"), "\(text.prefix(300))")
                }
                #expect(ending == .closed, "\(text.prefix(300))")
            }
            #expect(upgraded == 16)
            try await canary.check("after 24 attackers")
        }
    }

    @Test("a refused upgrade is answered with Connection: close and the connection ends at once")
    func refusedUpgradeCloses() async throws {
        try await self.withServer { server, canary in
            let cases: [(String, String)] = [
                ("GET /v1/ws HTTP/1.1\r\nHost: x\r\n\(Self.upgradeHead)Authorization: Bearer forged\r\n\r\n", "HTTP/1.1 401"),
                ("GET /v1/ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n", "HTTP/1.1 400"),
                ("GET /healthz HTTP/1.1\r\nHost: x\r\nUpgrade: h2c\r\nConnection: Upgrade\r\n\r\n", "HTTP/1.1 200"),
                // Found by the pipeline fuzz target: without the Connection token NIO's parser goes
                // on reading HTTP behind the request, so it must not be upgraded.
                (
                    "GET /v1/echo HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgra*e\r\nSec-WebSocket-Version: 13\r\n"
                        + "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n",
                    "HTTP/1.1 400"
                ),
            ]
            for (request, status) in cases {
                let connection = try RawTCP(port: server.port)
                // A second request behind it: it gets no answer of its own, the connection ends.
                connection.send(request + "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
                let (bytes, ending) = await connection.readToEnd(timeout: .seconds(20))
                let text = String(decoding: bytes, as: UTF8.self)
                #expect(text.hasPrefix(status), "\(request.debugDescription): \(text.prefix(80))")
                #expect(text.lowercased().contains("connection: close"), "\(text.prefix(300))")
                #expect(text.components(separatedBy: "HTTP/1.1 ").count == 2, "one answer only: \(text)")
                #expect(ending == .closed, "\(request.debugDescription): \(ending)")
            }
            // Bytes streamed after such a request are dropped, not kept: the server still answers.
            let flood = try RawTCP(port: server.port)
            flood.send("GET /healthz HTTP/1.1\r\nHost: x\r\nUpgrade: foo\r\nConnection: Upgrade\r\n\r\n")
            let chunk = [UInt8](repeating: 0x41, count: 1 << 20)
            for _ in 0..<8 { flood.send(chunk) }
            let (_, ending) = await flood.readToEnd(timeout: .seconds(20))
            #expect(ending != .timedOut)
            try await canary.check("after the refused upgrades")
        }
    }

    @Test("an upgrade request that announces a body is refused with 400")
    func upgradeWithBody() async throws {
        try await self.withServer { server, canary in
            let token = try await server.token("mallory")
            for extra in ["Content-Length: 5\r\n", "Transfer-Encoding: chunked\r\n"] {
                let connection = try RawTCP(port: server.port)
                connection.send(
                    "GET /v1/ws HTTP/1.1\r\nHost: x\r\n\(Self.upgradeHead)Authorization: Bearer \(token)\r\n\(extra)\r\n"
                )
                let (bytes, ending) = await connection.readToEnd(timeout: .seconds(20))
                let text = String(decoding: bytes, as: UTF8.self)
                #expect(text.hasPrefix("HTTP/1.1 400"), "\(extra): \(text.prefix(200))")
                #expect(text.contains("a WebSocket upgrade is a GET request without a body"), "\(text)")
                #expect(ending == .closed)
            }
            try await canary.check("after the upgrades with bodies")
        }
    }

    @Test("upgrades abandoned during the token check give their connection slot back")
    func abandonedUpgradesReleaseTheirSlot() async throws {
        try await self.withServer(.init(maxConnectionsPerUser: 2)) { server, canary in
            let token = try await server.token("quitter")
            for _ in 0..<20 {
                let connection = try RawTCP(port: server.port)
                connection.send(self.chatUpgrade(token))
                // Gone before reading the 101 (or while the token is being checked).
                var linger = linger(l_onoff: 1, l_linger: 0)
                setsockopt(connection.fd, SOL_SOCKET, SO_LINGER, &linger, socklen_t(MemoryLayout<linger>.size))
            }
            // Each slot is released when its channel closes; the closes may trail the resets.
            var connected: TestClient?
            for _ in 0..<50 where connected == nil {
                connected = try? await TestClient.connect(server, user: "quitter")
                if connected == nil { try await Task.sleep(for: .milliseconds(100)) }
            }
            #expect(connected != nil, "quitter's slots were never released")
            await connected?.close()
            try await canary.check("after the abandoned upgrades")
        }
    }

    @Test("a body over 1 MiB gets 413 and ends the connection; a pipelined request behind it is not answered")
    func tooLargeCloses() async throws {
        try await self.withServer { server, canary in
            let token = try await server.token("mallory")
            let body = String(repeating: "x", count: 1_536 * 1024)
            let connection = try RawTCP(port: server.port)
            connection.send(
                "POST /v1/circles HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \(token)\r\nContent-Length: \(body.utf8.count)\r\n\r\n\(body)"
                    + "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
            )
            let (bytes, ending) = await connection.readToEnd(timeout: .seconds(20))
            let text = String(decoding: bytes, as: UTF8.self)
            #expect(text.hasPrefix("HTTP/1.1 413"), "\(text.prefix(200))")
            #expect(text.components(separatedBy: "HTTP/1.1 ").count == 2, "one answer only: \(text)")
            #expect(ending == .closed, "\(ending)")
            try await canary.check("after the 413")
        }
    }

    @Test("path parameters are percent-decoded: an owner removes josé and 田中 from a private circle")
    func percentDecodedMembers() async throws {
        try await self.withServer { server, canary in
            try await server.createCircle("club", owner: "owner", isPrivate: true)
            let token = try await server.token("owner")
            for (name, encoded) in [("josé", "jos%C3%A9"), ("田中", "%E7%94%B0%E4%B8%AD")] {
                let added = try await server.http("POST", "/v1/circles/club/members", token: token, json: #"{"user":"\#(name)"}"#)
                #expect(added.status == 200, "\(added.body)")
                #expect(added.body.contains(name))
                let removed = try await server.http("DELETE", "/v1/circles/club/members/\(encoded)", token: token)
                #expect(removed.status == 200, "\(name): \(removed.body)")
                #expect(!removed.body.contains(name), "\(removed.body)")
            }
            // The circle's name is decoded too, and a percent-encoding that is not UTF-8 is a 400.
            #expect(try await server.http("GET", "/v1/circles/%63lub", token: token).status == 200)
            let invalid = try await server.http("DELETE", "/v1/circles/club/members/%FF", token: token)
            #expect(invalid.status == 400)
            #expect(invalid.body.contains("is not valid percent-encoded UTF-8"), "\(invalid.body)")
            try await canary.check("after the member changes")
        }
    }
}
