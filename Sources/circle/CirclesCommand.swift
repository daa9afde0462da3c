import ArgumentParser
import Foundation

struct CirclesCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "circle",
        abstract: "Create and list circles, and manage members of private ones.",
        subcommands: [Create.self, List.self, AddMember.self, RemoveMember.self]
    )

    struct Create: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Create a circle (you become its owner).")
        @Argument(help: "Name: 1–64 characters a–z, 0–9, . _ -") var name: String
        @Flag(help: "Members only.") var `private` = false
        @OptionGroup var client: ClientOptions

        func run() async throws {
            let (status, body) = try await self.client.http("POST", "/v1/circles", json: #"{"name":"\#(self.name)","private":\#(self.private)}"#)
            guard status == 201 else { exitWithFailure("circle create", CLIFailure(apiErrorMessage(body), exitCode: 1)) }
            print("created \(self.private ? "private" : "public") circle \(self.name)")
        }
    }

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "List the circles you can see.")
        @OptionGroup var client: ClientOptions

        func run() async throws {
            let (status, body) = try await self.client.http("GET", "/v1/circles")
            guard status == 200, let object = try? JSONSerialization.jsonObject(with: body) as? [String: Any],
                let circles = object["circles"] as? [[String: Any]]
            else {
                exitWithFailure("circle list", CLIFailure(apiErrorMessage(body), exitCode: 1))
            }
            for circle in circles {
                let name = circle["name"] as? String ?? "?"
                let isPrivate = circle["private"] as? Bool ?? false
                let lastSeq = circle["lastSeq"] as? Int ?? 0
                print("\(name)\t\(isPrivate ? "private" : "public")\towner \(circle["owner"] as? String ?? "?")\t\(lastSeq) posts")
            }
        }
    }

    struct AddMember: AsyncParsableCommand {
        static let configuration = CommandConfiguration(commandName: "add-member", abstract: "Add a member to a private circle you own.")
        @Argument var circle: String
        @Argument var user: String
        @OptionGroup var client: ClientOptions

        func run() async throws {
            let (status, body) = try await self.client.http("POST", "/v1/circles/\(self.circle)/members", json: #"{"user":"\#(self.user)"}"#)
            guard status == 200 else { exitWithFailure("circle add-member", CLIFailure(apiErrorMessage(body), exitCode: 1)) }
            print("\(self.user) is a member of \(self.circle)")
        }
    }

    struct RemoveMember: AsyncParsableCommand {
        static let configuration = CommandConfiguration(commandName: "remove-member", abstract: "Remove a member (owners; or yourself).")
        @Argument var circle: String
        @Argument var user: String
        @OptionGroup var client: ClientOptions

        func run() async throws {
            let (status, body) = try await self.client.http("DELETE", "/v1/circles/\(self.circle)/members/\(self.user)")
            guard status == 200 else { exitWithFailure("circle remove-member", CLIFailure(apiErrorMessage(body), exitCode: 1)) }
            print("\(self.user) is no longer a member of \(self.circle)")
        }
    }
}
