import CircleTestSupport
import Foundation
import Testing

/// Every port, size and count a `circle` command takes is checked against its range: a value
/// outside it is a usage error (64) that names the option, the value and the range, never a
/// number truncated on its way to a socket (`--port 99999` once listened on 34463).
@Suite("circle: numbers out of range are usage errors")
struct ServeFlagsTests {
    struct Case: Sendable, CustomTestStringConvertible {
        var arguments: [String]
        var environment: [String: String] = [:]
        /// What stderr must contain.
        var message: String

        var testDescription: String {
            (self.environment.map { "\($0.key)=\($0.value) " }.joined()) + "circle " + self.arguments.joined(separator: " ")
        }
    }

    /// `circle serve` with an option; if the check let it through, the missing parent of
    /// `--data` makes it fail at once with 5 instead of serving.
    private static func serve(_ option: String, _ value: String, _ message: String) -> Case {
        Case(arguments: ["serve", "\(option)=\(value)", "--data", "/nonexistent/circle-data", "--jwt-secret", testSecret], message: message)
    }

    /// A client command that would fail to connect (status 2) if the check let it through.
    private static func client(_ command: [String], _ option: String, _ value: String, _ message: String) -> Case {
        Case(
            arguments: command + ["\(option)=\(value)", "--user", "alice", "--jwt-secret", testSecret, "--server", "ws://127.0.0.1:1/v1/ws"],
            message: message
        )
    }

