import CircleSocket
import Foundation
import NIOCore
import NIOHTTP1
import Testing

/// A loopback server for `circle ws`: echoes every message, and on the text commands
/// `close:CODE:REASON` closes with that code, `abort` drops the TCP connection.
/// `greeting` may send a first message built from the upgrade request.
func startServer(
    _ configuration: WebSocketServerConfiguration = .init(),
    decide: @escaping WebSocketServer.Decider = { _ in .accept },
    greeting: (@Sendable (HTTPRequestHead) -> String)? = nil
) async throws -> WebSocketServer {
    try await WebSocketServer.start(configuration: configuration, decide: decide) { socket, head in
        do {
            if let greeting { try await socket.send(greeting(head)) }
            for try await message in socket.messages {
                if case .text(let text) = message {
                    if text.hasPrefix("close:") {
                        let parts = text.split(separator: ":", maxSplits: 2).map(String.init)
                        await socket.close(code: WebSocketCloseCode(UInt16(parts[1])!), reason: parts.count > 2 ? parts[2] : "")
                        return
                    }
                    if text == "abort" {
                        socket.abort()
                        return
                    }
                }
                try await socket.send(message)
            }
        } catch {}
    }
}

/// Runs `body` with a started server and shuts the server down afterwards.
func withServer(
    _ configuration: WebSocketServerConfiguration = .init(),
    decide: @escaping WebSocketServer.Decider = { _ in .accept },
    greeting: (@Sendable (HTTPRequestHead) -> String)? = nil,
    _ body: (_ url: String) async throws -> Void
) async throws {
    let server = try await startServer(configuration, decide: decide, greeting: greeting)
    do {
        try await body("ws://127.0.0.1:\(server.port)/chat")
    } catch {
        await server.shutdown()
        throw error
    }
    await server.shutdown()
}

@Suite("circle ws", .serialized)
struct WSCommandTests {
    @Test("-x sends a message and --wait prints the reply before closing")
    func executeAndWait() async throws {
        try await withServer { url in
            let process = try CircleProcess(["ws", url, "-x", "hello", "-x", "grüße 👋", "--count", "2", "--wait", "60"])
            let status = try await process.waitForExit()
            #expect(status == 0, "stderr: \(process.stderr)")
            #expect(process.stdoutLines == ["hello", "grüße 👋"])
            #expect(process.stderr.contains("connected to \(url)\n"))
            #expect(process.stderr.contains("closed: 1000"))
        }
    }

    @Test("--quiet leaves stdout unchanged and stderr empty")
    func quiet() async throws {
        try await withServer { url in
            let process = try CircleProcess(["ws", url, "-x", "hello", "--count", "1", "--wait", "60", "--quiet"])
            let status = try await process.waitForExit()
            #expect(status == 0)
            #expect(process.stdoutLines == ["hello"])
            #expect(process.stderr.isEmpty, "stderr: \(process.stderr)")
        }
    }

    @Test("lines typed on stdin are sent, replies printed; end of input closes and exits 0")
    func stdinLines() async throws {
        try await withServer { url in
            let process = try CircleProcess(["ws", url])
            try await process.waitForStderr("connected to \(url)")
            try process.send(line: "one")
            try await process.waitForStdout("one\n")
            try process.send(line: "two\r")  // CRLF line endings lose the CR too
            try await process.waitForStdout("two\n")
            try process.send(line: "//slash")  // escaped slash: sent as "/slash"
            try await process.waitForStdout("/slash\n")
            try process.send(line: "/nonsense")
            try await process.waitForStderr("unknown command /nonsense")
            try process.send(line: "")  // an empty message
            try await process.waitForStdout("/slash\n\n")
            process.closeInput()
            let status = try await process.waitForExit()
            #expect(status == 0, "stderr: \(process.stderr)")
            #expect(process.stdout == "one\ntwo\n/slash\n\n")
            #expect(process.stderr.contains("closed: 1000"))
        }
    }

    @Test("piped input with --wait: all lines are sent and the replies printed before the close")
    func pipedInputWithWait() async throws {
        try await withServer { url in
            let process = try CircleProcess(["ws", url, "--count", "2", "--wait", "60"])
            try process.send(line: "first")
            try process.send(line: "second")
            process.closeInput()  // end of input at once, as with `printf ... | circle ws`
            let status = try await process.waitForExit()
            #expect(status == 0, "stderr: \(process.stderr)")
            #expect(process.stdoutLines == ["first", "second"])
            #expect(process.stderr.contains("closed: 1000"))
        }
    }

