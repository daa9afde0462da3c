import CircleServer
import CircleTestSupport
import Foundation
import Testing

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// `circle serve --config FILE`, `circle config check FILE` and the reload on SIGHUP
/// (docs/OPERATIONS.md, "Configuration file").
@Suite("circle serve --config and circle config check", .serialized)
struct ConfigFileTests {
    /// A directory of its own, removed afterwards by the caller.
    private static func directory() throws -> String {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("circle-config-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        return path
    }

    private static func write(_ text: String, to path: String) throws {
        try Data(text.utf8).write(to: URL(fileURLWithPath: path))
    }

    @Test("a good file is ok (exit 0)")
    func goodFile() async throws {
        let directory = try Self.directory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let file = directory + "/circle.json"
        try Self.write(
            """
            {
              "port": 9000,
              "host": "0.0.0.0",
              "max-post-bytes": 16384,
              "posts-per-second": 2.5,
              "log-level": "debug",
              "dev": true,
              "echo": false,
              "jwt-issuer": ["iss=https://id.example.com,jwks=https://id.example.com/jwks"],
              "idle-timeout": "90s",
              "webhook-timeout": "5s",
              "max-requests-in-flight": 4,
              "tls-cert": "/etc/circle/cert.pem",
              "tls-key": "/etc/circle/key.pem",
              "announce": true
            }
            """,
            to: file
        )
        let check = try CircleProcess(["config", "check", file])
        #expect(try await check.waitForExit() == 0, "\(check.stderr)")
        #expect(check.stdout == "ok\n")
        #expect(check.stderr.isEmpty)
    }

    @Test("settings checked together: the entry at fault has the line; an invalid variable has none")
    func together() async throws {
        let directory = try Self.directory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let file = directory + "/circle.json"
        try Self.write("{\n  \"port\": 9000,\n  \"tls-cert\": \"/c.pem\",\n  \"announce\": \"Team\"\n}", to: file)
        let check = try CircleProcess(["config", "check", file])
        #expect(try await check.waitForExit() == 64)
        #expect(
            check.stderr.split(separator: "\n").map(String.init) == [
                "\(file):3: --tls-cert and --tls-key go together",
                "\(file):4: --announce needs a server reachable from the network: add --host 0.0.0.0 (IPv4) or --host :: (IPv4 and IPv6)",
            ],
            "\(check.stderr)"
        )
        try Self.write("{\"port\": 9000}", to: file)
        let variable = try CircleProcess(["config", "check", file], environment: ["CIRCLE_LOG_LEVEL": "loud"])
        #expect(try await variable.waitForExit() == 64)
        #expect(variable.stderr == "\(file): --log-level must be one of trace, debug, info, notice, warning, error, critical\n", "\(variable.stderr)")
    }

    @Test("unknown keys (with did you mean), wrong types and values out of range: FILE:LINE each, exit 64")
    func badFile() async throws {
        let directory = try Self.directory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let file = directory + "/circle.json"
        try Self.write(
            """
            {
              "max-post-byte": 100,
              "port": 99999,
              "dev": "yes",
              "log-level": "loud",
              "idle-timeout": "1e20s",
              "colour": 3,
              "host": null,
              "max-connections-per-user": [1],
              "posts-per-second": "nan",
              "prot": 1
            }
            """,
            to: file
        )
        let check = try CircleProcess(["config", "check", file])
        #expect(try await check.waitForExit() == 64)
        let lines = check.stderr.split(separator: "\n").map(String.init)
        #expect(
            lines == [
                "\(file):2: unknown setting \"max-post-byte\" — did you mean \"max-post-bytes\"? (the settings are circle serve's options without --)",
                "\(file):3: --port must be from 0 to 65,535 (0 picks a free port), not 99999",
                "\(file):4: \"dev\" takes true or false, not a string",
                "\(file):5: --log-level must be one of trace, debug, info, notice, warning, error, critical",
                "\(file):6: --idle-timeout takes a duration of at most 100 years, such as 75s or 5m",
                "\(file):7: unknown setting \"colour\" (the settings are circle serve's options without --)",
                "\(file):8: \"host\" is null; leave the key out for the default",
                "\(file):9: \"max-connections-per-user\" takes one value, not an array",
                "\(file):10: --posts-per-second must be more than 0 and at most 1,000,000, not nan",
                "\(file):11: unknown setting \"prot\" — did you mean \"port\"? (the settings are circle serve's options without --)",
            ],
            "\(check.stderr)"
        )
        #expect(check.stdout.isEmpty)

