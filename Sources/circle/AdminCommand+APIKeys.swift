import ArgumentParser
import CircleClient
import CircleWire
import Foundation

extension AdminCommand {
    /// `circle admin api-key …` (docs/CLI.md, docs/API.md "API keys").
    struct APIKeyCommand: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "api-key",
            abstract: "Make, list and revoke API keys for an app's backend.",
            subcommands: [Add.self, List.self, Revoke.self]
        )

        struct Add: AsyncParsableCommand {
            static let configuration = CommandConfiguration(abstract: "Make a key; prints its id and the key (shown once).")
            @OptionGroup var options: Options
            @Argument(help: "What the key is for (1–60 characters).") var name: String
            @Option(help: "The bot account it acts as (made when it does not exist).") var bot: String
            @Option(
                name: .customLong("scope"),
                help: "post_as_bot, post_as_user, manage, read, moderate or admin (repeat for several)."
            ) var scopes: [String] = []
            @Option(help: "Days until the key stops working (1…\(HTTPAPI.maxAPIKeyLifetimeDays)); default: never.") var expiresInDays: Int?

            func validate() throws {
                guard !self.scopes.isEmpty else { throw ValidationError("give at least one --scope") }
                if let days = self.expiresInDays, !(1...HTTPAPI.maxAPIKeyLifetimeDays).contains(days) {
                    throw ValidationError("--expires-in-days is 1…\(HTTPAPI.maxAPIKeyLifetimeDays)")
                }
                for scope in self.scopes where !HTTPAPI.apiKeyScopes.contains(scope) {
                    throw ValidationError("--scope is one of \(HTTPAPI.apiKeyScopes.joined(separator: ", ")), not \"\(scope)\"")
                }
            }

            func run() async throws {
                var scopes: [String] = []
                for scope in self.scopes where !scopes.contains(scope) { scopes.append(scope) }
                try await self.options.perform("api-key add") { token in
                    let made = try await CircleClient.createAPIKey(
                        .init(
                            name: self.name, bot: self.bot, scopes: scopes,
                            expiresAt: self.expiresInDays.map { Int64(Date().timeIntervalSince1970 * 1000) + Int64($0) * 86_400_000 }
                        ),
                        token: token,
                        server: self.options.server
                    )
                    Console.line("\(made.id)  \(made.key ?? "")")
                }
            }
        }

        struct List: AsyncParsableCommand {
            static let configuration = CommandConfiguration(abstract: "List keys: id, state, bot, scopes, last use, name.")
            @OptionGroup var options: Options

            func run() async throws {
                try await self.options.perform("api-key list") { token in
                    for key in try await CircleClient.apiKeys(token: token, server: self.options.server) {
                        let now = Int64(Date().timeIntervalSince1970 * 1000)
                        let state = key.revokedAt != nil ? "revoked" : (key.expiresAt.map { $0 <= now } ?? false) ? "expired" : "active"
                        let used = key.lastUsedAt.map { "used \(Self.time($0))" } ?? "never used"
                        Console.line("\(key.id)  \(state)  \(key.bot)  \(key.scopes.joined(separator: ","))  \(used)  \(key.name)")
                    }
                }
            }

            static func time(_ milliseconds: Int64) -> String {
                ISO8601DateFormatter().string(from: Date(timeIntervalSince1970: Double(milliseconds) / 1000))
            }
        }

        struct Revoke: AsyncParsableCommand {
            static let configuration = CommandConfiguration(abstract: "Revoke a key: it authenticates nothing from now on.")
            @OptionGroup var options: Options
            @Argument(help: "The key's id.") var id: String

            func run() async throws {
                try await self.options.perform("api-key revoke") { token in
                    try await CircleClient.revokeAPIKey(id: self.id, token: token, server: self.options.server)
                    Console.line("revoked \(self.id)")
                }
            }
        }
    }
}
