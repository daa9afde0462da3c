import ArgumentParser
import CircleClient
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
        subcommands: [Create.self, List.self, AddMember.self, RemoveMember.self, SystemEntries.self]
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
