import CircleTestSupport
import Foundation
import Testing

/// What `circle serve` tells its operator at `info`, and the option bounds that once trapped.
@Suite("circle serve: the operator's log", .serialized)
struct ServerLogTests {
    @Test("connections with address and close reason, refused tokens without the token, message first")
    func logLines() async throws {
        let data = FileManager.default.temporaryDirectory.appendingPathComponent("circle-log-\(UUID().uuidString)").path
        defer { try? FileManager.default.removeItem(atPath: data) }
        let port = try unusedPort()
        let serve = try CircleProcess(["serve", "--port", "\(port)", "--data", data, "--jwt-secret", testSecret])
        defer { serve.killNow() }
        try await serve.waitForStderr("Press Ctrl-C to stop.")
        let url = "ws://127.0.0.1:\(port)/v1/ws"

        let created = try CircleProcess(["circle", "create", "general", "--user", "alice", "--jwt-secret", testSecret, "--server", url])
        #expect(try await created.waitForExit() == 0, "\(created.stderr)")
        let chat = try CircleProcess(["tail", "general", "--user", "alice", "--jwt-secret", testSecret, "--server", url])
        try await serve.waitForStderr("connected  address=127.0.0.1:")
        chat.interrupt()
        _ = try await chat.waitForExit()
        try await serve.waitForStderr("disconnected  reason=")

        let forged = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJtYWxsb3J5IiwiZXhwIjo0MTAyNDQ0ODAwfQ.c2lnbmF0dXJlLW5vdC12YWxpZA"
        let refused = try CircleProcess(["send", "general", "hi", "--token", forged, "--server", url])
        #expect(try await refused.waitForExit() == 4)
        try await serve.waitForStderr("refused a token  address=127.0.0.1:")
        let log = serve.stderr
        #expect(!log.contains(forged), "the log shows the refused token")
        #expect(!log.contains("c2lnbmF0dXJl"), "the log shows part of the refused token")
        // Message first: the level, then what happened, then key=value details.
        let line = try #require(log.split(separator: "\n").first { $0.contains("refused a token") })
        #expect(line.range(of: #"^\S+ info +refused a token  address=\S+ code=unauthorized reason=""#, options: .regularExpression) != nil, "\(line)")
    }

    @Test("durations beyond 100 years are usage errors, not a crash")
    func hugeDurations() async throws {
        for arguments in [["token", "--user", "alice", "--jwt-secret", testSecret, "--ttl", "200000000000d"],
                          ["token", "--user", "alice", "--jwt-secret", testSecret, "--ttl", "1e300"],
                          ["serve", "--port", "0", "--data", "/nonexistent/x", "--idle-timeout", "1e20s"]] {
            let process = try CircleProcess(arguments)
            let status = try await process.waitForExit()
            #expect(status == 64, "\(arguments): \(status) \(process.stderr)")
            #expect(process.stderr.contains("at most 100 years"), "\(process.stderr)")
        }
        let longest = try CircleProcess(["token", "--user", "alice", "--jwt-secret", testSecret, "--ttl", "36000d"])
        #expect(try await longest.waitForExit() == 0, "\(longest.stderr)")
    }
}
