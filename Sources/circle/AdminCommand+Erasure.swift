import ArgumentParser
import CircleClient
import CircleWire
import Foundation

extension AdminCommand {
    /// `circle admin erase-user NAME` (docs/CLI.md, docs/OPERATIONS.md "Erasing a person").
    struct EraseUser: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "erase-user",
            abstract: "Erase a person's data: their posts become tombstones, their reactions, sessions, passkeys, uploads and photos go; the account is anonymised (or removed).",
            discussion: "Recorded in the audit log (circle admin audit). It cannot be undone."
        )
        @OptionGroup var options: Options
        @Argument(help: "The user.") var user: String
        @Flag(help: "Remove the account instead of anonymising it (its name can then be taken again).") var removeAccount = false

        func run() async throws {
            try await self.options.perform("erase-user") { token in
                let erased = try await CircleClient.eraseUser(self.user, removeAccount: self.removeAccount, token: token, server: self.options.server)
                Console.line(
                    "erased \(erased.user): \(erased.posts) posts made tombstones, \(erased.reactions) reactions taken back, left \(erased.memberships) circles, \(erased.media) photos and \(erased.uploads) uploads deleted, account \(erased.account)"
                )
            }
        }
    }

    /// `circle admin audit`.
    struct Audit: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "List the audit log, newest first: id, time, who, what, whom, details.")
        @OptionGroup var options: Options
        @Option(help: "Entries, 1 to 200.") var limit = 50
        @Option(help: "Only entries with an id below this one (the next page).") var before: Int64?

        func validate() throws {
            try OptionRanges.check("--limit", self.limit, 1...200)
        }

        func run() async throws {
            try await self.options.perform("audit") { token in
                let log = try await CircleClient.auditLog(before: self.before, limit: self.limit, token: token, server: self.options.server)
                for entry in log.entries {
                    let time = ISO8601DateFormatter().string(from: Date(timeIntervalSince1970: Double(entry.time) / 1000))
                    Console.line("\(entry.id)  \(time)  \(entry.actor)  \(entry.action)  \(entry.subject)  \(entry.detail)")
                }
                if let next = log.next { Console.line("more: --before \(next)") }
            }
        }
    }
}
