import CircleTestSupport
import Foundation
import Testing

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// What a new user meets in the first hour: exit statuses and sentences on stderr instead of
/// crashes and Swift values, failures known at once, the server's banner, `/metrics`.
@Suite("circle: the first hour", .serialized)
struct FirstHourTests {
    private func run(
        _ arguments: [String],
        server: TestServer? = nil,
        input: [String]? = nil,
        directory: String? = nil,
        timeout: Duration = .seconds(40)
    ) async throws -> (status: Int32, stdout: String, stderr: String) {
        var full = arguments
        if let server { full += ["--server", server.wsURL, "--jwt-secret", testSecret] }
        let process = try CircleProcess(full, directory: directory)
        for line in input ?? [] { try process.send(line: line) }
        process.closeInput()
        let status = try await process.waitForExit(timeout: timeout)
        return (status, process.stdout, process.stderr)
    }

    /// Runs a shell pipeline through bash and returns its stdout (the pipeline prints what the
    /// test needs, such as PIPESTATUS).
    private func shell(_ script: String, timeout: Duration = .seconds(40)) async throws -> String {
        let output = Pipe()
        let input = try SpawnedProcess.open("/dev/null", forWriting: false)
        defer { close(input) }
        let process = try SpawnedProcess(
            executable: "/bin/bash", arguments: ["-c", script],
            standardInput: input,
            standardOutput: output.fileHandleForWriting.fileDescriptor,
            standardError: output.fileHandleForWriting.fileDescriptor
        )
        try output.fileHandleForWriting.close()
        let collector = OutputCollector(output.fileHandleForReading)
        collector.start()
        let deadline = ContinuousClock.now + timeout
        while process.isRunning || !collector.isFinished {
            guard ContinuousClock.now < deadline else {
                process.terminate()
                throw TestFailure("timed out running: \(script)\noutput: \(collector.text)")
            }
            try await Task.sleep(for: .milliseconds(20))
        }
        return collector.text
    }

    /// Nothing on stderr that looks like a crash or a Swift value instead of a sentence.
    private func expectSentence(_ stderr: String, sourceLocation: SourceLocation = #_sourceLocation) {
        for marker in ["Fatal error", "backtrace", "Error(", "errno", "SingleConnectionFailure", "(file_error)", "Usage:"] {
            #expect(!stderr.contains(marker), "stderr shows \"\(marker)\":\n\(stderr)", sourceLocation: sourceLocation)
        }
    }


    @Test("tail into a pipe that closes early ends quietly (SIGPIPE status), never with a crash")
    func closedPipe() async throws {
        let server = TestServer()
        defer { server.remove() }
        try await server.start()
        try await server.createCircle("general", owner: "alice")
        let lines = (1...30).map { "post \($0)" }
        #expect(try await self.run(["send", "general", "--user", "alice"], server: server, input: lines).status == 0)
        let tail = "'\(CircleProcess.executablePath)' tail general --since 0 --json --user bob --server \(server.wsURL) --jwt-secret \(testSecret)"
        for _ in 1...3 {
            let output = try await self.shell("\(tail) | head -1; echo \"status=${PIPESTATUS[0]}\"")
            let outputLines = output.split(separator: "\n")
            #expect(outputLines.count == 2, "\(output)")
            #expect(outputLines.first?.contains("\"text\":\"post 1\"") == true, "\(output)")
            #expect(outputLines.last == "status=0" || outputLines.last == "status=141", "\(output)")
        }
        // A reader that is gone before the first line: the first write ends the command.
        let gone = try await self.shell("\(tail) | true; echo \"status=${PIPESTATUS[0]}\"")
        #expect(gone == "status=141\n", "\(gone)")
        await server.stop()
    }

