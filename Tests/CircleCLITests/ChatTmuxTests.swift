import CircleTestSupport
import Foundation
import Testing

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// `circle chat` as a person sees it: real terminals under tmux, keys sent with send-keys and
/// the screen read with capture-pane.
@Suite("circle chat under tmux", .serialized)
struct ChatTmuxTests {
    let socket = "circle-test-\(UUID().uuidString.prefix(8))"

    @discardableResult
    private func tmux(_ arguments: [String]) throws -> String {
        try Tmux(socket: self.socket).run(arguments)
    }

    /// Ends this test's tmux server and everything it started. `kill-server` alone was seen to
    /// leave the server and a chat running (tmux 3.3a, after a chat's exit left a zombie pane),
    /// so the server's pid and every pane's pid are read first and killed after it.
    private func stopTmux() {
        let listed = (try? self.tmux(["list-panes", "-a", "-F", "#{pane_pid}"])) ?? ""
        let server = (try? self.tmux(["list-sessions", "-F", "#{pid}"])) ?? ""
        _ = try? self.tmux(["kill-server"])
        for line in (listed + "\n" + server).split(whereSeparator: \.isNewline) {
            if let pid = pid_t(line.trimmingCharacters(in: .whitespaces)), pid > 1 { kill(pid, SIGKILL) }
        }
    }

    private func screen(_ session: String) throws -> String {
        try Tmux(socket: self.socket).screen(session)
    }

    /// Polls the pane until `predicate` holds. The bound is generous: these chats are debug
    /// builds started while other suites run servers and PostgreSQL restarts on the same two
    /// cores, and a CI run once saw a first post take over 20 s to show.
    private func waitForScreen(_ session: String, timeout: Duration = .seconds(45), _ predicate: (String) -> Bool) async throws {
        let deadline = ContinuousClock.now + timeout
        var last = ""
        while ContinuousClock.now < deadline {
            last = try self.screen(session)
            if predicate(last) { return }
            try await Task.sleep(for: .milliseconds(100))
        }
        // Every pane, not only this one: what the other chat shows tells where a post stopped.
        let sessions = ((try? self.tmux(["list-sessions", "-F", "#{session_name}"])) ?? "").split(whereSeparator: \.isNewline)
        let others = sessions.filter { $0 != session && $0 != "keeper" }.map { name -> String in
            let shown = (try? self.screen(String(name))) ?? "(gone)"
            return "screen of \(name):\n\(shown)"
        }
        Issue.record("screen of \(session) never matched; it shows:\n\(last)\n\(others.joined(separator: "\n"))")
        throw TestFailure("timed out")
    }

    private func startChat(_ session: String, user: String, server: TestServer, circle: String = "general", options: String = "") throws {
        // Without NO_COLOR, which the test runner's environment may carry, so the chat uses colour.
        let command = "env -u NO_COLOR \(CircleProcess.executablePath) chat \(circle) --user \(user) --jwt-secret \(testSecret) --server \(server.wsURL) \(options)"
        try self.tmux(["new-session", "-d", "-s", session, "-x", "90", "-y", "24", command])
    }

    /// Runs `circle ARGUMENTS` to its end and returns the exit status and stderr.
    private func circle(_ arguments: [String], server: TestServer) async throws -> (status: Int32, stdout: String, stderr: String) {
        let process = try CircleProcess(arguments + ["--jwt-secret", testSecret, "--server", server.wsURL])
        process.closeInput()
        let status = try await process.waitForExit(timeout: .seconds(30))
        return (status, process.stdout, process.stderr)
    }

