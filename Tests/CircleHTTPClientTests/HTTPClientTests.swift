import CircleHTTPClient
import CircleTestSupport
import Foundation
import NIOCore
import NIOHTTP1
import NIOPosix
import NIOSSL
import Testing

/// A small HTTP/1.1 server on loopback (optionally over TLS) that answers every request with
/// `200` and the request's method and path as the body.
final class LoopbackHTTPServer: Sendable {
    /// How the server treats a request.
    enum Behaviour: Sendable {
        /// Answers and keeps the connection.
        case answer
        /// Answers the first request of a connection (allowing keep-alive) and closes the
        /// connection when a second request arrives on it, without answering.
        case closeOnSecondRequest
        /// Reads the request and never answers.
        case silent
    }

    let channel: any Channel
    var port: Int { self.channel.localAddress?.port ?? 0 }

    init(tls: TLSConfiguration?, behaviour: Behaviour = .answer) async throws {
        let context = try tls.map { try NIOSSLContext(configuration: $0) }
        self.channel = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    if let context {
                        try channel.pipeline.syncOperations.addHandler(NIOSSLServerHandler(context: context))
                    }
                    try channel.pipeline.syncOperations.configureHTTPServerPipeline()
                    try channel.pipeline.syncOperations.addHandler(Responder(behaviour: behaviour))
                }
            }
            .bind(host: "127.0.0.1", port: 0).get()
    }

    func shutdown() async {
        try? await self.channel.close()
    }

    private final class Responder: ChannelInboundHandler {
        typealias InboundIn = HTTPServerRequestPart
        typealias OutboundOut = HTTPServerResponsePart
        private var line = ""
        private var requests = 0
        private let behaviour: Behaviour

        init(behaviour: Behaviour) {
            self.behaviour = behaviour
        }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            switch self.unwrapInboundIn(data) {
            case .head(let head):
                self.line = "\(head.method.rawValue) \(head.uri)"
            case .body:
                break
            case .end:
                self.requests += 1
                if case .silent = self.behaviour { return }
                if case .closeOnSecondRequest = self.behaviour, self.requests > 1 {
                    context.close(promise: nil)
                    return
                }
                let body = ByteBuffer(string: self.line)
                var headers = HTTPHeaders()
                headers.add(name: "Content-Length", value: "\(body.readableBytes)")
                context.write(self.wrapOutboundOut(.head(HTTPResponseHead(version: .http1_1, status: .ok, headers: headers))), promise: nil)
                context.write(self.wrapOutboundOut(.body(.byteBuffer(body))), promise: nil)
                context.writeAndFlush(self.wrapOutboundOut(.end(nil)), promise: nil)
            }
        }
    }
}

@Suite("HTTP client: URL targets")
struct HTTPTargetTests {
    @Test(
        "a URL's host, port, TLS and request URI",
        arguments: [
            ("http://127.0.0.1:8080/v1/circles?x=1", "127.0.0.1", 8080, false, "/v1/circles?x=1", "127.0.0.1:8080"),
            ("https://chat.example.com", "chat.example.com", 443, true, "/", "chat.example.com"),
            ("ws://[::1]:9000/v1/ws", "::1", 9000, false, "/v1/ws", "[::1]:9000"),
            ("wss://Example.org/v1/ws", "Example.org", 443, true, "/v1/ws", "Example.org"),
        ]
    )
    func parses(url: String, host: String, port: Int, tls: Bool, uri: String, hostHeader: String) throws {
        let (target, path) = try HTTPTarget.parse(url)
        #expect(target.host == host)
        #expect(target.port == port)
        #expect(target.usesTLS == tls)
        #expect(path == uri)
        #expect(target.hostHeader == hostHeader)
    }

    @Test("URLs without a host or with another scheme are refused with invalid_url", arguments: ["ftp://example.com/", "http://", "not a url", "ws://x/"])
    func refuses(url: String) {
        let schemes: Set<String> = url.hasPrefix("ws") ? ["http", "https"] : ["http", "https", "ws", "wss"]
        #expect {
            _ = try HTTPTarget.parse(url, schemes: schemes)
        } throws: { error in
            (error as? HTTPClientError)?.code == .invalidURL
        }
    }
}

@Suite("HTTP client: TLS, pins and errors", .serialized)
struct HTTPClientTLSTests {
    let certificates: TestCertificates

    init() throws {
        self.certificates = try TestCertificates()
    }

    private func client(trust: ClientTLSConfiguration.Trust, pins: [String] = []) -> HTTPClient {
        HTTPClient(configuration: .init(connectTimeout: .seconds(10), idleTimeout: .seconds(10), tls: .init(trust: trust, pinnedPublicKeys: pins)))
    }

    private func expectFailure(_ code: HTTPClientError.Code, _ client: HTTPClient, url: String) async {
        do {
            let answer = try await client.execute(.GET, url: url)
            Issue.record("\(url) should have failed with \(code), answered \(answer.status)")
        } catch {
            #expect(error.code == code, "\(error)")
        }
    }

