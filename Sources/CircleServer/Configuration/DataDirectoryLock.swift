import Logging
import NIOConcurrencyHelpers

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The lock a server holds on its data directory for as long as it serves from it: an exclusive
/// `flock(2)` on `circle.lock` in the directory, which holds the server's PID and host name.
///
/// Two servers on one SQLite store would both serve, but a post through one would never reach
/// the other's subscribers live (SQLite has no signal between processes). So the second is
/// refused, with the holder's PID and command line. The kernel drops the lock when the holder
/// exits, however it exits: a lock file left by a process that was killed holds only a stale PID
/// and does not block the next start. The file is never removed (removing a lock file while
/// another process opens it would let two processes each hold a lock on a different file).
final class DataDirectoryLock: Sendable {
    /// The lock file's name in the data directory.
    static let fileName = "circle.lock"

    /// The open lock file; `nil` once released.
    private let descriptor: NIOLockedValueBox<Int32?>

    private init(descriptor: Int32) {
        self.descriptor = NIOLockedValueBox(descriptor)
    }

    deinit {
        self.release()
    }

    /// Takes the lock on `directory` (which must exist), or throws ``DataDirectoryError`` with
    /// ``DataDirectoryError/Code/inUse`` and the holder when another process has it. Where the
    /// file system cannot lock (some network mounts), it logs a warning and goes on unlocked.
    static func acquire(directory: String, logger: Logger) throws(DataDirectoryError) -> DataDirectoryLock {
        let path = directory.hasSuffix("/") ? directory + Self.fileName : directory + "/" + Self.fileName
        let fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0o600)
        if fd < 0 {
            let code = errno
            // A lock file this user may read but not write: another user's server may hold it.
            let readOnly = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW)
            guard readOnly >= 0 else { throw Self.openError(code, directory: directory, path: path) }
            defer { _ = close(readOnly) }
            guard Self.isHeld(readOnly) else { throw Self.openError(code, directory: directory, path: path) }
            throw DataDirectoryError(.inUse, path: directory, culprit: path, holder: Self.holder(readOnly))
        }
        while flock(fd, LOCK_EX | LOCK_NB) != 0 {
            let code = errno
            if code == EINTR { continue }
            if code == EWOULDBLOCK {
                let holder = Self.holder(fd)
                _ = close(fd)
                throw DataDirectoryError(.inUse, path: directory, culprit: path, holder: holder, errno: code)
            }
            logger.warning(
                "cannot lock the data directory: a second server on it would not be refused",
                metadata: ["circle.data.lock": "\(path)", "error": "\(String(cString: strerror(code)))"]
            )
            break
        }
        Self.writeOwner(fd)
        return DataDirectoryLock(descriptor: fd)
    }

    /// Releases the lock (at most once): the lock file is emptied, so that it names no process,
    /// and closed.
    func release() {
        let fd = self.descriptor.withLockedValue { descriptor -> Int32? in
            defer { descriptor = nil }
            return descriptor
        }
        guard let fd else { return }
        _ = ftruncate(fd, 0)
        // Unlocked explicitly, not only by the close: a child process forked by this one (a
        // `Process` run) holds a copy of the descriptor until it execs, and the lock belongs to
        // the open file, so a close alone would leave the directory locked for that moment (a
        // server restarted at once in the same process was refused, seen in the test suite).
        _ = flock(fd, LOCK_UN)
        _ = close(fd)
    }

    /// Whether another process holds the lock on the open file `fd`.
    private static func isHeld(_ fd: Int32) -> Bool {
        guard flock(fd, LOCK_SH | LOCK_NB) != 0 else {
            _ = flock(fd, LOCK_UN)
            return false
        }
        return errno == EWOULDBLOCK
    }

    private static func openError(_ code: Int32, directory: String, path: String) -> DataDirectoryError {
        switch code {
        case EACCES, EPERM: DataDirectoryError(.notWritable, path: directory, culprit: path, errno: code)
        case EROFS: DataDirectoryError(.readOnly, path: directory, culprit: directory, errno: code)
        default: DataDirectoryError(.unusable, path: directory, culprit: path, errno: code)
        }
    }

    /// Writes `PID\nHOST\n` over the file's content.
    private static func writeOwner(_ fd: Int32) {
        let text = "\(getpid())\n\(Self.hostName() ?? "")\n"
        _ = ftruncate(fd, 0)
        _ = text.withCString { pwrite(fd, $0, strlen($0), 0) }
    }

    /// Who holds the lock, from what it wrote into the file and, on this machine, `/proc`.
    private static func holder(_ fd: Int32) -> DataDirectoryError.Holder {
        var buffer = [UInt8](repeating: 0, count: 512)
        let count = buffer.withUnsafeMutableBytes { pread(fd, $0.baseAddress, $0.count, 0) }
        let text = count > 0 ? String(decoding: buffer.prefix(count), as: UTF8.self) : ""
        let lines = text.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        guard let pid = lines.first.flatMap({ Int32($0) }), pid > 0 else {
            return DataDirectoryError.Holder(pid: nil, host: nil, commandLine: nil)
        }
        if pid == getpid() {
            return DataDirectoryError.Holder(pid: pid, host: nil, commandLine: "this very process: another CircleServer in it serves the directory")
        }
        let host = lines.count > 1 && !lines[1].isEmpty ? lines[1] : nil
        if let host, host != Self.hostName() {
            return DataDirectoryError.Holder(pid: pid, host: host, commandLine: nil)
        }
        return DataDirectoryError.Holder(pid: pid, host: nil, commandLine: Self.commandLine(of: pid))
    }

    /// `/proc/PID/cmdline` with its arguments separated by spaces (at most 300 characters), or
    /// `nil` where there is no such file or it may not be read.
    static func commandLine(of pid: Int32) -> String? {
        let fd = open("/proc/\(pid)/cmdline", O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { _ = close(fd) }
        var buffer = [UInt8](repeating: 0, count: 4096)
        let count = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
        guard count > 0 else { return nil }
        let arguments = buffer.prefix(count).split(separator: 0).map { String(decoding: $0, as: UTF8.self) }
        let line = Self.redacted(arguments).joined(separator: " ")
        guard !line.isEmpty else { return nil }
        return line.count > 300 ? String(line.prefix(299)) + "…" : line
    }

    /// The arguments with the values of secrets replaced by `***` (`--jwt-secret S`,
    /// `--token=T`): the sentence that names the holder ends up in terminals and logs.
    static func redacted(_ arguments: [String]) -> [String] {
        let secrets: Set<String> = ["--jwt-secret", "--token", "--publisher-token"]
        var result: [String] = []
        var hideNext = false
        for argument in arguments {
            if hideNext {
                result.append("***")
                hideNext = false
            } else if secrets.contains(argument) {
                result.append(argument)
                hideNext = true
            } else if let equals = argument.firstIndex(of: "="), secrets.contains(String(argument[..<equals])) {
                result.append(argument[..<equals] + "=***")
            } else {
                result.append(argument)
            }
        }
        return result
    }

    private static func hostName() -> String? {
        var buffer = [UInt8](repeating: 0, count: 256)
        let result = buffer.withUnsafeMutableBufferPointer { bytes in
            bytes.baseAddress!.withMemoryRebound(to: CChar.self, capacity: bytes.count) { gethostname($0, bytes.count - 1) }
        }
        guard result == 0 else { return nil }
        let name = String(decoding: buffer.prefix { $0 != 0 }, as: UTF8.self)
        return name.isEmpty ? nil : name
    }
}
