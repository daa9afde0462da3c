import ArgumentParser
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
        subcommands: [Create.self, List.self, AddMember.self, RemoveMember.self]
    )

    /// Runs one API call of a subcommand; a refusal prints the server's reason and exits 1.
    static func call(
        _ command: String,
        _ client: ClientOptions,
        circle: String? = nil,
        _ body: () async throws -> Void
    ) async throws {
        try await reportingFailures("circle \(command)", verbose: client.verbose, context: client.context(circle: circle), body)
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
            try await CirclesCommand.call("create", self.client, circle: self.name) {
                let (status, body) = try await self.client.http("POST", "/v1/circles", json: #"{"name":"\#(self.name)","private":\#(self.private)}"#)
                guard status == 201 else {
                    throw CLIFailure(.refused, "\"\(self.name)\" was not created: \(apiErrorMessage(body))", detail: "HTTP \(status)")
                }
                Console.line("created \(self.private ? "private" : "public") circle \(self.name)")
            }
        }
    }

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "List the circles you can see.",
            discussion: """
                Prints a line per circle: name, public or private, owner, number of posts (tab-separated).

                Exit status: 0 listed; 2 the server could not be reached; 4 the token was refused; 64 usage.

                Example:
                  circle circle list --user bob
                """
        )
        @OptionGroup var client: ClientOptions

        func run() async throws {
            try await CirclesCommand.call("list", self.client) {
                let (status, body) = try await self.client.http("GET", "/v1/circles")
                guard status == 200, let object = try? JSONSerialization.jsonObject(with: body) as? [String: Any],
                    let circles = object["circles"] as? [[String: Any]]
                else {
                    throw CLIFailure(.refused, "the server did not list the circles: \(apiErrorMessage(body))", detail: "HTTP \(status)")
                }
                for circle in circles {
                    let name = circle["name"] as? String ?? "?"
                    let isPrivate = circle["private"] as? Bool ?? false
                    let lastSeq = circle["lastSeq"] as? Int ?? 0
                    Console.line("\(name)\t\(isPrivate ? "private" : "public")\towner \(circle["owner"] as? String ?? "?")\t\(lastSeq) posts")
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
            try await CirclesCommand.call("add-member", self.client, circle: self.circle) {
                let (status, body) = try await self.client.http("POST", "/v1/circles/\(self.circle)/members", json: #"{"user":"\#(self.user)"}"#)
                guard status == 200 else {
                    throw CLIFailure(.refused, "\(self.user) was not added to \(self.circle): \(apiErrorMessage(body))", detail: "HTTP \(status)")
                }
                Console.line("\(self.user) is a member of \(self.circle)")
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
            try await CirclesCommand.call("remove-member", self.client, circle: self.circle) {
                let (status, body) = try await self.client.http("DELETE", "/v1/circles/\(self.circle)/members/\(self.user)")
                guard status == 200 else {
                    throw CLIFailure(.refused, "\(self.user) was not removed from \(self.circle): \(apiErrorMessage(body))", detail: "HTTP \(status)")
                }
                Console.line("\(self.user) is no longer a member of \(self.circle)")
            }
        }
    }
}
