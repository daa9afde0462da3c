import ArgumentParser
import CircleClient
import CircleWire
import Foundation

/// The credentials `circle login` keeps, one per server, in the user's config directory:
/// `$CIRCLE_CONFIG_DIR`, else `$XDG_CONFIG_HOME/circle`, else `~/.config/circle`, in
/// `credentials.json` with mode 0600 (the directory 0700). Each is a device credential the
/// server can list and revoke (docs/CLI.md, "Signing in").
struct CredentialStore {
    struct Entry: Codable, Equatable {
        var user: String
        var token: String
        /// The session id on the server (its sessions list).
        var session: String
    }

    struct File: Codable {
        /// By server URL, as given to `--server`.
        var servers: [String: Entry] = [:]
    }

    static var directory: String {
        let environment = ProcessInfo.processInfo.environment
        if let explicit = environment["CIRCLE_CONFIG_DIR"], !explicit.isEmpty { return explicit }
        if let xdg = environment["XDG_CONFIG_HOME"], !xdg.isEmpty { return (xdg as NSString).appendingPathComponent("circle") }
        return (NSHomeDirectory() as NSString).appendingPathComponent(".config/circle")
    }

    static var path: String { (Self.directory as NSString).appendingPathComponent("credentials.json") }

    static func read() -> File {
        guard let data = FileManager.default.contents(atPath: Self.path) else { return File() }
        return (try? JSONDecoder().decode(File.self, from: data)) ?? File()
    }

    static func entry(for server: String) -> Entry? { Self.read().servers[server] }

