import CircleClient
import CircleServer
import CircleTestSupport
import CircleWire
import Crypto
import Foundation
import Testing

@Suite("CircleClient's HTTP API calls and forward history against a real server", .serialized)
struct ClientAPITests {
    private func client(_ server: TestServer, user: String, servers: [String]? = nil) async throws -> CircleClient {
        try await CircleClient(
            configuration: .init(
                servers: servers ?? [server.wsURL],
                tokenProvider: { try await server.token(user) },
                reconnect: .init(base: .milliseconds(100), cap: .seconds(1))
            )
        )
    }

    @Test("circles: create, list, get; members: add, list, remove; refusals carry the server's code, message and status")
    func management() async throws {
        let server = TestServer()
        defer { server.remove() }
        try await server.start()
        let alice = try await self.client(server, user: "alice")
        let bob = try await self.client(server, user: "bob")

        let team = try await alice.createCircle("team", private: true)
        #expect(team.name == "team" && team.owner == "alice" && team.private && team.lastSeq == 0)
        try await alice.createCircle("general")
        #expect(try await alice.circles().map(\.name) == ["general", "team"])
        // bob sees the public circle only, and may not read the private one.
        #expect(try await bob.circles().map(\.name) == ["general"])
        await #expect {
            _ = try await bob.circle(named: "team")
        } throws: { error in
            let error = error as? CircleClientError
            return error?.code == .forbidden && error?.httpStatus == 403 && (error?.message.contains("private") ?? false)
        }