    @Test("a server that is down: exit 2 at once with a sentence, for every command")
    func serverDown() async throws {
        let port = try unusedPort()
        let url = "ws://127.0.0.1:\(port)/v1/ws"
        let commands: [[String]] = [
            ["send", "general", "hello"], ["tail", "general"], ["circle", "list"], ["download", String(repeating: "a", count: 64)],
        ]
        for command in commands {
            let result = try await self.run(command + ["--user", "alice", "--jwt-secret", testSecret, "--server", url], timeout: .seconds(8))
            #expect(result.status == 2, "\(command): \(result.stderr)")
            #expect(result.stderr.contains("127.0.0.1:\(port)"), "\(command): \(result.stderr)")
            #expect(result.stderr.contains("is `circle serve` running there?"), "\(command): \(result.stderr)")
            self.expectSentence(result.stderr)
        }
        let verbose = try await self.run(["send", "general", "x", "--user", "a", "--jwt-secret", testSecret, "--server", url, "--verbose"], timeout: .seconds(8))
        #expect(verbose.status == 2)
        #expect(verbose.stderr.contains("details: "), "\(verbose.stderr)")
    }

    @Test("a refused token is exit 4, not 'unreachable'; no key to mint one is exit 4 too")
    func refusedToken() async throws {
        let server = TestServer()
        defer { server.remove() }
        try await server.start()
        try await server.createCircle("general", owner: "alice")
        let forged = try await self.run(["send", "general", "hi", "--token", "not.a.token", "--server", server.wsURL])
        #expect(forged.status == 4, "\(forged.stderr)")
        #expect(forged.stderr.contains("the server refused the token"), "\(forged.stderr)")
        self.expectSentence(forged.stderr)
        let otherKey = try await self.run(
            ["tail", "general", "--user", "alice", "--jwt-secret", String(repeating: "x", count: 40), "--server", server.wsURL]
        )
        #expect(otherKey.status == 4, "\(otherKey.stderr)")
        let list = try await self.run(["circle", "list", "--token", "not.a.token", "--server", server.wsURL])
        #expect(list.status == 4, "\(list.stderr)")
        #expect(list.stderr.contains("the server refused the token"), "\(list.stderr)")
        let noKey = try await self.run(
            ["send", "general", "hi", "--user", "alice", "--data", "/nonexistent/circle-data", "--server", server.wsURL]
        )
        #expect(noKey.status == 4, "\(noKey.stderr)")
        #expect(noKey.stderr.contains("no key to mint a token for alice"), "\(noKey.stderr)")
        let token = try await self.run(["token", "--user", "alice", "--data", "/nonexistent/circle-data"])
        #expect(token.status == 4, "\(token.stderr)")
        self.expectSentence(token.stderr)
        await server.stop()
    }

    @Test("a circle that does not exist, or is private, is said at once by send, tail and upload; nothing is sent")
    func missingCircle() async throws {
        let server = TestServer()
        defer { server.remove() }
        try await server.start()
        try await server.createCircle("team", owner: "alice", isPrivate: true)
        let send = try await self.run(["send", "nosuchcircle", "hello", "--user", "bob"], server: server)
        #expect(send.status == 1)
        #expect(send.stderr.hasPrefix("circle send: there is no circle \"nosuchcircle\""), "\(send.stderr)")
        #expect(send.stderr.contains("circle circle create nosuchcircle --user bob"), "\(send.stderr)")
        self.expectSentence(send.stderr)
        let tail = try await self.run(["tail", "nosuchcircle", "--user", "bob"], server: server)
        #expect(tail.status == 1)
        #expect(tail.stderr.contains("there is no circle \"nosuchcircle\""), "\(tail.stderr)")

        let photo = FileManager.default.temporaryDirectory.appendingPathComponent("circle-\(UUID().uuidString).png").path
        _ = FileManager.default.createFile(atPath: photo, contents: Data([0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A] + [UInt8](repeating: 7, count: 300_000)))
        defer { try? FileManager.default.removeItem(atPath: photo) }
        let upload = try await self.run(["upload", photo, "--circle", "nosuchcircle", "--user", "bob"], server: server)
        #expect(upload.status == 1)
        #expect(upload.stderr.contains("there is no circle \"nosuchcircle\""), "\(upload.stderr)")
        #expect(!upload.stderr.contains("upload: 0%"), "no bytes were sent: \(upload.stderr)")
        let media = (try? FileManager.default.contentsOfDirectory(atPath: server.dataDirectory + "/media")) ?? []
        #expect(media.filter { $0 != "uploads" }.isEmpty, "\(media)")

        let outsider = try await self.run(["send", "team", "let me in", "--user", "mallory"], server: server)
        #expect(outsider.status == 1)
        #expect(outsider.stderr.contains("\"team\" is private and mallory is not a member"), "\(outsider.stderr)")
        await server.stop()
    }

