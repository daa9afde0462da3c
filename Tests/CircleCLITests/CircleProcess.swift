import CircleTestSupport
import Foundation
import Testing

/// The `circle` executable running as a child process, with its stdin, stdout and stderr on pipes.
///
/// Every wait is bounded: a process still running at its deadline is killed and the test fails.
final class CircleProcess {
    struct NotFound: Error, CustomStringConvertible {
        var path: String
        var description: String {
            "the circle executable is not at \(path); build it first with `swift build` (the tests run the built binary)"
        }
    }

    struct TimedOut: Error, CustomStringConvertible {
        var description: String
    }

    /// `.build/debug/circle` under the package root, derived from this file's path.
    static var executablePath: String {
        URL(fileURLWithPath: #filePath)
            .deletingLastPathComponent()  // CircleCLITests
            .deletingLastPathComponent()  // Tests
            .deletingLastPathComponent()  // package root
            .appendingPathComponent(".build/debug/circle")
            .path
    }

    private let process: SpawnedProcess
    private let input = Pipe()
    private let stdoutCollector: OutputCollector
    private let stderrCollector: OutputCollector
    let arguments: [String]

    /// Starts `circle ARGUMENTS...`, in `directory` when given, with `environment` added to this
    /// process's environment.
    init(_ arguments: [String], directory: String? = nil, environment: [String: String] = [:]) throws {
        // Writing to the stdin of a process that has exited must fail with EPIPE, not kill the runner.
        signal(SIGPIPE, SIG_IGN)
        let path = Self.executablePath
        guard FileManager.default.isExecutableFile(atPath: path) else { throw NotFound(path: path) }
        self.arguments = arguments
        let output = Pipe()
        let error = Pipe()
        self.process = try SpawnedProcess(
            executable: path,
            arguments: arguments,
            directory: directory,
            environment: environment.isEmpty ? nil : ProcessInfo.processInfo.environment.merging(environment) { $1 },
            standardInput: self.input.fileHandleForReading.fileDescriptor,
            standardOutput: output.fileHandleForWriting.fileDescriptor,
            standardError: error.fileHandleForWriting.fileDescriptor
        )
        // This process's copies of the child's pipe ends go, so the readers see end of file.
        try self.input.fileHandleForReading.close()
        try output.fileHandleForWriting.close()
        try error.fileHandleForWriting.close()
        self.stdoutCollector = OutputCollector(output.fileHandleForReading)
        self.stderrCollector = OutputCollector(error.fileHandleForReading)
        self.stdoutCollector.start()
        self.stderrCollector.start()
    }

    deinit {
        if self.process.isRunning {
            kill(self.process.processIdentifier, SIGKILL)
        }
    }

    var stdout: String { self.stdoutCollector.text }
    var stderr: String { self.stderrCollector.text }

    /// The non-empty lines written to stdout so far.
    var stdoutLines: [String] {
        self.stdout.split(separator: "\n").map(String.init)
    }

    /// Writes `line` and a newline to the process's stdin.
    func send(line: String) throws {
        try self.input.fileHandleForWriting.write(contentsOf: Data((line + "\n").utf8))
    }

    /// Closes the process's stdin (end of input).
    func closeInput() {
        try? self.input.fileHandleForWriting.close()
    }

    /// Sends SIGKILL: the process dies at once, as an app killed by the system would.
    func killNow() {
        kill(self.process.processIdentifier, SIGKILL)
    }

    /// Sends `number` (e.g. SIGHUP) to the process.
    func deliver(_ number: Int32) {
        kill(self.process.processIdentifier, number)
    }

    /// Sends SIGINT, as Ctrl-C would.
    func interrupt() {
        self.process.interrupt()
    }

    /// Waits until stdout contains `text`.
    func waitForStdout(_ text: String, timeout: Duration = .seconds(20)) async throws {
        try await self.wait(timeout: timeout, "stdout to contain \"\(text)\"") { self.stdout.contains(text) }
    }

    /// Waits until stderr contains `text`.
    func waitForStderr(_ text: String, timeout: Duration = .seconds(20)) async throws {
        try await self.wait(timeout: timeout, "stderr to contain \"\(text)\"") { self.stderr.contains(text) }
    }

    /// Waits until stderr satisfies `condition`.
    func waitForStderr(
        _ what: String,
        timeout: Duration = .seconds(20),
        until condition: @escaping (String) -> Bool
    ) async throws {
        try await self.wait(timeout: timeout, "stderr: \(what)") { condition(self.stderr) }
    }

    /// Waits for the process to exit and for its output to be read; returns its exit status.
    /// Kills the process and throws if it is still running after `timeout`.
    @discardableResult
    func waitForExit(timeout: Duration = .seconds(20)) async throws -> Int32 {
        try await self.wait(timeout: timeout, "the process to exit") { !self.process.isRunning }
        try await self.wait(timeout: .seconds(5), "stdout and stderr to end") {
            self.stdoutCollector.isFinished && self.stderrCollector.isFinished
        }
        return self.process.terminationStatus
    }

    private func wait(timeout: Duration, _ what: String, until condition: () -> Bool) async throws {
        let deadline = ContinuousClock.now + timeout
        while !condition() {
            guard ContinuousClock.now < deadline else {
                let running = self.process.isRunning
                if running { kill(self.process.processIdentifier, SIGKILL) }
                throw TimedOut(
                    description: """
                        timed out after \(timeout) waiting for \(what)\(running ? "; killed the process" : "")
                        command: circle \(self.arguments.joined(separator: " "))
                        stdout: \(self.stdout)
                        stderr: \(self.stderr)
                        """
                )
            }
            try await Task.sleep(for: .milliseconds(20))
        }
    }
}

/// Reads a pipe to its end on a thread of its own and keeps what it read.
final class OutputCollector: @unchecked Sendable {
    // @unchecked: `data` and `finished` are only touched while `lock` is held.
    private let lock = NSLock()
    private var data = Data()
    private var finished = false
    private let handle: FileHandle

    init(_ handle: FileHandle) {
        self.handle = handle
    }

    func start() {
        let thread = Thread { [self] in
            while true {
                let chunk = self.handle.availableData
                if chunk.isEmpty { break }
                self.lock.withLock { self.data.append(chunk) }
            }
            self.lock.withLock { self.finished = true }
        }
        thread.start()
    }

    var text: String {
        self.lock.withLock { String(decoding: self.data, as: UTF8.self) }
    }

    var isFinished: Bool {
        self.lock.withLock { self.finished }
    }
}

/// A loopback port that nothing listens on (see `ServerProcess.freePort`).
func unusedPort() throws -> Int {
    try ServerProcess.freePort()
}
