import CircleTestSupport
import Foundation
import Testing

/// `circle circle`, `circle send` and `circle tail` against a real server.
@Suite("circle send, tail and circle", .serialized)
struct ChatCommandsTests {
    private func run(_ arguments: [String], server: TestServer, input: [String]? = nil) async throws -> (status: Int32, stdout: String, stderr: String) {
        let process = try CircleProcess(arguments + ["--server", server.wsURL, "--jwt-secret", testSecret])
        if let input {
            for line in input { try process.send(line: line) }
        }
        process.closeInput()
        let status = try await process.waitForExit(timeout: .seconds(40))
        return (status, process.stdout, process.stderr)
    }

    @Test("create and list circles, post, and read them back in order")
    func roundTrip() async throws {
        let server = TestServer()
        defer { server.remove() }
        try await server.start()
        let created = try await self.run(["circle", "create", "general", "--user", "alice"], server: server)
        #expect(created.status == 0, "\(created.stderr)")
        #expect(try await self.run(["circle", "create", "general", "--user", "alice"], server: server).status == 1)
        let listed = try await self.run(["circle", "list", "--user", "bob"], server: server)
        #expect(listed.stdout.contains("general\tpublic\towner alice"))

        let sent = try await self.run(["send", "general", "hello", "world", "--user", "alice"], server: server)
        #expect(sent.status == 0, "\(sent.stderr)")
        #expect(sent.stdout == "#1\n")
        let piped = try await self.run(["send", "general", "--user", "bob"], server: server, input: ["one", "", "two"])
        #expect(piped.stdout == "#2\n#3\n")

        let tail = try await self.run(["tail", "general", "--user", "carol"], server: server)
        let lines = tail.stdout.split(separator: "\n").map(String.init)
        #expect(lines.count == 3)
        #expect(lines.first?.hasPrefix("#1 ") == true)
        #expect(lines.first?.hasSuffix("alice: hello world") == true)
        #expect(lines.last?.hasSuffix("bob: two") == true)

        let json = try await self.run(["tail", "general", "--since", "2", "--json", "--user", "carol"], server: server)
        #expect(json.stdout.split(separator: "\n").count == 1)
        #expect(json.stdout.contains("\"seq\":3"))
        await server.stop()
    }

    @Test("tail --follow prints new posts as they come")
    func follow() async throws {
        let server = TestServer()
        defer { server.remove() }
        try await server.start()
        try await server.createCircle("live", owner: "alice")
        let tail = try CircleProcess(["tail", "live", "--follow", "--user", "carol", "--server", server.wsURL, "--jwt-secret", testSecret])
        try await Task.sleep(for: .milliseconds(800))
        #expect(try await self.run(["send", "live", "first", "--user", "alice"], server: server).status == 0)
        try await tail.waitForStdout("alice: first")
        #expect(try await self.run(["send", "live", "second", "--user", "alice"], server: server).status == 0)
        try await tail.waitForStdout("alice: second")
        #expect(tail.stdoutLines.count == 2)
        tail.interrupt()
        await server.stop()
    }

    @Test("failures: a refused post exits 1 with the reason; an unreachable server exits 2")
    func failures() async throws {
        let server = TestServer()
        defer { server.remove() }
        try await server.start()
        try await server.createCircle("secret", owner: "alice", isPrivate: true)
        let refused = try await self.run(["send", "secret", "let me in", "--user", "mallory"], server: server)
        #expect(refused.status == 1)
        #expect(refused.stderr.contains("\"secret\" is private and mallory is not a member"), "\(refused.stderr)")
        let noUser = try await self.run(["send", "secret", "who am i"], server: server)
        #expect(noUser.status == 64)
        await server.stop()
        // Not the stopped server's port: a tmux server started meanwhile by another suite may hold it.
        let port = try unusedPort()
        let process = try CircleProcess(["send", "x", "y", "--user", "alice", "--jwt-secret", testSecret, "--server", "ws://127.0.0.1:\(port)/v1/ws"])
        process.closeInput()
        #expect(try await process.waitForExit(timeout: .seconds(40)) == 2)
        #expect(process.stderr.contains("nothing is listening on 127.0.0.1:\(port) (connection refused)"), "\(process.stderr)")
    }
}