    static let cases: [Case] = [
        serve("--jwt-issuer", "iss=x,audience=y", "--jwt-issuer: unknown part \"audience=y\""),
        serve("--jwt-issuer", "jwks=/f", "--jwt-issuer needs iss=ISSUER"),
        serve("--jwt-issuer", "iss=x", "--jwt-issuer x needs jwks=URL or jwks=FILE"),
        serve("--jwt-issuer", "iss=x,jwks=ftp://h/j", "is neither an https:// (or http://) URL nor a file path"),
        serve("--jwt-issuer", "iss=x,jwks=https://", "tokenIssuers[0].keys must be an https:// (or http://) URL"),
        serve("--jwks-fetch-timeout", "1ms", "--jwks-fetch-timeout must be a duration of at least 0.1 seconds"),
        Case(
            arguments: ["serve", "--jwt-issuer", "iss=x,jwks=/a", "--jwt-issuer", "iss=x,jwks=/b", "--data", "/nonexistent/circle-data", "--jwt-secret", testSecret],
            message: "tokenIssuers[1].issuer must be configured once, not \"x\""
        ),
        Case(
            arguments: ["serve", "--data", "/nonexistent/circle-data", "--jwt-secret", testSecret],
            environment: ["CIRCLE_JWT_ISSUERS": "iss=a,jwks=/a; iss=b"],
            message: "--jwt-issuer b needs jwks=URL or jwks=FILE"
        ),
        serve("--port", "99999", "--port must be from 0 to 65,535 (0 picks a free port), not 99999"),
        serve("--port", "70000", "--port must be from 0 to 65,535 (0 picks a free port), not 70000"),
        serve("--port", "65536", "--port must be from 0 to 65,535 (0 picks a free port), not 65536"),
        serve("--port", "-1", "--port must be from 0 to 65,535 (0 picks a free port), not -1"),
        Case(
            arguments: ["serve", "--data", "/nonexistent/circle-data", "--jwt-secret", testSecret],
            environment: ["CIRCLE_PORT": "99999"],
            message: "CIRCLE_PORT must be from 0 to 65,535 (0 picks a free port), not 99999"
        ),
        Case(
            arguments: ["serve", "--data", "/nonexistent/circle-data", "--jwt-secret", testSecret],
            environment: ["CIRCLE_PORT": "80a"],
            message: "CIRCLE_PORT must be a port number from 0 to 65,535, not \"80a\""
        ),
        serve("--max-post-bytes", "0", "--max-post-bytes must be from 1 to 1,073,741,824, not 0"),
        serve("--max-post-bytes", "1073741825", "--max-post-bytes must be from 1 to 1,073,741,824, not 1073741825"),
        serve("--max-media-bytes", "0", "--max-media-bytes must be from 1 to 1,099,511,627,776, not 0"),
        serve("--max-media-bytes", "2000000000000", "--max-media-bytes must be from 1 to 1,099,511,627,776, not 2000000000000"),
        serve("--max-message-bytes", "-5", "--max-message-bytes must be from 1 to 1,073,741,824, not -5"),
        serve("--max-message-bytes", "5000000000", "--max-message-bytes must be from 1 to 1,073,741,824, not 5000000000"),
        serve("--posts-per-second", "0", "--posts-per-second must be more than 0 and at most 1,000,000, not 0"),
        serve("--posts-per-second", "nan", "--posts-per-second must be more than 0 and at most 1,000,000, not nan"),
        serve("--posts-per-second", "2e6", "--posts-per-second must be more than 0 and at most 1,000,000, not 2000000"),
        serve("--post-burst", "0.5", "--post-burst must be from 1 to 1,000,000, not 0.5"),
        serve("--outbound-queue-bytes", "-1", "--outbound-queue-bytes must be from 1 to 1,073,741,824, not -1"),
        serve("--outbound-queue-bytes", "4294967296", "--outbound-queue-bytes must be from 1 to 1,073,741,824, not 4294967296"),
        serve("--max-connections-per-user", "0", "--max-connections-per-user must be from 1 to 1,000,000, not 0"),
        serve("--presence-limit", "-1", "--presence-limit must be from 0 to 1,000,000, not -1"),
        serve("--compression-min-bytes", "-1", "--compression-min-bytes must be from 0 to 1,073,741,824, not -1"),
        serve("--event-loops", "0", "--event-loops must be from 1 to 1024, not 0"),
        serve("--event-loops", "1025", "--event-loops must be from 1 to 1024, not 1025"),
        serve("--max-pending-connections", "-1", "--max-pending-connections must be from 0 to 1,000,000, not -1"),
        serve("--max-pending-connections-per-address", "1000001", "--max-pending-connections-per-address must be from 0 to 1,000,000, not 1000001"),
        serve("--max-requests-in-flight", "0", "--max-requests-in-flight must be from 1 to 4096, not 0"),
        client(["send", "general", "hi"], "--timeout", "0", "--timeout must be from 1 to 86,400 seconds, not 0"),
        client(["send", "general", "hi"], "--timeout", "86401", "--timeout must be from 1 to 86,400 seconds, not 86401"),
        client(["tail", "general"], "--timeout", "-3", "--timeout must be from 1 to 86,400 seconds, not -3"),
        client(["tail", "general"], "--since", "-1", "--since must be 0 or more, not -1"),
        client(["upload", "photo.jpg", "--circle", "general"], "--timeout", "0", "--timeout must be from 1 to 86,400 seconds, not 0"),
        client(["upload", "photo.jpg", "--circle", "general"], "--limit-rate", "0", "--limit-rate must be from 1 to 1,099,511,627,776 bytes per second, not 0"),
        client(["upload", "photo.jpg", "--circle", "general"], "--limit-rate", "9999999999G", "--limit-rate takes a byte count from 1 to 1024G per second, such as 500K or 2M; not \"9999999999G\""),
        client(["download", "abc"], "--timeout", "100000", "--timeout must be from 1 to 86,400 seconds, not 100000"),
        Case(
            arguments: ["send", "general", "hi", "--user", "alice", "--jwt-secret", testSecret, "--server", "ws://127.0.0.1:99999/v1/ws"],
            message: "--server ws://127.0.0.1:99999/v1/ws: the port must be from 1 to 65,535, not 99999"
        ),
        Case(arguments: ["ws", "ws://127.0.0.1:70000/"], message: "URL ws://127.0.0.1:70000/: the port must be from 1 to 65,535, not 70000"),
        Case(arguments: ["ws", "ws://127.0.0.1:1/", "--max-message-size=0"], message: "--max-message-size must be from 1 to 1,073,741,824 bytes, not 0"),
        Case(arguments: ["ws", "ws://127.0.0.1:1/", "--count=0"], message: "--count must be 1 or more, not 0"),
        Case(arguments: ["ws", "ws://127.0.0.1:1/", "--ping=0"], message: "--ping must be more than 0 and at most 86,400 seconds, not 0"),
        Case(arguments: ["ws", "ws://127.0.0.1:1/", "--wait=-1"], message: "--wait must be from 0 to 86,400 seconds, not -1"),
        Case(arguments: ["ws", "ws://127.0.0.1:1/", "--connect-timeout=1e9"], message: "--connect-timeout must be more than 0 and at most 86,400 seconds, not 1000000000"),
        Case(arguments: ["bench", "client", "--url", "ws://127.0.0.1:1/", "--size=0"], message: "--size must be from 1 to 100,000,000 bytes, not 0"),
        Case(arguments: ["bench", "client", "--url", "ws://127.0.0.1:1/", "--connections=10001"], message: "--connections must be from 1 to 10,000, not 10001"),
        Case(arguments: ["bench", "client", "--url", "ws://127.0.0.1:1/", "--in-flight=0"], message: "--in-flight must be from 1 to 10,000, not 0"),
        Case(arguments: ["bench", "client", "--url", "ws://127.0.0.1:1/", "--warmup=61"], message: "--warmup must be from 0 to 60 seconds, not 61"),
        Case(
            arguments: ["bench", "recovery", "--url", "ws://127.0.0.1:1/", "--token", "t", "--publisher-token", "p", "--subscribers=0"],
            message: "--subscribers must be from 1 to 20,000, not 0"
        ),
        Case(
            arguments: ["bench", "recovery", "--url", "ws://127.0.0.1:1/", "--token", "t", "--publisher-token", "p", "--rate=0"],
            message: "--rate must be more than 0 and at most 10,000 posts per second, not 0"
        ),
    ]

    @Test("a number out of range: status 64 and a sentence with the option, the value and the range", arguments: Self.cases)
    func refused(_ test: Case) async throws {
        let process = try CircleProcess(test.arguments, environment: test.environment)
        process.closeInput()
        let status = try await process.waitForExit(timeout: .seconds(60))
        #expect(status == 64, "\(process.stderr)")
        #expect(process.stderr.contains(test.message), "\(process.stderr)")
    }

    @Test("the ends of --port's range are taken: 0 picks a free port")
    func portZero() async throws {
        let data = FileManager.default.temporaryDirectory.appendingPathComponent("circle-port-\(UUID().uuidString)").path
        defer { try? FileManager.default.removeItem(atPath: data) }
        let serve = try CircleProcess(["serve", "--data", data, "--jwt-secret", testSecret], environment: ["CIRCLE_PORT": "0"])
        defer { serve.killNow() }
        try await serve.waitForStderr("Press Ctrl-C to stop.", timeout: .seconds(60))
        #expect(!serve.stderr.contains("127.0.0.1:8080/"), "\(serve.stderr)")
        serve.interrupt()
        #expect(try await serve.waitForExit(timeout: .seconds(30)) == 0, "\(serve.stderr)")
    }
}
