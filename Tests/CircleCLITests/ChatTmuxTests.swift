import CircleTestSupport
import Foundation
import Testing

/// `circle chat` as a person sees it: real terminals under tmux, keys sent with send-keys and
/// the screen read with capture-pane.
@Suite("circle chat under tmux", .serialized)
struct ChatTmuxTests {
    let socket = "circle-test-\(UUID().uuidString.prefix(8))"

    /// Runs tmux through /bin/sh with posix_spawn and waitpid: Foundation's Process did not reap
    /// the tmux client here (it daemonizes its server), so plain POSIX keeps this dependable.
    @discardableResult
    private func tmux(_ arguments: [String]) throws -> String {
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("tmux-\(UUID().uuidString)").path
        defer { try? FileManager.default.removeItem(atPath: file) }
        let quoted = (["tmux", "-L", self.socket] + arguments).map { "'" + $0.replacingOccurrences(of: "'", with: "'\\''") + "'" }
        let command = quoted.joined(separator: " ") + " > '\(file)' 2>/dev/null < /dev/null"
        var pid: pid_t = 0
        let argv: [UnsafeMutablePointer<CChar>?] = [strdup("/bin/sh"), strdup("-c"), strdup(command), nil]
        defer { for pointer in argv { free(pointer) } }
        guard posix_spawn(&pid, "/bin/sh", nil, nil, argv, environ) == 0 else { throw TestFailure("cannot run tmux") }
        var status: Int32 = 0
        waitpid(pid, &status, 0)
        return (try? String(contentsOfFile: file, encoding: .utf8)) ?? ""
    }

    private func screen(_ session: String) throws -> String {
        try self.tmux(["capture-pane", "-p", "-t", session])
    }

    private func waitForScreen(_ session: String, timeout: Duration = .seconds(20), _ predicate: (String) -> Bool) async throws {
        let deadline = ContinuousClock.now + timeout
        var last = ""
        while ContinuousClock.now < deadline {
            last = try self.screen(session)
            if predicate(last) { return }
            try await Task.sleep(for: .milliseconds(100))
        }
        Issue.record("screen of \(session) never matched; it shows:\n\(last)")
        throw TestFailure("timed out")
    }

    private func startChat(_ session: String, user: String, server: TestServer) throws {
        let command = "\(CircleProcess.executablePath) chat general --user \(user) --jwt-secret \(testSecret) --server \(server.wsURL)"
        try self.tmux(["new-session", "-d", "-s", session, "-x", "90", "-y", "24", command])
    }

    @Test("two chats and circle send see each other's posts; a server restart shows reconnecting and loses nothing")
    func twoChatsAndARestart() async throws {
        // Start tmux's server before ours: a daemon forked later would inherit this process's
        // listening socket and keep the port bound across the restart below.
        try self.tmux(["new-session", "-d", "-s", "keeper", "sleep 600"])
        defer { _ = try? self.tmux(["kill-server"]) }
        let server = TestServer()
        defer { server.remove() }
        try await server.start()
        try await server.createCircle("general", owner: "alice")
        defer { _ = try? self.tmux(["kill-server"]) }
        try self.startChat("alice", user: "alice", server: server)
        try self.startChat("bob", user: "bob", server: server)
        try await self.waitForScreen("alice") { $0.contains("general — alice — connected") }
        try await self.waitForScreen("bob") { $0.contains("general — bob — connected") }

        try self.tmux(["send-keys", "-t", "alice", "hello from alice", "Enter"])
        try await self.waitForScreen("bob") { $0.contains("#1") && $0.contains("alice: hello from alice") }
        try await self.waitForScreen("alice") { $0.contains("#1") && $0.contains("alice: hello from alice") && !$0.contains("sending") }

        let send = try CircleProcess(["send", "general", "from the shell", "--user", "carol", "--jwt-secret", testSecret, "--server", server.wsURL])
        send.closeInput()
        #expect(try await send.waitForExit(timeout: .seconds(30)) == 0)
        try await self.waitForScreen("alice") { $0.contains("#2") && $0.contains("carol: from the shell") }
        try await self.waitForScreen("bob") { $0.contains("carol: from the shell") }

        try self.tmux(["send-keys", "-t", "bob", "typing something"])
        try await self.waitForScreen("alice") { $0.contains("bob is typing") }
        try self.tmux(["send-keys", "-t", "bob", "Enter"])
        try await self.waitForScreen("alice") { $0.contains("#3") && $0.contains("bob: typing something") }

        // The server goes away: the chats say so; a post made meanwhile waits, then arrives once.
        await server.stop()
        try await self.waitForScreen("alice") { $0.contains("reconnecting") }
        try self.tmux(["send-keys", "-t", "alice", "written while offline", "Enter"])
        try await self.waitForScreen("alice") { $0.contains("written while offline  (sending") && $0.contains("posts waiting") }
        try await server.start()
        try await self.waitForScreen("alice", timeout: .seconds(40)) { $0.contains("— alice — connected") && $0.contains("#4") && $0.contains("alice: written while offline") }
        try await self.waitForScreen("bob", timeout: .seconds(40)) { $0.contains("#4") && $0.contains("alice: written while offline") }
        let final = try self.screen("bob")
        #expect(final.components(separatedBy: "written while offline").count == 2, "shown once:\n\(final)")
        #expect(final.components(separatedBy: "hello from alice").count == 2)

        try self.tmux(["send-keys", "-t", "alice", "/quit", "Enter"])
        try await Task.sleep(for: .milliseconds(500))
        #expect(!(try self.tmux(["ls"])).contains("alice:"))
        await server.stop()
    }
}

struct TestFailure: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}
