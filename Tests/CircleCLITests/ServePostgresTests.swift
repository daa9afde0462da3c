import CircleTestSupport
import Foundation
import Testing

/// `circle serve --postgres`: the data lives in PostgreSQL (a restarted server on a fresh data
/// directory still has it), several nodes on one database, and a database that cannot be reached
/// is a clear exit 2.
@Suite("circle serve --postgres", .serialized)
struct ServePostgresTests {
    private func circle(_ arguments: [String], input: [String] = []) async throws -> (status: Int32, stdout: String, stderr: String) {
        let process = try CircleProcess(arguments)
        for line in input { try process.send(line: line) }
        process.closeInput()
        let status = try await process.waitForExit(timeout: .seconds(60))
        return (status, process.stdout, process.stderr)
    }

    private func temporaryDirectory() -> String {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("circle-pg-\(UUID().uuidString)").path
        try? FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        return path
    }

    @Test("posts survive a restart on another data directory; a second node serves the same database")
    func dataLivesInPostgres() async throws {
        let database = try await PostgresTestServer.shared.freshDatabase()
        let first = ServerProcess(port: try unusedPort(), dataDirectory: self.temporaryDirectory(), arguments: ["--postgres", database])
        try await first.start()
        let server = "ws://127.0.0.1:\(first.port)/v1/ws"
        let keys = ["--jwt-secret", testSecret]
        #expect(try await self.circle(["circle", "create", "general", "--user", "alice", "--server", server] + keys).status == 0)
        let sent = try await self.circle(["send", "general", "--user", "alice", "--server", server] + keys, input: ["one", "two"])
        #expect(sent.status == 0, "\(sent.stderr)")

        // A second node on the same database serves it too: a post through it is stored after
        // the first node's, and the first node's readers see it.
        let second = ServerProcess(port: try unusedPort(), dataDirectory: self.temporaryDirectory(), arguments: ["--postgres", database])
        try await second.start()
        let secondServer = "ws://127.0.0.1:\(second.port)/v1/ws"
        let third = try await self.circle(["send", "general", "--user", "carol", "--server", secondServer] + keys, input: ["three"])
        #expect(third.status == 0, "\(third.stderr)")
        let both = try await self.circle(["tail", "general", "--since", "0", "--user", "bob", "--server", server] + keys)
        #expect(both.stdout.split(separator: "\n").count == 3 && both.stdout.contains("#3 ") && both.stdout.contains("three"), "\(both.stdout)")
        second.stop()
        first.stop()

        // Restarted with an empty data directory: circles and posts come from PostgreSQL.
        let restarted = ServerProcess(port: try unusedPort(), dataDirectory: self.temporaryDirectory(), arguments: ["--postgres", database])
        try await restarted.start()
        let tail = try await self.circle(["tail", "general", "--since", "0", "--user", "bob", "--server", "ws://127.0.0.1:\(restarted.port)/v1/ws"] + keys)
        #expect(tail.status == 0, "\(tail.stderr)")
        #expect(tail.stdout.contains("one") && tail.stdout.contains("two"), "\(tail.stdout)")
        #expect(tail.stdout.split(separator: "\n").first?.hasPrefix("#1 ") == true, "\(tail.stdout)")
        restarted.stop()
    }

    @Test("a PostgreSQL that cannot be reached is exit 2 with the address, without the password")
    func unreachable() async throws {
        let port = try unusedPort()
        let process = try CircleProcess([
            "serve", "--port", "\(try unusedPort())", "--data", self.temporaryDirectory(), "--jwt-secret", testSecret,
            "--postgres", "postgres://circle:hunter2@127.0.0.1:\(port)/circle?sslmode=disable",
        ])
        process.closeInput()
        #expect(try await process.waitForExit(timeout: .seconds(60)) == 2)
        #expect(process.stderr.contains("PostgreSQL at postgres://circle:***@127.0.0.1:\(port)/circle"), "\(process.stderr)")
        #expect(!process.stderr.contains("hunter2"))
    }

    @Test("a URL that is not postgres:// is a usage error")
    func badURL() async throws {
        let result = try await self.circle(["serve", "--postgres", "mysql://a@b/c", "--data", self.temporaryDirectory()])
        #expect(result.status == 64)
        #expect(result.stderr.contains("--postgres: the URL's scheme is mysql"), "\(result.stderr)")
    }
}