    @Test(
        "the server closing decides the exit status and prints the code and reason",
        arguments: [(code: UInt16(1000), status: Int32(0)), (1001, 0), (4001, 3), (1011, 3)]
    )
    func serverCloses(code: UInt16, status expected: Int32) async throws {
        try await withServer { url in
            // stdin stays open: the process must exit because the connection ended.
            let process = try CircleProcess(["ws", url])
            try await process.waitForStderr("connected to")
            try process.send(line: "close:\(code):go away")
            let status = try await process.waitForExit()
            #expect(status == expected)
            #expect(process.stderr.contains("closed by server: \(code) go away\n"), "stderr: \(process.stderr)")
        }
    }

    @Test("the close line is printed even with --quiet when the close is abnormal")
    func abnormalCloseWithQuiet() async throws {
        try await withServer { url in
            // --wait is far longer than the bound, so that a loaded machine cannot blur the two.
            let process = try CircleProcess(["ws", url, "-x", "close:4001:nope", "--wait", "120", "--quiet"])
            let start = ContinuousClock.now
            let status = try await process.waitForExit(timeout: .seconds(180))
            #expect(status == 3)
            #expect(process.stderr == "closed by server: 4001 nope\n")
            #expect(ContinuousClock.now - start < .seconds(60), "exits when the server closes, not after --wait")
        }
    }

    @Test("a dropped connection exits 3 with a message")
    func connectionLost() async throws {
        try await withServer { url in
            let process = try CircleProcess(["ws", url])
            try await process.waitForStderr("connected to")
            try process.send(line: "abort")
            let status = try await process.waitForExit()
            #expect(status == 3)
            #expect(process.stderr.contains("circle ws: connection lost"), "stderr: \(process.stderr)")
        }
    }

    @Test("/close with a code and reason closes and exits 0")
    func closeCommand() async throws {
        try await withServer { url in
            let process = try CircleProcess(["ws", url])
            try await process.waitForStderr("connected to")
            try process.send(line: "/close 4000 see you")
            let status = try await process.waitForExit()
            #expect(status == 0, "stderr: \(process.stderr)")
            // The server answers with the same code (and, like most servers, no reason).
            #expect(process.stderr.contains("closed: 4000\n"), "stderr: \(process.stderr)")
        }
    }

    @Test("/quit closes with 1000; an invalid /close code is refused")
    func quitCommand() async throws {
        try await withServer { url in
            let process = try CircleProcess(["ws", url])
            try await process.waitForStderr("connected to")
            try process.send(line: "/close 1006")
            try await process.waitForStderr("/close needs a code that may be sent")
            try process.send(line: "/quit")
            let status = try await process.waitForExit()
            #expect(status == 0, "stderr: \(process.stderr)")
            #expect(process.stderr.contains("closed: 1000"))
        }
    }

    @Test("Ctrl-C closes with 1000 and exits 0")
    func interrupt() async throws {
        try await withServer { url in
            let process = try CircleProcess(["ws", url])
            try await process.waitForStderr("connected to")
            process.interrupt()
            let status = try await process.waitForExit()
            #expect(status == 0, "stderr: \(process.stderr)")
            #expect(process.stderr.contains("closed: 1000"))
        }
    }

    @Test("a refused connection exits 2 and says so")
    func connectionRefused() async throws {
        // A port nothing listens on (a stopped server's port may be held by a tmux server that
        // another suite started meanwhile).
        let port = try unusedPort()
        let url = "ws://127.0.0.1:\(port)/"
        let process = try CircleProcess(["ws", url])
        let status = try await process.waitForExit()
        #expect(status == 2)
        #expect(process.stderr == "circle ws: cannot connect to \(url): connection refused\n")
        #expect(process.stdout.isEmpty)
    }

    @Test("a refused upgrade shows the HTTP status and body; 401 (the token) exits 4")
    func handshakeRefused() async throws {
        try await withServer(decide: { _ in .refuse(.unauthorized, body: "{\"error\":\"no token\"}") }) { url in
            let process = try CircleProcess(["ws", url])
            let status = try await process.waitForExit()
            #expect(status == 4)
            #expect(process.stderr.contains("cannot connect to \(url)"), "stderr: \(process.stderr)")
            #expect(process.stderr.contains("HTTP 401 Unauthorized"), "stderr: \(process.stderr)")
            #expect(process.stderr.contains("{\"error\":\"no token\"}"), "stderr: \(process.stderr)")
        }
    }

    @Test("an invalid URL is a usage error (64)")
    func invalidURL() async throws {
        let process = try CircleProcess(["ws", "http://127.0.0.1/"])
        let status = try await process.waitForExit()
        #expect(status == 64)
        #expect(process.stderr.contains("circle ws: invalid URL"), "stderr: \(process.stderr)")
    }

