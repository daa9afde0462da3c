import CircleServer
import CircleTestSupport
import CircleWire
import Foundation
import Logging
import Testing

#if os(Linux)
/// `circle export` beside a running server and `circle import` into another data directory
/// (docs/OPERATIONS.md, "Export and import of a circle"): the exit statuses of each refusal.
@Suite("circle export and import", .serialized)
struct ExportImportTests {
    private static func run(_ arguments: [String]) async throws -> (status: Int32, stdout: String, stderr: String) {
        let process = try CircleProcess(arguments)
        process.closeInput()
        let status = try await process.waitForExit(timeout: .seconds(120))
        return (status, process.stdout, process.stderr)
    }

    @Test("export beside a running server; import refused while a server holds the target, into a stopped one it keeps every seq; exists → 1, damaged → 7")
    func exportAndImport() async throws {
        let root = FileManager.default.temporaryDirectory.appendingPathComponent("circle-export-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: root) }
        let source = ServerProcess(port: try unusedPort(), dataDirectory: root + "/source")
        try await source.start()
        let wsURL = "ws://127.0.0.1:\(source.port)/v1/ws"
        #expect(try await Self.run(["circle", "create", "team", "--user", "alice", "--server", wsURL, "--jwt-secret", testSecret]).status == 0)
        let sender = try CircleProcess(["send", "team", "--user", "alice", "--server", wsURL, "--jwt-secret", testSecret])
        for index in 1...20 { try sender.send(line: "post \(index)") }
        sender.closeInput()
        #expect(try await sender.waitForExit(timeout: .seconds(120)) == 0, "\(sender.stderr)")

        let missing = try await Self.run(["export", "nowhere", root + "/nowhere", "--data", root + "/source"])
        #expect(missing.status == 1 && missing.stderr.contains("no circle \"nowhere\""), "\(missing.stderr)")
        let exported = try await Self.run(["export", "team", root + "/team", "--data", root + "/source"])
        #expect(exported.status == 0, "\(exported.stderr)")
        #expect(exported.stdout.hasPrefix("exported team to \(root)/team: 20 entries, 1 members, 0 photos"), "\(exported.stdout)")
        source.stop()

        // The target: a database with alice's account.
        try FileManager.default.createDirectory(atPath: root + "/target", withIntermediateDirectories: true)
        let store = try await SQLiteStore.open(path: root + "/target/circle.sqlite", logger: Logger(label: "test") { _ in SwiftLogNoOpLogHandler() })
        try await store.migrate()
        _ = try await store.createAccount(Account(name: "alice", createdAt: 1), passwordHash: nil, invite: nil, now: 1)
        try await store.close()

        let noDatabase = try await Self.run(["import", root + "/team", "--data", root + "/empty"])
        #expect(noDatabase.status == 5 && noDatabase.stderr.contains("holds no Circle database"), "\(noDatabase.stderr)")
        let target = ServerProcess(port: try unusedPort(), dataDirectory: root + "/target")
        try await target.start()
        let busy = try await Self.run(["import", root + "/team", "--data", root + "/target"])
        #expect(busy.status == 6 && busy.stderr.contains("stop the server first"), "\(busy.stderr)")
        target.stop()
        let imported = try await Self.run(["import", root + "/team", "--data", root + "/target"])
        #expect(imported.status == 0, "\(imported.stderr)")
        #expect(imported.stdout.hasPrefix("imported team from \(root)/team: 20 entries, 1 members, 0 photos"), "\(imported.stdout)")
        let again = try await Self.run(["import", root + "/team", "--data", root + "/target"])
        #expect(again.status == 1 && again.stderr.contains("exists on this server"), "\(again.stderr)")
        // A damaged export: exit 7, naming the file; nothing written.
        let history = root + "/team/circle.jsonl"
        let original = try Data(contentsOf: URL(fileURLWithPath: history))
        try Data("{}\n".utf8).write(to: URL(fileURLWithPath: history))
        let damaged = try await Self.run(["import", root + "/team", "--data", root + "/target"])
        #expect(damaged.status == 7 && damaged.stderr.contains("checksum mismatch: circle.jsonl"), "\(damaged.stderr)")
        try original.write(to: URL(fileURLWithPath: history))

        // The imported circle is served with its seqs; the next post is 21.
        let server = ServerProcess(port: try unusedPort(), dataDirectory: root + "/target")
        try await server.start()
        defer { server.stop() }
        let targetURL = "ws://127.0.0.1:\(server.port)/v1/ws"
        let next = try CircleProcess(["send", "team", "--user", "alice", "--server", targetURL, "--jwt-secret", testSecret])
        try next.send(line: "after the move")
        next.closeInput()
        #expect(try await next.waitForExit(timeout: .seconds(60)) == 0, "\(next.stderr)")
        #expect(next.stdout.contains("#21"), "\(next.stdout)")

    }
}
#endif
