import CircleServer
import CircleTestSupport
import CircleWire
import Foundation
import Testing

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

#if os(Linux)
/// `circle backup` while a server takes a storm of posts, and `circle restore` into a new data
/// directory that a server then serves from; damaged backups and unusable destinations.
@Suite("circle backup and restore", .serialized)
struct BackupRestoreTests {
    private static func temporaryDirectory(_ name: String) throws -> String {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("circle-\(name)-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        return path
    }

    private static func run(_ arguments: [String]) async throws -> (status: Int32, stdout: String, stderr: String) {
        let process = try CircleProcess(arguments)
        process.closeInput()
        let status = try await process.waitForExit(timeout: .seconds(120))
        return (status, process.stdout, process.stderr)
    }

    private static func token(_ user: String) async throws -> String {
        try await TokenAuthority(.hs256(secret: testSecret)).mint(user: user, ttl: .seconds(3600))
    }

    /// Acknowledged seqs `circle send` has printed so far ("#SEQ" lines).
    private static func acked(_ stdout: String) -> [Int64] {
        stdout.split(separator: "\n").compactMap { $0.hasPrefix("#") ? Int64($0.dropFirst()) : nil }
    }

    @Test("a backup taken mid-storm restores every post acknowledged before it began, each once, and readers resume from it without a gap")
    func backupDuringAStorm() async throws {
        let root = try Self.temporaryDirectory("backup")
        defer { try? FileManager.default.removeItem(atPath: root) }
        let server = ServerProcess(port: try unusedPort(), dataDirectory: root + "/data")
        try await server.start()
        defer { server.stop() }
        let wsURL = "ws://127.0.0.1:\(server.port)/v1/ws"
        let created = try await Self.run(["circle", "create", "storm", "--user", "alice", "--server", wsURL, "--jwt-secret", testSecret])
        #expect(created.status == 0, "\(created.stderr)")

        // The storm: `circle send` posts every line of its input, many in flight.
        let total = 3000
        let sender = try CircleProcess(["send", "storm", "--user", "alice", "--server", wsURL, "--jwt-secret", testSecret, "--timeout", "120"])
        for index in 1...total { try sender.send(line: "storm post \(index)") }
        sender.closeInput()
        // Once a good part is acknowledged (bounded: the sender's own timeout ends it otherwise)…
        try await sender.waitForStdout("#500\n", timeout: .seconds(120))
        let ackedBefore = Set(Self.acked(sender.stdout))
        #expect(ackedBefore.count >= 500)
        // …the backup, while posts keep coming.
        let backup = try await Self.run(["backup", root + "/backup", "--data", root + "/data"])
        #expect(backup.status == 0, "\(backup.stderr)")
        #expect(backup.stdout.hasPrefix("backed up \(root)/data to \(root)/backup: "), "\(backup.stdout)")
        #expect(try await sender.waitForExit(timeout: .seconds(180)) == 0, "\(sender.stderr)")
        #expect(Self.acked(sender.stdout).count == total)
        server.stop()

        let manifest = try DataBackup.verify(root + "/backup")
        // The server was given its key (--jwt-secret): no secret file to copy.
        #expect(manifest.files.map(\.path) == ["circle.sqlite"])

        let restored = try await Self.run(["restore", root + "/backup", "--data", root + "/restored"])
        #expect(restored.status == 0, "\(restored.stderr)")
        let again = ServerProcess(port: try unusedPort(), dataDirectory: root + "/restored")
        try await again.start()
        defer { again.stop() }
        let againURL = "ws://127.0.0.1:\(again.port)/v1/ws"

        // Everything from the start: contiguous seqs, each post once, every early ack there.
        let reader = try await TestClient(url: againURL, token: try await Self.token("bob"))
        let newest = try #require(try await reader.join("storm", since: 0))
        #expect(Int(newest) >= ackedBefore.count)
        let all = await reader.posts(in: "storm", timeout: .seconds(60)) { $0.seq == newest }
        #expect(all.ended == nil, "\(all.ended ?? "")")
        #expect(all.gaps.isEmpty)
        #expect(all.posts.map(\.seq) == Array(1...newest))
        let texts = all.posts.compactMap(\.text)
        #expect(Set(texts).count == texts.count, "a post stored twice")
        #expect(ackedBefore.isSubset(of: Set(all.posts.map(\.seq))))
        await reader.close()

        // A reader that had read up to the middle resumes from there; a new post follows on.
        let middle = newest / 2
        let resumed = try await TestClient(url: againURL, token: try await Self.token("carol"))
        try await resumed.join("storm", since: middle)
        let rest = await resumed.posts(in: "storm", timeout: .seconds(60)) { $0.seq == newest }
        #expect(rest.posts.map(\.seq) == Array((middle + 1)...newest))
        #expect(rest.gaps.isEmpty)
        let after = try await Self.run(["send", "storm", "after the restore", "--user", "alice", "--server", againURL, "--jwt-secret", testSecret])
        #expect(after.stdout == "#\(newest + 1)\n", "\(after.stderr)")
        let live = await resumed.posts(in: "storm", timeout: .seconds(30)) { $0.seq == newest + 1 }
        #expect(live.posts.last?.text == "after the restore")
        await resumed.close()
    }

    @Test("PostgreSQL: pg_dump taken mid-storm and pg_restore into a new database: every post acknowledged before the dump began, each once, and readers resume without a gap")
    func postgresDumpDuringAStorm() async throws {
        let bin = ProcessInfo.processInfo.environment["PGBIN"] ?? "/usr/lib/postgresql/15/bin"
        let root = try Self.temporaryDirectory("pgdump")
        defer { try? FileManager.default.removeItem(atPath: root) }
        let database = try await PostgresTestServer.shared.freshDatabase()
        let server = ServerProcess(port: try unusedPort(), dataDirectory: root + "/data", arguments: ["--postgres", database])
        try await server.start()
        defer { server.stop() }
        let wsURL = "ws://127.0.0.1:\(server.port)/v1/ws"
        #expect(try await Self.run(["circle", "create", "storm", "--user", "alice", "--server", wsURL, "--jwt-secret", testSecret]).status == 0)
        let total = 1500
        let sender = try CircleProcess(["send", "storm", "--user", "alice", "--server", wsURL, "--jwt-secret", testSecret, "--timeout", "120"])
        for index in 1...total { try sender.send(line: "storm post \(index)") }
        sender.closeInput()
        try await sender.waitForStdout("#300\n", timeout: .seconds(120))
        let ackedBefore = Set(Self.acked(sender.stdout))
        let dump = try await SpawnedProcess.run(bin + "/pg_dump", ["--format=custom", "--file=" + root + "/circle.dump", database], timeout: .seconds(300))
        #expect(dump.status == 0, "\(dump.stderr)")
        #expect(try await sender.waitForExit(timeout: .seconds(180)) == 0, "\(sender.stderr)")
        server.stop()

        let restoredDatabase = try await PostgresTestServer.shared.freshDatabase()
        let restore = try await SpawnedProcess.run(bin + "/pg_restore", ["--no-owner", "--dbname=" + restoredDatabase, root + "/circle.dump"], timeout: .seconds(300))
        #expect(restore.status == 0, "\(restore.stderr)")
        let again = ServerProcess(port: try unusedPort(), dataDirectory: root + "/data", arguments: ["--postgres", restoredDatabase])
        try await again.start()
        defer { again.stop() }
        let againURL = "ws://127.0.0.1:\(again.port)/v1/ws"
        let reader = try await TestClient(url: againURL, token: try await Self.token("bob"))
        let newest = try #require(try await reader.join("storm", since: 0))
        let all = await reader.posts(in: "storm", timeout: .seconds(60)) { $0.seq == newest }
        #expect(all.posts.map(\.seq) == Array(1...newest))
        #expect(all.gaps.isEmpty)
        let texts = all.posts.compactMap(\.text)
        #expect(Set(texts).count == texts.count, "a post stored twice")
        #expect(ackedBefore.isSubset(of: Set(all.posts.map(\.seq))))
        let after = try await Self.run(["send", "storm", "after the restore", "--user", "alice", "--server", againURL, "--jwt-secret", testSecret])
        #expect(after.stdout == "#\(newest + 1)\n", "\(after.stderr)")
        let live = await reader.posts(in: "storm", timeout: .seconds(30)) { $0.seq == newest + 1 }
        #expect(live.posts.last?.text == "after the restore")
        await reader.close()
    }

    @Test("bad input: a destination that is not empty, a data directory without a database, a damaged or incomplete backup, a manifest that points outside; nothing is written")
    func badInput() async throws {
        let root = try Self.temporaryDirectory("backup-bad")
        defer { try? FileManager.default.removeItem(atPath: root) }
        let server = ServerProcess(port: try unusedPort(), dataDirectory: root + "/data")
        try await server.start()
        let wsURL = "ws://127.0.0.1:\(server.port)/v1/ws"
        #expect(try await Self.run(["circle", "create", "general", "--user", "alice", "--server", wsURL, "--jwt-secret", testSecret]).status == 0)
        #expect(try await Self.run(["send", "general", "hello", "--user", "alice", "--server", wsURL, "--jwt-secret", testSecret]).status == 0)
        server.stop()

        // Not a data directory; a destination that is not empty.
        try FileManager.default.createDirectory(atPath: root + "/empty", withIntermediateDirectories: true)
        let noDatabase = try await Self.run(["backup", root + "/b0", "--data", root + "/empty"])
        #expect(noDatabase.status == 5)
        #expect(noDatabase.stderr.contains("holds no Circle database"), "\(noDatabase.stderr)")
        try FileManager.default.createDirectory(atPath: root + "/full", withIntermediateDirectories: true)
        _ = FileManager.default.createFile(atPath: root + "/full/keep", contents: Data("mine".utf8))
        let notEmpty = try await Self.run(["backup", root + "/full", "--data", root + "/data"])
        #expect(notEmpty.status == 5)
        #expect(notEmpty.stderr.contains("is not empty"), "\(notEmpty.stderr)")
        #expect(try FileManager.default.contentsOfDirectory(atPath: root + "/full") == ["keep"])

        // A good backup into an existing empty directory.
        try FileManager.default.createDirectory(atPath: root + "/good", withIntermediateDirectories: true)
        #expect(try await Self.run(["backup", root + "/good", "--data", root + "/data"]).status == 0)

        func damaged(_ name: String, _ change: (String) throws -> Void) async throws -> (status: Int32, stderr: String) {
            let copy = root + "/" + name
            try FileManager.default.copyItem(atPath: root + "/good", toPath: copy)
            try change(copy)
            let result = try await Self.run(["restore", copy, "--data", root + "/into-" + name])
            #expect(!FileManager.default.fileExists(atPath: root + "/into-" + name), "\(name): something was written")
            return (result.status, result.stderr)
        }
        let flipped = try await damaged("flipped") { copy in
            let handle = try #require(FileHandle(forUpdatingAtPath: copy + "/circle.sqlite"))
            try handle.seek(toOffset: 5000)
            try handle.write(contentsOf: Data([0xFF, 0x00, 0xFF]))
            try handle.close()
        }
        #expect(flipped.status == 7)
        #expect(flipped.stderr.contains("circle.sqlite in \(root)/flipped does not match the manifest"), "\(flipped.stderr)")
        let missing = try await damaged("missing") { try FileManager.default.removeItem(atPath: $0 + "/circle.sqlite") }
        #expect(missing.status == 7, "\(missing.stderr)")
        #expect(missing.stderr.contains("circle.sqlite: No such file or directory"), "\(missing.stderr)")
        let extra = try await damaged("extra") { _ = FileManager.default.createFile(atPath: $0 + "/stray", contents: Data()) }
        #expect(extra.status == 7)
        #expect(extra.stderr.contains("holds stray, which its manifest does not list"), "\(extra.stderr)")
        let outside = try await damaged("outside") { copy in
            var manifest = try JSONDecoder().decode(DataBackup.Manifest.self, from: try Data(contentsOf: URL(fileURLWithPath: copy + "/manifest.json")))
            manifest.files.append(.init(path: "../../etc/passwd", bytes: 1, sha256: "00"))
            try JSONEncoder().encode(manifest).write(to: URL(fileURLWithPath: copy + "/manifest.json"))
        }
        #expect(outside.status == 7)
        #expect(outside.stderr.contains("lists a file outside the backup"), "\(outside.stderr)")
        let garbage = try await damaged("garbage") { try Data("not json".utf8).write(to: URL(fileURLWithPath: $0 + "/manifest.json")) }
        #expect(garbage.status == 7)
        #expect(garbage.stderr.contains("is not a Circle backup manifest"), "\(garbage.stderr)")

        // A destination that fills up (a 64 KiB tmpfs, in a mount namespace of the command's
        // own; root only): status 5, "the disk is full", nothing left there.
        if getuid() == 0, FileManager.default.isExecutableFile(atPath: "/usr/bin/unshare") {
            try FileManager.default.createDirectory(atPath: root + "/small", withIntermediateDirectories: true)
            let result = try await SpawnedProcess.run("/usr/bin/unshare", [
                "-m", "/bin/sh", "-c", #"mount -t tmpfs -o size=64k tmpfs "$0" && "$1" backup "$0/b" --data "$2"; status=$?; ls -A "$0"; exit $status"#,
                root + "/small", CircleProcess.executablePath, root + "/data",
            ])
            let (listed, stderr) = (result.stdout, result.stderr)
            #expect(result.status == 5, "\(stderr)")
            #expect(stderr.contains("the disk is full"), "\(stderr)")
            #expect(listed.isEmpty, "left behind: \(listed)")
        }

        // Restoring over a data directory in use is refused.
        let over = try await Self.run(["restore", root + "/good", "--data", root + "/data"])
        #expect(over.status == 5)
        #expect(over.stderr.contains("is not empty"), "\(over.stderr)")
        // And the good one restores.
        #expect(try await Self.run(["restore", root + "/good", "--data", root + "/restored"]).status == 0)
        // No staging directory is left anywhere.
        #expect(try FileManager.default.contentsOfDirectory(atPath: root).filter { $0.contains(".partial-") }.isEmpty)
    }
}
#endif
