import ArgumentParser
import CircleClient
import CircleWire
import Foundation

/// `circle admin …`: the admin API from a terminal, as an admin signed in with `circle login`
/// (or with `--token`, a personal access token).
struct AdminCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "admin",
        abstract: "Manage people, invites, webhooks and API keys (admins; sign in first with circle login).",
        subcommands: [Invite.self, Invites.self, RevokeInvite.self, Users.self, SetUser.self, Bot.self, WebhookCommand.self, PublishHookCommand.self, ReadOnly.self, Disconnect.self, APIKeyCommand.self, EraseUser.self, Audit.self]
    )

    /// Where and as whom an admin command acts.
    struct Options: ParsableArguments {
        @Option(help: "The server's WebSocket URL. Env: CIRCLE_SERVER.")
        var server: String = ProcessInfo.processInfo.environment["CIRCLE_SERVER"] ?? "ws://127.0.0.1:8080/v1/ws"

        @Option(help: "A personal access token or device credential instead of the one circle login kept. Env: CIRCLE_TOKEN.")
        var token: String?

        @Flag(name: .shortAndLong, help: "On failure, print the technical details too.")
        var verbose = false

        func credential() throws -> String {
            if let token = self.token ?? ProcessInfo.processInfo.environment["CIRCLE_TOKEN"] { return token }
            guard let entry = CredentialStore.entry(for: self.server) else {
                throw CLIFailure(.unauthorized, "not signed in to \(self.server): run circle login --server \(self.server) (or give --token)")
            }
            return entry.token
        }

        /// Runs `body` with the credential; a failure is printed as `circle admin COMMAND:
        /// SENTENCE` and ends the process with its exit status.
        func perform(_ command: String, _ body: (String) async throws -> Void) async throws {
            try await reportingFailures("admin \(command)", verbose: self.verbose, context: FailureContext(server: self.server)) {
                try await body(try self.credential())
            }
        }
    }

    struct Invite: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Make an invite link and print it.")
        @OptionGroup var options: Options
        @Option(help: "Hours it works, 1 to 720.") var hours = 168
        @Option(help: "People it signs up, 1 to 1000.") var uses = 1
        @Option(name: .customLong("circle"), help: "A circle the new accounts join (repeat for several).") var circles: [String] = []

        func validate() throws {
            try OptionRanges.check("--hours", self.hours, 1...720)
            try OptionRanges.check("--uses", self.uses, 1...1000)
        }

        func run() async throws {
            try await self.options.perform("invite") { token in
                let invite = try await CircleClient.createInvite(.init(hours: self.hours, uses: self.uses, circles: self.circles), token: token, server: self.options.server)
                Console.line(invite.url ?? invite.token ?? invite.id)
            }
        }
    }

    struct Bot: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Make a bot account and print its token (shown once; CIRCLE_TOKEN for its scripts).")
        @OptionGroup var options: Options
        @Argument(help: "The bot's user name.") var name: String
        @Option(help: "What people see as its name.") var displayName: String?
        @Option(help: "Days the token works, 1 to 365.") var days = 365

        func validate() throws {
            try OptionRanges.check("--days", self.days, 1...365)
        }

        func run() async throws {
            try await self.options.perform("bot") { token in
                let credential = try await CircleClient.createBot(.init(name: self.name, displayName: self.displayName, days: self.days), token: token, server: self.options.server)
                Console.line(credential.token)
            }
        }
    }

    struct Invites: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "List invites: id, uses, expiry, circles, state.")
        @OptionGroup var options: Options

        func run() async throws {
            try await self.options.perform("invites") { token in
                let invites = try await CircleClient.invites(token: token, server: self.options.server)
                let now = Int64(Date().timeIntervalSince1970 * 1000)
                for invite in invites {
                    let state = invite.revoked ? "revoked" : invite.uses >= invite.maxUses ? "used up" : invite.expiresAt <= now ? "expired" : "open"
                    let expires = ISO8601DateFormatter().string(from: Date(timeIntervalSince1970: Double(invite.expiresAt) / 1000))
                    Console.line("\(invite.id)  \(invite.uses)/\(invite.maxUses)  until \(expires)  \(state)  \(invite.circles.joined(separator: ","))")
                }
            }
        }
    }

    struct RevokeInvite: AsyncParsableCommand {
        static let configuration = CommandConfiguration(commandName: "revoke-invite", abstract: "Revoke an invite by its id.")
        @OptionGroup var options: Options
        @Argument(help: "The invite's id (circle admin invites lists them).") var id: String

        func run() async throws {
            try await self.options.perform("revoke-invite") { token in
                try await CircleClient.revokeInvite(id: self.id, token: token, server: self.options.server)
                Console.line("revoked \(self.id)")
            }
        }
    }

    struct Users: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "List accounts: name, role, status, last seen.")
        @OptionGroup var options: Options

        func run() async throws {
            try await self.options.perform("users") { token in
                for user in try await CircleClient.users(token: token, server: self.options.server) {
                    let seen = user.lastSeenAt.map { ISO8601DateFormatter().string(from: Date(timeIntervalSince1970: Double($0) / 1000)) } ?? "never"
                    Console.line("\(user.name)  \(user.role)  \(user.status)  last seen \(seen)")
                }
            }
        }
    }

    struct SetUser: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "set",
            abstract: "Change a user's role or status; banned and deactivated end their sessions and connections at once."
        )
        @OptionGroup var options: Options
        @Argument(help: "The user name.") var name: String
        @Option(help: "admin, member or bot.") var role: String?
        @Option(help: "active, deactivated or banned.") var status: String?

        func validate() throws {
            guard self.role != nil || self.status != nil else { throw ValidationError("give --role or --status") }
            if let role, !["admin", "member", "bot"].contains(role) { throw ValidationError("--role is admin, member or bot") }
            if let status, !["active", "deactivated", "banned"].contains(status) {
                throw ValidationError("--status is active, deactivated or banned")
            }
        }

        func run() async throws {
            try await self.options.perform("set") { token in
                let user = try await CircleClient.updateUser(self.name, .init(role: self.role, status: self.status), token: token, server: self.options.server)
                Console.line("\(user.name)  \(user.role)  \(user.status)")
            }
        }
    }
}
