import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// A child process started with `posix_spawn`, for the tests.
///
/// Why not Foundation's `Process`: on Linux its `run()` scans `/proc/self/fd` and copies 256
/// bytes of every dirent's name (`findMaximumOpenFromProcSelfFD()`), reading past short records;
/// when that reaches an unmapped page the whole test process dies with signal 11
/// (swiftlang/swift-corelibs-foundation#5472, fixed upstream, not in Swift 6.3.1). It did, twice
/// in a day of full runs here. This does what the tests need of `Process` without that scan:
/// the child's descriptors above 2 are closed with `posix_spawn_file_actions_addclosefrom_np`.
public final class SpawnedProcess: @unchecked Sendable {
    // @unchecked: `waitStatus` is only touched while `lock` is held.
    public let processIdentifier: pid_t
    private let lock = NSLock()
    private var waitStatus: Int32?

    public struct SpawnError: Error, CustomStringConvertible {
        public var code: Int32
        public var executable: String
        public var description: String { "posix_spawn \(self.executable) failed: \(String(cString: strerror(self.code)))" }
    }

    /// Starts `executable` with `arguments`, its stdin, stdout and stderr on the given
    /// descriptors, in `directory` when given, with `environment` (this process's when `nil`),
    /// every signal at its default disposition and none blocked.
    public init(
        executable: String,
        arguments: [String],
        directory: String? = nil,
        environment: [String: String]? = nil,
        standardInput: Int32,
        standardOutput: Int32,
        standardError: Int32
    ) throws {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_adddup2(&actions, standardInput, 0)
        posix_spawn_file_actions_adddup2(&actions, standardOutput, 1)
        posix_spawn_file_actions_adddup2(&actions, standardError, 2)
        // glibc's (2.34 and 2.29 on) GNU extensions, which Swift's Glibc module does not import.
        guard let closeFrom = Self.closeFrom, let changeDirectory = Self.changeDirectory else {
            throw SpawnError(code: ENOSYS, executable: executable)
        }
        _ = closeFrom(&actions, 3)
        if let directory { _ = changeDirectory(&actions, directory) }

        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        var all = sigset_t()
        sigfillset(&all)
        posix_spawnattr_setsigdefault(&attributes, &all)
        var none = sigset_t()
        sigemptyset(&none)
        posix_spawnattr_setsigmask(&attributes, &none)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK))

        let argv = ([executable] + arguments).map { strdup($0) } + [nil]
        let envp = (environment ?? ProcessInfo.processInfo.environment).map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer {
            for pointer in argv { free(pointer) }
            for pointer in envp { free(pointer) }
        }
        var pid = pid_t()
        let status = posix_spawn(&pid, executable, &actions, &attributes, argv, envp)
        guard status == 0 else { throw SpawnError(code: status, executable: executable) }
        self.processIdentifier = pid
    }

    private typealias CloseFrom = @convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>?, Int32) -> Int32
    private typealias ChangeDirectory = @convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>?, UnsafePointer<CChar>?) -> Int32
    private static let closeFrom: CloseFrom? = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "posix_spawn_file_actions_addclosefrom_np")
        .map { unsafeBitCast($0, to: CloseFrom.self) }
    private static let changeDirectory: ChangeDirectory? = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "posix_spawn_file_actions_addchdir_np")
        .map { unsafeBitCast($0, to: ChangeDirectory.self) }

    deinit {
        if self.isRunning {
            kill(self.processIdentifier, SIGKILL)
            var status: Int32 = 0
            _ = waitpid(self.processIdentifier, &status, 0)
        }
    }

    /// Whether the child has not exited yet (reaps it when it has).
    public var isRunning: Bool {
        self.lock.withLock {
            guard self.waitStatus == nil else { return false }
            var status: Int32 = 0
            let reaped = waitpid(self.processIdentifier, &status, WNOHANG)
            if reaped == 0 { return true }
            self.waitStatus = reaped == self.processIdentifier ? status : -1
            return false
        }
    }

    /// As `Process.terminationStatus`: the exit status, or the signal that ended the child.
    /// Only meaningful once ``isRunning`` is `false`.
    public var terminationStatus: Int32 {
        self.lock.withLock {
            guard let status = self.waitStatus, status >= 0 else { return -1 }
            let signal = status & 0x7F
            return signal == 0 ? (status >> 8) & 0xFF : signal
        }
    }

    /// Sends SIGINT.
    public func interrupt() {
        kill(self.processIdentifier, SIGINT)
    }

    /// Sends SIGTERM.
    public func terminate() {
        kill(self.processIdentifier, SIGTERM)
    }

    /// Blocks until the child has exited (reaping it). Call it off the cooperative pool, or
    /// after a signal that ends the child at once.
    public func waitUntilExit() {
        if self.lock.withLock({ self.waitStatus != nil }) { return }
        var status: Int32 = 0
        var reaped: pid_t
        repeat {
            reaped = waitpid(self.processIdentifier, &status, 0)
        } while reaped == -1 && errno == EINTR
        self.lock.withLock {
            // `isRunning` on another thread may have reaped it first (then this saw ECHILD).
            if self.waitStatus == nil { self.waitStatus = reaped == self.processIdentifier ? status : -1 }
        }
    }

    /// What ``run(_:_:timeout:)`` saw.
    public struct Finished: Sendable {
        public var status: Int32
        public var stdout: String
        public var stderr: String
    }

    /// Runs `executable` with `arguments` to its end (stdin from /dev/null), at most `timeout`:
    /// then it is killed and this throws.
    public static func run(_ executable: String, _ arguments: [String], timeout: Duration = .seconds(60)) async throws -> Finished {
        let base = NSTemporaryDirectory() + "spawned-\(getpid())-\(UUID().uuidString)"
        defer {
            unlink(base + ".out")
            unlink(base + ".err")
        }
        let process: SpawnedProcess
        do {
            let input = try Self.open("/dev/null", forWriting: false)
            defer { close(input) }
            let output = try Self.open(base + ".out", forWriting: true)
            defer { close(output) }
            let errors = try Self.open(base + ".err", forWriting: true)
            defer { close(errors) }
            process = try SpawnedProcess(executable: executable, arguments: arguments, standardInput: input, standardOutput: output, standardError: errors)
        }
        let deadline = ContinuousClock.now + timeout
        while process.isRunning {
            guard ContinuousClock.now < deadline else {
                kill(process.processIdentifier, SIGKILL)
                process.waitUntilExit()
                let stderr = (try? String(contentsOfFile: base + ".err", encoding: .utf8)) ?? ""
                throw TimedOut(description: "\(executable) \(arguments) still running after \(timeout); stderr: \(stderr)")
            }
            try await Task.sleep(for: .milliseconds(20))
        }
        return Finished(
            status: process.terminationStatus,
            stdout: (try? String(contentsOfFile: base + ".out", encoding: .utf8)) ?? "",
            stderr: (try? String(contentsOfFile: base + ".err", encoding: .utf8)) ?? ""
        )
    }

    public struct TimedOut: Error, CustomStringConvertible {
        public var description: String
    }

    /// Opens `path` for the child's standard input (read) or output (append, created when
    /// missing); the caller closes the descriptor once the child has started.
    public static func open(_ path: String, forWriting: Bool) throws -> Int32 {
        let fd = forWriting ? Glibc.open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0o644) : Glibc.open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw SpawnError(code: errno, executable: path) }
        return fd
    }
}
