import CircleServer
import CircleTestSupport
import CircleWire
import Foundation
import Hummingbird
import Logging
import NIOCore
import ServiceLifecycle
import Testing

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// An app's own request context, with the one field Circle's routes need.
struct AppContext: CircleRequestContext {
    var coreContext: CoreRequestContextStorage
    var circleUser: AuthenticatedUser?

    init(source: ApplicationRequestContextSource) {
        self.coreContext = .init(source: source)
        self.circleUser = nil
    }
}

@Suite("Circle mounted in an app's own Hummingbird server")
struct MountTests {
    @Test("the app's route and Circle's routes under /chat answer on one port, and a WebSocket session works")
    func mountedUnderPrefix() async throws {
        let data = FileManager.default.temporaryDirectory.appendingPathComponent("circle-mount-\(UUID().uuidString)").path
        defer { try? FileManager.default.removeItem(atPath: data) }
        var logger = Logger(label: "app")
        logger.logLevel = .warning
        let configuration = CircleServerConfiguration(dataDirectory: data, tokenKeys: .hs256(secret: testSecret))
        let listening = PortBox()

        // The example of docs/API.md, "Mounting Circle in your app".
        let circle = try await CircleServer(configuration: configuration, logger: logger)
        let router = Router(context: AppContext.self)
        router.get("/hello") { _, _ in "hello from the app" }
        circle.addRoutes(to: router.group("chat"))
        let app = Application(
            router: router,
            server: circle.httpServer(prefix: "/chat"),
            configuration: .init(address: .hostname("127.0.0.1", port: 0)),
            services: [circle.service],
            onServerRunning: { channel in listening.set(channel.localAddress?.port ?? 0) },
            logger: logger
        )
        // (the app runs it with `try await app.runService()`)

        let group = ServiceGroup(configuration: .init(services: [app], logger: logger))
        let running = Task { try await group.run() }
        let port = try await listening.wait()
        let base = "http://127.0.0.1:\(port)"

        let hello = try await Self.get(base + "/hello")
        #expect(hello.status == 200)
        #expect(hello.body == "hello from the app")
        let health = try await Self.get(base + "/chat/healthz")
        #expect(health.status == 200)
        #expect(health.body.contains(#""status":"ok""#))
        let unknown = try await Self.get(base + "/chat/v1/nothing")
        #expect(unknown.status == 404)
        // The page at /chat/; /chat redirects there with a relative Location that cannot leave
        // the origin, whatever the request's path and query say.
        let chatPage = try await Self.get(base + "/chat/")
        #expect(chatPage.status == 200 && chatPage.body.contains("<script src=\"assets/app.js\""))
        for (target, location) in [("/chat", "./chat/"), ("/chat?x=//evil.example/", "./chat/?x=//evil.example/"), ("//chat", "./chat/")] {
            let connection = try RawTCP(port: port)
            connection.send("GET \(target) HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            let (bytes, _) = await connection.readToEnd(timeout: .seconds(15))
            let answer = String(decoding: bytes, as: UTF8.self)
            #expect(answer.hasPrefix("HTTP/1.1 308"), "\(target): \(answer)")
            #expect(answer.lowercased().contains("location: \(location)\r\n"), "\(target): \(answer)")
        }

        let token = try await circle.mintToken(user: "alice")
        let created = try await Self.send("POST", base + "/chat/v1/circles", token: token, json: #"{"name":"general"}"#)
        #expect(created.status == 201, "\(created.body)")
        let refused = try await Self.get(base + "/chat/v1/circles")
        #expect(refused.status == 401)

        let client = try await TestClient(url: "ws://127.0.0.1:\(port)/chat/v1/ws", token: token)
        _ = try await client.request { .join("general", id: $0) }
        let ack = try await client.request { .post("mounted", to: "general", id: $0) }
        #expect(ack.ackSeq == 1)
        await client.close()
        let page = try await Self.send("GET", base + "/chat/v1/circles/general/messages", token: token)
        #expect(page.body.contains(#""text":"mounted""#), "\(page.body)")

        // Links and Locations the server makes point under the app's prefix.
        let photo = try await Self.send("POST", base + "/chat/v1/media", token: token, body: TestImage.bytes(64, magic: TestImage.pngMagic, seed: 7), contentType: "image/png")
        #expect(photo.status == 201, "\(photo.body)")
        #expect(photo.location?.hasPrefix("/chat/v1/media/") == true, "Location \(photo.location ?? "none")")
        #expect(photo.body.contains(#""url":"\/chat\/v1\/media\/"#) || photo.body.contains(#""url":"/chat/v1/media/"#), "\(photo.body)")
        let upload = try await Self.send("POST", base + "/chat/v1/media/uploads", token: token, json: #"{"length":64,"contentType":"image/png"}"#)
        #expect(upload.status == 201, "\(upload.body)")
        #expect(upload.location?.hasPrefix("/chat/v1/media/uploads/u") == true, "Location \(upload.location ?? "none")")
        let device = try await Self.send("POST", base + "/chat/v1/auth/device", json: #"{"device":"build box"}"#)
        #expect(device.status == 201, "\(device.body)")
        #expect(device.body.contains("127.0.0.1:\(port)\\/chat\\/#device=") || device.body.contains("127.0.0.1:\(port)/chat/#device="), "\(device.body)")

        await group.triggerGracefulShutdown()
        try await running.value
    }

    @Test("--path-prefix: the setup link is under the prefix, with the public URL's origin too; invites are")
    func standaloneLinks() async throws {
        let server = TestServer()
        defer { server.remove() }
        server.configuration.pathPrefix = "/chat"
        server.configuration.identity.publicURL = "https://chat.example.com"
        let circle = try await server.start()
        let link = try #require(circle.setupLink)
        #expect(link.hasPrefix("https://chat.example.com/chat/#setup="), "\(link)")
        let token = String(try #require(link.split(separator: "#setup=").last))
        let setup = try await Self.send(
            "POST", server.httpBase + "/chat/v1/auth/setup", json: #"{"token":"\#(token)","name":"ada","password":"correct horse battery"}"#
        )
        #expect(setup.status == 201, "\(setup.body)")
        let admin = try await circle.mintToken(user: "ada")
        let invite = try await Self.send("POST", server.httpBase + "/chat/v1/admin/invites", token: admin, json: #"{"hours":1,"uses":1}"#)
        #expect(invite.status == 201, "\(invite.body)")
        #expect(
            invite.body.contains(#"https:\/\/chat.example.com\/chat\/#invite="#) || invite.body.contains("https://chat.example.com/chat/#invite="),
            "\(invite.body)"
        )
        await server.stop()
    }

    static func get(_ url: String) async throws -> (status: Int, body: String) {
        let answer = try await Self.send("GET", url)
        return (answer.status, answer.body)
    }

    static func send(
        _ method: String, _ url: String, token: String? = nil, json: String? = nil, body: [UInt8]? = nil, contentType: String? = nil
    ) async throws -> (status: Int, body: String, location: String?) {
        var request = URLRequest(url: try #require(URL(string: url)))
        request.httpMethod = method
        if let token { request.setValue("Bearer \(token)", forHTTPHeaderField: "Authorization") }
        if let json { request.httpBody = Data(json.utf8) }
        if let body { request.httpBody = Data(body) }
        if let contentType { request.setValue(contentType, forHTTPHeaderField: "Content-Type") }
        let (data, response) = try await URLSession.shared.data(for: request)
        let http = response as? HTTPURLResponse
        return (http?.statusCode ?? 0, String(decoding: data, as: UTF8.self), http?.value(forHTTPHeaderField: "Location"))
    }
}

/// The port the app's server bound, for the test to wait on.
private final class PortBox: Sendable {
    private let stream: AsyncStream<Int>
    private let continuation: AsyncStream<Int>.Continuation

    init() {
        (self.stream, self.continuation) = AsyncStream.makeStream(of: Int.self)
    }

    func set(_ port: Int) {
        self.continuation.yield(port)
        self.continuation.finish()
    }

    func wait() async throws -> Int {
        for await port in self.stream { return port }
        throw TestFailure("the app's server did not start")
    }
}
