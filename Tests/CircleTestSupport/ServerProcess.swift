import Foundation

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// `circle serve` as a separate process, so tests can kill it with SIGKILL and start it again
/// on the same port and data directory.
public final class ServerProcess: @unchecked Sendable {
    // @unchecked: driven by one test task at a time.
    public let port: Int
    public let dataDirectory: String
    private var process: SpawnedProcess?
    /// More `circle serve` options.
    public let arguments: [String]
    /// Run the server with this open-file limit (`ulimit -n`, soft and hard).
    public let openFileLimit: Int?
    /// Run the server on these CPUs only (`taskset -c`, e.g. "0" or "0-1").
    public let cpuList: String?
    /// Append the server's standard output and error to this file (each start adds to it);
    /// `nil` discards them.
    public let logFile: String?

    /// The server's process id while it runs.
    public var pid: Int32? { self.process?.processIdentifier }

    /// The `circle` binary built by `swift build`, found from this file's path.
    public static var binary: URL {
        URL(fileURLWithPath: #filePath)
            .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent(".build/debug/circle")
    }

    public init(port: Int, dataDirectory: String, arguments: [String] = [], openFileLimit: Int? = nil, cpuList: String? = nil, logFile: String? = nil) {
        self.port = port
        self.dataDirectory = dataDirectory
        self.arguments = arguments
        self.openFileLimit = openFileLimit
        self.cpuList = cpuList
        self.logFile = logFile
    }

    /// Starts the server and waits until `/healthz` answers.
    public func start() async throws {
        guard FileManager.default.isExecutableFile(atPath: Self.binary.path) else {
            throw ServerProcessError("\(Self.binary.path) is missing: run `swift build` first")
        }
        let arguments = [
            "serve", "--port", "\(self.port)", "--data", self.dataDirectory, "--jwt-secret", testSecret,
            "--log-level", "warning", "--posts-per-second", "10000", "--post-burst", "10000",
        ] + self.arguments
        let executable: String
        let commandArguments: [String]
        if self.openFileLimit != nil || self.cpuList != nil {
            // The shell sets the limit and becomes the server (exec; taskset execs too), so the
            // pid is the server's.
            let limit = self.openFileLimit.map { "ulimit -n \($0) && " } ?? ""
            let pin = self.cpuList.map { "taskset -c \($0) " } ?? ""
            executable = "/bin/sh"
            commandArguments = ["-c", "\(limit)exec \(pin)\"$0\" \"$@\"", Self.binary.path] + arguments
        } else {
            executable = Self.binary.path
            commandArguments = arguments
        }
        let input = try SpawnedProcess.open("/dev/null", forWriting: false)
        defer { close(input) }
        let output = try SpawnedProcess.open(self.logFile ?? "/dev/null", forWriting: true)
        // The child has its own copies of the descriptors; ours are closed once it runs.
        defer { close(output) }
        let process = try SpawnedProcess(
            executable: executable, arguments: commandArguments,
            standardInput: input, standardOutput: output, standardError: output
        )
        self.process = process
        // Generous: every suite runs at once on a loaded machine, and a node's migration may wait
        // for another node's. An early exit ends the wait at once (below).
        let deadline = ContinuousClock.now + .seconds(60)
        while ContinuousClock.now < deadline {
            var request = URLRequest(url: URL(string: "http://127.0.0.1:\(self.port)/healthz")!)
            request.timeoutInterval = 1
            if let (_, response) = try? await URLSession.shared.data(for: request), (response as? HTTPURLResponse)?.statusCode == 200 {
                return
            }
            if !process.isRunning {
                self.process = nil
                throw ServerProcessError("the server on port \(self.port) exited with \(process.terminationStatus) before it answered /healthz")
            }
            try await Task.sleep(for: .milliseconds(50))
        }
        throw ServerProcessError("the server did not come up on port \(self.port)")
    }

    /// SIGKILL: no graceful shutdown, no close frames, in-flight commits cut off.
    public func kill() {
        guard let process = self.process else { return }
        Foundation.kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
        self.process = nil
    }

    /// SIGTERM and wait.
    public func stop() {
        guard let process = self.process else { return }
        process.terminate()
        process.waitUntilExit()
        self.process = nil
    }

    /// A free port on loopback: bound for a moment and released, never listened on. The socket is
    /// close-on-exec, so that no child process forked meanwhile (a tmux server) can keep it.
    public static func freePort() throws -> Int {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = 0
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) == 0 && getsockname(fd, $0, &length) == 0 }
        }
        guard bound else { throw ServerProcessError("could not find a free port") }
        return Int(UInt16(bigEndian: address.sin_port))
    }
}

public struct ServerProcessError: Error, CustomStringConvertible {
    public var description: String
    public init(_ description: String) { self.description = description }
}