    @Test("send: an empty text is a usage error unless --allow-empty; a refused post is a sentence")
    func sendEdges() async throws {
        let server = TestServer(limits: .init(maxPostBytes: 10))
        defer { server.remove() }
        try await server.start()
        try await server.createCircle("general", owner: "alice")
        let empty = try await self.run(["send", "general", "", "--user", "alice"], server: server)
        #expect(empty.status == 64)
        #expect(empty.stderr.contains("the text is empty"), "\(empty.stderr)")
        let allowed = try await self.run(["send", "general", "", "--allow-empty", "--user", "alice"], server: server)
        #expect(allowed.status == 0, "\(allowed.stderr)")
        #expect(allowed.stdout == "#1\n")
        let long = try await self.run(["send", "general", "far too long for the limit", "--user", "alice"], server: server)
        #expect(long.status == 1)
        #expect(long.stderr.contains("not posted: \"far too long for the limit\": too large"), "\(long.stderr)")
        self.expectSentence(long.stderr)
        let tail = try await self.run(["tail", "general", "--user", "bob"], server: server)
        #expect(tail.stdout.split(separator: "\n").count == 1, "only the allowed empty post: \(tail.stdout)")
        await server.stop()
    }

    @Test("an upload that is not a photo is refused before a byte is sent")
    func notAPhoto() async throws {
        let server = TestServer()
        defer { server.remove() }
        try await server.start()
        try await server.createCircle("general", owner: "alice")
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("big-\(UUID().uuidString).bin").path
        _ = FileManager.default.createFile(atPath: file, contents: Data((0..<100_000).map { UInt8(truncatingIfNeeded: $0 &* 7919) }))
        defer { try? FileManager.default.removeItem(atPath: file) }
        let upload = try await self.run(["upload", file, "--circle", "general", "--user", "alice"], server: server)
        #expect(upload.status == 1)
        #expect(upload.stderr.contains("is not a photo: Circle takes JPEG, PNG, GIF and WebP"), "\(upload.stderr)")
        // Declared as a photo anyway: the server checks the bytes and refuses.
        let declared = try await self.run(["upload", file, "--circle", "general", "--type", "image/png", "--user", "alice"], server: server)
        #expect(declared.status == 1, "\(declared.stderr)")
        #expect(declared.stderr.contains("not posted: the server does not take this file: only JPEG, PNG, GIF and WebP photos"), "\(declared.stderr)")
        self.expectSentence(declared.stderr)
        let missing = try await self.run(["upload", "/nonexistent/photo.jpg", "--circle", "general", "--user", "alice"], server: server)
        #expect(missing.status == 5)
        #expect(missing.stderr.contains("cannot read /nonexistent/photo.jpg: no such file"), "\(missing.stderr)")
        await server.stop()
    }