    @Test("authors with a display name show as \"Display (name)\"")
    func displayNames() async throws {
        try self.tmux(["new-session", "-d", "-s", "keeper", "sleep 600"])
        defer { self.stopTmux() }
        let server = TestServer()
        defer { server.remove() }
        let running = try await server.start()
        defer { Task { await server.stop() } }
        // Ada has an account with a display name (made through the setup link); bob comes from a token.
        var request = URLRequest(url: URL(string: server.httpBase + "/v1/auth/setup")!)
        request.httpMethod = "POST"
        request.setValue("application/json", forHTTPHeaderField: "Content-Type")
        let token = try #require(running.setupLink?.split(separator: "#setup=").last)
        request.httpBody = Data(#"{"token":"\#(token)","name":"ada","password":"correct horse battery","displayName":"Ada Lovelace"}"#.utf8)
        let (_, response) = try await URLSession.shared.data(for: request)
        #expect((response as? HTTPURLResponse)?.statusCode == 201)
        try await server.createCircle("general", owner: "ada")
        try self.startChat("bob", user: "bob", server: server)
        try await self.waitForScreen("bob") { $0.contains("general — bob — connected") }
        let send = try await self.circle(["send", "general", "hello from ada", "--user", "ada"], server: server)
        #expect(send.status == 0, "\(send.stderr)")
        try await self.waitForScreen("bob") { $0.contains("Ada Lovelace (ada): hello from ada") }
        try self.tmux(["send-keys", "-t", "bob", "hi", "Enter"])
        try await self.waitForScreen("bob") { $0.contains("bob: hi") }
    }

    @Test("two chats and circle send see each other's posts; a server restart shows reconnecting and loses nothing")
    func twoChatsAndARestart() async throws {
        // Start tmux's server before ours: a daemon forked later would inherit this process's
        // listening socket and keep the port bound across the restart below.
        try self.tmux(["new-session", "-d", "-s", "keeper", "sleep 600"])
        defer { self.stopTmux() }
        let server = TestServer()
        defer { server.remove() }
        try await server.start()
        try await server.createCircle("general", owner: "alice")
        defer { self.stopTmux() }
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
        try await self.waitForScreen("alice", timeout: .seconds(60)) { $0.contains("— alice — connected") && $0.contains("#4") && $0.contains("alice: written while offline") }
        try await self.waitForScreen("bob", timeout: .seconds(60)) { $0.contains("#4") && $0.contains("alice: written while offline") }
        let final = try self.screen("bob")
        #expect(final.components(separatedBy: "written while offline").count == 2, "shown once:\n\(final)")
        #expect(final.components(separatedBy: "hello from alice").count == 2)
        #expect(!final.contains("circle.client") && !final.contains("warning"), "no log line over the chat:\n\(final)")

        try self.tmux(["send-keys", "-t", "alice", "/quit", "Enter"])
        try await Task.sleep(for: .milliseconds(500))
        #expect(!(try self.tmux(["ls"])).contains("alice:"))
        await server.stop()
    }
}

extension ChatTmuxTests {
    @Test("a circle that does not exist is said at once, before the screen is taken over, with exit 1")
    func missingCircle() async throws {
        try self.tmux(["new-session", "-d", "-s", "keeper", "sleep 600"])
        defer { self.stopTmux() }
        let server = TestServer()
        defer { server.remove() }
        try await server.start()
        let command =
            "\(CircleProcess.executablePath) chat nosuchcircle --user alice --jwt-secret \(testSecret) --server \(server.wsURL); echo \"exit=$?\"; sleep 60"
        try self.tmux(["new-session", "-d", "-s", "lost", "-x", "120", "-y", "24", command])
        try await self.waitForScreen("lost") { $0.contains("exit=") }
        let screen = try self.screen("lost")
        #expect(screen.contains("circle chat: there is no circle \"nosuchcircle\""), "\(screen)")
        #expect(screen.contains("exit=1"), "\(screen)")
        #expect(!screen.contains("— alice —"), "the chat screen never opened:\n\(screen)")
        #expect(!screen.contains("warning"), "no log lines:\n\(screen)")
        await server.stop()
    }

