import ArgumentParser
import CircleClient
import CircleWire
import Foundation

extension AdminCommand {
    /// `circle admin hook …` (docs/CLI.md, docs/API.md "Publish hooks").
    struct PublishHookCommand: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "hook",
            abstract: "A circle's publish hook: an endpoint that accepts, refuses or rewrites each post before it is stored.",
            subcommands: [SetHook.self, Show.self, Remove.self]
        )

        struct SetHook: AsyncParsableCommand {
            static let configuration = CommandConfiguration(commandName: "set", abstract: "Set or replace a circle's hook; prints its signing secret when a new one is made.")
            @OptionGroup var options: Options
            @Argument(help: "The circle.") var circle: String
            @Argument(help: "The endpoint: https://… (or http://).") var url: String
            @Option(help: "Milliseconds a post waits for the answer, 100…10000 (default 2000).") var timeoutMs: Int?
            @Option(help: "When the hook fails or is late: refuse (default) or accept.") var onFailure: String?
            @Flag(help: "Make a new signing secret (a new hook always gets one).") var rotateSecret = false

            func validate() throws {
                if let timeout = self.timeoutMs, !(100...10_000).contains(timeout) { throw ValidationError("--timeout-ms is 100…10000") }
                if let policy = self.onFailure, !["refuse", "accept"].contains(policy) { throw ValidationError("--on-failure is refuse or accept") }
            }

            func run() async throws {
                try await self.options.perform("hook set") { token in
                    let hook = try await CircleClient.setPublishHook(
                        circle: self.circle,
                        .init(url: self.url, timeoutMs: self.timeoutMs, onFailure: self.onFailure, rotateSecret: self.rotateSecret ? true : nil),
                        token: token,
                        server: self.options.server
                    )
                    Console.line("\(hook.circle)  \(hook.timeoutMs) ms  on failure: \(hook.onFailure)  \(hook.url)" + (hook.secret.map { "  \($0)" } ?? ""))
                }
            }
        }

        struct Show: AsyncParsableCommand {
            static let configuration = CommandConfiguration(abstract: "Show a circle's hook: deadline, failure policy, URL.")
            @OptionGroup var options: Options
            @Argument(help: "The circle.") var circle: String

            func run() async throws {
                try await self.options.perform("hook show") { token in
                    let hook = try await CircleClient.publishHook(circle: self.circle, token: token, server: self.options.server)
                    Console.line("\(hook.circle)  \(hook.timeoutMs) ms  on failure: \(hook.onFailure)  \(hook.url)  set by \(hook.createdBy)")
                }
            }
        }

        struct Remove: AsyncParsableCommand {
            static let configuration = CommandConfiguration(abstract: "Remove a circle's hook.")
            @OptionGroup var options: Options
            @Argument(help: "The circle.") var circle: String

            func run() async throws {
                try await self.options.perform("hook remove") { token in
                    try await CircleClient.deletePublishHook(circle: self.circle, token: token, server: self.options.server)
                    Console.line("removed the publish hook of \(self.circle)")
                }
            }
        }
    }
}
