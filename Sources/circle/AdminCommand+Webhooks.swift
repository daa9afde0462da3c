import ArgumentParser
import CircleClient
import CircleWire
import Foundation

extension AdminCommand {
    /// `circle admin webhook …` (docs/CLI.md, docs/API.md "Webhooks").
    struct WebhookCommand: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "webhook",
            abstract: "Subscribe endpoints to circles' entries, list them and their deliveries.",
            subcommands: [Add.self, List.self, Enable.self, Disable.self, Rotate.self, Remove.self, Deliveries.self, Retry.self]
        )

        struct Add: AsyncParsableCommand {
            static let configuration = CommandConfiguration(abstract: "Subscribe a URL; prints its id and signing secret (shown once).")
            @OptionGroup var options: Options
            @Argument(help: "The endpoint: https://… (or http://).") var url: String
            @Option(name: .customLong("circle"), help: "Only this circle's entries (default: every circle).") var circle: String?
            @Option(name: .customLong("event"), help: "post, edit, delete, reaction, member or mention (mention: needs --bot; repeat for several; default: all).") var events: [String] = []
            @Option(help: "A bot account: the endpoint's JSON replies ({\"text\": …}) become its posts.") var bot: String?

            func validate() throws {
                for event in self.events where !["post", "edit", "delete", "reaction", "member", "mention"].contains(event) {
                    throw ValidationError("--event is post, edit, delete, reaction, member or mention, not \"\(event)\"")
                }
            }

            func run() async throws {
                try await self.options.perform("webhook add") { token in
                    let made = try await CircleClient.createWebhook(
                        .init(url: self.url, circle: self.circle, events: self.events.isEmpty ? nil : self.events, bot: self.bot),
                        token: token,
                        server: self.options.server
                    )
                    Console.line("\(made.id)  \(made.secret ?? "")")
                }
            }
        }

        struct List: AsyncParsableCommand {
            static let configuration = CommandConfiguration(abstract: "List subscriptions: id, state, circle, events, deliveries, URL.")
            @OptionGroup var options: Options

            func run() async throws {
                try await self.options.perform("webhook list") { token in
                    for hook in try await CircleClient.webhooks(token: token, server: self.options.server) {
                        let counts = ["pending", "delivered", "failed"].map { "\(hook.deliveries[$0] ?? 0) \($0)" }.joined(separator: ", ")
                        let state = hook.status == "active" ? "active" : "disabled (\(hook.disabledReason ?? "by an admin"))"
                        Console.line("\(hook.id)  \(state)  \(hook.circle ?? "every circle")  \(hook.events.joined(separator: ","))  \(counts)  \(hook.url)")
                    }
                }
            }
        }

        struct Enable: AsyncParsableCommand {
            static let configuration = CommandConfiguration(abstract: "Enable a subscription: its waiting deliveries go out, in order.")
            @OptionGroup var options: Options
            @Argument(help: "The subscription's id.") var id: String

            func run() async throws {
                try await self.options.perform("webhook enable") { token in
                    _ = try await CircleClient.setWebhook(id: self.id, enabled: true, token: token, server: self.options.server)
                    Console.line("enabled \(self.id)")
                }
            }
        }

        struct Disable: AsyncParsableCommand {
            static let configuration = CommandConfiguration(abstract: "Disable a subscription: deliveries are recorded and wait.")
            @OptionGroup var options: Options
            @Argument(help: "The subscription's id.") var id: String

            func run() async throws {
                try await self.options.perform("webhook disable") { token in
                    _ = try await CircleClient.setWebhook(id: self.id, enabled: false, token: token, server: self.options.server)
                    Console.line("disabled \(self.id)")
                }
            }
        }

        struct Rotate: AsyncParsableCommand {
            static let configuration = CommandConfiguration(abstract: "Make a new signing secret and print it; the previous one keeps signing until the next rotation.")
            @OptionGroup var options: Options
            @Argument(help: "The subscription's id.") var id: String
            @Flag(help: "Stop signing with the previous secret at once.") var dropPrevious = false

            func run() async throws {
                try await self.options.perform("webhook rotate") { token in
                    let rotated = try await CircleClient.rotateWebhookSecret(id: self.id, keepPrevious: !self.dropPrevious, token: token, server: self.options.server)
                    Console.line(rotated.secret ?? "")
                }
            }
        }

        struct Remove: AsyncParsableCommand {
            static let configuration = CommandConfiguration(abstract: "Remove a subscription and its deliveries.")
            @OptionGroup var options: Options
            @Argument(help: "The subscription's id.") var id: String

            func run() async throws {
                try await self.options.perform("webhook remove") { token in
                    try await CircleClient.deleteWebhook(id: self.id, token: token, server: self.options.server)
                    Console.line("removed \(self.id)")
                }
            }
        }

        struct Deliveries: AsyncParsableCommand {
            static let configuration = CommandConfiguration(abstract: "A subscription's newest deliveries: id, circle/seq, event, state, attempts, last answer.")
            @OptionGroup var options: Options
            @Argument(help: "The subscription's id.") var id: String
            @Option(help: "How many, 1 to 200.") var limit = 50

            func validate() throws {
                try OptionRanges.check("--limit", self.limit, 1...200)
            }

            func run() async throws {
                try await self.options.perform("webhook deliveries") { token in
                    for delivery in try await CircleClient.webhookDeliveries(id: self.id, limit: self.limit, token: token, server: self.options.server) {
                        let last = delivery.lastError ?? delivery.lastStatus.map { "answered \($0)" } ?? "not tried yet"
                        Console.line("\(delivery.id)  \(delivery.circle)/\(delivery.seq)  \(delivery.event)  \(delivery.status)  \(delivery.attempts) attempts  \(last)")
                    }
                }
            }
        }

        struct Retry: AsyncParsableCommand {
            static let configuration = CommandConfiguration(abstract: "Send a failed delivery again (enable its subscription too, or it waits).")
            @OptionGroup var options: Options
            @Argument(help: "The subscription's id.") var id: String
            @Argument(help: "The delivery's id (msg_…).") var delivery: String

            func run() async throws {
                try await self.options.perform("webhook retry") { token in
                    try await CircleClient.retryWebhookDelivery(id: self.id, delivery: self.delivery, token: token, server: self.options.server)
                    Console.line("retrying \(self.delivery)")
                }
            }
        }
    }
}
