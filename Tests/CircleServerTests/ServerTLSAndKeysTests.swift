import CircleServer
import CircleSocket
import CircleTestSupport
import CircleWire
import Foundation
import JWTKit
import NIOSSL
import Testing

@Suite("Circle server: TLS and ES256 tokens", .serialized)
struct ServerTLSAndKeysTests {
    @Test("wss:// with a certificate and key; clients trusting the CA connect, others are refused")
    func tls() async throws {
        let certificates = try TestCertificates()
        let server = TestServer()
        defer { server.remove() }
        server.configuration.tls = try certificates.serverTLS(names: ["localhost"])
        try await server.start()
        var configuration = WebSocketConfiguration()
        configuration.subprotocols = [circleSubprotocol]
        configuration.headers.add(name: "Authorization", value: "Bearer \(try await server.token("tess"))")
        configuration.tls.trust = .certificateAuthorities([certificates.caCertificate])
        let socket = try await WebSocket.connect(to: "wss://localhost:\(server.port)/v1/ws", configuration: configuration)
        try await socket.send(#"{"action":"join","id":"x","circle":"nowhere"}"#)
        var iterator = socket.messages.makeAsyncIterator()
        guard case .text(let reply)? = try await iterator.next() else {
            Issue.record("no reply over TLS")
            return
        }
        #expect(try CircleServerMessage.decode(reply).errorCode == .notFound)
        await socket.close()

        configuration.tls.trust = .system
        do {
            _ = try await WebSocket.connect(to: "wss://localhost:\(server.port)/v1/ws", configuration: configuration)
            Issue.record("an untrusted certificate must be refused")
        } catch let error as WebSocketError {
            #expect(error.code == .tlsFailed)
        }
        await server.stop()
    }

    @Test("ES256: tokens signed by the private key are accepted, HS256 ones refused")
    func es256() async throws {
        let key = ES256PrivateKey()
        let server = TestServer()
        defer { server.remove() }
        server.configuration.tokenKeys = .es256(publicKeyPEM: key.publicKey.pemRepresentation)
        try await server.start()
        let signer = try await TokenAuthority(.es256(publicKeyPEM: key.publicKey.pemRepresentation, privateKeyPEM: key.pemRepresentation))
        let good = try await signer.mint(user: "erin", ttl: .seconds(60))
        let client = try await TestClient(url: server.wsURL, token: good)
        #expect(try await client.request { .join("nowhere", id: $0) }.errorCode == .notFound)
        await client.close()
        do {
            _ = try await TestClient(url: server.wsURL, token: try await server.token("erin"))
            Issue.record("an HS256 token must not pass an ES256 server")
        } catch let error as WebSocketError {
            #expect(error.httpStatus == 401)
        }
        await server.stop()
    }
}
