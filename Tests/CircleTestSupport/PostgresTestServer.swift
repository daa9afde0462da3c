import Foundation
import Logging
import PostgresNIO

/// The PostgreSQL the tests use: the one `CIRCLE_TEST_POSTGRES_URL` names (scripts/test starts one
/// with scripts/postgres-test-server and exports it), or else one this process starts with that
/// script on first use, which stops it when the process exits. Each test takes a database of its
/// own from ``freshDatabase()``.
public actor PostgresTestServer {
    public static let shared = PostgresTestServer()

    /// The one start of the server; concurrent first callers wait for the same one.
    private var starting: Task<URLComponents, any Error>?
    private var counter = 0

    /// The server's URL (to the database `circle`).
    public func url() async throws -> URLComponents {
        if let starting { return try await starting.value }
        let starting = Task<URLComponents, any Error> {
            let text: String
            if let given = ProcessInfo.processInfo.environment["CIRCLE_TEST_POSTGRES_URL"], !given.isEmpty {
                text = given
            } else {
                text = try await Self.startServer().url
            }
            guard let components = URLComponents(string: text) else {
                throw PostgresTestServerError("not a URL: \(text)")
            }
            return components
        }
        self.starting = starting
        return try await starting.value
    }

    /// A new, empty database on the server; its `postgres://` URL.
    public func freshDatabase() async throws -> String {
        var components = try await self.url()
        self.counter += 1
        let name = "t\(getpid())_\(self.counter)_\(UInt32.random(in: 0...UInt32.max))"
        guard let base = components.string else { throw PostgresTestServerError("cannot build the server's URL") }
        // A database name cannot be a bind parameter; this one is made of [a-z0-9_] only.
        _ = try await Self.withConnection(to: base) { connection, logger in
            try await connection.query(PostgresQuery(unsafeSQL: "CREATE DATABASE \(name)"), logger: logger)
        }
        components.path = "/" + name
        components.queryItems = [URLQueryItem(name: "sslmode", value: "disable")]
        guard let url = components.string else { throw PostgresTestServerError("cannot build a URL for \(name)") }
        return url
    }

    /// A PostgreSQL of its own for a test that restarts it; stopped when the test process exits
    /// or by ``stop()``.
    public struct Private: Sendable {
        /// To the database `circle`.
        public var url: String
        public var directory: String

        /// Restarts it as after a crash (`pg_ctl restart -m immediate`): connections are cut.
        public func restart() async throws {
            _ = try await PostgresTestServer.script(["restart", self.directory])
        }

        public func stop() async throws {
            _ = try await PostgresTestServer.script(["stop", self.directory])
        }
    }

    public static func startPrivate() async throws -> Private {
        let started = try await Self.startServer()
        return Private(url: started.url, directory: started.directory)
    }

    /// Runs scripts/postgres-test-server start, which prints `CIRCLE_TEST_POSTGRES_URL=…` and `PGDIR=…`.
    private static func startServer() async throws -> (url: String, directory: String) {
        let text = try await Self.script(["start", "--watch", "\(getpid())"])
        func value(_ key: String) -> String? {
            text.split(separator: "\n").first(where: { $0.hasPrefix(key + "=") }).map { String($0.dropFirst(key.count + 1)) }
        }
        guard let url = value("CIRCLE_TEST_POSTGRES_URL"), let directory = value("PGDIR") else {
            throw PostgresTestServerError("scripts/postgres-test-server start printed no URL: \(text)")
        }
        return (url, directory)
    }

    /// Runs scripts/postgres-test-server with `arguments`; its standard output.
    static func script(_ arguments: [String]) async throws -> String {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let script = root.appendingPathComponent("scripts/postgres-test-server").path
        let output = Pipe()
        let input = try SpawnedProcess.open("/dev/null", forWriting: false)
        defer { close(input) }
        let process = try SpawnedProcess(
            executable: "/bin/bash", arguments: [script] + arguments,
            standardInput: input, standardOutput: output.fileHandleForWriting.fileDescriptor, standardError: 2
        )
        // Ours goes, so that the read below sees end of file when the script (and what it
        // started in the background, which must not hold stdout) is done.
        try output.fileHandleForWriting.close()
        // initdb and a start take a few seconds, bounded by the script's own timeouts. The blocking
        // read and wait run on a thread of their own, not on the tests' cooperative pool.
        let (status, text) = await withCheckedContinuation { (continuation: CheckedContinuation<(Int32, String), Never>) in
            Thread.detachNewThread {
                let data = output.fileHandleForReading.readDataToEndOfFile()
                process.waitUntilExit()
                continuation.resume(returning: (process.terminationStatus, String(decoding: data, as: UTF8.self)))
            }
        }
        guard status == 0 else {
            throw PostgresTestServerError("\(script) \(arguments.joined(separator: " ")) failed (exit \(status)): \(text)")
        }
        return text
    }
}

public struct PostgresTestServerError: Error, CustomStringConvertible {
    public var description: String
    init(_ description: String) { self.description = description }
}
