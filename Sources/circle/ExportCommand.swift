import ArgumentParser
import CircleServer
import Foundation
import Logging

/// `circle export` and `circle import` (docs/OPERATIONS.md, "Export and import of a circle").
struct ExportCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "export",
        abstract: "Export one circle — its entries, members, settings and photos — into a directory (JSON Lines, a manifest with checksums).",
        discussion: """
            Reads the server's store beside it while it runs: the data directory's SQLite \
            database, or PostgreSQL with --postgres (photos are always in the data directory). \
            DIR is a new (or empty) directory; it gets circle.jsonl (format: docs/OPERATIONS.md), \
            media/ with the circle's photos, and manifest.json with every file's size and SHA-256. \
            Entries committed after the export began are left out. Direct messages are not exported.

            Exit status: 0 exported; 1 no such circle, or a direct message; 5 DIR is not empty, \
            the data directory holds no database, a file cannot be read or written; 64 usage.

            Examples:
              circle export team /backups/team --data /srv/circle-data
              circle export team ./team --data /srv/circle-data --postgres postgres://circle@db/circle
            """
    )

    @Argument(help: "The circle.") var circle: String
    @Argument(help: "The export's directory: new, or empty.") var destination: String
    @OptionGroup var store: TransferStoreOptions

    func run() async throws {
        let started = ContinuousClock.now
        do {
            let (circle, destination, data) = (self.circle, self.destination, self.store.data)
            let summary = try await CircleTransfer.withStore(dataDirectory: data, postgresURL: self.store.postgresURL, access: .read, logger: TransferStoreOptions.logger) { store in
                try await CircleTransfer.export(circle: circle, store: store, dataDirectory: data, to: destination)
            }
            Console.line(
                "exported \(summary.circle) to \(self.destination): \(summary.entries) entries, \(summary.members) members, \(summary.media) photos, \(summary.bytes.formatted()) bytes, in \(BackupCommand.seconds(since: started))"
            )
        } catch {
            exitWithFailure("export", TransferStoreOptions.failure(error))
        }
    }
}

struct ImportCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "import",
        abstract: "Import a circle exported by `circle export`, keeping every entry's seq, author and time.",
        discussion: """
            Checks everything before writing anything: every file against the manifest (size and \
            SHA-256, none missing, none extra), every line of circle.jsonl (a bad line is named by \
            its number), that the circle does not exist here, and that everyone it names has an \
            account here. Then it copies the photos and commits the entries again in order, in \
            batches of 500. On SQLite the server must be stopped (the import takes the data \
            directory's lock); on PostgreSQL nodes may run.

            Exit status: 0 imported; 1 the circle exists, or people it names have no account; 5 a \
            file cannot be read or written, the data directory holds no database; 6 a server holds \
            the data directory (SQLite); 7 \
            the export is damaged or not in the format (nothing is written); 64 usage.

            Examples:
              circle import /backups/team --data /srv/circle-data
            """
    )

    @Argument(help: "The export's directory (made by `circle export`).") var source: String
    @OptionGroup var store: TransferStoreOptions

    func run() async throws {
        let started = ContinuousClock.now
        do {
            let (source, data) = (self.source, self.store.data)
            let summary = try await CircleTransfer.withStore(dataDirectory: data, postgresURL: self.store.postgresURL, access: .write, logger: TransferStoreOptions.logger) { store in
                try await CircleTransfer.importCircle(from: source, store: store, dataDirectory: data)
            }
            // An import that stopped before left the first entries: this one went on after them.
            let resumed = summary.resumedAfter.map { " (an earlier import stopped after entry \($0); this one went on from there)" } ?? ""
            Console.line(
                "imported \(summary.circle) from \(self.source): \(summary.entries) entries, \(summary.members) members, \(summary.media) photos, in \(BackupCommand.seconds(since: started))\(resumed)"
            )
        } catch {
            exitWithFailure("import", TransferStoreOptions.failure(error))
        }
    }
}

/// The store `circle export` and `circle import` use.
struct TransferStoreOptions: ParsableArguments {
    @Option(name: .long, help: ArgumentHelp("The server's data directory (its database, and the photos). Env: CIRCLE_DATA.", valueName: "dir"))
    var data: String = ProcessInfo.processInfo.environment["CIRCLE_DATA"] ?? "./circle-data"

    @Option(help: "The server's PostgreSQL instead of the data directory's database. Env: CIRCLE_POSTGRES_URL.")
    var postgres: String?

    var postgresURL: String? { self.postgres ?? ProcessInfo.processInfo.environment["CIRCLE_POSTGRES_URL"] }

    static let logger = Logger(label: "circle.transfer") { _ in SwiftLogNoOpLogHandler() }

    static func failure(_ error: any Error) -> CLIFailure {
        guard let failure = error as? CircleTransfer.Failure else { return CLIFailure(.local, "\(error)") }
        switch failure.kind {
        case .notFound, .conflict, .refused: return CLIFailure(.refused, failure.message)
        case .corrupt: return CLIFailure(.damaged, failure.message)
        case .inUse: return CLIFailure(.dataDirectoryInUse, failure.message)
        case .local, .io: return CLIFailure(.local, failure.message)
        }
    }
}