        // serve refuses the same file with the same messages and writes nothing.
        let data = directory + "/data"
        let serve = try CircleProcess(["serve", "--config", file, "--data", data])
        #expect(try await serve.waitForExit() == 64)
        for line in lines { #expect(serve.stderr.contains(line), "\(serve.stderr)") }
        #expect(!FileManager.default.fileExists(atPath: data), "serve wrote its data directory with a bad file")
    }

    @Test("malformed, not UTF-8, too large, too deep, a directory, missing: documented errors")
    func adversarialFiles() async throws {
        let directory = try Self.directory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let cases: [(name: String, bytes: [UInt8], status: Int32, message: String)] = [
            ("malformed", Array("{\n  \"port\": 9000\n  \"dev\": true\n}".utf8), 64, ":3: malformed JSON: '\"' where ',' or '}' should be"),
            ("unclosed", Array("{\n  \"port\": 9000,\n".utf8), 64, ":3: malformed JSON: the file ends where a key in double quotes should be"),
            ("not-utf8", Array("{\n\"host\": \"caf".utf8) + [0xE9] + Array("\"}".utf8), 64, ":2: is not UTF-8 text"),
            ("array", Array("[1, 2]".utf8), 64, ":1: must be a JSON object"),
            ("empty", [], 64, ":1: is empty"),
            ("twice", Array("{\"port\": 1,\n\"port\": 2}".utf8), 64, ":2: \"port\" is set twice (first on line 1)"),
            ("deep", Array(("{\"a\": " + String(repeating: "[", count: 100_000)).utf8), 64, ":1: nested more than 16 deep"),
            ("huge", Array("{\"host\": \"".utf8) + [UInt8](repeating: UInt8(ascii: "a"), count: 1 << 20) + Array("\"}".utf8), 64, "more than the limit of 1048576 (1 MiB)"),
            ("nested", Array("{\"limits\": {\"port\": 1}}".utf8), 64, ":1: unknown setting \"limits\""),
        ]
        for item in cases {
            let path = directory + "/" + item.name + ".json"
            try Data(item.bytes).write(to: URL(fileURLWithPath: path))
            let check = try CircleProcess(["config", "check", path])
            #expect(try await check.waitForExit() == item.status, "\(item.name): \(check.stderr)")
            #expect(check.stderr.contains(item.message.hasPrefix(":") ? path + item.message : item.message), "\(item.name): \(check.stderr)")
            #expect(check.stderr.hasPrefix(path), "\(item.name): \(check.stderr)")
        }
        let folder = try CircleProcess(["config", "check", directory])
        #expect(try await folder.waitForExit() == 5)
        #expect(folder.stderr.contains("\(directory): is a directory, not a configuration file"), "\(folder.stderr)")
        let missing = try CircleProcess(["config", "check", directory + "/missing.json"])
        #expect(try await missing.waitForExit() == 5)
        #expect(missing.stderr.contains("missing.json: cannot open it: No such file or directory"), "\(missing.stderr)")
        let serve = try CircleProcess(["serve", "--config", directory + "/missing.json", "--data", directory + "/data"])
        #expect(try await serve.waitForExit() == 5)
        #expect(!FileManager.default.fileExists(atPath: directory + "/data"))
    }

    @Test("precedence: the command line, then CIRCLE_*, then the file, then the default")
    func precedence() async throws {
        let directory = try Self.directory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let file = directory + "/circle.json"
        // Data directories whose parent does not exist: serve stops at once (5) and names the one it took.
        try Self.write("{\"data\": \"/nonexistent/file-data\", \"jwt-secret\": \"\(testSecret)\"}", to: file)
        let fromFile = try CircleProcess(["serve", "--config", file])
        #expect(try await fromFile.waitForExit() == 5)
        #expect(fromFile.stderr.contains("/nonexistent/file-data"), "\(fromFile.stderr)")
        let fromEnvironment = try CircleProcess(["serve", "--config", file], environment: ["CIRCLE_DATA": "/nonexistent/env-data"])
        #expect(try await fromEnvironment.waitForExit() == 5)
        #expect(fromEnvironment.stderr.contains("/nonexistent/env-data"), "\(fromEnvironment.stderr)")
        let fromCommandLine = try CircleProcess(["serve", "--config", file, "--data", "/nonexistent/cli-data"], environment: ["CIRCLE_DATA": "/nonexistent/env-data"])
        #expect(try await fromCommandLine.waitForExit() == 5)
        #expect(fromCommandLine.stderr.contains("/nonexistent/cli-data"), "\(fromCommandLine.stderr)")
        // Without the key, the default (./circle-data, relative to the working directory).
        try Self.write("{\"jwt-secret\": \"\(testSecret)\", \"port\": 0, \"max-post-bytes\": 0}", to: file)
        let refused = try CircleProcess(["serve", "--config", file, "--max-post-bytes", "100"], directory: directory)
        #expect(try await refused.waitForExit() == 64, "a bad value in the file is refused even when the command line sets it")
        #expect(refused.stderr.contains("\(file):1: --max-post-bytes must be from 1 to 1,073,741,824, not 0"), "\(refused.stderr)")
    }

