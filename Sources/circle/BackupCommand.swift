import ArgumentParser
import CircleServer
import Foundation
import Logging

/// `circle backup` and `circle restore` (docs/OPERATIONS.md, "Backup and restore").
struct BackupCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "backup",
        abstract: "Back up a data directory on SQLite while the server runs: the database, the token secret, the photos, a manifest.",
        discussion: """
            DEST is a new (or empty) directory. The database is copied as one consistent \
            snapshot (SQLite's VACUUM INTO, a read transaction: the server keeps serving and \
            committing), then the token secret and the photos; manifest.json lists every file \
            with its size and SHA-256. Nothing is left half-written: the copy is made beside DEST \
            and renamed into place at the end. On PostgreSQL, back up the database with pg_dump \
            and the data directory beside it (docs/OPERATIONS.md).

            Exit status: 0 backed up; 5 the data directory holds no Circle database, DEST is not \
            empty, or a file cannot be read or written (a full disk); 64 usage.

            Examples:
              circle backup /backups/circle-$(date +%F) --data /srv/circle-data
              circle restore /backups/circle-2026-11-27 --data /srv/circle-data-restored
            """
    )

    @Argument(help: "The backup's directory: new, or empty.")
    var destination: String

    @Option(name: .long, help: ArgumentHelp("The server's data directory. Env: CIRCLE_DATA.", valueName: "dir"))
    var data: String = ProcessInfo.processInfo.environment["CIRCLE_DATA"] ?? "./circle-data"

    func run() async throws {
        let started = ContinuousClock.now
        do {
            let summary = try await DataBackup.backup(dataDirectory: self.data, to: self.destination, logger: Logger(label: "circle.backup") { _ in SwiftLogNoOpLogHandler() })
            let files = summary.manifest.files.count
            Console.line("backed up \(self.data) to \(self.destination): \(files) file\(files == 1 ? "" : "s"), \(summary.totalBytes.formatted()) bytes, in \(Self.seconds(since: started))")
        } catch {
            exitWithFailure("backup", Self.failure(error))
        }
    }

    static func failure(_ error: DataBackup.Failure) -> CLIFailure {
        switch error.kind {
        case .refused, .io: CLIFailure(.local, error.message)
        case .corrupt: CLIFailure(.damaged, error.message)
        }
    }

    static func seconds(since start: ContinuousClock.Instant) -> String {
        let elapsed = ContinuousClock.now - start
        let milliseconds = elapsed.components.seconds * 1000 + elapsed.components.attoseconds / 1_000_000_000_000_000
        return String(format: "%.2f s", Double(milliseconds) / 1000)
    }
}

struct RestoreCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "restore",
        abstract: "Restore a backup made by `circle backup` into a new data directory, after checking it.",
        discussion: """
            Every file is checked against the backup's manifest (size and SHA-256; none missing, \
            none extra) and the database with SQLite's integrity check before anything is \
            written; then the files are copied into a directory beside --data and renamed into \
            place. --data must not exist or be empty. Start `circle serve --data DIR` on it.

            Exit status: 0 restored; 5 --data is not empty, or a file cannot be read or written; \
            7 the backup does not match its manifest or its database is damaged (nothing is \
            written); 64 usage.

            Examples:
              circle restore /backups/circle-2026-11-27 --data /srv/circle-data
            """
    )

    @Argument(help: "The backup's directory (made by `circle backup`).")
    var backup: String

    @Option(name: .long, help: ArgumentHelp("The data directory to restore into: new, or empty.", valueName: "dir"))
    var data: String

    func run() async throws {
        let started = ContinuousClock.now
        do {
            let summary = try await DataBackup.restore(backup: self.backup, into: self.data, logger: Logger(label: "circle.restore") { _ in SwiftLogNoOpLogHandler() })
            let files = summary.manifest.files.count
            Console.line("restored \(self.backup) into \(self.data): \(files) file\(files == 1 ? "" : "s") checked and copied, \(summary.totalBytes.formatted()) bytes, in \(BackupCommand.seconds(since: started))")
        } catch {
            exitWithFailure("restore", BackupCommand.failure(error))
        }
    }
}
