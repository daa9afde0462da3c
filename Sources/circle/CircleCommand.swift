import ArgumentParser
import CircleServer
import Foundation

/// The `circle` command-line tool; each job is a subcommand.
@main
struct CircleCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "circle",
        abstract: "Circle: a self-hostable realtime chat system.",
        discussion: """
            Exit status, the same for every command:
              0    done
              1    the server refused what was asked (a post, a circle that does
                   not exist, a private circle, a file that is not a photo), or
                   it did not answer in time
              2    the server could not be reached (nothing listening, no
                   answer, TLS failed)
              3    an open connection was lost (circle ws)
              4    the token was refused, or no token could be made
              5    a local problem: a file cannot be read or written, the port
                   is in use, the --data directory cannot be used
              6    circle serve: another server serves the --data directory
              64   usage: an unknown command or option, a missing argument,
                   a number outside its range
              130  interrupted (circle ws, twice Ctrl-C)
            When stdout is closed early (`circle tail … | head -1`), a command
            stops quietly, as if killed by SIGPIPE (141 in the shell).
            --verbose adds the details of a failure.

            Examples:
              circle serve
              circle circle create general --user alice
              circle chat general --user alice
              circle send general "hello" --user bob
              circle tail general --follow --json --user carol | jq .text
              circle search deploy --user alice
            """,
        version: CircleVersion.current,
        subcommands: [
            ServeCommand.self, TokenCommand.self, ChatCommand.self, SendCommand.self, TailCommand.self, SearchCommand.self, CirclesCommand.self,
            UploadCommand.self,
            DownloadCommand.self, WSCommand.self, BenchCommand.self, DiscoverCommand.self, LoginCommand.self, LogoutCommand.self,
            AdminCommand.self, ConfigCommand.self, BackupCommand.self, RestoreCommand.self, ExportCommand.self, ImportCommand.self,
        ]
    )

    static func main() async {
        // `circle serve --config FILE`: the file's settings become arguments (ServeSettings).
        let arguments = ServeSettings.expandServeArguments(Array(CommandLine.arguments.dropFirst()))
        if let mistyped = arguments.first, let message = Self.unknownCommand(mistyped) {
            Console.err("circle: \(message)\n")
            Foundation.exit(ExitStatus.usage)
        }
        do {
            var command = try Self.parseAsRoot(arguments)
            if var command = command as? any AsyncParsableCommand {
                try await command.run()
            } else {
                try command.run()
            }
        } catch {
            Self.exit(withError: error)
        }
    }

    /// A sentence for a first argument that is no subcommand (and no option), with the nearest
    /// subcommand names; `nil` when it is fine.
    static func unknownCommand(_ word: String) -> String? {
        guard !word.hasPrefix("-"), word != "help" else { return nil }
        let names = Self.configuration.subcommands.map { $0._commandName }
        guard !names.contains(word) else { return nil }
        let allowed = word.count >= 5 ? 2 : 1
        let near = names.filter { Self.distance($0, word) <= allowed || ($0.hasPrefix(word) && word.count >= 2) }
        let suggestion = near.isEmpty ? "" : " — did you mean \(near.map { "`circle \($0)`" }.joined(separator: " or "))?"
        return "\"\(word)\" is not a circle command\(suggestion) (`circle --help` lists them)"
    }

    /// The edit distance of two words: insertions, deletions, substitutions and swaps of two
    /// neighbouring letters (`chta` is one edit from `chat`).
    static func distance(_ a: String, _ b: String) -> Int {
        let a = Array(a)
        let b = Array(b)
        guard !a.isEmpty else { return b.count }
        guard !b.isEmpty else { return a.count }
        var table = Array(repeating: Array(repeating: 0, count: b.count + 1), count: a.count + 1)
        for i in 0...a.count { table[i][0] = i }
        for j in 0...b.count { table[0][j] = j }
        for i in 1...a.count {
            for j in 1...b.count {
                let cost = a[i - 1] == b[j - 1] ? 0 : 1
                table[i][j] = min(table[i - 1][j] + 1, table[i][j - 1] + 1, table[i - 1][j - 1] + cost)
                if i > 1, j > 1, a[i - 1] == b[j - 2], a[i - 2] == b[j - 1] {
                    table[i][j] = min(table[i][j], table[i - 2][j - 2] + 1)
                }
            }
        }
        return table[a.count][b.count]
    }
}