    @Test("a trusted certificate whose key is pinned is accepted; connect and TLS times are reported")
    func pinAccepted() async throws {
        let identity = try self.certificates.serverIdentity(names: ["localhost"])
        let server = try await LoopbackHTTPServer(
            tls: TLSConfiguration.makeServerConfiguration(certificateChain: [.certificate(identity.certificate)], privateKey: .privateKey(identity.key))
        )
        let pin = try ClientTLSConfiguration.publicKeyPin(of: identity.certificate)
        let client = self.client(trust: .certificateAuthorities([self.certificates.caCertificate]), pins: [pin])
        let answer = try await client.execute(.GET, url: "https://localhost:\(server.port)/healthz?x=1")
        #expect(answer.status == 200)
        #expect(String(decoding: answer.body, as: UTF8.self) == "GET /healthz?x=1")
        #expect(answer.timings.connect != nil)
        #expect(answer.timings.tls != nil)
        #expect(answer.timings.reusedConnection == false)
        // The second request reuses the kept-alive connection: no connect, no handshake.
        let again = try await client.execute(.POST, url: "https://localhost:\(server.port)/v1/circles", body: Array("{}".utf8))
        #expect(String(decoding: again.body, as: UTF8.self) == "POST /v1/circles")
        #expect(again.timings.reusedConnection)
        #expect(again.timings.tls == nil)
        await client.pool.closeAll()
        await server.shutdown()
    }

    @Test("a trusted certificate whose key matches no pin is refused with pin_mismatch")
    func pinRefused() async throws {
        let server = try await LoopbackHTTPServer(tls: try self.certificates.serverTLS(names: ["localhost"]))
        let other = try self.certificates.serverIdentity(names: ["localhost"])
        let client = self.client(
            trust: .certificateAuthorities([self.certificates.caCertificate]),
            pins: [try ClientTLSConfiguration.publicKeyPin(of: other.certificate)]
        )
        await self.expectFailure(.pinMismatch, client, url: "https://localhost:\(server.port)/")
        await server.shutdown()
    }

    @Test("an untrusted certificate and a malformed pin fail with tls_failed")
    func untrusted() async throws {
        let server = try await LoopbackHTTPServer(tls: try self.certificates.serverTLS(names: ["localhost"]))
        await self.expectFailure(.tlsFailed, self.client(trust: .system), url: "https://localhost:\(server.port)/")
        await self.expectFailure(
            .tlsFailed,
            self.client(trust: .certificateAuthorities([self.certificates.caCertificate]), pins: ["sha256/not-a-digest"]),
            url: "https://localhost:\(server.port)/"
        )
        // A self-signed certificate is accepted on loopback with selfSignedOnLocalhost.
        let selfSigned = try await LoopbackHTTPServer(tls: try self.certificates.serverTLS(names: ["localhost"], selfSigned: true))
        let answer = try await self.client(trust: .selfSignedOnLocalhost).execute(.GET, url: "https://localhost:\(selfSigned.port)/")
        #expect(answer.status == 200)
        await selfSigned.shutdown()
        await server.shutdown()
    }

    @Test("a server that never answers fails the request with idle_timeout")
    func idleTimeout() async throws {
        let server = try await LoopbackHTTPServer(tls: nil, behaviour: .silent)
        let client = HTTPClient(configuration: .init(connectTimeout: .seconds(10), idleTimeout: .milliseconds(300)))
        await self.expectFailure(.idleTimeout, client, url: "http://127.0.0.1:\(server.port)/")
        await server.shutdown()
    }

    @Test("a kept-alive connection the server has closed is replaced by a new one, once")
    func staleConnection() async throws {
        let server = try await LoopbackHTTPServer(tls: nil, behaviour: .closeOnSecondRequest)
        let client = HTTPClient(configuration: .init(connectTimeout: .seconds(10), idleTimeout: .seconds(10)))
        for index in 1...3 {
            // Requests 2 and 3 go out on the pooled connection, which the server closes; each is
            // sent again on a new connection and answered there.
            let answer = try await client.execute(.GET, url: "http://127.0.0.1:\(server.port)/\(index)")
            #expect(String(decoding: answer.body, as: UTF8.self) == "GET /\(index)")
            #expect(answer.timings.connect != nil, "request \(index) should have been answered on a new connection")
            #expect(answer.timings.reusedConnection == false)
        }
        await client.pool.closeAll()
        await server.shutdown()
    }

    @Test("nothing listening fails with connect_failed; a bad URL with invalid_url")
    func connectErrors() async throws {
        let port = try ServerProcess.freePort()
        await self.expectFailure(.connectFailed, self.client(trust: .system), url: "http://127.0.0.1:\(port)/")
        await self.expectFailure(.invalidURL, self.client(trust: .system), url: "ftp://127.0.0.1/")
    }
}
