import ArgumentParser
import CircleServer
import Foundation

/// `circle config`: the configuration file of `circle serve --config` (ServeSettings).
struct ConfigCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "config",
        abstract: "Check a configuration file for circle serve --config.",
        subcommands: [ConfigCheckCommand.self, ConfigKeysCommand.self]
    )
}

struct ConfigCheckCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "check",
        abstract: "Check a configuration file: unknown keys, wrong types, values out of range.",
        discussion: """
            The file is a JSON object whose keys are circle serve's options without -- \
            (docs/OPERATIONS.md, "Configuration file"). Prints "ok" for a good file; otherwise one \
            line per problem on stderr, FILE:LINE: message, with "did you mean" for a key close \
            to a real one. Values are checked together, as circle serve takes them; a problem \
            no entry causes (an invalid CIRCLE_* variable) is FILE: message.

            Exit status: 0 the file is good; 5 it cannot be opened or read (missing, a \
            directory, no permission); 64 anything else (malformed JSON, not UTF-8, more than \
            1 MiB or nested more than 16 deep, unknown keys, bad values) — the same status \
            circle serve --config exits with, with the same messages.
            """
    )

    @Argument(help: ArgumentHelp("The configuration file.", valueName: "file"))
    var file: String

    func run() throws {
        switch ServeSettings.load(self.file) {
        case .failure(let failure):
            Console.err("\(failure.problem.shown(file: self.file))\n")
            throw ExitCode(failure.unreadable ? ExitStatus.local : ExitStatus.usage)
        case .success(let settings):
            let problems = ServeSettings.check(settings)
            guard problems.isEmpty else {
                for problem in problems { Console.err("\(problem.shown(file: self.file))\n") }
                throw ExitCode(ExitStatus.usage)
            }
            print("ok")
        }
    }
}

/// The table of settings in docs/OPERATIONS.md ("Configuration file") is this command's output;
/// a test keeps the two the same.
struct ConfigKeysCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "keys",
        abstract: "List the settings a configuration file may set, as a Markdown table."
    )

    func run() {
        print("| key | takes | environment | on SIGHUP |")
        print("|---|---|---|---|")
        for setting in ServeSettings.all {
            let takes = setting.isFlag ? "true or false" : setting.isRepeating ? "a string or a list of strings" : "a string or a number"
            let reload = setting.isReloadable ? "reloaded" : "needs a restart"
            print("| `\(setting.key)` | \(takes) | \(setting.environment.map { "`\($0)`" } ?? "") | \(reload) |")
        }
    }
}
