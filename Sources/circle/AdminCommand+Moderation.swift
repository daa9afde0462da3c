import ArgumentParser
import CircleClient
import CircleWire
import Foundation

extension AdminCommand {
    /// `circle admin read-only CIRCLE on|off` (docs/CLI.md, docs/API.md "Moderation").
    struct ReadOnly: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "read-only",
            abstract: "Make a circle read-only for its members (on), or open it again (off); its owner, admins, bots and API keys still post."
        )
        @OptionGroup var options: Options
        @Argument(help: "The circle.") var circle: String
        @Argument(help: "on or off.") var state: String

        func validate() throws {
            guard ["on", "off"].contains(self.state) else { throw ValidationError("say on or off, not \"\(self.state)\"") }
        }

        func run() async throws {
            try await self.options.perform("read-only") { token in
                let answer = try await CircleClient.setReadOnly(circle: self.circle, self.state == "on", token: token, server: self.options.server)
                Console.line("\(answer.circle ?? self.circle) is \(answer.readOnly ? "read-only for members" : "open to its members")")
            }
        }
    }

    /// `circle admin disconnect USER`.
    struct Disconnect: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "End every connection of a user, on every node (their sessions stay).")
        @OptionGroup var options: Options
        @Argument(help: "The user.") var user: String

        func run() async throws {
            try await self.options.perform("disconnect") { token in
                try await CircleClient.disconnect(user: self.user, token: token, server: self.options.server)
                Console.line("ended the connections of \(self.user)")
            }
        }
    }
}
