import CircleServer
import Foundation
import Logging
import Testing

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

public let testSecret = "circle-test-secret-0123456789abcdef-0123"

/// A server on port 0 with its own data directory, restartable on the same directory.
public final class TestServer: @unchecked Sendable {
    // @unchecked: mutated only by the test that owns it, sequentially.
    public let dataDirectory: String
    public var configuration: CircleServerConfiguration
    public private(set) var server: CircleServer?
    /// The store to serve from; `nil`: the server's own SQLite store in ``dataDirectory``.
    public var store: (any CircleStore)?
    /// This server's own HTTP connections: with `URLSession.shared` a pooled keep-alive
    /// connection to an earlier test's server that had the same port was reused and reset (CI).
    private let session = URLSession(configuration: .ephemeral)

    /// - Parameter dataDirectory: by default a new temporary directory; another server's to share it.
    public init(limits: CircleServerConfiguration.Limits = .init(), echo: Bool = false, dev: Bool = false, dataDirectory: String? = nil) {
        self.dataDirectory = dataDirectory ?? FileManager.default.temporaryDirectory.appendingPathComponent("circle-test-\(UUID().uuidString)").path
        self.configuration = CircleServerConfiguration(
            host: "127.0.0.1",
            port: 0,
            dataDirectory: self.dataDirectory,
            tokenKeys: .hs256(secret: testSecret),
            limits: limits,
            developmentTokens: dev,
            echoEndpoint: echo
        )
        // bcrypt's least cost: the tests sign up and in by the dozen; `circle bench`-style
        // figures for the real cost are in docs/bench/signin.md.
        self.configuration.identity.passwordCost = 4
        // Waits long enough that a slow machine cannot outlast them within a test.
        self.configuration.identity.accountThrottle.firstWait = .seconds(120)
        self.configuration.identity.addressThrottle.firstWait = .seconds(120)
    }

    @discardableResult
    public func start() async throws -> CircleServer {
        var logger = Logger(label: "circle.test-server")
        // Connections come and go by the hundred in the tests: only warnings and errors are shown.
        logger.logLevel = .warning
        let server = try await CircleServer.start(configuration: self.configuration, store: self.store, logger: logger)
        self.server = server
        // Restarts come back on the same port, as a real deployment would.
        self.configuration.port = server.port
        return server
    }

    public var port: Int { self.server?.port ?? 0 }
    public var wsURL: String { "ws://127.0.0.1:\(self.port)/v1/ws" }
    public var httpBase: String { "http://127.0.0.1:\(self.port)" }

    public func stop() async {
        await self.server?.shutdown()
        self.server = nil
    }

    public func token(_ user: String, ttl: Duration = .seconds(3600)) async throws -> String {
        try await TokenAuthority(.hs256(secret: testSecret)).mint(user: user, ttl: ttl)
    }

    public func remove() {
        try? FileManager.default.removeItem(atPath: self.dataDirectory)
    }

    /// An HTTP request to the server's API.
    public func http(
        _ method: String,
        _ path: String,
        token: String? = nil,
        json: String? = nil,
        headers: [String: String] = [:]
    ) async throws -> (status: Int, body: String) {
        var request = URLRequest(url: URL(string: self.httpBase + path)!)
        request.httpMethod = method
        if let token { request.setValue("Bearer \(token)", forHTTPHeaderField: "Authorization") }
        for (name, value) in headers { request.setValue(value, forHTTPHeaderField: name) }
        if let json {
            request.httpBody = Data(json.utf8)
            request.setValue("application/json", forHTTPHeaderField: "Content-Type")
        }
        let (data, response) = try await self.session.data(for: request)
        return ((response as! HTTPURLResponse).statusCode, String(decoding: data, as: UTF8.self))
    }

    deinit {
        self.session.finishTasksAndInvalidate()
    }

    public func createCircle(_ name: String, owner: String, isPrivate: Bool = false) async throws {
        var result = try await self.http("POST", "/v1/circles", token: try await self.token(owner), json: #"{"name":"\#(name)","private":\#(isPrivate)}"#)
        // 503 unavailable says "retry" (docs/API.md): SQLite's write lock was not free within its
        // 5 s busy timeout, which a full test run on 2 loaded cores once caused. A client retries.
        for _ in 0..<2 where result.status == 503 {
            result = try await self.http("POST", "/v1/circles", token: try await self.token(owner), json: #"{"name":"\#(name)","private":\#(isPrivate)}"#)
        }
        #expect(result.status == 201, "creating \(name): \(result.body)")
    }
}


extension TestServer {
    /// Sends raw request bytes over a plain TCP connection and returns what the server answered
    /// until it closed, a whole response had come, or `timeout` passed (for requests an HTTP
    /// client library would not send as is).
    public func rawHTTP(_ request: String, timeout: Duration = .seconds(10)) async throws -> String {
        let connection = try RawTCP(port: self.port)
        connection.send(request)
        let bytes = await connection.read(until: Self.holdsWholeResponse, timeout: timeout)
        return String(decoding: bytes, as: UTF8.self)
    }

    /// Whether `bytes` start with a whole response: its head and as much body as its
    /// `Content-Length` says.
    @Sendable private static func holdsWholeResponse(_ bytes: [UInt8]) -> Bool {
        let text = String(decoding: bytes, as: UTF8.self)
        guard let end = text.range(of: "\r\n\r\n"),
            let lengthLine = text[..<end.lowerBound].split(separator: "\r\n").first(where: { $0.lowercased().hasPrefix("content-length:") }),
            let length = Int(lengthLine.split(separator: ":")[1].trimmingCharacters(in: .whitespaces))
        else { return false }
        return text.utf8.count - text.utf8.distance(from: text.startIndex, to: end.upperBound) >= length
    }
}
