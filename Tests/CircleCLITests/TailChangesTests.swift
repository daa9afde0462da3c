import CircleTestSupport
import Foundation
import Testing

/// `circle tail` with the changes of issue 15: edits, deletes, reactions and replies made while
/// it follows print as lines of their own (raw entries with `--json`), and a later backlog shows
/// each post as it is now.
@Suite("circle tail shows edits, deletes, reactions and replies", .serialized)
struct TailChangesTests {
    private func run(_ arguments: [String], server: TestServer) async throws -> (status: Int32, stdout: String, stderr: String) {
        let process = try CircleProcess(arguments + ["--server", server.wsURL, "--jwt-secret", testSecret])
        process.closeInput()
        let status = try await process.waitForExit(timeout: .seconds(40))
        return (status, process.stdout, process.stderr)
    }

    /// A raw `circle.v1` connection through `circle ws`: one JSON request per line, and a wait for
    /// the answer carrying its id.
    private func rawClient(_ user: String, server: TestServer) async throws -> CircleProcess {
        let token = try await server.token(user)
        return try CircleProcess(["ws", server.wsURL, "--subprotocol", "circle.v1", "--header", "Authorization: Bearer \(token)", "--quiet"])
    }

    private func request(_ raw: CircleProcess, _ id: String, _ json: String) async throws {
        try raw.send(line: "{\"id\":\"\(id)\",\(json)}")
        // The answer (not the entry's own event, which carries the same id).
        let deadline = ContinuousClock.now + .seconds(20)
        var answer: String?
        while answer == nil, ContinuousClock.now < deadline {
            answer = raw.stdoutLines.first { $0.contains("\"id\":\"\(id)\"") && !$0.contains("\"type\":\"post\"") }
            if answer == nil { try await Task.sleep(for: .milliseconds(50)) }
        }
        #expect(answer?.contains("\"type\":\"ack\"") == true, "\(id): \(answer ?? "no answer") \(raw.stderr)")
    }

