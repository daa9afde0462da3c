import CircleTestSupport
import Foundation
import Testing

/// The CLI's server calls go through the SDK: development tokens from a `--dev` server,
/// circle and member management with the server's refusals, and `tail`'s forward paging.
@Suite("circle commands through the SDK", .serialized)
struct CLIThroughSDKTests {
    private func run(_ arguments: [String], server: TestServer, keys: [String]? = nil) async throws -> (status: Int32, stdout: String, stderr: String) {
        let process = try CircleProcess(arguments + ["--server", server.wsURL] + (keys ?? ["--jwt-secret", testSecret]))
        process.closeInput()
        let status = try await process.waitForExit(timeout: .seconds(60))
        return (status, process.stdout, process.stderr)
    }

    @Test("--user against a --dev server without the key: the token is fetched; members are managed; refusals exit 1 with the server's message")
    func developmentTokenAndMembers() async throws {
        let server = TestServer(dev: true)
        defer { server.remove() }
        try await server.start()
        let noKey = ["--data", "/nonexistent/circle-data"]
        let created = try await self.run(["circle", "create", "team", "--private", "--user", "alice"], server: server, keys: noKey)
        #expect(created.status == 0, "\(created.stderr)")
        #expect(created.stdout == "created private circle team\n")
        let taken = try await self.run(["circle", "create", "team", "--user", "alice"], server: server, keys: noKey)
        #expect(taken.status == 1)
        #expect(taken.stderr.contains("\"team\" was not created: circle \"team\" exists"), "\(taken.stderr)")

        let added = try await self.run(["circle", "add-member", "team", "bob", "--user", "alice"], server: server, keys: noKey)
        #expect(added.status == 0, "\(added.stderr)")
        #expect(added.stdout == "bob is a member of team\n")
        let listed = try await self.run(["circle", "list", "--user", "bob"], server: server, keys: noKey)
        // Newest #1: the system entry "alice added bob" (not unread).
        #expect(listed.stdout == "team\tprivate\towner alice\tnewest #1\t0 unread\n", "\(listed.stdout)")
        let notOwner = try await self.run(["circle", "add-member", "team", "carol", "--user", "bob"], server: server, keys: noKey)
        #expect(notOwner.status == 1)
        #expect(notOwner.stderr.contains("carol was not added to team: only the owner (alice) or an admin adds members"), "\(notOwner.stderr)")
        let off = try await self.run(["circle", "system-entries", "team", "off", "--user", "alice"], server: server, keys: noKey)
        #expect(off.status == 0 && off.stdout == "system entries of team: off\n", "\(off.stdout) \(off.stderr)")
        let notYours = try await self.run(["circle", "system-entries", "team", "on", "--user", "bob"], server: server, keys: noKey)
        #expect(notYours.status == 1 && notYours.stderr.contains("system entries of team were not changed: only the owner"), "\(notYours.stderr)")
        #expect(try await self.run(["circle", "system-entries", "team", "maybe", "--user", "alice"], server: server, keys: noKey).status == 64)
        let removed = try await self.run(["circle", "remove-member", "team", "bob", "--user", "alice"], server: server, keys: noKey)
        #expect(removed.status == 0, "\(removed.stderr)")
        #expect(try await self.run(["circle", "list", "--user", "bob"], server: server, keys: noKey).stdout == "")
        await server.stop()
    }

    @Test("circle retention: prints the policy, sets days and keep, --off; a bad value and not the owner exit 1 with the server's message")
    func retention() async throws {
        let server = TestServer(dev: true)
        defer { server.remove() }
        try await server.start()
        let noKey = ["--data", "/nonexistent/circle-data"]
        #expect(try await self.run(["circle", "create", "team", "--user", "alice"], server: server, keys: noKey).status == 0)
        let shown = try await self.run(["circle", "retention", "team", "--user", "bob"], server: server, keys: noKey)
        #expect(shown.status == 0 && shown.stdout == "team keeps everything\n", "\(shown)")
        let set = try await self.run(["circle", "retention", "team", "--days", "90", "--keep", "1", "--user", "alice"], server: server, keys: noKey)
        #expect(set.status == 0 && set.stdout == "team keeps 90 days and keeps the newest 1 entry\n", "\(set)")
        let notOwner = try await self.run(["circle", "retention", "team", "--keep", "5", "--user", "bob"], server: server, keys: noKey)
        #expect(notOwner.status == 1)
        #expect(notOwner.stderr.contains("the retention of team was not changed: only the owner (alice) or an admin sets a circle's retention"), "\(notOwner.stderr)")
        let bad = try await self.run(["circle", "retention", "team", "--days", "0", "--user", "alice"], server: server, keys: noKey)
        #expect(bad.status == 1 && bad.stderr.contains("\"days\" is from 1 to 36500, not 0"), "\(bad.stderr)")
        let usage = try await self.run(["circle", "retention", "team", "--off", "--days", "3", "--user", "alice"], server: server, keys: noKey)
        #expect(usage.status == 64, "\(usage)")
        let off = try await self.run(["circle", "retention", "team", "--off", "--user", "alice"], server: server, keys: noKey)
        #expect(off.status == 0 && off.stdout == "team keeps everything\n", "\(off)")
        await server.stop()
    }

    @Test("a --user without the key against a server that hands out no development tokens is exit 4")
    func noDevelopmentTokens() async throws {
        let server = TestServer()
        defer { server.remove() }
        try await server.start()
        let result = try await self.run(["circle", "list", "--user", "alice"], server: server, keys: ["--data", "/nonexistent/circle-data"])
        #expect(result.status == 4, "\(result.stderr)")
        #expect(result.stderr.contains("the server does not hand out development tokens"), "\(result.stderr)")
        await server.stop()
    }

    @Test("tail --since reads the backlog forwards past one page of 200")
    func tailPages() async throws {
        let server = TestServer()
        defer { server.remove() }
        try await server.start()
        try await server.createCircle("long", owner: "alice")
        let lines = (1...260).map { "post \($0)" }
        let process = try CircleProcess(["send", "long", "--user", "alice", "--server", server.wsURL, "--jwt-secret", testSecret])
        for line in lines { try process.send(line: line) }
        process.closeInput()
        #expect(try await process.waitForExit(timeout: .seconds(120)) == 0, "\(process.stderr)")
        let tail = try await self.run(["tail", "long", "--since", "5", "--user", "bob"], server: server)
        #expect(tail.status == 0, "\(tail.stderr)")
        let seqs = tail.stdout.split(separator: "\n").compactMap { line in line.split(separator: " ").first.flatMap { Int($0.dropFirst()) } }
        #expect(seqs == Array(6...260))
        await server.stop()
    }
}