    @Test("/help lists the commands; an unknown /command is not posted; photos show by caption; one author's posts are grouped, in colour")
    func commandsPhotosAndGrouping() async throws {
        try self.tmux(["new-session", "-d", "-s", "keeper", "sleep 600"])
        defer { self.stopTmux() }
        let server = TestServer()
        defer { server.remove() }
        try await server.start()
        try await server.createCircle("general", owner: "alice")
        try self.startChat("alice", user: "alice", server: server)
        try await self.waitForScreen("alice") { $0.contains("general — alice — connected") }

        try self.tmux(["send-keys", "-t", "alice", "/help", "Enter"])
        try await self.waitForScreen("alice") { $0.contains("/older loads older posts") && $0.contains("/quit leaves") }
        try self.tmux(["send-keys", "-t", "alice", "/shrug", "Enter"])
        try await self.waitForScreen("alice") { $0.contains("unknown command /shrug, not posted") }
        try self.tmux(["send-keys", "-t", "alice", "first of mine", "Enter"])
        try self.tmux(["send-keys", "-t", "alice", "second of mine", "Enter"])
        try await self.waitForScreen("alice") { $0.contains("#2") && $0.contains("second of mine") && !$0.contains("sending") }
        // Only the two posts were stored: the commands were not posted.
        let tail = try await self.circle(["tail", "general", "--user", "bob"], server: server)
        #expect(tail.stdout.split(separator: "\n").count == 2, "\(tail.stdout)")
        #expect(!tail.stdout.contains("/shrug") && !tail.stdout.contains("/help"), "\(tail.stdout)")
        let grouped = try self.screen("alice").split(separator: "\n")
        #expect(grouped.contains { $0.contains("alice: first of mine") }, "\(grouped)")
        #expect(grouped.contains { $0.contains("second of mine") && !$0.contains("alice:") }, "the second post is grouped under the first:\n\(grouped)")

        // A photo with a caption shows as [photo] caption, not as its 64-hex media id.
        let photo = FileManager.default.temporaryDirectory.appendingPathComponent("circle-\(UUID().uuidString).jpg").path
        _ = FileManager.default.createFile(atPath: photo, contents: Data([0xFF, 0xD8, 0xFF, 0xE0] + [UInt8](repeating: 3, count: 5000)))
        defer { try? FileManager.default.removeItem(atPath: photo) }
        let upload = try await self.circle(["upload", photo, "--circle", "general", "--caption", "the harbour", "--user", "bob"], server: server)
        #expect(upload.status == 0, "\(upload.stderr)")
        let media = String(upload.stdout.split(separator: " ").last ?? "").trimmingCharacters(in: .whitespacesAndNewlines)
        try await self.waitForScreen("alice") { $0.contains("bob: [photo] the harbour") }
        #expect(!(try self.screen("alice")).contains(media), "no media id on the screen")

        // Colour: author names are drawn with SGR sequences (tmux reports them with -e).
        let coloured = try self.tmux(["capture-pane", "-p", "-e", "-t", "alice"])
        let photoLine = coloured.split(separator: "\n").first { $0.contains("[photo] the harbour") } ?? ""
        #expect(photoLine.contains("\u{1B}["), "the line has colour codes: \(photoLine.debugDescription)")
        try self.tmux(["send-keys", "-t", "alice", "/quit", "Enter"])
        await server.stop()
    }

    @Test("presence is per user: circle send makes none; a second chat of a user neither joins nor leaves; the last one leaves")
    func presence() async throws {
        try self.tmux(["new-session", "-d", "-s", "keeper", "sleep 600"])
        defer { self.stopTmux() }
        let server = TestServer()
        defer { server.remove() }
        try await server.start()
        try await server.createCircle("general", owner: "alice")
        // Bob's join right after alice's own is said; his leave 2 s after it.
        try self.startChat("alice", user: "alice", server: server, options: "--presence-settle 0 --presence-away 2")
        try await self.waitForScreen("alice") { $0.contains("general — alice — connected") }

        #expect(try await self.circle(["send", "general", "deployed", "--user", "carol"], server: server).status == 0)
        try await self.waitForScreen("alice") { $0.contains("carol: deployed") }
        #expect(try await self.circle(["send", "general", "again", "--user", "carol"], server: server).status == 0)
        try await self.waitForScreen("alice") { $0.contains("again") }

        try self.startChat("bob", user: "bob", server: server)
        try await self.waitForScreen("alice") { $0.contains("bob joined") }
        try self.startChat("bob2", user: "bob", server: server)
        try await self.waitForScreen("bob2") { $0.contains("general — bob — connected") }
        try self.tmux(["send-keys", "-t", "bob2", "/quit", "Enter"])
        try self.tmux(["send-keys", "-t", "bob", "still here", "Enter"])
        try await self.waitForScreen("alice") { $0.contains("still here") }
        try self.tmux(["send-keys", "-t", "bob", "/quit", "Enter"])
        try await self.waitForScreen("alice") { $0.contains("bob left") }
        let screen = try self.screen("alice")
        #expect(!screen.contains("carol joined") && !screen.contains("carol left"), "\(screen)")
        #expect(screen.components(separatedBy: "bob joined").count == 2, "\(screen)")
        #expect(screen.components(separatedBy: "bob left").count == 2, "\(screen)")
        // In order: bob joined, then his post, then bob left.
        let joined = screen.range(of: "bob joined")?.lowerBound
        let post = screen.range(of: "still here")?.lowerBound
        let left = screen.range(of: "bob left")?.lowerBound
        if let joined, let post, let left {
            #expect(joined < post && post < left, "\(screen)")
        }
        try self.tmux(["send-keys", "-t", "alice", "/quit", "Enter"])
        await server.stop()
    }

