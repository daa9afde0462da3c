import CircleTestSupport
import Crypto
import Foundation
import Testing

/// `circle upload` and `circle download` against a real server.
@Suite("circle upload and download", .serialized)
struct TransferCommandsTests {
    private func start(_ arguments: [String], server: TestServer) throws -> CircleProcess {
        try CircleProcess(arguments + ["--server", server.wsURL, "--jwt-secret", testSecret])
    }

    private func run(_ arguments: [String], server: TestServer) async throws -> (status: Int32, stdout: String, stderr: String) {
        let process = try self.start(arguments, server: server)
        process.closeInput()
        let status = try await process.waitForExit(timeout: .seconds(60))
        return (status, process.stdout, process.stderr)
    }

    /// A JPEG-looking file of `size` pseudo-random bytes, and its SHA-256.
    private func photo(_ size: Int, seed: UInt64 = 1) throws -> (path: String, sha256: String, bytes: [UInt8]) {
        var state = seed | 1
        var bytes = [UInt8](repeating: 0, count: size)
        for index in bytes.indices {
            state ^= state << 13
            state ^= state >> 7
            state ^= state << 17
            bytes[index] = UInt8(truncatingIfNeeded: state)
        }
        bytes.replaceSubrange(0..<4, with: [0xFF, 0xD8, 0xFF, 0xE0])
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("circle-cli-\(UUID().uuidString).jpg").path
        _ = FileManager.default.createFile(atPath: path, contents: Data(bytes))
        return (path, SHA256.hash(data: bytes).map { String(format: "%02x", $0) }.joined(), bytes)
    }

    @Test("upload posts the photo; a member downloads it byte for byte; others and oversized files are refused")
    func uploadAndDownload() async throws {
        let server = TestServer(limits: .init(maxMediaBytes: 1 << 20))
        defer { server.remove() }
        try await server.start()
        try await server.createCircle("team", owner: "alice", isPrivate: true)
        _ = try await server.http("POST", "/v1/circles/team/members", token: try await server.token("alice"), json: #"{"user":"bob"}"#)
        let file = try self.photo(200_000)

        let upload = try await self.run(["upload", file.path, "--circle", "team", "--caption", "the view", "--user", "alice", "--metrics"], server: server)
        #expect(upload.status == 0, "\(upload.stderr)")
        #expect(upload.stdout == "#2 \(file.sha256)\n")  // 1: the system entry "alice added bob"
        #expect(upload.stderr.contains("upload: 100% (200000/200000 bytes)"))
        #expect(upload.stderr.contains("PATCH /v1/media/uploads/"))
        let (_, page) = try await server.http("GET", "/v1/circles/team/messages", token: try await server.token("alice"))
        #expect(page.contains(#""attachment":"\#(file.sha256)""#))
        #expect(page.contains(#""text":"the view""#))

        let target = file.path + ".down"
        let download = try await self.run(["download", file.sha256, "-o", target, "--user", "bob"], server: server)
        #expect(download.status == 0, "\(download.stderr)")
        #expect(download.stdout == "\(target)\n")
        #expect(download.stderr.contains("download: 100%"))
        #expect(FileManager.default.contents(atPath: target) == Data(file.bytes))

        let outsider = try await self.run(["download", file.sha256, "-o", target + ".x", "--user", "eve"], server: server)
        #expect(outsider.status == 1)
        #expect(outsider.stderr.contains("not found"), "\(outsider.stderr)")
        #expect(!FileManager.default.fileExists(atPath: target + ".x"))

        let big = try self.photo((1 << 20) + 1, seed: 2)
        let refused = try await self.run(["upload", big.path, "--circle", "team", "--user", "alice"], server: server)
        #expect(refused.status == 1)
        #expect(refused.stderr.contains("not posted: too large"), "\(refused.stderr)")
        await server.stop()
    }

    @Test("an upload killed half-way continues from the server's offset on the next run and posts once")
    func uploadResumesAfterKill() async throws {
        let server = TestServer()
        defer { server.remove() }
        try await server.start()
        try await server.createCircle("trip", owner: "kim")
        let state = server.dataDirectory + "-upload.sqlite"
        defer {
            for suffix in ["", "-wal", "-shm", "-spool", "-media"] { try? FileManager.default.removeItem(atPath: state + suffix) }
        }
        let file = try self.photo(2 << 20, seed: 3)
        let arguments = ["upload", file.path, "--circle", "trip", "--caption", "summit", "--user", "kim", "--state", state]

        let slow = try self.start(arguments + ["--limit-rate", "512K"], server: server)
        try await slow.waitForStderr("upload: 20%")
        slow.killNow()
        _ = try await slow.waitForExit()

        let again = try await self.run(arguments, server: server)
        #expect(again.status == 0, "\(again.stderr)")
        #expect(again.stdout == "#1 \(file.sha256)\n")
        #expect(again.stderr.contains("continuing the upload of an earlier run"))
        let resumedAt = again.stderr.split(separator: "\n").first { $0.hasPrefix("circle upload: resumed at byte ") }
            .flatMap { Int($0.split(separator: " ").last ?? "") }
        // Resumed, not started over: the server kept part of what was sent before the kill (how
        // much depends on what was still in flight when the process died).
        #expect((resumedAt ?? 0) > 0)
        #expect((resumedAt ?? Int.max) < 2 << 20)

        // Run once more: the same post is not made twice.
        let third = try await self.run(arguments, server: server)
        #expect(third.stdout == "#1 \(file.sha256)\n")
        let (_, page) = try await server.http("GET", "/v1/circles/trip/messages", token: try await server.token("kim"))
        #expect(page.components(separatedBy: #""seq":"#).count == 2)
        await server.stop()
    }

    @Test("download continues a .part file with Range and If-Range")
    func downloadResumes() async throws {
        let server = TestServer()
        defer { server.remove() }
        try await server.start()
        try await server.createCircle("x", owner: "lou")
        let file = try self.photo(500_000, seed: 5)
        let upload = try await self.run(["upload", file.path, "--circle", "x", "--user", "lou"], server: server)
        #expect(upload.status == 0, "\(upload.stderr)")
        let target = file.path + ".down"
        _ = FileManager.default.createFile(atPath: target + ".part", contents: Data(file.bytes[0..<123_456]))
        _ = FileManager.default.createFile(atPath: target + ".part.etag", contents: Data("\"\(file.sha256)\"".utf8))
        let download = try await self.run(["download", file.sha256, "-o", target, "--user", "lou", "--metrics"], server: server)
        #expect(download.status == 0, "\(download.stderr)")
        #expect(download.stderr.contains("resuming at byte 123456"))
        #expect(download.stderr.contains("→ 206"))
        #expect(download.stderr.contains("received=376544"))
        #expect(FileManager.default.contents(atPath: target) == Data(file.bytes))
        #expect(!FileManager.default.fileExists(atPath: target + ".part"))
        await server.stop()
    }
}