    @Test("docs/OPERATIONS.md lists exactly the settings circle config keys prints")
    func documentedKeys() async throws {
        let keys = try CircleProcess(["config", "keys"])
        #expect(try await keys.waitForExit() == 0)
        let table = keys.stdout
        #expect(table.contains("| `port` | a string or a number | `CIRCLE_PORT` | needs a restart |"), "\(table)")
        #expect(table.contains("| `log-level` | a string or a number | `CIRCLE_LOG_LEVEL` | reloaded |"))
        #expect(table.contains("| `dev` | true or false |  | needs a restart |"))
        #expect(!table.contains("`config`"))
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let operations = try String(contentsOf: root.appendingPathComponent("docs/OPERATIONS.md"), encoding: .utf8)
        #expect(operations.contains(table), "docs/OPERATIONS.md's table of settings differs from `circle config keys`")
    }

    @Test("SIGHUP: the log level and a limit change without a restart; a bad file changes nothing and the server serves on")
    func reloadOnSIGHUP() async throws {
        let directory = try Self.directory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let file = directory + "/circle.json"
        let port = try unusedPort()
        let url = "ws://127.0.0.1:\(port)/v1/ws"
        func settings(_ extra: String) -> String {
            "{\n  \"port\": \(port),\n  \"data\": \"\(directory)/data\",\n  \"jwt-secret\": \"\(testSecret)\"\(extra)\n}\n"
        }
        try Self.write(settings(",\n  \"log-level\": \"info\""), to: file)
        let serve = try CircleProcess(["serve", "--config", file])
        defer { serve.killNow() }
        try await serve.waitForStderr("Press Ctrl-C to stop.")

        let created = try CircleProcess(["circle", "create", "general", "--user", "alice", "--jwt-secret", testSecret, "--server", url])
        #expect(try await created.waitForExit() == 0, "\(created.stderr)")
        // One connection of alice's stays open.
        let tail = try CircleProcess(["tail", "general", "--follow", "--user", "alice", "--jwt-secret", testSecret, "--server", url])
        defer { tail.killNow() }
        try await serve.waitForStderr("connected  address=127.0.0.1:")
        let before = try CircleProcess(["send", "general", "one", "--user", "alice", "--jwt-secret", testSecret, "--server", url])
        #expect(try await before.waitForExit() == 0, "a second connection before the reload: \(before.stderr)")
        #expect(!serve.stderr.contains(" debug "), "debug lines at --log-level info")

        // The log level, a limit, and a setting that needs a restart.
        func allowedOrigin() async throws -> String? {
            var request = URLRequest(url: URL(string: "http://127.0.0.1:\(port)/healthz")!)
            request.setValue("https://app.example.com", forHTTPHeaderField: "Origin")
            let (_, response) = try await URLSession.shared.data(for: request)
            return (response as? HTTPURLResponse)?.value(forHTTPHeaderField: "Access-Control-Allow-Origin")
        }
        #expect(try await allowedOrigin() == nil)
        try Self.write(
            settings(",\n  \"log-level\": \"debug\",\n  \"max-connections-per-user\": 1,\n  \"cors-origin\": \"https://app.example.com\",\n  \"echo\": true"),
            to: file
        )
        serve.deliver(SIGHUP)
        try await serve.waitForStderr("configuration reloaded")
        #expect(serve.stderr.contains("configuration setting needs a restart  file=\(file) setting=echo"), "\(serve.stderr)")
        #expect(try await allowedOrigin() == "https://app.example.com")
        let after = try CircleProcess(["send", "general", "two", "--user", "alice", "--jwt-secret", testSecret, "--server", url])
        #expect(try await after.waitForExit() != 0, "a second connection beyond max-connections-per-user 1 was let in")
        #expect(after.stderr.contains("already has 1 connections open"), "\(after.stderr)")
        // An HTTP request, which the server logs at debug.
        let list = try CircleProcess(["circle", "list", "--user", "alice", "--jwt-secret", testSecret, "--server", url])
        #expect(try await list.waitForExit() == 0, "\(list.stderr)")
        try await serve.waitForStderr("a line at debug level") { $0.range(of: #"\n\S+ debug +"#, options: .regularExpression) != nil }

        // A bad file: logged with its line, nothing changes, the server serves on.
        try Self.write("{\n  \"port\": \"x\",\n  \"max-connections-per-user\": 5,\n  \"bogus\": 1\n}\n", to: file)
        serve.deliver(SIGHUP)
        try await serve.waitForStderr("configuration not reloaded")
        try await serve.waitForStderr("\(file):4: unknown setting")
        let bob = try CircleProcess(["send", "general", "three", "--user", "bob", "--jwt-secret", testSecret, "--server", url])
        #expect(try await bob.waitForExit() == 0, "the server stopped serving after a bad reload: \(bob.stderr)")
        let still = try CircleProcess(["send", "general", "four", "--user", "alice", "--jwt-secret", testSecret, "--server", url])
        #expect(try await still.waitForExit() != 0, "the bad file's limit was applied")
        #expect(serve.stderr.components(separatedBy: "configuration reloaded").count == 2, "a bad file was reported as reloaded")
    }

    @Test("SIGHUP: the post size for the next connection and the HTTP post rate at once, without a restart")
    func reloadLimitsOnSIGHUP() async throws {
        let directory = try Self.directory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let file = directory + "/circle.json"
        let port = try unusedPort()
        let url = "ws://127.0.0.1:\(port)/v1/ws"
        func settings(_ limits: String) -> String {
            "{\n  \"port\": \(port),\n  \"data\": \"\(directory)/data\",\n  \"jwt-secret\": \"\(testSecret)\",\n\(limits)\n}\n"
        }
        try Self.write(settings("  \"max-post-bytes\": 100,\n  \"posts-per-second\": 0.001,\n  \"post-burst\": 1"), to: file)
        let serve = try CircleProcess(["serve", "--config", file])
        defer { serve.killNow() }
        try await serve.waitForStderr("Press Ctrl-C to stop.")
        let created = try CircleProcess(["circle", "create", "general", "--user", "alice", "--jwt-secret", testSecret, "--server", url])
        #expect(try await created.waitForExit() == 0, "\(created.stderr)")

        let long = String(repeating: "a", count: 300)
        func sendLong() async throws -> (status: Int32, stderr: String) {
            let send = try CircleProcess(["send", "general", long, "--user", "alice", "--jwt-secret", testSecret, "--server", url])
            let status = try await send.waitForExit()
            return (status, send.stderr)
        }
        let token = try await TokenAuthority(.hs256(secret: testSecret)).mint(user: "bob", ttl: .seconds(3600))
        func postOverHTTP(_ text: String) async throws -> Int {
            var request = URLRequest(url: URL(string: "http://127.0.0.1:\(port)/v1/circles/general/messages")!)
            request.httpMethod = "POST"
            request.setValue("Bearer \(token)", forHTTPHeaderField: "Authorization")
            request.setValue("application/json", forHTTPHeaderField: "Content-Type")
            request.httpBody = Data(#"{"text":"\#(text)"}"#.utf8)
            let (_, response) = try await URLSession.shared.data(for: request)
            return (response as? HTTPURLResponse)?.statusCode ?? 0
        }

        let refused = try await sendLong()
        #expect(refused.status != 0 && refused.stderr.contains("too large"), "300 bytes over max-post-bytes 100: \(refused.stderr)")
        #expect((200..<300).contains(try await postOverHTTP("one")), "bob's first post over HTTP (burst 1)")
        #expect(try await postOverHTTP("two") == 429, "bob's second post at 0.001 a second")

        try Self.write(settings("  \"max-post-bytes\": 1000,\n  \"posts-per-second\": 1000,\n  \"post-burst\": 100"), to: file)
        serve.deliver(SIGHUP)
        try await serve.waitForStderr("configuration reloaded")
        #expect(!serve.stderr.contains("needs a restart"), "\(serve.stderr)")
        let accepted = try await sendLong()
        #expect(accepted.status == 0, "300 bytes under max-post-bytes 1000 after the reload: \(accepted.stderr)")
        #expect((200..<300).contains(try await postOverHTTP("three")), "bob's allowance after the reload")
        #expect((200..<300).contains(try await postOverHTTP("four")), "bob's allowance after the reload")
    }
}