    @Test("a chat that reconnects (a restart of the chat or of the server) is not announced; a return after being away is")
    func reconnectsAreNotAnnounced() async throws {
        try self.tmux(["new-session", "-d", "-s", "keeper", "sleep 600"])
        defer { self.stopTmux() }
        let server = TestServer()
        defer { server.remove() }
        try await server.start()
        try await server.createCircle("general", owner: "alice")
        try self.startChat("alice", user: "alice", server: server, options: "--presence-settle 0 --presence-away 8")
        try await self.waitForScreen("alice") { $0.contains("general — alice — connected") }
        try self.startChat("bob", user: "bob", server: server)
        try await self.waitForScreen("alice") { $0.contains("bob joined") }

        // Bob's chat quits and starts again at once: he leaves and joins again within the 8 s.
        let quitAt = ContinuousClock.now
        try self.tmux(["send-keys", "-t", "bob", "/quit", "Enter"])
        try self.startChat("bob2", user: "bob", server: server)
        try await self.waitForScreen("bob2") { $0.contains("general — bob — connected") }
        try self.tmux(["send-keys", "-t", "bob2", "back at once", "Enter"])
        try await self.waitForScreen("alice") { $0.contains("bob: back at once") }
        while ContinuousClock.now < quitAt + .seconds(9) {
            let screen = try self.screen("alice")
            #expect(screen.components(separatedBy: "bob joined").count == 2 && !screen.contains("bob left"), "\(screen)")
            try await Task.sleep(for: .milliseconds(250))
        }

        // The server restarts: both chats come back, and nobody is announced.
        await server.stop()
        try await self.waitForScreen("alice") { $0.contains("reconnecting") }
        try await server.start()
        try await self.waitForScreen("alice", timeout: .seconds(60)) { $0.contains("— alice — connected") }
        try await self.waitForScreen("bob2", timeout: .seconds(60)) { $0.contains("— bob — connected") }
        try self.tmux(["send-keys", "-t", "bob2", "after the restart", "Enter"])
        try await self.waitForScreen("alice") { $0.contains("after the restart") }
        var screen = try self.screen("alice")
        #expect(screen.components(separatedBy: "bob joined").count == 2 && !screen.contains("bob left"), "\(screen)")

        // Bob leaves and stays away: said after the 8 s; back later: said.
        try self.tmux(["send-keys", "-t", "bob2", "/quit", "Enter"])
        try await self.waitForScreen("alice") { $0.contains("bob left") }
        try self.startChat("bob3", user: "bob", server: server)
        try await self.waitForScreen("alice") { $0.components(separatedBy: "bob joined").count == 3 }
        screen = try self.screen("alice")
        #expect(screen.components(separatedBy: "bob left").count == 2, "\(screen)")
        try self.tmux(["send-keys", "-t", "bob3", "/quit", "Enter"])
        try self.tmux(["send-keys", "-t", "alice", "/quit", "Enter"])
        await server.stop()
    }
}

extension ChatTmuxTests {
    @Test("circle send on a terminal says what it waits for; the upload bar shows speed and time left, then clears its line")
    func terminalPrompts() async throws {
        try self.tmux(["new-session", "-d", "-s", "keeper", "sleep 600"])
        defer { self.stopTmux() }
        let server = TestServer()
        defer { server.remove() }
        try await server.start()
        try await server.createCircle("general", owner: "alice")
        let circle = "env -u NO_COLOR \(CircleProcess.executablePath)"
        let options = "--user alice --jwt-secret \(testSecret) --server \(server.wsURL)"

        try self.tmux(["new-session", "-d", "-s", "send", "-x", "160", "-y", "20", "\(circle) send general \(options); echo \"exit=$?\"; sleep 60"])
        try await self.waitForScreen("send") { $0.contains("type the posts for general, one per line; Ctrl-D ends") }
        try self.tmux(["send-keys", "-t", "send", "typed at the terminal", "Enter"])
        try await self.waitForScreen("send") { $0.contains("#1") }
        try self.tmux(["send-keys", "-t", "send", "C-d"])
        try await self.waitForScreen("send") { $0.contains("exit=0") }

        let photo = FileManager.default.temporaryDirectory.appendingPathComponent("circle-\(UUID().uuidString).jpg").path
        _ = FileManager.default.createFile(atPath: photo, contents: Data([0xFF, 0xD8, 0xFF, 0xE0] + (0..<600_000).map { UInt8(truncatingIfNeeded: $0 &* 31) }))
        defer { try? FileManager.default.removeItem(atPath: photo) }
        let upload = "\(circle) upload \(photo) --circle general --limit-rate 200K \(options); echo \"exit=$?\"; sleep 60"
        try self.tmux(["new-session", "-d", "-s", "upload", "-x", "160", "-y", "20", upload])
        try await self.waitForScreen("upload") { $0.contains("upload [") && $0.contains("/s") && $0.contains(" left") }
        try await self.waitForScreen("upload", timeout: .seconds(60)) { $0.contains("exit=0") }
        let done = try self.screen("upload")
        #expect(!done.contains("upload ["), "the bar's line was cleared:\n\(done)")
        #expect(done.contains("#2 "), "\(done)")
        await server.stop()
    }
}

extension ChatTmuxTests {
    @Test("Tab completes a name after @; a post that mentions me is marked; /dm starts a direct message that /circles lists apart and its other member is told of")
    func mentionsAndDirectMessages() async throws {
        try self.tmux(["new-session", "-d", "-s", "keeper", "sleep 600"])
        defer { self.stopTmux() }
        let server = TestServer()
        defer { server.remove() }
        try await server.start()
        try await server.createCircle("general", owner: "alice", isPrivate: true)
        let alice = try await server.token("alice")
        #expect(try await server.http("POST", "/v1/circles/general/members", token: alice, json: #"{"user":"bob"}"#).status == 200)
        try self.startChat("alice", user: "alice", server: server)
        try self.startChat("bob", user: "bob", server: server)
        try await self.waitForScreen("alice") { $0.contains("general — alice — connected") }
        try await self.waitForScreen("bob") { $0.contains("general — bob — connected") }
        // The system entry of bob's addition: a line of its own, on both screens.
        try await self.waitForScreen("alice") { $0.contains("#1") && $0.contains("— alice added bob") }
        try await self.waitForScreen("bob") { $0.contains("— alice added bob") }
        // The circle's start, above its first entry (which stays #1).
        try await self.waitForScreen("alice") { $0.contains("— alice created general · ") }
        try self.tmux(["send-keys", "-t", "bob", "hi there", "Enter"])
        try await self.waitForScreen("alice") { $0.contains("bob: hi there") }

        // "@b" and Tab: "@bob " (bob is the only name seen here that fits).
        try self.tmux(["send-keys", "-t", "alice", "-l", "thanks @b"])
        try self.tmux(["send-keys", "-t", "alice", "Tab"])
        // (capture-pane drops the trailing space; the next word shows it was there.)
        try await self.waitForScreen("alice") { $0.contains("> thanks @bob") }
        try self.tmux(["send-keys", "-t", "alice", "-l", "see you"])
        try await self.waitForScreen("alice") { $0.contains("> thanks @bob see you") }
        try self.tmux(["send-keys", "-t", "alice", "Enter"])
        // bob's chat marks the post that mentions him; alice's does not.
        try await self.waitForScreen("bob") { $0.contains("alice: @ thanks @bob see you") }
        try await self.waitForScreen("alice") { $0.contains("alice: thanks @bob see you") }

        try self.tmux(["send-keys", "-t", "alice", "/dm bob", "Enter"])
        try await self.waitForScreen("alice") { $0.contains("direct message with alice, bob: open it with") }
        // bob's chat, in another circle, is told at once.
        try await self.waitForScreen("bob") { $0.contains("alice started a direct message with you: open it with `circle chat dm.") }
        let list = try await server.http("GET", "/v1/circles", token: alice)
        #expect(list.body.contains(#""direct":["alice","bob"]"#), "\(list.body)")
        try self.tmux(["send-keys", "-t", "alice", "/circles", "Enter"])
        try await self.waitForScreen("alice") { $0.contains("direct messages: dm bob (dm.") }
        try self.tmux(["send-keys", "-t", "alice", "/quit", "Enter"])
        try self.tmux(["send-keys", "-t", "bob", "/quit", "Enter"])
        await server.stop()
    }