        #expect(try await alice.addMember("bob", to: "team") == ["alice", "bob"])
        #expect(try await bob.circle(named: "team").owner == "alice")
        #expect(try await bob.members(of: "team") == ["alice", "bob"])
        #expect(try await bob.circles().map(\.name) == ["general", "team"])
        // Only the owner adds members.
        await #expect {
            try await bob.addMember("carol", to: "team")
        } throws: { error in
            (error as? CircleClientError)?.code == .forbidden
        }
        #expect(try await alice.removeMember("bob", from: "team") == ["alice"])
        #expect(try await bob.circles().map(\.name) == ["general"])

        // The server's own codes: a taken name, an unknown circle, an invalid name.
        await #expect {
            try await alice.createCircle("team")
        } throws: { error in
            let error = error as? CircleClientError
            return error?.code == .conflict && error?.httpStatus == 409
        }
        await #expect {
            _ = try await alice.circle(named: "nope")
        } throws: { error in
            let error = error as? CircleClientError
            return error?.code == .notFound && error?.httpStatus == 404 && error?.message == "no circle \"nope\""
        }
        await #expect {
            try await alice.createCircle("Not Valid!")
        } throws: { error in
            (error as? CircleClientError)?.code == .badRequest
        }
        await alice.shutdown()
        await bob.shutdown()
    }

    @Test("postMessage: an ack with its seq, the same ack for a repeat of the id, the server's refusal for a private circle")
    func postOverHTTP() async throws {
        let server = TestServer()
        defer { server.remove() }
        try await server.start()
        try await server.createCircle("general", owner: "alice")
        try await server.createCircle("secret", owner: "alice", isPrivate: true)
        let token = try await server.token("bob")
        let ack = try await CircleClient.postMessage(.init(text: "over HTTP", id: "b-1"), in: "general", token: token, server: server.wsURL)
        #expect(ack.seq == 1 && ack.author == "bob" && ack.id == "b-1" && !ack.duplicate)
        let again = try await CircleClient.postMessage(.init(text: "over HTTP", id: "b-1"), in: "general", token: token, server: server.wsURL)
        #expect(again.seq == 1 && again.duplicate)
        await #expect {
            _ = try await CircleClient.postMessage(.init(text: "let me in"), in: "secret", token: token, server: server.wsURL)
        } throws: { error in
            let error = error as? CircleClientError
            return error?.httpStatus == 403 && error?.message.contains("private") == true
        }
        await server.stop()
    }

    @Test("registerAPNsToken: the device is listed as the person's push subscription; unregistering removes it; APNs off is not_found")
    func apnsDevices() async throws {
        let server = TestServer()
        defer { server.remove() }
        server.configuration.push.apns = APNsSettings(
            keyPEM: P256.Signing.PrivateKey().pemRepresentation, keyID: "ABC123DEFG", teamID: "DEF123GHIJ", topic: "com.example.chat", url: "https://127.0.0.1:9"
        )
        try await server.start()
        let bob = try await self.client(server, user: "bob")
        let token = (0..<32).map { UInt8($0 * 7 & 0xff) }
        let info = try await bob.registerAPNsToken(token, environment: .development)
        #expect(info.endpoint == "apns:development:" + Hex.encode(token), "\(info.endpoint)")
        let listed = try await server.http("GET", HTTPAPI.Path.pushSubscriptions, token: try await server.token("bob"))
        #expect(listed.body.contains(info.endpoint), "\(listed.body)")
        try await bob.unregisterAPNsToken(token)
        await #expect {
            try await bob.unregisterAPNsToken(token)
        } throws: { error in
            (error as? CircleClientError)?.code == .notFound
        }
        await #expect {
            try await bob.registerAPNsToken([1, 2, 3])
        } throws: { error in
            (error as? CircleClientError)?.code == .badRequest
        }
        await bob.shutdown()
        await server.stop()

        let off = TestServer()
        defer { off.remove() }
        try await off.start()
        let carol = try await self.client(off, user: "carol")
        await #expect {
            try await carol.registerAPNsToken(token)
        } throws: { error in
            let error = error as? CircleClientError
            return error?.code == .notFound && error?.httpStatus == 404
        }
        await carol.shutdown()
        await off.stop()
    }

    @Test("a refused token is unauthorized (401); an unreachable server is not_connected")
    func failures() async throws {
        let server = TestServer()
        defer { server.remove() }
        try await server.start()
        let forged = try await CircleClient(configuration: .init(servers: [server.wsURL], tokenProvider: { "not.a.token" }))
        await #expect {
            _ = try await forged.circles()
        } throws: { error in
            let error = error as? CircleClientError
            return error?.httpStatus == 401
        }
        await forged.shutdown()
        let port = try ServerProcess.freePort()
        let nowhere = try await self.client(server, user: "alice", servers: ["ws://127.0.0.1:\(port)/v1/ws"])
        await #expect {
            _ = try await nowhere.circles()
        } throws: { error in
            let error = error as? CircleClientError
            return error?.code == .notConnected && error?.httpStatus == nil
        }
        await nowhere.shutdown()
    }

    @Test("development tokens: handed out by a --dev server, refused with not_found by another")
    func developmentToken() async throws {
        let dev = TestServer(dev: true)
        defer { dev.remove() }
        try await dev.start()
        let token = try await CircleClient.developmentToken(for: "dana", server: dev.wsURL)
        #expect(token.split(separator: ".").count == 3)
        let client = try await CircleClient(configuration: .init(servers: [dev.wsURL], tokenProvider: { token }))
        try await client.createCircle("dana-room")
        #expect(try await client.circle(named: "dana-room").owner == "dana")
        await client.shutdown()

        let plain = TestServer()
        defer { plain.remove() }
        try await plain.start()
        await #expect {
            _ = try await CircleClient.developmentToken(for: "dana", server: plain.httpBase)
        } throws: { error in
            let error = error as? CircleClientError
            return error?.code == .notFound && error?.httpStatus == 404
        }
    }

    @Test("checkConnection: passes with a good token; a refused token and a closed port throw the transport's error at once")
    func checkConnection() async throws {
        let server = TestServer()
        defer { server.remove() }
        try await server.start()
        let alice = try await self.client(server, user: "alice")
        try await alice.checkConnection(timeout: .seconds(10))
        #expect(await alice.state == .disconnected)
        await alice.shutdown()
        let forged = try await CircleClient(configuration: .init(servers: [server.wsURL], tokenProvider: { "not.a.token" }))
        await #expect {
            try await forged.checkConnection(timeout: .seconds(10))
        } throws: { error in
            let error = error as? WebSocketError
            return error?.code == .handshakeRefused && error?.httpStatus == 401
        }
        await forged.shutdown()
        let port = try ServerProcess.freePort()
        let nowhere = try await self.client(server, user: "alice", servers: ["ws://127.0.0.1:\(port)/v1/ws"])
        await #expect {
            try await nowhere.checkConnection(timeout: .seconds(10))
        } throws: { error in
            (error as? WebSocketError)?.code == .connectionFailed
        }
        await nowhere.shutdown()
    }

    @Test("history(after:) pages forwards, oldest first, with more until the end")
    func historyAfter() async throws {
        let server = TestServer()
        defer { server.remove() }
        try await server.start()
        try await server.createCircle("general", owner: "alice")
        let alice = try await self.client(server, user: "alice")
        await alice.connect()
        for index in 1...7 {
            try await alice.post("post \(index)", to: "general")
        }
        var seen: [Int64] = []
        var cursor: Int64 = 2
        var pages = 0
        while true {
            let page = try await alice.history(of: "general", after: cursor, limit: 2)
            pages += 1
            seen += page.posts.map(\.seq)
            cursor = page.posts.last?.seq ?? cursor
            if !page.more { break }
            #expect(pages < 10)
            if pages >= 10 { break }
        }
        #expect(seen == [3, 4, 5, 6, 7])
        #expect(try await alice.history(of: "general", after: 7).posts.isEmpty)
        // Backwards paging is unchanged.
        let newest = try await alice.history(of: "general", limit: 2)
        #expect(newest.posts.map(\.seq) == [6, 7] && newest.more)
        await alice.shutdown()
    }
}