    /// Writes the file whole, with 0600 from its creation (a temporary file renamed over it).
    static func write(_ file: File) throws {
        let directory = Self.directory
        do {
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
            let data = try encoder.encode(file)
            let temporary = Self.path + ".\(getpid()).tmp"
            let descriptor = open(temporary, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
            guard descriptor >= 0 else { throw CLIFailure(.local, "cannot write \(temporary): \(String(cString: strerror(errno)))") }
            let written = data.withUnsafeBytes { Foundation.write(descriptor, $0.baseAddress, $0.count) }
            fsync(descriptor)
            close(descriptor)
            guard written == data.count, rename(temporary, Self.path) == 0 else {
                unlink(temporary)
                throw CLIFailure(.local, "cannot write \(Self.path): \(String(cString: strerror(errno)))")
            }
        } catch let failure as CLIFailure {
            throw failure
        } catch {
            throw CLIFailure(.local, "cannot write \(Self.path): \(error.localizedDescription)")
        }
    }
}

/// `circle login`: a password sign-in that keeps a device credential for `--server`.
struct LoginCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "login",
        abstract: "Sign in to a server with your password; later commands use the credential kept for it.",
        discussion: """
            The password is read from the terminal without echo, or from the first line of
            standard input when it is not a terminal (echo "$PW" | circle login …). The
            credential is kept in \(CredentialStore.path) (mode 0600); it appears in your
            sessions on the page, where it can be signed out, and `circle logout` ends it.
            A passkey cannot be used in a terminal: set a password on the page first.
            """
    )

    @Option(help: "The server's WebSocket URL. Env: CIRCLE_SERVER.")
    var server: String = ProcessInfo.processInfo.environment["CIRCLE_SERVER"] ?? "ws://127.0.0.1:8080/v1/ws"

    @Option(help: "Your user name (asked when not given).")
    var user: String?

    @Option(help: "What your sessions list calls this device. Default: this computer's host name.")
    var device: String?

    @Flag(help: "Sign in without a password: print a code to approve on a page where you are signed in (with a passkey, say).")
    var code = false

    @Flag(name: .shortAndLong, help: "On failure, print the technical details too.")
    var verbose = false

    func run() async throws {
        if self.code {
            try await reportingFailures("login", verbose: self.verbose, context: FailureContext(server: self.server)) {
                try await self.signInWithCode()
            }
            return
        }
        try await reportingFailures("login", verbose: self.verbose, context: FailureContext(server: self.server, user: self.user)) {
            try await self.signIn()
        }
    }

    private func signIn() async throws {
        let interactive = isatty(STDIN_FILENO) == 1
        guard let name = self.user ?? (interactive ? Self.prompt("User name: ", echo: true) : nil), !name.isEmpty else {
            throw CLIFailure(.usage, "give --user NAME (standard input is not a terminal to ask on)")
        }
        guard let password = interactive ? Self.prompt("Password for \(name): ", echo: false) : readLine(strippingNewline: true), !password.isEmpty
        else {
            throw CLIFailure(.usage, "no password: type it at the prompt, or give it on standard input")
        }
        let device = String((self.device ?? ProcessInfo.processInfo.hostName).prefix(60))
        let context = FailureContext(server: self.server, user: name)
        do {
            let credential = try await CircleClient.signIn(name: name, password: password, device: device.isEmpty ? "circle" : device, server: self.server)
            try Self.keep(credential, server: self.server)
            Console.line("signed in to \(context.address) as \(credential.user); the credential is in \(CredentialStore.path)")
        } catch let failure as CLIFailure {
            throw failure
        } catch {
            throw CLIFailure.from(error, context)
        }
    }

    /// The device flow: show the code, poll until it is approved or expires.
    private func signInWithCode() async throws {
        let device = String((self.device ?? ProcessInfo.processInfo.hostName).prefix(60))
        let code = try await CircleClient.startDeviceSignIn(device: device.isEmpty ? "circle" : device, server: self.server)
        Console.err("To sign in, open \(code.url) where you are signed in,\nor enter the code \(code.code) on the page (your menu → Approve a device).\n")
        while Int64(Date().timeIntervalSince1970 * 1000) < code.expiresAt {
            if let credential = try await CircleClient.pollDeviceSignIn(code, server: self.server) {
                try Self.keep(credential, server: self.server)
                Console.line("signed in to \(FailureContext(server: self.server).address) as \(credential.user); the credential is in \(CredentialStore.path)")
                return
            }
            try await Task.sleep(for: .seconds(code.interval))
        }
        throw CLIFailure(.unauthorized, "the code \(code.code) was not approved within 10 minutes; run circle login --code again")
    }

    static func keep(_ credential: HTTPAPI.Credential, server: String) throws {
        var file = CredentialStore.read()
        file.servers[server] = .init(user: credential.user, token: credential.token, session: credential.session.id)
        try CredentialStore.write(file)
    }

    /// Reads one line from the terminal, without echo for secrets.
    static func prompt(_ text: String, echo: Bool) -> String? {
        Console.err(text)
        var saved = termios()
        let hidden = !echo && tcgetattr(STDIN_FILENO, &saved) == 0
        if hidden {
            var quiet = saved
            quiet.c_lflag &= ~tcflag_t(ECHO)
            tcsetattr(STDIN_FILENO, TCSANOW, &quiet)
        }
        defer {
            if hidden {
                tcsetattr(STDIN_FILENO, TCSANOW, &saved)
                Console.err("\n")
            }
        }
        return readLine(strippingNewline: true)
    }
}

/// `circle logout`: ends the kept credential's session on the server and forgets it.
struct LogoutCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "logout", abstract: "Sign out of a server: end the kept credential and forget it.")

    @Option(help: "The server's WebSocket URL. Env: CIRCLE_SERVER.")
    var server: String = ProcessInfo.processInfo.environment["CIRCLE_SERVER"] ?? "ws://127.0.0.1:8080/v1/ws"

    @Flag(name: .shortAndLong, help: "On failure, print the technical details too.")
    var verbose = false

    func run() async throws {
        try await reportingFailures("logout", verbose: self.verbose, context: FailureContext(server: self.server)) {
            try await self.signOut()
        }
    }

    private func signOut() async throws {
        var file = CredentialStore.read()
        guard let entry = file.servers[self.server] else {
            throw CLIFailure(.usage, "not signed in to \(self.server) (nothing in \(CredentialStore.path))")
        }
        var ended = true
        do {
            try await CircleClient.signOut(credential: entry.token, server: self.server)
        } catch let error as CircleClientError where error.httpStatus == 401 {
            // Ended already (signed out on the page, or expired): forget it all the same.
        } catch {
            ended = false
            Console.err("circle: the server was not told (\(error)); the credential is forgotten here all the same\n")
        }
        file.servers[self.server] = nil
        try CredentialStore.write(file)
        Console.line(ended ? "signed out of \(self.server)" : "forgot the credential for \(self.server)")
    }
}
