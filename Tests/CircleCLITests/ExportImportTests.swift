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

    @Test("circle import SIGKILLed midway leaves whole batches; the same import again goes on after them and ends with every entry once")
    func importKilledMidway() async throws {
        let root = FileManager.default.temporaryDirectory.appendingPathComponent("circle-import-kill-\(UUID().uuidString)").path
        defer { try? FileManager.default.removeItem(atPath: root) }
        for directory in ["source", "target"] { try FileManager.default.createDirectory(atPath: root + "/" + directory, withIntermediateDirectories: true) }
        let logger = Logger(label: "test") { _ in SwiftLogNoOpLogHandler() }
        let total: Int64 = 10_000
        // The export (through the library: the command is tested above): 10,000 posts, 20 batches.
        let source = try await SQLiteStore.open(path: root + "/source/circle.sqlite", logger: logger)
        try await source.migrate()
        _ = try await source.createAccount(Account(name: "alice", createdAt: 1), passwordHash: nil, invite: nil, now: 1)
        _ = try await source.createCircle(name: "big", owner: "alice", isPrivate: false, createdAt: 1)
        for batch in 0..<Int(total / 500) {
            _ = try await source.commit(
                (0..<500).map { NewPost(circle: "big", author: "alice", clientID: "p\(batch * 500 + $0)", text: "post \(batch * 500 + $0)", attachment: nil, time: 1) }
            )
        }
        _ = try await CircleTransfer.export(circle: "big", store: source, dataDirectory: root + "/source", to: root + "/big")
        try await source.close()
        let target = try await SQLiteStore.open(path: root + "/target/circle.sqlite", logger: logger)
        try await target.migrate()
        _ = try await target.createAccount(Account(name: "alice", createdAt: 1), passwordHash: nil, invite: nil, now: 1)

        let importer = try CircleProcess(["import", root + "/big", "--data", root + "/target"])
        importer.closeInput()
        // Killed once its first batches are in (looked at through a connection of this test's).
        let deadline = ContinuousClock.now + .seconds(60)
        while ContinuousClock.now < deadline, (try await target.circle(named: "big")?.lastSeq ?? 0) == 0 {
            try await Task.sleep(for: .milliseconds(2))
        }
        importer.killNow()
        _ = try await importer.waitForExit(timeout: .seconds(30))
        let held = try await target.circle(named: "big")?.lastSeq ?? 0
        #expect(held > 0 && held < total, "the import was not caught midway: it held \(held) of \(total) entries")
        #expect(held % Int64(CircleTransfer.batchSize) == 0, "\(held) entries are not whole batches")

        let again = try await Self.run(["import", root + "/big", "--data", root + "/target"])
        #expect(again.status == 0, "\(again.stderr)")
        #expect(again.stdout.contains("10000 entries") && again.stdout.contains("(an earlier import stopped after entry \(held); this one went on from there)"), "\(again.stdout)")
        var seqs: [Int64] = []
        var ids = Set<String>()
        while Int64(seqs.count) < total {
            let page = try await target.posts(in: "big", after: seqs.last ?? 0, limit: 500)
            guard !page.isEmpty else { break }
            seqs += page.map(\.seq)
            ids.formUnion(page.map(\.id))
        }
        #expect(seqs == Array(1...total) && ids.count == Int(total))
        let finished = try await Self.run(["import", root + "/big", "--data", root + "/target"])
        #expect(finished.status == 1 && finished.stderr.contains("exists on this server"), "\(finished.stderr)")
        try await target.close()
    }
}
#endif
