import CircleServer
import CircleTestSupport
import Foundation
import Testing

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// `circle login`, `circle logout` and `circle admin` against a server with accounts.
@Suite("circle login, logout, admin", .serialized)
struct LoginCommandTests {
    private func run(_ arguments: [String], config: String, input: [String] = []) async throws -> (status: Int32, stdout: String, stderr: String) {
        let process = try CircleProcess(arguments, environment: ["CIRCLE_CONFIG_DIR": config])
        for line in input { try process.send(line: line) }
        process.closeInput()
        let status = try await process.waitForExit(timeout: .seconds(40))
        return (status, process.stdout, process.stderr)
    }

    /// Makes the first admin through the setup link, as the page would.
    private func makeAdmin(_ server: TestServer, link: String) async throws {
        var request = URLRequest(url: URL(string: server.httpBase + "/v1/auth/setup")!)
        request.httpMethod = "POST"
        request.setValue("application/json", forHTTPHeaderField: "Content-Type")
        let token = link.split(separator: "#setup=")[1]
        request.httpBody = Data(#"{"token":"\#(token)","name":"ada","password":"correct horse battery"}"#.utf8)
        let (_, response) = try await URLSession.shared.data(for: request)
        #expect((response as? HTTPURLResponse)?.statusCode == 201)
    }

    @Test("login keeps a 0600 device credential that the other commands use; admin invites and lists; logout ends it")
    func loginAdminLogout() async throws {
        try await self.withAdminServer { server, config in
            try await self.loginAdminLogout(server, config: config)
        }
    }

    private func loginAdminLogout(_ server: TestServer, config: String) async throws {
        let ws = server.wsURL

        let wrong = try await self.run(["login", "--server", ws, "--user", "ada"], config: config, input: ["not the password"])
        #expect(wrong.status == 4, "\(wrong.stdout) \(wrong.stderr)")
        #expect(wrong.stderr.contains("the name or the password is wrong"))

        let login = try await self.run(["login", "--server", ws, "--user", "ada", "--device", "build box"], config: config, input: ["correct horse battery"])
        #expect(login.status == 0, "\(login.stderr)")
        let file = config + "/credentials.json"
        let mode = try FileManager.default.attributesOfItem(atPath: file)[.posixPermissions] as? Int
        #expect(mode == 0o600)
        #expect(try String(contentsOfFile: file, encoding: .utf8).contains("circle_"))

        let create = try await self.run(["circle", "create", "ops", "--server", ws], config: config)
        #expect(create.status == 0, "the kept credential signs the other commands in: \(create.stderr)")
        let invite = try await self.run(["admin", "invite", "--server", ws, "--uses", "2", "--circle", "ops"], config: config)
        #expect(invite.status == 0 && invite.stdout.contains("/#invite="), "\(invite.stdout) \(invite.stderr)")
        let invites = try await self.run(["admin", "invites", "--server", ws], config: config)
        #expect(invites.stdout.contains("0/2") && invites.stdout.contains("open") && invites.stdout.contains("ops"))
        let users = try await self.run(["admin", "users", "--server", ws], config: config)
        #expect(users.stdout.contains("ada  admin  active"))
        let refused = try await self.run(["admin", "set", "ada", "--status", "banned", "--server", ws], config: config)
        #expect(refused.status == 1 && refused.stderr.contains("cannot demote or disable themselves"), "\(refused.stderr)")

        let bot = try await self.run(["admin", "bot", "deploy-bot", "--display-name", "Deploys", "--server", ws], config: config)
        #expect(bot.status == 0 && bot.stdout.hasPrefix("circle_"), "\(bot.stderr)")
        let botToken = bot.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        let asBot = try await self.run(["send", "ops", "deployed", "--server", ws, "--token", botToken], config: config)
        #expect(asBot.status == 0, "the bot posts with its own token: \(asBot.stderr)")
        let botList = try await self.run(["circle", "list", "--server", ws, "--token", botToken], config: config)
        #expect(botList.status == 0 && botList.stdout.contains("ops"), "the bot's own token works: \(botList.stderr)")
        #expect(try await self.run(["admin", "users", "--server", ws], config: config).stdout.contains("deploy-bot  bot  active"))

        // The device flow: a second terminal is approved from the admin's credential (as a page would).
        let otherConfig = config + "-2"
        defer { try? FileManager.default.removeItem(atPath: otherConfig) }
        let waiting = try CircleProcess(["login", "--code", "--server", ws, "--device", "laptop"], environment: ["CIRCLE_CONFIG_DIR": otherConfig])
        waiting.closeInput()
        try await waiting.waitForStderr("#device=")
        let code = try #require(waiting.stderr.components(separatedBy: "#device=").last?.prefix(9)).description
        let admin = try #require(try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: file))) as? [String: Any])
        let servers = try #require(admin["servers"] as? [String: [String: String]])
        let adminToken = try #require(servers[ws]?["token"])
        let approved = try await server.http("POST", "/v1/auth/device/approve", token: adminToken, json: #"{"code":"\#(code.lowercased())"}"#)
        #expect(approved.status == 204, "\(approved.body)")
        #expect(try await waiting.waitForExit(timeout: .seconds(30)) == 0, "\(waiting.stderr)")
        let second = try await self.run(["circle", "list", "--server", ws], config: otherConfig)
        #expect(second.status == 0 && second.stdout.contains("ops"), "\(second.stderr)")
        let reused = try await server.http("POST", "/v1/auth/device/approve", token: adminToken, json: #"{"code":"\#(code)"}"#)
        #expect(reused.status == 404, "a code is approved once")

        let logout = try await self.run(["logout", "--server", ws], config: config)
        #expect(logout.status == 0, "\(logout.stderr)")
        #expect(try !String(contentsOfFile: file, encoding: .utf8).contains("circle_"))
        let after = try await self.run(["admin", "users", "--server", ws], config: config)
        #expect(after.status == 4 && after.stderr.contains("circle login"), "\(after.status) \(after.stderr)")
    }

    @Test("admin webhook: add prints the id and the secret once, list, disable, rotate, deliveries, remove; a loopback URL is refused")
    func adminWebhooks() async throws {
        try await self.withAdminServer { server, config in
            try await self.webhookCommands(server, config: config)
        }
    }

    @Test("admin api-key: add prints the id and the key once, the key reads, list shows its use, revoke ends it")
    func adminAPIKeys() async throws {
        try await self.withAdminServer { server, config in
            let ws = server.wsURL
            let login = try await self.run(["login", "--server", ws, "--user", "ada"], config: config, input: ["correct horse battery"])
            #expect(login.status == 0, "\(login.stderr)")
            #expect(try await self.run(["circle", "create", "ops", "--server", ws], config: config).status == 0)

            let badScope = try await self.run(["admin", "api-key", "add", "deploys", "--bot", "deploy-bot", "--scope", "root", "--server", ws], config: config)
            #expect(badScope.status == 64, "\(badScope.stderr)")
            let noScope = try await self.run(["admin", "api-key", "add", "deploys", "--bot", "deploy-bot", "--server", ws], config: config)
            #expect(noScope.status == 64, "\(noScope.stderr)")
            let person = try await self.run(["admin", "api-key", "add", "deploys", "--bot", "ada", "--scope", "read", "--server", ws], config: config)
            #expect(person.status == 1 && person.stderr.contains("not a bot"), "\(person.stderr)")

            let add = try await self.run(
                ["admin", "api-key", "add", "deploys", "--bot", "deploy-bot", "--scope", "post_as_bot", "--scope", "read", "--server", ws], config: config
            )
            #expect(add.status == 0, "\(add.stderr)")
            let fields = add.stdout.split(separator: " ", omittingEmptySubsequences: true).map { $0.trimmingCharacters(in: .whitespacesAndNewlines) }
            let id = try #require(fields.first)
            let key = try #require(fields.last)
            #expect(key.hasPrefix("circle_key_\(id)."), "\(add.stdout)")

            let before = try await self.run(["admin", "api-key", "list", "--server", ws], config: config)
            #expect(before.stdout.contains("\(id)  active  deploy-bot  post_as_bot,read  never used  deploys"), "\(before.stdout)")
            #expect(!before.stdout.contains(key), "the key is shown once")
            let read = try await server.http("GET", "/v1/circles", token: key)
            #expect(read.status == 200 && read.body.contains("\"ops\""), "\(read.body)")
            let after = try await self.run(["admin", "api-key", "list", "--server", ws], config: config)
            #expect(after.stdout.contains("\(id)  active  deploy-bot  post_as_bot,read  used "), "\(after.stdout)")

            #expect(try await self.run(["admin", "api-key", "revoke", id, "--server", ws], config: config).status == 0)
            #expect(try await self.run(["admin", "api-key", "list", "--server", ws], config: config).stdout.contains("\(id)  revoked  deploy-bot"))
            #expect(try await server.http("GET", "/v1/circles", token: key).status == 401)
            let unknown = try await self.run(["admin", "api-key", "revoke", "nope", "--server", ws], config: config)
            #expect(unknown.status == 1 && unknown.stderr.contains("no API key"), "\(unknown.stderr)")
        }
    }

    @Test("admin hook, read-only, disconnect and api-key --expires-in-days: each does what it says, bad values refused")
    func adminHooksAndModeration() async throws {
        try await self.withAdminServer { server, config in
            let ws = server.wsURL
            let login = try await self.run(["login", "--server", ws, "--user", "ada"], config: config, input: ["correct horse battery"])
            #expect(login.status == 0, "\(login.stderr)")
            #expect(try await self.run(["circle", "create", "ops", "--server", ws], config: config).status == 0)

            let badTimeout = try await self.run(["admin", "hook", "set", "ops", "https://hooks.example.com/p", "--timeout-ms", "5", "--server", ws], config: config)
            #expect(badTimeout.status == 64, "\(badTimeout.stderr)")
            let set = try await self.run(
                ["admin", "hook", "set", "ops", "https://hooks.example.com/p", "--timeout-ms", "1500", "--on-failure", "accept", "--server", ws], config: config
            )
            #expect(set.status == 0 && set.stdout.contains("ops  1500 ms  on failure: accept  https://hooks.example.com/p  whsec_"), "\(set.stdout) \(set.stderr)")
            let show = try await self.run(["admin", "hook", "show", "ops", "--server", ws], config: config)
            #expect(show.status == 0 && show.stdout.contains("set by ada") && !show.stdout.contains("whsec_"), "\(show.stdout)")
            #expect(try await self.run(["admin", "hook", "remove", "ops", "--server", ws], config: config).status == 0)
            let gone = try await self.run(["admin", "hook", "show", "ops", "--server", ws], config: config)
            #expect(gone.status == 1, "\(gone.stdout) \(gone.stderr)")

            let on = try await self.run(["admin", "read-only", "ops", "on", "--server", ws], config: config)
            #expect(on.status == 0 && on.stdout.contains("ops is read-only for members"), "\(on.stdout) \(on.stderr)")
            let refused = try await server.http("POST", "/v1/circles/ops/messages", token: try await server.token("bo"), json: #"{"text":"hi"}"#)
            #expect(refused.status == 403 && refused.body.contains("read_only"), "\(refused)")
            #expect(try await self.run(["admin", "read-only", "ops", "maybe", "--server", ws], config: config).status == 64)
            #expect(try await self.run(["admin", "read-only", "ops", "off", "--server", ws], config: config).stdout.contains("open to its members"))

            let disconnect = try await self.run(["admin", "disconnect", "bo", "--server", ws], config: config)
            #expect(disconnect.status == 0 && disconnect.stdout.contains("ended the connections of bo"), "\(disconnect.stderr)")

            let badDays = try await self.run(["admin", "api-key", "add", "soon", "--bot", "soon-bot", "--scope", "read", "--expires-in-days", "0", "--server", ws], config: config)
            #expect(badDays.status == 64, "\(badDays.stderr)")
            let add = try await self.run(["admin", "api-key", "add", "soon", "--bot", "soon-bot", "--scope", "read", "--expires-in-days", "30", "--server", ws], config: config)
            #expect(add.status == 0, "\(add.stderr)")
            let id = try #require(add.stdout.split(separator: " ").first.map(String.init))
            #expect(try await self.run(["admin", "api-key", "list", "--server", ws], config: config).stdout.contains("\(id)  active  soon-bot"))
        }
    }

    /// A server with its first admin, ada, and an empty config directory for the CLI.
    private func withAdminServer(_ body: (TestServer, String) async throws -> Void) async throws {
        let server = TestServer()
        defer { server.remove() }
        let running = try await server.start()
        defer { Task { await server.stop() } }
        try await self.makeAdmin(server, link: try #require(running.setupLink))
        let config = FileManager.default.temporaryDirectory.appendingPathComponent("circle-config-\(UUID().uuidString)").path
        defer { try? FileManager.default.removeItem(atPath: config) }
        try await body(server, config)
    }

    private func webhookCommands(_ server: TestServer, config: String) async throws {
        let ws = server.wsURL
        let login = try await self.run(["login", "--server", ws, "--user", "ada"], config: config, input: ["correct horse battery"])
        #expect(login.status == 0, "\(login.stderr)")
        #expect(try await self.run(["circle", "create", "ops", "--server", ws], config: config).status == 0)

        let refused = try await self.run(["admin", "webhook", "add", "http://127.0.0.1:9/hook", "--server", ws], config: config)
        #expect(refused.status == 1 && refused.stderr.contains("public addresses only"), "\(refused.stderr)")
        let badEvent = try await self.run(["admin", "webhook", "add", "https://hooks.example.com/x", "--event", "typing", "--server", ws], config: config)
        #expect(badEvent.status == 64, "\(badEvent.stderr)")

        let add = try await self.run(
            ["admin", "webhook", "add", "https://hooks.example.com/circle", "--circle", "ops", "--event", "post", "--server", ws], config: config
        )
        #expect(add.status == 0, "\(add.stderr)")
        let fields = add.stdout.split(separator: " ", omittingEmptySubsequences: true).map { $0.trimmingCharacters(in: .whitespacesAndNewlines) }
        let id = try #require(fields.first)
        #expect(id.hasPrefix("wh_") && fields.last?.hasPrefix("whsec_") == true, "\(add.stdout)")

        let list = try await self.run(["admin", "webhook", "list", "--server", ws], config: config)
        #expect(list.stdout.contains("\(id)  active  ops  post") && !list.stdout.contains("whsec_"), "the secret is shown once: \(list.stdout)")
        #expect(try await self.run(["send", "ops", "hello", "--server", ws], config: config).status == 0)
        let deliveries = try await self.run(["admin", "webhook", "deliveries", id, "--server", ws], config: config)
        #expect(deliveries.status == 0 && deliveries.stdout.contains("ops/1  post"), "the post's delivery was recorded: \(deliveries.stdout) \(deliveries.stderr)")

        #expect(try await self.run(["admin", "webhook", "disable", id, "--server", ws], config: config).status == 0)
        #expect(try await self.run(["admin", "webhook", "list", "--server", ws], config: config).stdout.contains("disabled (disabled by ada)"))
        let rotated = try await self.run(["admin", "webhook", "rotate", id, "--server", ws], config: config)
        #expect(rotated.status == 0 && rotated.stdout.hasPrefix("whsec_"), "\(rotated.stderr)")
        #expect(try await self.run(["admin", "webhook", "remove", id, "--server", ws], config: config).status == 0)
        let gone = try await self.run(["admin", "webhook", "remove", id, "--server", ws], config: config)
        #expect(gone.status == 1 && gone.stderr.contains("no such webhook"), "\(gone.stderr)")
    }
}
