import ArgumentParser
import CircleServer
import Foundation

/// The settings a configuration file may set (`circle serve --config FILE`, `circle config
/// check FILE`; docs/OPERATIONS.md, "Configuration file"): exactly `circle serve`'s options,
/// each under its flag's name without `--` (`"max-post-bytes": 16384`). The list is not written
/// down here: it is read from the options' own declarations (ArgumentParser's description of
/// ``ServeCommand``), and a value is checked by parsing it as that option, so a file and a
/// command line take the same values with the same messages and ranges.
///
/// Precedence: the command line, then the environment (`CIRCLE_*`, the variable an option's
/// help names after "Env:"), then the file, then the default.
enum ServeSettings {
    /// One setting: a `circle serve` option.
    struct Setting: Sendable, Equatable {
        /// The option's long name without `--`, the key in a file.
        var key: String
        /// Its short name (`v` for `-v`), if any.
        var short: String?
        /// A flag takes `true` or `false`; an option a value.
        var isFlag: Bool
        /// May be given more than once (a list in a file).
        var isRepeating: Bool
        /// The variable that sets it too (from its help's "Env: CIRCLE_…").
        var environment: String?
        /// The option's help.
        var help: String

        /// Takes effect on SIGHUP without a restart (``ServeSettings/reloadable``).
        var isReloadable: Bool { ServeSettings.reloadable.contains(self.key) }
    }

    /// The settings a running server changes on SIGHUP (``ConfigurationReloader``): the log
    /// level, the CORS origin, the limits and timeouts the server reads when a connection opens or
    /// when it uses them, and the webhook delivery settings. Every other one "needs a restart":
    /// it was used to build something that lives as long as the server (the listener, the
    /// store, the token keys, the admission limits, the dispatchers' pools).
    static let reloadable: Set<String> = [
        "log-level", "cors-origin",
        "max-connections-per-user", "presence-limit",
        "max-post-bytes", "max-message-bytes", "posts-per-second", "post-burst", "outbound-queue-bytes", "idle-timeout",
        "max-media-bytes", "upload-expiry",
        "request-head-timeout", "request-body-timeout", "write-stall-timeout",
        "webhook-timeout", "webhook-retry-after", "webhook-give-up-after",
    ]

    /// `circle serve` options that are not settings.
    private static let excluded: Set<String> = ["config", "help", "version"]

