import CircleTestSupport
import Foundation
import Testing

/// `circle search` against a real server.
@Suite("circle search", .serialized)
struct SearchCommandTests {
    private func run(_ arguments: [String], server: TestServer) async throws -> (status: Int32, stdout: String, stderr: String) {
        let process = try CircleProcess(arguments + ["--server", server.wsURL, "--jwt-secret", testSecret])
        process.closeInput()
        let status = try await process.waitForExit(timeout: .seconds(40))
        return (status, process.stdout, process.stderr)
    }

    @Test("hits as lines and as JSON, the filters, nothing found, and a refused query")
    func search() async throws {
        let server = TestServer()
        defer { server.remove() }
        try await server.start()
        #expect(try await self.run(["circle", "create", "ops", "--user", "alice"], server: server).status == 0)
        #expect(try await self.run(["circle", "create", "team", "--private", "--user", "alice"], server: server).status == 0)
        for (circle, text, user) in [("ops", "we deploy at five", "alice"), ("ops", "deploy done", "bob"), ("team", "deploy secrets", "alice")] {
            let sent = try await self.run(["send", circle, text, "--user", user], server: server)
            #expect(sent.status == 0, "\(sent.stderr)")
        }

        let lines = try await self.run(["search", "deploy", "--newest", "--user", "bob"], server: server)
        #expect(lines.status == 0, "\(lines.stderr)")
        let fields = lines.stdout.split(separator: "\n").map { $0.split(separator: "\t", omittingEmptySubsequences: false).map(String.init) }
        #expect(fields.map { $0.first ?? "" } == ["ops#2", "ops#1"], "\(lines.stdout)")
        #expect(fields.first?.count == 4)
        #expect(fields.first?[1] == "bob")
        #expect(fields.first?[3] == "*deploy* done")
        #expect(fields.last?[3] == "we *deploy* at five")

        let alice = try await self.run(["search", "deploy", "--circle", "team", "--json", "--user", "alice"], server: server)
        #expect(alice.status == 0, "\(alice.stderr)")
        #expect(alice.stdout.split(separator: "\n").count == 1)
        #expect(alice.stdout.contains(#""circle":"team""#) && alice.stdout.contains(#""seq":1"#))

        let limited = try await self.run(["search", "deploy", "--from", "alice", "--limit", "1", "--user", "alice"], server: server)
        #expect(limited.stdout.split(separator: "\n").count == 1)
        let none = try await self.run(["search", "deploy", "--after", "2999-01-01", "--user", "bob"], server: server)
        #expect(none.status == 0 && none.stdout.isEmpty, "\(none)")

        let refused = try await self.run(["search", "from:bob", "--user", "bob"], server: server)
        #expect(refused.status == 1)
        #expect(refused.stderr.contains("give a word"), "\(refused.stderr)")
        let forbidden = try await self.run(["search", "deploy", "--circle", "team", "--user", "bob"], server: server)
        #expect(forbidden.status == 1, "\(forbidden.stderr)")
        let usage = try await self.run(["search", "deploy", "--limit", "0", "--user", "bob"], server: server)
        #expect(usage.status == 64)
        await server.stop()
    }
}
