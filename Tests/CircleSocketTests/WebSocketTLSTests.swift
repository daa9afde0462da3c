import CircleSocket
import Foundation
import NIOCore
import NIOSSL
import CircleTestSupport
import Testing

@Suite("WebSocket over TLS")
struct WebSocketTLSTests {
    let certificates: TestCertificates

    init() throws {
        self.certificates = try TestCertificates()
    }

    private func tlsEcho(_ tls: TLSConfiguration) async throws -> WebSocketServer {
        try await WebSocketServer.start(configuration: .init(tls: tls)) { socket, _ in
            do {
                for try await message in socket.messages { try await socket.send(message) }
            } catch {}
        }
    }

    private func expectFailure(_ code: WebSocketError.Code, url: String, _ configuration: WebSocketConfiguration) async {
        do {
            let socket = try await WebSocket.connect(to: url, configuration: configuration)
            await socket.close()
            Issue.record("connecting to \(url) should have failed with \(code)")
        } catch let error as WebSocketError {
            #expect(error.code == code, "\(error)")
        } catch {
            Issue.record("unexpected error \(error)")
        }
    }

    private func expectEcho(url: String, _ configuration: WebSocketConfiguration) async throws {
        let socket = try await WebSocket.connect(to: url, configuration: configuration)
        try await socket.send("secure")
        var iterator = socket.messages.makeAsyncIterator()
        #expect(try await iterator.next() == .text("secure"))
        await socket.close()
    }

    @Test("a custom CA is trusted; the system roots refuse the same certificate")
    func customCA() async throws {
        let server = try await self.tlsEcho(try self.certificates.serverTLS(names: ["localhost"]))
        defer { Task { await server.shutdown() } }
        var configuration = WebSocketConfiguration()
        configuration.tls.trust = .certificateAuthorities([self.certificates.caCertificate])
        try await self.expectEcho(url: "wss://localhost:\(server.port)/", configuration)
        await self.expectFailure(.tlsFailed, url: "wss://localhost:\(server.port)/", WebSocketConfiguration())
    }

    @Test("a certificate for another name is refused")
    func wrongName() async throws {
        let server = try await self.tlsEcho(try self.certificates.serverTLS(names: ["other.test"]))
        defer { Task { await server.shutdown() } }
        var configuration = WebSocketConfiguration()
        configuration.tls.trust = .certificateAuthorities([self.certificates.caCertificate])
        await self.expectFailure(.tlsFailed, url: "wss://localhost:\(server.port)/", configuration)
    }

    @Test("self-signed is accepted on localhost only")
    func selfSignedLocalhost() async throws {
        let server = try await self.tlsEcho(try self.certificates.serverTLS(names: ["localhost", "dev.test"], selfSigned: true))
        defer { Task { await server.shutdown() } }
        var configuration = WebSocketConfiguration()
        configuration.tls.trust = .selfSignedOnLocalhost
        try await self.expectEcho(url: "wss://localhost:\(server.port)/", configuration)
        try await self.expectEcho(url: "wss://127.0.0.1:\(server.port)/", configuration)
        // The same server under a non-loopback name (reached on loopback): refused.
        configuration.connectAddress = try SocketAddress(ipAddress: "127.0.0.1", port: server.port)
        await self.expectFailure(.tlsFailed, url: "wss://dev.test:\(server.port)/", configuration)
        // Without the option, localhost is refused too.
        await self.expectFailure(.tlsFailed, url: "wss://localhost:\(server.port)/", WebSocketConfiguration())
    }

    @Test("SPKI pinning accepts the pinned key and refuses a valid but unpinned certificate")
    func pinning() async throws {
        let identity = try self.certificates.serverIdentity(names: ["localhost"])
        let server = try await self.tlsEcho(
            .makeServerConfiguration(certificateChain: [.certificate(identity.certificate)], privateKey: .privateKey(identity.key))
        )
        defer { Task { await server.shutdown() } }
        var configuration = WebSocketConfiguration()
        configuration.tls.trust = .certificateAuthorities([self.certificates.caCertificate])
        configuration.tls.pinnedPublicKeys = [try WebSocketTLSConfiguration.publicKeyPin(of: identity.certificate)]
        try await self.expectEcho(url: "wss://localhost:\(server.port)/", configuration)

        let other = try self.certificates.serverIdentity(names: ["localhost"])
        configuration.tls.pinnedPublicKeys = [try WebSocketTLSConfiguration.publicKeyPin(of: other.certificate)]
        await self.expectFailure(.pinMismatch, url: "wss://localhost:\(server.port)/", configuration)

        configuration.tls.pinnedPublicKeys = ["not-a-pin"]
        await self.expectFailure(.tlsFailed, url: "wss://localhost:\(server.port)/", configuration)
    }
}