    @Test("a malformed --header is a usage error")
    func malformedHeader() async throws {
        let process = try CircleProcess(["ws", "ws://127.0.0.1:1/", "--header", "no colon here"])
        let status = try await process.waitForExit()
        #expect(status == 64)
        #expect(process.stderr.contains("is not of the form \"Name: value\""), "stderr: \(process.stderr)")
    }

    @Test("--header values reach the server")
    func headers() async throws {
        let greeting: @Sendable (HTTPRequestHead) -> String = { head in
            "test=\(head.headers["X-Circle-Test"].joined(separator: ",")) auth=\(head.headers["Authorization"].joined(separator: ","))"
        }
        try await withServer(greeting: greeting) { url in
            let process = try CircleProcess([
                "ws", url, "--header", "X-Circle-Test: a: b", "--header", "Authorization:Bearer t0k3n", "-x", "done", "--count", "2", "--wait", "60",
            ])
            let status = try await process.waitForExit()
            #expect(status == 0, "stderr: \(process.stderr)")
            #expect(process.stdoutLines == ["test=a: b auth=Bearer t0k3n", "done"])
        }
    }

    @Test("--subprotocol and --deflate are negotiated and shown")
    func subprotocolAndCompression() async throws {
        let configuration = WebSocketServerConfiguration(subprotocols: ["circle.v1"], compression: true)
        try await withServer(configuration) { url in
            let long = String(repeating: "compress me ", count: 50)
            let process = try CircleProcess([
                "ws", url, "--subprotocol", "chat.v0", "--subprotocol", "circle.v1", "--deflate", "-x", long, "--count", "1", "--wait", "60",
            ])
            let status = try await process.waitForExit()
            #expect(status == 0, "stderr: \(process.stderr)")
            #expect(
                process.stderr.contains("connected to \(url) (subprotocol: circle.v1, compression: permessage-deflate"),
                "stderr: \(process.stderr)"
            )
            #expect(process.stdoutLines == [long])
        }
    }

    @Test("without --subprotocol or --deflate the connected line has no details")
    func noNegotiation() async throws {
        try await withServer(.init(subprotocols: ["circle.v1"], compression: true)) { url in
            let process = try CircleProcess(["ws", url, "-x", "hi", "--wait", "0.3"])
            let status = try await process.waitForExit()
            #expect(status == 0)
            #expect(process.stderr.hasPrefix("connected to \(url)\n"), "stderr: \(process.stderr)")
        }
    }

    @Test(
        "/binary sends bytes; the echo is printed in the chosen format",
        arguments: [
            (arguments: [String](), expected: "[binary 3 bytes] 0001ff"),
            (["--binary-format", "hex"], "[binary 3 bytes] 0001ff"),
            (["--binary-format", "base64"], "[binary 3 bytes] AAH/"),
        ]
    )
    func binary(arguments: [String], expected: String) async throws {
        try await withServer { url in
            let process = try CircleProcess(["ws", url] + arguments)
            try await process.waitForStderr("connected to")
            try process.send(line: "/binary 00 01ff")
            try await process.waitForStdout("\n")
            try process.send(line: "/binary zz")
            try await process.waitForStderr("/binary needs hex digits")
            process.closeInput()
            let status = try await process.waitForExit()
            #expect(status == 0)
            #expect(process.stdoutLines == [expected])
        }
    }

    @Test("--ping prints round-trip times; /ping prints one on demand")
    func ping() async throws {
        try await withServer { url in
            let process = try CircleProcess(["ws", url, "--ping", "0.2"])
            try await process.waitForStderr("two pong lines") { stderr in
                stderr.components(separatedBy: "< pong ").count >= 3
            }
            let pongs = process.stderr.split(separator: "\n").filter { $0.hasPrefix("< pong ") }
            for pong in pongs {
                #expect(pong.wholeMatch(of: /< pong \d+\.\d\d ms/) != nil, "line: \(pong)")
            }
            #expect(process.stdout.isEmpty)
            process.closeInput()
            #expect(try await process.waitForExit() == 0)
        }
        try await withServer { url in
            let process = try CircleProcess(["ws", url, "--quiet"])
            try process.send(line: "/ping")
            try await process.waitForStderr("< pong ")
            process.closeInput()
            #expect(try await process.waitForExit() == 0)
            #expect(process.stderr.split(separator: "\n").map(String.init).allSatisfy { $0.hasPrefix("< pong ") })
        }
    }

    @Test("--max-message-size: a larger message from the server exits 3")
    func maxMessageSize() async throws {
        try await withServer { url in
            let process = try CircleProcess(["ws", url, "--max-message-size", "10", "-x", "this is more than ten bytes", "--wait", "5"])
            let status = try await process.waitForExit()
            #expect(status == 3)
            #expect(process.stderr.contains("circle ws: message too big"), "stderr: \(process.stderr)")
            #expect(process.stdout.isEmpty)
        }
    }
}
