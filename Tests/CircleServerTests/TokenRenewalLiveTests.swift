import CircleServer
import CircleSocket
import CircleTestSupport
import CircleWire
import Foundation
import Testing

/// `auth` on an open connection, against a real server on loopback.
@Suite("auth: renewing a token on an open connection", .timeLimit(.minutes(2)))
struct TokenRenewalLiveTests {
    @Test("a renewed token keeps the connection open past the old exp, with its joins; a control connection closes with 4001")
    func renewalOutlivesTheOldExpiry() async throws {
        let server = TestServer()
        defer { server.remove() }
        try await server.start()
        try await server.createCircle("renew", owner: "dora")
        // The short token must outlive the setup (two upgrades and the auth) even on a loaded
        // machine, so it is not shorter than 8 s; the test waits for its expiry as an event.
        let short = try await server.token("dora", ttl: .seconds(8))
        let control = try await TestClient(url: server.wsURL, token: short)
        let renewed = try await TestClient(url: server.wsURL, token: short)
        let fresh = try await server.token("dora", ttl: .seconds(3600))
        let ack = try await renewed.request { .auth(token: fresh, id: $0) }
        guard case .ack(_, let seq, _, _) = ack else {
            Issue.record("auth was not acked: \(ack)")
            return
        }
        #expect(seq == nil)
        let joined = try await renewed.request { .join("renew", id: $0) }
        #expect(joined.ackSeq != nil, "\(joined)")

        // The control connection, which kept the 8 s token, ends at its expiry: an event, after
        // which the renewed connection is past the old expiry too.
        #expect(try await control.next(timeout: .seconds(60)) == nil)
        #expect(await control.socket.closeInfo.code == WebSocketCloseCode(CircleCloseCode.tokenExpired))

        // Still open and still joined: a post from another member arrives, nothing was resent.
        let poster = try await TestClient.connect(server, user: "erin")
        #expect(try await poster.request { .join("renew", id: $0) }.ackSeq != nil)
        let posted = try await poster.request { .post("after the old expiry", to: "renew", id: $0) }
        #expect(posted.ackSeq == 1, "\(posted)")
        var delivered: CirclePost?
        while delivered == nil, let message = try await renewed.next(timeout: .seconds(10)) {
            if case .post(let post) = message { delivered = post }
            if case .joined = message { continue }
        }
        #expect(delivered?.text == "after the old expiry")
        let ping = try await renewed.request { CircleRequest(action: .ping, id: $0, circle: "") }
        #expect(ping.errorCode == nil, "\(ping)")
        await poster.close()
        await renewed.close()
        await server.stop()
    }

    @Test("auth refuses another user's token (user_mismatch), a forged, an expired and a missing token; the connection stays")
    func refusals() async throws {
        let server = TestServer()
        defer { server.remove() }
        try await server.start()
        let client = try await TestClient.connect(server, user: "dora")
        let other = try await server.token("mallory", ttl: .seconds(3600))
        let expired = try signedToken(#"{"sub":"dora","exp":1000}"#)
        let forged = try await TokenAuthority(.hs256(secret: String(repeating: "x", count: 40))).mint(user: "dora", ttl: .seconds(3600))
        let cases: [(String, CircleErrorCode)] = [
            (other, .userMismatch),
            (expired, .tokenExpired),
            (forged, .unauthorized),
            ("not.a.token", .unauthorized),
        ]
        for (token, code) in cases {
            let reply = try await client.request { .auth(token: token, id: $0) }
            #expect(reply.errorCode == code, "\(token.prefix(20)): \(reply)")
        }
        for raw in [
            #"{"action":"auth","id":"a1"}"#,
            #"{"action":"auth","id":"a2","token":""}"#,
            #"{"action":"auth","id":"a3","token":42}"#,
            #"{"action":"auth","id":"a4","token":"\#(String(repeating: "a", count: CircleRequest.maxTokenBytes + 1))"}"#,
        ] {
            try await client.sendRaw(raw)
            let id = String(raw.dropFirst(#"{"action":"auth","id":""#.count).prefix(2))
            let reply = try await client.reply(to: id).reply
            #expect(reply.errorCode == .badRequest, "\(raw.prefix(60)): \(reply)")
        }
        let ping = try await client.request { CircleRequest(action: .ping, id: $0, circle: "") }
        #expect(ping.errorCode == nil, "\(ping)")
        await client.close()
        await server.stop()
    }
}
