import ArgumentParser
import CircleClient
import CircleWire
import Foundation

struct CirclesCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "circle",
        abstract: "Create and list circles, and manage members of private ones.",
        discussion: """
            Exit status (every subcommand): 0 done; 1 the server refused (the name is taken, \
            no such circle, not the owner, …); 2 the server could not be reached; 4 the token \
            was refused, or none could be made; 64 usage.

            Examples:
              circle circle create team --private --user alice
              circle circle add-member team bob --user alice
              circle circle list --user bob
            """,
        subcommands: [Create.self, List.self, AddMember.self, RemoveMember.self, Retention.self, SystemEntries.self]
    )

    /// Runs the SDK calls of a subcommand; a refusal prints `refusal(server's message)` and exits 1.
    static func call(
        _ command: String,
        _ client: ClientOptions,
        circle: String? = nil,
        refusal: @escaping @Sendable (String) -> String,
        _ body: @escaping @Sendable (CircleClient) async throws -> Void
    ) async throws {
        try await reportingFailures("circle \(command)", verbose: client.verbose, context: client.context(circle: circle)) {
            do {
                try await client.withAPI(body)
            } catch let error as CircleClientError where error.httpStatus != nil {
                throw CLIFailure(.refused, refusal(error.message), detail: "HTTP \(error.httpStatus ?? 0): \(error.code)")
            }
        }
    }

    struct Create: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Create a circle (you become its owner).",
            discussion: """
                Exit status: 0 created; 1 refused (the name is taken or not valid); 2 the server \
                could not be reached; 4 the token was refused; 64 usage.

                Examples:
                  circle circle create general --user alice
                  circle circle create team --private --token "$TOKEN"
                """
        )
        @Argument(help: "Name: 1–64 characters a–z, 0–9, . _ -") var name: String
        @Flag(help: "Members only.") var `private` = false
        @OptionGroup var client: ClientOptions

        func run() async throws {
            let (name, isPrivate) = (self.name, self.private)
            try await CirclesCommand.call("create", self.client, circle: name, refusal: { "\"\(name)\" was not created: \($0)" }) { api in
                let circle = try await api.createCircle(name, private: isPrivate)
                Console.line("created \(circle.private ? "private" : "public") circle \(circle.name)")
            }
        }
    }

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "List the circles you can see.",
            discussion: """
                Prints a line per circle: name, public or private, owner, the newest entry's number \
                ("newest #N"; edits, deletes and reactions take numbers too), and your unread posts \
                (by others, not deleted, after your read marker; "1000+" from 1,000 on), tab-separated; \
                a read-only circle (only its owner, admins and apps post there) ends its line with \
                "read-only".

                Exit status: 0 listed; 2 the server could not be reached; 4 the token was refused; 64 usage.

                Example:
                  circle circle list --user bob
                """
        )
        @OptionGroup var client: ClientOptions

        func run() async throws {
            try await CirclesCommand.call("list", self.client, refusal: { "the server did not list the circles: \($0)" }) { api in
                for circle in try await api.circles() {
                    Console.line(
                        "\(circle.name)\t\(circle.private ? "private" : "public")\towner \(circle.owner)\tnewest #\(circle.lastSeq)\t\(circle.unreadText) unread"
                            + (circle.readOnly ? "\tread-only" : "")
                    )
                }
            }
        }
    }

    struct AddMember: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "add-member",
            abstract: "Add a member to a private circle you own.",
            discussion: """
                Exit status: 0 added; 1 refused (no such circle, or not yours); 2 the server could \
                not be reached; 4 the token was refused; 64 usage.

                Example:
                  circle circle add-member team bob --user alice
                """
        )
        @Argument(help: "The circle.") var circle: String
        @Argument(help: "The user to add.") var user: String
        @OptionGroup var client: ClientOptions

        func run() async throws {
            let (circle, user) = (self.circle, self.user)
            try await CirclesCommand.call("add-member", self.client, circle: circle, refusal: { "\(user) was not added to \(circle): \($0)" }) { api in
                try await api.addMember(user, to: circle)
                Console.line("\(user) is a member of \(circle)")
            }
        }
    }

    struct RemoveMember: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "remove-member",
            abstract: "Remove a member (owners; or yourself).",
            discussion: """
                Exit status: 0 removed; 1 refused (no such circle or member, or not yours); 2 the \
                server could not be reached; 4 the token was refused; 64 usage.

                Example:
                  circle circle remove-member team bob --user alice
                """
        )
        @Argument(help: "The circle.") var circle: String
        @Argument(help: "The user to remove.") var user: String
        @OptionGroup var client: ClientOptions

        func run() async throws {
            let (circle, user) = (self.circle, self.user)
            try await CirclesCommand.call("remove-member", self.client, circle: circle, refusal: { "\(user) was not removed from \(circle): \($0)" }) { api in
                try await api.removeMember(user, from: circle)
                Console.line("\(user) is no longer a member of \(circle)")
            }
        }
    }

    struct Retention: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Show or set what a circle keeps (its owner or an admin sets it).",
            discussion: """
                Without options, prints the circle's policy. With --days or --keep (or both), \
                entries older than that many days, and beyond the newest that many, are removed \
                in the background (posts, changes, their photos); what remains keeps its numbers. \
                --off keeps everything again. Prints "keeps everything" or "keeps N days" and/or \
                "keeps the newest N entries".

                Exit status: 0 done; 1 refused (no such circle, not yours, a value out of range); \
                2 the server could not be reached; 4 the token was refused; 64 usage.

                Examples:
                  circle circle retention general --days 90 --user alice
                  circle circle retention support --keep 10000 --user alice
                  circle circle retention general --off --user alice
                """
        )
        @Argument(help: "The circle.") var circle: String
        @Option(help: "Remove entries older than this many days (1–36500).") var days: Int64?
        @Option(help: "Keep only the newest this many entries (1–1000000000).") var keep: Int64?
        @Flag(help: "Keep everything (remove the policy).") var off = false
        @OptionGroup var client: ClientOptions

        func validate() throws {
            if self.off, self.days != nil || self.keep != nil { throw ValidationError("--off goes without --days and --keep") }
        }

        func run() async throws {
            let (circle, days, keep, off) = (self.circle, self.days, self.keep, self.off)
            try await CirclesCommand.call("retention", self.client, circle: circle, refusal: { "the retention of \(circle) was not changed: \($0)" }) { api in
                let setting: HTTPAPI.RetentionSetting
                if off || days != nil || keep != nil {
                    setting = try await api.setRetention(days: days, keep: keep, in: circle)
                } else {
                    setting = try await api.retention(of: circle)
                }
                Console.line("\(circle) \(Self.describe(setting))")
            }
        }

        static func describe(_ setting: HTTPAPI.RetentionSetting) -> String {
            var parts: [String] = []
            if let days = setting.days { parts.append("keeps \(days) day\(days == 1 ? "" : "s")") }
            if let keep = setting.keep { parts.append("keeps the newest \(keep) entr\(keep == 1 ? "y" : "ies")") }
            return parts.isEmpty ? "keeps everything" : parts.joined(separator: " and ")
        }
    }

    struct SystemEntries: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "system-entries",
            abstract: "Turn a circle's system entries (members added, removed, left) on or off.",
            discussion: """
                Exit status: 0 done; 1 refused (no such circle, or not yours); 2 the server could \
                not be reached; 4 the token was refused; 64 usage.

                Example:
                  circle circle system-entries team off --user alice
                """
        )
        @Argument(help: "The circle.") var circle: String
        @Argument(help: "on or off.") var setting: String
        @OptionGroup var client: ClientOptions

        func validate() throws {
            guard ["on", "off"].contains(self.setting) else { throw ValidationError("the setting is on or off, not \"\(self.setting)\"") }
        }

        func run() async throws {
            let (circle, enabled) = (self.circle, self.setting == "on")
            try await CirclesCommand.call("system-entries", self.client, circle: circle, refusal: { "system entries of \(circle) were not changed: \($0)" }) { api in
                let changed = try await api.setSystemEntries(enabled, in: circle)
                Console.line("system entries of \(circle): \(changed.systemEntries ? "on" : "off")")
            }
        }
    }
}
