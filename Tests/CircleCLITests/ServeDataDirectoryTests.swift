import CircleTestSupport
import Foundation
import Testing

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

#if os(Linux)
/// `circle serve` and its `--data` directory: one server per directory (a lock held for the
/// server's life, which a SIGKILL does not leave behind), and a directory that cannot be used
/// told in a sentence with the path and what to do.
@Suite("circle serve: the data directory")
struct ServeDataDirectoryTests {
    private static func temporaryDirectory(_ name: String) throws -> String {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("circle-\(name)-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        return path
    }

    private static func healthz(_ port: Int) async -> Int? {
        var request = URLRequest(url: URL(string: "http://127.0.0.1:\(port)/healthz")!)
        request.timeoutInterval = 5
        guard let (_, response) = try? await URLSession.shared.data(for: request) else { return nil }
        return (response as? HTTPURLResponse)?.statusCode
    }

    @Test("a second serve on the same data directory exits 6 naming the first's PID; the first serves on; after a SIGKILL the directory serves again")
    func oneServerPerDirectory() async throws {
        let root = try Self.temporaryDirectory("lock")
        defer { try? FileManager.default.removeItem(atPath: root) }
        let data = root + "/data"
        let first = ServerProcess(port: try unusedPort(), dataDirectory: data)
        try await first.start()
        defer { first.stop() }
        let pid = try #require(first.pid)

        let second = try CircleProcess(["serve", "--port", "\(try unusedPort())", "--data", data, "--jwt-secret", testSecret])
        second.closeInput()
        #expect(try await second.waitForExit(timeout: .seconds(60)) == 6, "\(second.stderr)")
        #expect(second.stderr.contains("circle serve: the data directory \(data) is in use by process \(pid) ("), "\(second.stderr)")
        // The holder's command line, from /proc.
        #expect(second.stderr.contains("serve --port \(first.port) --data \(data) --jwt-secret ***"), "\(second.stderr)")
        #expect(!second.stderr.contains(testSecret), "the holder's secret is shown: \(second.stderr)")
        #expect(await Self.healthz(first.port) == 200)

        // The refused server did not take the lock over: a third one is refused as well.
        let third = try CircleProcess(["serve", "--port", "\(try unusedPort())", "--data", data, "--jwt-secret", testSecret])
        third.closeInput()
        #expect(try await third.waitForExit(timeout: .seconds(60)) == 6, "\(third.stderr)")

        // SIGKILL: the lock file stays with the dead PID in it, and does not block a restart.
        first.kill()
        let stale = try String(contentsOfFile: data + "/circle.lock", encoding: .utf8)
        #expect(stale.hasPrefix("\(pid)\n"), "\(stale)")
        let restarted = ServerProcess(port: first.port, dataDirectory: data)
        try await restarted.start()
        defer { restarted.stop() }
        #expect(await Self.healthz(restarted.port) == 200)
        let owner = try String(contentsOfFile: data + "/circle.lock", encoding: .utf8)
        #expect(owner.hasPrefix("\(try #require(restarted.pid))\n"), "\(owner)")
    }

    struct BadData: Sendable, CustomTestStringConvertible {
        var name: String
        var testDescription: String { self.name }
    }

    /// Root may write anywhere: as root, "no permission" runs the server as nobody (setpriv), and
    /// a read-only file system is a tmpfs mounted in a mount namespace of the server's own
    /// (unshare); as another user, "no permission" is a directory of mode 0555.
    static var badData: [BadData] {
        let root = getuid() == 0
        var cases = [BadData(name: "the parent is missing"), BadData(name: "the path is a file"), BadData(name: "a file on the way")]
        if !root || FileManager.default.isExecutableFile(atPath: "/usr/bin/setpriv") {
            cases.append(BadData(name: "no permission"))
        }
        if root, FileManager.default.isExecutableFile(atPath: "/usr/bin/unshare") {
            cases.append(BadData(name: "a read-only file system"))
        }
        return cases
    }

    @Test("an unusable --data: status 5 and a sentence with the path and what to do", arguments: Self.badData)
    func unusableData(_ test: BadData) async throws {
        let root = try Self.temporaryDirectory("baddata")
        defer { try? FileManager.default.removeItem(atPath: root) }
        let serve = ["serve", "--port", "\(try unusedPort())", "--jwt-secret", testSecret, "--data"]
        let result: (status: Int32, stderr: String)
        let expected: String
        switch test.name {
        case "the parent is missing":
            result = try await Self.run(CircleProcess.executablePath, serve + [root + "/missing/data"])
            expected = "circle serve: cannot create the data directory \(root)/missing/data: its parent \(root)/missing does not exist — create it first (mkdir -p \(root)/missing), or check --data for a typo"
        case "the path is a file":
            _ = FileManager.default.createFile(atPath: root + "/file", contents: Data("x".utf8))
            result = try await Self.run(CircleProcess.executablePath, serve + [root + "/file"])
            expected = "circle serve: --data \(root)/file is a file, not a directory — give --data the path of a directory"
        case "a file on the way":
            _ = FileManager.default.createFile(atPath: root + "/file", contents: Data("x".utf8))
            result = try await Self.run(CircleProcess.executablePath, serve + [root + "/file/data"])
            expected = "circle serve: cannot use --data \(root)/file/data: \(root)/file is a file, not a directory — check the path"
        case "no permission" where getuid() != 0:
            try FileManager.default.setAttributes([.posixPermissions: 0o555], ofItemAtPath: root)
            defer { try? FileManager.default.setAttributes([.posixPermissions: 0o755], ofItemAtPath: root) }
            result = try await Self.run(CircleProcess.executablePath, serve + [root + "/data"])
            expected = "circle serve: no permission to write in \(root) (for --data \(root)/data) — run circle serve as a user who may, or give --data a directory this user owns"
        case "no permission":
            // The server runs as nobody, beside a directory root owns.
            try FileManager.default.setAttributes([.posixPermissions: 0o755], ofItemAtPath: root)
            result = try await Self.run(
                "/usr/bin/setpriv",
                ["--reuid=65534", "--regid=65534", "--clear-groups", CircleProcess.executablePath] + serve + [root + "/data"]
            )
            expected = "circle serve: no permission to write in \(root) (for --data \(root)/data) — run circle serve as a user who may, or give --data a directory this user owns"
        default:
            // A read-only tmpfs over the directory, in a mount namespace of the server's own.
            result = try await Self.run(
                "/usr/bin/unshare",
                ["-m", "/bin/sh", "-c", "mount -t tmpfs -o ro tmpfs \"$0\" && exec \"$@\"", root, CircleProcess.executablePath] + serve + [root + "/data"]
            )
            expected = "circle serve: --data \(root)/data is on a read-only file system — give --data a directory on a writable one"
        }
        #expect(result.status == 5, "\(result.stderr)")
        #expect(result.stderr.contains(expected), "\(result.stderr)")
        #expect(!result.stderr.contains("The operation could not be completed"), "\(result.stderr)")
    }

    /// Runs a program to its end (at most 60 s) and returns its status and stderr.
    private static func run(_ executable: String, _ arguments: [String]) async throws -> (status: Int32, stderr: String) {
        let result = try await SpawnedProcess.run(executable, arguments)
        return (result.status, result.stderr)
    }
}
#endif
