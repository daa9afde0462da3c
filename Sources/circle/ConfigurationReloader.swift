import CircleServer
import Foundation
import Logging
import ServiceLifecycle
import UnixSignals

/// Re-reads `circle serve --config FILE` on each SIGHUP (docs/OPERATIONS.md, "Configuration
/// file"): the settings in ``ServeSettings/reloadable`` take effect at once; any other setting
/// the file changed is logged as needing a restart, by name; a file with problems is logged
/// with each of them and changes nothing. The server serves throughout.
struct ConfigurationReloader: Service {
    let path: String
    /// `circle serve`'s own arguments (which win over the file).
    let commandLine: [String]
    let server: CircleServer
    let logger: Logger
    /// SIGHUP, trapped before the server binds (its default action ends the process).
    let signals: UnixSignalsSequence

    func run() async throws {
        var running = self.fileSettings(ServeSettings.load(self.path)) ?? [:]
        for await _ in self.signals.cancelOnGracefulShutdown() {
            running = self.reload(running: running)
        }
    }

    /// The file's settings that take effect, key by key, or `nil` (logged) when it has problems.
    private func fileSettings(_ loaded: Result<SettingsFile, ServeSettings.LoadFailure>) -> [String: [String]]? {
        let file: SettingsFile
        switch loaded {
        case .failure(let failure):
            self.logger.error("configuration not reloaded", metadata: ["problem": "\(failure.problem.shown(file: self.path))"])
            return nil
        case .success(let loaded):
            file = loaded
        }
        let problems = ServeSettings.check(file)
        guard problems.isEmpty else {
            for problem in problems {
                self.logger.error("configuration not reloaded", metadata: ["problem": "\(problem.shown(file: self.path))"])
            }
            return nil
        }
        let environment = ProcessInfo.processInfo.environment
        return Dictionary(
            ServeSettings.fileArguments(file: file, commandLine: self.commandLine, environment: environment).map { ($0.key, $0.arguments) },
            uniquingKeysWith: { $1 }
        )
    }

    /// The limits of ``ServeSettings/reloadable``, from `resolved` (the others are as they were at
    /// start there too, but are copied by name so that nothing else can change by accident).
    static func apply(_ resolved: CircleServerConfiguration.Limits, to limits: inout CircleServerConfiguration.Limits) {
        limits.maxConnectionsPerUser = resolved.maxConnectionsPerUser
        limits.presenceLimit = resolved.presenceLimit
        limits.maxPostBytes = resolved.maxPostBytes
        limits.maxMessageBytes = resolved.maxMessageBytes
        limits.postsPerSecond = resolved.postsPerSecond
        limits.postBurst = resolved.postBurst
        limits.outboundQueueBytes = resolved.outboundQueueBytes
        limits.idleTimeout = resolved.idleTimeout
        limits.maxMediaBytes = resolved.maxMediaBytes
        limits.uploadExpiry = resolved.uploadExpiry
        limits.requestHeadTimeout = resolved.requestHeadTimeout
        limits.requestBodyTimeout = resolved.requestBodyTimeout
        limits.writeStallTimeout = resolved.writeStallTimeout
    }

    /// One SIGHUP: the settings now in effect from the file, key by key.
    private func reload(running: [String: [String]]) -> [String: [String]] {
        guard let wanted = self.fileSettings(ServeSettings.load(self.path)) else { return running }
        let changed = Set(running.keys).union(wanted.keys).filter { running[$0] != wanted[$0] }.sorted()
        var applied = running
        var restart: [String] = []
        for key in changed {
            if ServeSettings.setting(key)?.isReloadable == true {
                applied[key] = wanted[key]
            } else {
                restart.append(key)
            }
        }
        // The values as serve takes them: the command line over the environment over the file
        // (only its reloadable settings, the others as they were at start).
        let arguments = applied.keys.sorted().flatMap { applied[$0] ?? [] } + self.commandLine
        let command: ServeCommand
        let resolved: ServeCommand.Resolved
        do {
            command = try ServeCommand.parse(arguments)
            resolved = try command.resolve()
            var webhooks = self.server.currentConfiguration.webhooks
            try command.webhooks.apply(to: &webhooks)
            try self.server.reload { configuration in
                Self.apply(resolved.limits, to: &configuration.limits)
                configuration.webhooks = webhooks
                configuration.corsOrigin = command.corsOrigin ?? ProcessInfo.processInfo.environment["CIRCLE_CORS_ORIGIN"]
            }
        } catch {
            self.logger.error("configuration not reloaded", metadata: ["problem": "\(self.path): \(ServeCommand.message(for: error))"])
            return running
        }
        ServerLogHandler.level.withLockedValue { $0 = resolved.level }
        for key in restart {
            self.logger.warning("configuration setting needs a restart", metadata: ["setting": "\(key)", "file": "\(self.path)"])
        }
        self.logger.notice(
            "configuration reloaded",
            metadata: [
                "file": "\(self.path)",
                "changed": "\(changed.filter { !restart.contains($0) }.joined(separator: ","))",
                "log-level": "\(resolved.level)",
            ]
        )
        return applied
    }
}