    @Test("download names the file after the media id with its type's extension")
    func downloadName() async throws {
        let server = TestServer()
        defer { server.remove() }
        try await server.start()
        try await server.createCircle("general", owner: "alice")
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("circle-dl-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let photo = directory + "/shot"
        let bytes = Data([0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A] + [UInt8](repeating: 1, count: 2000))
        _ = FileManager.default.createFile(atPath: photo, contents: bytes)
        let upload = try await self.run(["upload", photo, "--circle", "general", "--user", "alice"], server: server)
        #expect(upload.status == 0, "\(upload.stderr)")
        let media = String(upload.stdout.split(separator: " ").last ?? "").trimmingCharacters(in: .whitespacesAndNewlines)
        let download = try await self.run(["download", media, "--user", "alice"], server: server, directory: directory)
        #expect(download.status == 0, "\(download.stderr)")
        #expect(download.stdout == "\(media).png\n")
        #expect(FileManager.default.contents(atPath: directory + "/\(media).png") == bytes)
        await server.stop()
    }

    @Test("serve: the banner, a port in use as a sentence with exit 5, /metrics with HELP, process and build info, POST /healthz 405")
    func serve() async throws {
        let data = FileManager.default.temporaryDirectory.appendingPathComponent("circle-serve-\(UUID().uuidString)").path
        defer { try? FileManager.default.removeItem(atPath: data) }
        let serve = try CircleProcess(["serve", "--port", "0", "--data", data, "--dev"])
        try await serve.waitForStderr("Press Ctrl-C to stop.")
        let banner = serve.stderr
        #expect(banner.contains("(--dev: sign in with just a name)"), "\(banner)")
        #expect(banner.contains("swift run circle token --user alice --data \(data)"), "\(banner)")
        let afterHost = banner.range(of: "chat page  http://127.0.0.1:").map { banner[$0.upperBound...].prefix { $0.isNumber } }
        let port = try #require(afterHost.flatMap { Int($0) })
        #expect(banner.contains("chat page  http://127.0.0.1:\(port)/"), "\(banner)")

        let busy = try await self.run(["serve", "--port", "\(port)", "--data", data + "-2"])
        #expect(busy.status == 5)
        #expect(busy.stderr.contains("circle serve: port \(port) is in use — is another circle serve running?"), "\(busy.stderr)")
        self.expectSentence(busy.stderr)
        try? FileManager.default.removeItem(atPath: data + "-2")

        let (metricsData, _) = try await URLSession.shared.data(from: try #require(URL(string: "http://127.0.0.1:\(port)/metrics")))
        let metrics = String(decoding: metricsData, as: UTF8.self)
        for line in [
            "# HELP circle_connections Open WebSocket chat connections.", "# HELP process_cpu_seconds_total", "process_resident_memory_bytes ",
            "process_open_fds ", "circle_build_info{version=\"", "# HELP circle_heap_trims_total",
        ] {
            #expect(metrics.contains(line), "/metrics lacks \(line):\n\(metrics)")
        }
        var post = URLRequest(url: try #require(URL(string: "http://127.0.0.1:\(port)/healthz")))
        post.httpMethod = "POST"
        let (_, response) = try await URLSession.shared.data(for: post)
        #expect((response as? HTTPURLResponse)?.statusCode == 405)
        #expect((response as? HTTPURLResponse)?.value(forHTTPHeaderField: "Allow") == "GET")

        serve.interrupt()
        #expect(try await serve.waitForExit() == 0)
    }

    @Test("--version, 'did you mean' for a mistyped command, and every --help with examples and exit status")
    func helpAndVersion() async throws {
        let version = try await self.run(["--version"])
        #expect(version.status == 0)
        #expect(version.stdout.split(separator: ".").count == 3, "\(version.stdout)")
        let typo = try await self.run(["chta", "general"])
        #expect(typo.status == 64)
        #expect(typo.stderr.contains("did you mean `circle chat`?"), "\(typo.stderr)")
        let other = try await self.run(["sned"])
        #expect(other.stderr.contains("did you mean `circle send`?"), "\(other.stderr)")

        let commands: [[String]] = [
            [], ["serve"], ["token"], ["chat"], ["send"], ["tail"], ["search"], ["circle"], ["circle", "create"], ["circle", "list"], ["circle", "add-member"],
            ["circle", "remove-member"], ["circle", "retention"], ["circle", "system-entries"], ["upload"], ["download"], ["ws"], ["bench"], ["bench", "client"], ["bench", "recovery"],
        ]
        for command in commands {
            let help = try await self.run(command + ["--help"])
            #expect(help.status == 0, "\(command)")
            #expect(help.stdout.contains("Exit status"), "circle \(command.joined(separator: " ")) --help has no exit status")
            #expect(help.stdout.contains("Example"), "circle \(command.joined(separator: " ")) --help has no examples")
        }
        let serve = try await self.run(["serve", "--help"])
        #expect(!serve.stdout.contains("Every option has an environment variable"))
        #expect(!serve.stdout.contains("Close connections silent for this long (4002), e.g. 75s. Env:"))
        let ws = try await self.run(["ws", "--help"])
        #expect(ws.stdout.contains("ws://127.0.0.1:8080/v1/ws"))
        #expect(!ws.stdout.contains("localhost:8080/ws "))
    }
}