    /// Every setting, in `circle serve --help`'s order.
    static let all: [Setting] = {
        struct Dump: Decodable {
            struct Command: Decodable { var arguments: [Argument]? }
            struct Argument: Decodable {
                struct Name: Decodable {
                    var kind: String
                    var name: String
                }
                var kind: String
                var names: [Name]?
                var isRepeating: Bool
                var abstract: String?
            }
            var command: Command
        }
        guard let dump = try? JSONDecoder().decode(Dump.self, from: Data(ServeCommand._dumpHelp().utf8)) else {
            preconditionFailure("ArgumentParser's description of circle serve cannot be read")
        }
        return (dump.command.arguments ?? []).compactMap { argument in
            guard argument.kind != "positional", let key = argument.names?.first(where: { $0.kind == "long" })?.name, !Self.excluded.contains(key) else {
                return nil
            }
            let help = argument.abstract ?? ""
            let environment = help.range(of: #"Env: CIRCLE_[A-Z_]+"#, options: .regularExpression).map { String(help[$0].dropFirst("Env: ".count)) }
            return Setting(
                key: key,
                short: argument.names?.first(where: { $0.kind == "short" })?.name,
                isFlag: argument.kind == "flag",
                isRepeating: argument.isRepeating,
                environment: environment,
                help: help
            )
        }
    }()

    static func setting(_ key: String) -> Setting? { Self.all.first { $0.key == key } }

    /// A complaint about a file, with its line (0: the file as a whole or settings together).
    struct Problem: Error, Equatable, Sendable {
        var line: Int
        var message: String

        /// `FILE:LINE: message`, or `FILE: message` without a line.
        func shown(file: String) -> String { self.line > 0 ? "\(file):\(self.line): \(self.message)" : "\(file): \(self.message)" }
    }

    /// Why a file cannot be used at all.
    struct LoadFailure: Error {
        var problem: Problem
        /// It cannot be opened or read (exit 5), rather than having wrong contents (64).
        var unreadable: Bool
    }

    /// The file at `path`, or the reason it cannot be used; `unreadable` tells a file that cannot
    /// be opened or read (exit 5) from one whose contents are wrong (64).
    static func load(_ path: String) -> Result<SettingsFile, LoadFailure> {
        do {
            return .success(try SettingsFile.read(path: path))
        } catch {
            let unreadable = error.message.hasPrefix("cannot") || error.message.contains("directory") || error.message.contains("regular file")
            return .failure(LoadFailure(problem: Problem(line: error.line, message: error.message), unreadable: unreadable))
        }
    }

    /// The arguments an entry stands for (`["--port=9000"]`), or what is wrong with it alone.
    static func arguments(for entry: SettingsFile.Entry) -> Result<[String], Problem> {
        func problem(_ message: String) -> Result<[String], Problem> { .failure(Problem(line: entry.line, message: message)) }
        guard let setting = Self.setting(entry.key) else {
            let near = Self.all.map(\.key).filter { CircleCommand.distance($0, entry.key) <= max(2, entry.key.count / 4) }
                .sorted { CircleCommand.distance($0, entry.key) < CircleCommand.distance($1, entry.key) }
            let hint = near.first.map { " — did you mean \"\($0)\"?" } ?? ""
            return problem("unknown setting \"\(entry.key)\"\(hint) (the settings are circle serve's options without --)")
        }
        let flag = "--\(setting.key)"
        func text(_ value: SettingsFile.Value) -> String? {
            switch value {
            case .string(let text): text
            case .number(let text): text
            default: nil
            }
        }
        switch entry.value {
        case .bool(let on) where setting.isFlag:
            return .success(on ? [flag] : [])
        case _ where setting.isFlag:
            return problem("\"\(setting.key)\" takes true or false, not \(entry.value.typeName)")
        case .bool(let on):
            // An option that may stand alone (--announce) takes true too.
            do {
                _ = try ServeCommand.parse([flag])
            } catch where ServeCommand.message(for: error).contains("Missing value") {
                return problem("\"\(setting.key)\" takes a string or a number, not a boolean")
            } catch {
                // Refused for another reason (--announce without --host 0.0.0.0): check() says why.
            }
            return .success(on ? [flag] : [])
        case .null:
            return problem("\"\(setting.key)\" is null; leave the key out for the default")
        case .object:
            return problem("\"\(setting.key)\" is an object; settings are not nested (circle serve's options without --)")
        case .array(let values):
            guard setting.isRepeating else {
                return problem("\"\(setting.key)\" takes one value, not an array")
            }
            var arguments: [String] = []
            for value in values {
                guard let text = text(value) else {
                    return problem("\"\(setting.key)\" takes a list of strings, not one with \(value.typeName)")
                }
                arguments.append("\(flag)=\(text)")
            }
            return .success(arguments)
        case .string, .number:
            return .success(["\(flag)=\(text(entry.value)!)"])
        }
    }

    /// Every problem of a file, in the file's order: unknown keys (with the nearest real one)
    /// and wrong types, entry by entry; then the values `circle serve` refuses, with the same
    /// message as the option's, each at the line of the entry at fault. Values are checked
    /// together, as serve takes them (`announce` needs `host`, `tls-cert` needs `tls-key`): the
    /// entry at fault is the one without which serve's complaint changes; when none is (an
    /// invalid `CIRCLE_*` variable), the complaint has no line.
    static func check(_ file: SettingsFile) -> [Problem] {
        var problems: [Problem] = []
        var remaining: [(line: Int, key: String, arguments: [String])] = []
        for entry in file.entries {
            switch Self.arguments(for: entry) {
            case .failure(let problem):
                problems.append(problem)
            case .success(let arguments):
                remaining.append((entry.line, entry.key, arguments))
            }
        }
        while let message = Self.refusal(remaining.flatMap(\.arguments)) {
            // The entries the message names first: usually one parse finds the one at fault.
            let named = remaining.indices.filter { message.contains("--\(remaining[$0].key)") }
            let order = named + remaining.indices.filter { !named.contains($0) }
            let culprit = order.first { index in
                var without = remaining
                without.remove(at: index)
                return Self.refusal(without.flatMap(\.arguments)) != message
            }
            guard let culprit else {
                problems.append(Problem(line: 0, message: message))
                break
            }
            problems.append(Problem(line: remaining[culprit].line, message: message))
            remaining.remove(at: culprit)
        }
        return problems.sorted { ($0.line == 0 ? Int.max : $0.line) < ($1.line == 0 ? Int.max : $1.line) }
    }

    /// Why `circle serve` would refuse these arguments (before it touches anything), or `nil`.
    static func refusal(_ arguments: [String]) -> String? {
        do {
            let command = try ServeCommand.parse(arguments)
            _ = try command.resolve()
            return nil
        } catch {
            return ServeCommand.message(for: error)
        }
    }

    /// The arguments of `circle serve` with a file: the file's entries that neither the command
    /// line nor the environment sets, then the command line (which wins).
    static func merged(file: SettingsFile, commandLine: [String], environment: [String: String]) -> [String] {
        Self.fileArguments(file: file, commandLine: commandLine, environment: environment).flatMap(\.arguments) + commandLine
    }

    /// The file's entries that take effect (the command line and the environment set the others),
    /// with their arguments; entries with a problem are left out (``check(_:)`` reports them).
    static func fileArguments(file: SettingsFile, commandLine: [String], environment: [String: String]) -> [(key: String, arguments: [String])] {
        file.entries.compactMap { entry in
            guard let setting = Self.setting(entry.key), case .success(let arguments) = Self.arguments(for: entry) else { return nil }
            if Self.commandLine(commandLine, sets: setting) { return nil }
            if let variable = setting.environment, let value = environment[variable], !value.isEmpty { return nil }
            return (setting.key, arguments)
        }
    }

    /// Whether `arguments` give `setting` (`--key`, `--key=…`, or its short name).
    static func commandLine(_ arguments: [String], sets setting: Setting) -> Bool {
        arguments.prefix { $0 != "--" }.contains { argument in
            argument == "--\(setting.key)" || argument.hasPrefix("--\(setting.key)=")
                || (setting.short.map { argument.hasPrefix("-") && !argument.hasPrefix("--") && argument.dropFirst().contains(Character($0)) } ?? false)
        }
    }

    /// The value of `--config` in `circle serve`'s arguments, if given.
    static func configPath(in arguments: [String]) -> String? {
        var iterator = arguments.prefix { $0 != "--" }.makeIterator()
        var path: String?
        while let argument = iterator.next() {
            if argument == "--config" {
                path = iterator.next()
            } else if argument.hasPrefix("--config=") {
                path = String(argument.dropFirst("--config=".count))
            }
        }
        return path
    }

    /// `circle serve`'s arguments with its `--config` file's settings merged in; with a file that
    /// cannot be used, its problems on stderr and exit 5 (cannot be read) or 64 (anything else),
    /// before anything is written.
    static func expandServeArguments(_ arguments: [String]) -> [String] {
        guard arguments.first == "serve", let path = Self.configPath(in: Array(arguments.dropFirst())) else { return arguments }
        let commandLine = Array(arguments.dropFirst())
        switch Self.load(path) {
        case .failure(let failure):
            Console.err("circle serve: \(failure.problem.shown(file: path))\n")
            Foundation.exit(failure.unreadable ? ExitStatus.local : ExitStatus.usage)
        case .success(let file):
            let problems = Self.check(file)
            guard problems.isEmpty else {
                for problem in problems { Console.err("circle serve: \(problem.shown(file: path))\n") }
                Foundation.exit(ExitStatus.usage)
            }
            return ["serve"] + Self.merged(file: file, commandLine: commandLine, environment: ProcessInfo.processInfo.environment)
        }
    }
}