    @Test("/edit, /react, /reply and /delete change posts on every chat; /circles shows unread counts; what the chat shows is marked read")
    func editReactReplyDeleteAndUnread() async throws {
        try self.tmux(["new-session", "-d", "-s", "keeper", "sleep 600"])
        defer { self.stopTmux() }
        let server = TestServer()
        defer { server.remove() }
        try await server.start()
        try await server.createCircle("general", owner: "alice")
        try await server.createCircle("random", owner: "carol")
        #expect(try await self.circle(["send", "random", "lunch?", "--user", "carol"], server: server).status == 0)
        #expect(try await self.circle(["send", "random", "tacos!", "--user", "carol"], server: server).status == 0)
        try self.startChat("alice", user: "alice", server: server)
        try self.startChat("bob", user: "bob", server: server)
        try await self.waitForScreen("alice") { $0.contains("general — alice — connected") }
        try await self.waitForScreen("bob") { $0.contains("general — bob — connected") }

        try self.tmux(["send-keys", "-t", "alice", "helo all", "Enter"])
        try await self.waitForScreen("bob") { $0.contains("#1") && $0.contains("alice: helo all") }
        try self.tmux(["send-keys", "-t", "alice", "/edit hello all", "Enter"])
        for session in ["alice", "bob"] {
            try await self.waitForScreen(session) { $0.contains("alice: hello all (edited)") && !$0.contains("helo all") }
        }

        try self.tmux(["send-keys", "-t", "bob", "-l", "/react 👍"])
        try self.tmux(["send-keys", "-t", "bob", "Enter"])
        for session in ["alice", "bob"] {
            try await self.waitForScreen(session) { $0.contains("alice: hello all (edited) [👍 1]") && $0.contains("bob reacted 👍 to #1") }
        }
        try self.tmux(["send-keys", "-t", "bob", "/reply 1 hi alice", "Enter"])
        for session in ["alice", "bob"] {
            try await self.waitForScreen(session) { $0.contains("↳ reply to #1 alice: hello all") && $0.contains("#4") && $0.contains("bob: hi alice") }
        }
        // /react again takes the reaction back.
        try self.tmux(["send-keys", "-t", "bob", "-l", "/react 👍 1"])
        try self.tmux(["send-keys", "-t", "bob", "Enter"])
        try await self.waitForScreen("alice") { $0.contains("bob took back 👍 from #1") && !$0.contains("[👍 1]") }

        try self.tmux(["send-keys", "-t", "alice", "/delete", "Enter"])
        for session in ["alice", "bob"] {
            try await self.waitForScreen(session) { $0.contains("alice: message deleted") && !$0.contains("hello all (edited)") }
        }
        // Someone else's post: refused, and said so.
        try self.tmux(["send-keys", "-t", "alice", "/edit not mine", "Enter"])
        try await self.waitForScreen("alice") { $0.contains("you have no post here to edit") }
        try self.tmux(["send-keys", "-t", "alice", "/delete 4", "Enter"])
        try await self.waitForScreen("alice") { $0.contains("#4 was not deleted:") }

        // Unread counts: the two posts in random are unread for alice; general is read.
        try self.tmux(["send-keys", "-t", "alice", "/circles", "Enter"])
        try await self.waitForScreen("alice") { $0.contains("circles: general (here) · random 2 unread") }
        let token = try await server.token("alice")
        let deadline = ContinuousClock.now + .seconds(20)
        var general = ""
        while ContinuousClock.now < deadline {
            let list = try await server.http("GET", "/v1/circles", token: token)
            general = list.body.components(separatedBy: "{").first { $0.contains("\"name\":\"general\"") } ?? ""
            if general.contains("\"readSeq\":6") && general.contains("\"unread\":0") { break }
            try await Task.sleep(for: .milliseconds(100))
        }
        #expect(general.contains("\"readSeq\":6") && general.contains("\"unread\":0"), "general is read up to its newest entry: \(general)")
        try self.tmux(["send-keys", "-t", "alice", "/quit", "Enter"])
        try self.tmux(["send-keys", "-t", "bob", "/quit", "Enter"])
        await server.stop()
    }
}
