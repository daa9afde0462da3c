import CircleServer
import Foundation
import Logging
import PostgresNIO

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// Several `circle serve --postgres` processes ("nodes") on one PostgreSQL database, as an
/// operator runs them behind a load balancer: each on its own loopback port, all with the same
/// data directory (token secret, media) and the same token key, so any node accepts any client.
/// Nodes can be killed with SIGKILL and started again on the same port.
public final class NodeCluster: @unchecked Sendable {
    // @unchecked: driven by one test task at a time (start, kill and restart are not concurrent
    // with each other for the same node).
    /// The database's `postgres://` URL.
    public let database: String
    public let dataDirectory: String
    public let nodes: [ServerProcess]
    private let authority: TokenAuthority

    /// - Parameters:
    ///   - database: A `postgres://` URL (``PostgresTestServer/freshDatabase()``).
    ///   - count: How many nodes.
    ///   - arguments: More `circle serve` options for every node.
    public init(database: String, count: Int = 3, arguments: [String] = []) async throws {
        self.database = database
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("circle-nodes-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        self.dataDirectory = directory + "/data"
        try FileManager.default.createDirectory(atPath: self.dataDirectory, withIntermediateDirectories: true)
        var nodes: [ServerProcess] = []
        for index in 0..<count {
            nodes.append(
                ServerProcess(
                    port: try ServerProcess.freePort(),
                    dataDirectory: self.dataDirectory,
                    arguments: ["--postgres", database] + arguments,
                    logFile: directory + "/node\(index).log"
                )
            )
        }
        self.nodes = nodes
        self.authority = try await TokenAuthority(.hs256(secret: testSecret))
    }

    /// Starts every node at once (their schema migrations race, as when an operator starts
    /// several) and waits until each answers `/healthz`.
    public func start() async throws {
        try await withThrowingTaskGroup(of: Void.self) { group in
            for node in self.nodes {
                group.addTask { try await node.start() }
            }
            try await group.waitForAll()
        }
    }

    /// SIGKILL to one node: no close frames, commits in flight cut off.
    public func kill(_ index: Int) {
        self.nodes[index].kill()
    }

    /// Starts a node again on its port.
    public func restart(_ index: Int) async throws {
        try await self.nodes[index].start()
    }

    /// SIGTERM to every node that runs, then deletes the data directory and the logs.
    public func stop() {
        for node in self.nodes { node.stop() }
        try? FileManager.default.removeItem(atPath: URL(fileURLWithPath: self.dataDirectory).deletingLastPathComponent().path)
    }

    /// The node's WebSocket URL.
    public func wsURL(_ index: Int) -> String { "ws://127.0.0.1:\(self.nodes[index].port)/v1/ws" }

    /// Every node's WebSocket URL, starting with node `first` and going round: a client's
    /// `servers` list, so that clients spread over the nodes and fail over to the next.
    public func servers(startingAt first: Int) -> [String] {
        (0..<self.nodes.count).map { self.wsURL((first + $0) % self.nodes.count) }
    }

    /// A token for `user`, valid for an hour, that every node accepts.
    public func token(_ user: String) async throws -> String {
        try await self.authority.mint(user: user, ttl: .seconds(3600))
    }

    /// An HTTP request to one node's API.
    public func http(_ node: Int, _ method: String, _ path: String, token: String? = nil, json: String? = nil) async throws -> (status: Int, body: String) {
        guard let url = URL(string: "http://127.0.0.1:\(self.nodes[node].port)" + path) else {
            throw ServerProcessError("not a path: \(path)")
        }
        var request = URLRequest(url: url)
        request.httpMethod = method
        request.timeoutInterval = 30
        if let token { request.setValue("Bearer \(token)", forHTTPHeaderField: "Authorization") }
        if let json {
            request.httpBody = Data(json.utf8)
            request.setValue("application/json", forHTTPHeaderField: "Content-Type")
        }
        let (data, response) = try await URLSession.shared.data(for: request)
        return ((response as? HTTPURLResponse)?.statusCode ?? 0, String(decoding: data, as: UTF8.self))
    }

    /// Creates a public circle through one node.
    public func createCircle(_ name: String, owner: String, via node: Int = 0) async throws {
        let result = try await self.http(node, "POST", "/v1/circles", token: try await self.token(owner), json: #"{"name":"\#(name)"}"#)
        guard result.status == 201 else { throw ServerProcessError("creating \(name) through node \(node): \(result.status) \(result.body)") }
    }

    /// The node's open WebSocket chat connections (`circle_connections` in its `/metrics`).
    public func connections(_ node: Int) async throws -> Int {
        let metrics = try await self.http(node, "GET", "/metrics")
        for line in metrics.body.split(separator: "\n") where line.hasPrefix("circle_connections ") {
            if let value = Double(line.split(separator: " ").last ?? "") { return Int(value) }
        }
        throw ServerProcessError("no circle_connections in node \(node)'s /metrics")
    }

    /// The last lines of every node's log, for a failure message.
    public func logTails(lines: Int = 15) -> String {
        let directory = URL(fileURLWithPath: self.dataDirectory).deletingLastPathComponent()
        return (0..<self.nodes.count).map { index in
            let text = (try? String(contentsOf: directory.appendingPathComponent("node\(index).log"), encoding: .utf8)) ?? ""
            return "node \(index) (port \(self.nodes[index].port)):\n" + text.split(separator: "\n").suffix(lines).joined(separator: "\n")
        }.joined(separator: "\n")
    }

    /// What the database holds for one circle's posts, read with SQL (not through a node).
    public func storedPosts(in circle: String) async throws -> StoredPosts {
        try await PostgresTestServer.withConnection(to: self.database) { connection, logger in
            let rows = try await connection.query(
                """
                SELECT count(*), count(DISTINCT (author, client_id)), count(DISTINCT text),
                       coalesce(min(seq), 0), coalesce(max(seq), 0)
                FROM posts WHERE circle = \(circle)
                """,
                logger: logger
            )
            for try await (count, keys, texts, first, last) in rows.decode((Int64, Int64, Int64, Int64, Int64).self) {
                return StoredPosts(count: Int(count), distinctKeys: Int(keys), distinctTexts: Int(texts), firstSeq: first, lastSeq: last)
            }
            throw ServerProcessError("no answer to the count of \(circle)'s posts")
        }
    }
}

/// A circle's posts as the database holds them.
public struct StoredPosts: Sendable, Equatable, CustomStringConvertible {
    /// Rows.
    public var count: Int
    /// Distinct idempotency keys `(author, id)`.
    public var distinctKeys: Int
    /// Distinct texts.
    public var distinctTexts: Int
    public var firstSeq: Int64
    public var lastSeq: Int64

    public init(count: Int, distinctKeys: Int, distinctTexts: Int, firstSeq: Int64, lastSeq: Int64) {
        self.count = count
        self.distinctKeys = distinctKeys
        self.distinctTexts = distinctTexts
        self.firstSeq = firstSeq
        self.lastSeq = lastSeq
    }

    public var description: String {
        "\(self.count) rows, \(self.distinctKeys) distinct (author, id), \(self.distinctTexts) distinct texts, seq \(self.firstSeq)…\(self.lastSeq)"
    }
}

extension PostgresTestServer {
    /// Runs `body` on one connection to the database a `postgres://` URL names, then closes it.
    public static func withConnection<Result: Sendable>(
        to url: String,
        _ body: (PostgresConnection, Logger) async throws -> Result
    ) async throws -> Result {
        guard let components = URLComponents(string: url) else { throw PostgresTestServerError("not a URL: \(url)") }
        let logger = Logger(label: "circle.test.postgres")
        let connection = try await PostgresConnection.connect(
            configuration: .init(
                host: components.host ?? "127.0.0.1",
                port: components.port ?? 5432,
                username: components.user ?? "circle",
                password: components.password,
                database: String(components.path.dropFirst()),
                tls: .disable
            ),
            id: 1,
            logger: logger
        )
        do {
            let result = try await body(connection, logger)
            try await connection.close()
            return result
        } catch {
            try? await connection.close()
            throw error
        }
    }
}