    @Test("tail --follow prints each change as a line, --json the raw entries; the backlog shows posts as they are now")
    func changes() async throws {
        let server = TestServer()
        defer { server.remove() }
        try await server.start()
        try await server.createCircle("log", owner: "alice")
        #expect(try await self.run(["send", "log", "--user", "alice", "first"], server: server).status == 0)
        #expect(try await self.run(["send", "log", "--user", "alice", "second"], server: server).status == 0)

        let text = try CircleProcess(["tail", "log", "--follow", "--user", "carol", "--server", server.wsURL, "--jwt-secret", testSecret])
        let json = try CircleProcess(["tail", "log", "--follow", "--json", "--user", "carol", "--server", server.wsURL, "--jwt-secret", testSecret])
        try await text.waitForStdout("alice: second")
        try await json.waitForStdout("\"text\":\"second\"")
        // The followers subscribe after printing the backlog; a post shows when they are live.
        #expect(try await self.run(["send", "log", "--user", "bob", "ready"], server: server).status == 0)
        try await text.waitForStdout("bob: ready")
        try await json.waitForStdout("\"text\":\"ready\"")

        let raw = try await self.rawClient("alice", server: server)
        try await self.request(raw, "j", #""action":"join","circle":"log""#)
        try await self.request(raw, "e1", #""action":"edit","circle":"log","target":1,"text":"first, fixed""#)
        try await self.request(raw, "r1", #""action":"react","circle":"log","target":3,"emoji":"👍""#)
        try await self.request(raw, "u1", #""action":"unreact","circle":"log","target":3,"emoji":"👍""#)
        try await self.request(raw, "r2", #""action":"react","circle":"log","target":3,"emoji":"🎉""#)
        try await self.request(raw, "d1", #""action":"delete","circle":"log","target":2"#)
        try await self.request(raw, "p1", #""action":"post","circle":"log","text":"welcome, bob","replyTo":3"#)
        raw.closeInput()

        try await text.waitForStdout("alice (reply to #3): welcome, bob")
        let lines = text.stdoutLines.map { line in
            // "#SEQ HH:MM:SS rest": the time varies.
            let parts = line.split(separator: " ", maxSplits: 2)
            return parts.count == 3 ? "\(parts[0]) \(parts[2])" : line
        }
        #expect(
            lines == [
                "#1 alice: first", "#2 alice: second", "#3 bob: ready",
                "#4 alice edited #1: first, fixed",
                "#5 alice reacted 👍 to #3",
                "#6 alice took back 👍 from #3",
                "#7 alice reacted 🎉 to #3",
                "#8 alice deleted #2",
                "#9 alice (reply to #3): welcome, bob",
            ],
            "\(text.stdout)"
        )
        try await json.waitForStdout("welcome, bob")
        let entries = json.stdoutLines.compactMap { line -> [String: Any]? in
            (try? JSONSerialization.jsonObject(with: Data(line.utf8))) as? [String: Any]
        }
        #expect(entries.count == 9, "\(json.stdout)")
        let changes = entries.compactMap { entry -> String? in
            guard let change = entry["change"] as? String, let target = entry["target"] as? Int else { return nil }
            return "\(change) \(target) \(entry["emoji"] as? String ?? entry["text"] as? String ?? "")"
        }
        #expect(changes == ["edit 1 first, fixed", "react 3 👍", "unreact 3 👍", "react 3 🎉", "delete 2 "], "\(json.stdout)")
        #expect((entries.last?["replyTo"] as? Int) == 3)
        text.interrupt()
        json.interrupt()

        // The backlog: posts only, each in its current state.
        let backlog = try await self.run(["tail", "log", "--since", "0", "--user", "carol"], server: server)
        #expect(backlog.status == 0, "\(backlog.stderr)")
        let current = backlog.stdout.split(separator: "\n").map { line in
            let parts = line.split(separator: " ", maxSplits: 2)
            return parts.count == 3 ? "\(parts[0]) \(parts[2])" : String(line)
        }
        #expect(
            current == ["#1 alice (edited): first, fixed", "#2 alice: [deleted]", "#3 bob: ready [🎉 1]", "#9 alice (reply to #3): welcome, bob"],
            "\(backlog.stdout)"
        )
        // carol never marked the circle read: #1, #3 and #9 are unread for her (#2 is deleted).
        let listed = try await self.run(["circle", "list", "--user", "carol"], server: server)
        #expect(listed.stdout.contains("log\tpublic\towner alice\tnewest #9\t3 unread"), "\(listed.stdout)")
        await server.stop()
    }

    @Test("tail prints system entries as lines of their own: live with --follow, and in the backlog")
    func systemEntries() async throws {
        let server = TestServer()
        defer { server.remove() }
        try await server.start()
        try await server.createCircle("club", owner: "alice")
        #expect(try await self.run(["send", "club", "--user", "alice", "hello"], server: server).status == 0)
        let text = try CircleProcess(["tail", "club", "--follow", "--user", "carol", "--server", server.wsURL, "--jwt-secret", testSecret])
        try await text.waitForStdout("alice: hello")
        // Live once a post shows that the follower is subscribed.
        #expect(try await self.run(["send", "club", "--user", "bob", "ready"], server: server).status == 0)
        try await text.waitForStdout("bob: ready")
        let alice = try await server.token("alice")
        #expect(try await server.http("POST", "/v1/circles/club/members", token: alice, json: #"{"user":"dan"}"#).status == 200)
        try await text.waitForStdout("— alice added dan")
        #expect(try await server.http("DELETE", "/v1/circles/club/members/dan", token: try await server.token("dan")).status == 200)
        try await text.waitForStdout("— dan left")
        text.interrupt()

        let backlog = try await self.run(["tail", "club", "--since", "0", "--user", "carol"], server: server)
        #expect(backlog.status == 0, "\(backlog.stderr)")
        let lines = backlog.stdout.split(separator: "\n").map { line in
            let parts = line.split(separator: " ", maxSplits: 2)
            return parts.count == 3 ? "\(parts[0]) \(parts[2])" : String(line)
        }
        #expect(lines == ["#1 alice: hello", "#2 bob: ready", "#3 — alice added dan", "#4 — dan left"], "\(backlog.stdout)")
        // Not unread: carol has two unread posts, newest #4.
        let listed = try await self.run(["circle", "list", "--user", "carol"], server: server)
        #expect(listed.stdout.contains("club\tpublic\towner alice\tnewest #4\t2 unread"), "\(listed.stdout)")
        await server.stop()
    }
}
