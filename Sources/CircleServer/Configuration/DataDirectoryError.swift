#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Why the server cannot use its data directory: which path is wrong, and how.
///
/// Thrown by ``CircleServer/init(configuration:store:eventLoopGroup:logger:)`` before anything
/// is opened. The ``description`` names the path and what to do; ``code`` tells the cases apart
/// for a caller that words its own sentence (as `circle serve` does).
public struct DataDirectoryError: Error, CustomStringConvertible, Sendable {
    /// The kinds of failure, as a struct so that more can be added.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        private enum Base: String, Hashable, Sendable {
            case inUse, parentMissing, notADirectory, notWritable, readOnly, unusable
        }

        private let base: Base

        private init(_ base: Base) { self.base = base }

        /// Another process serves the directory: it holds the directory's lock (``holder``).
        public static let inUse = Code(.inUse)
        /// The directory does not exist and cannot be made: its parent (``culprit``) does not
        /// exist either.
        public static let parentMissing = Code(.parentMissing)
        /// The path, or a directory on the way to it (``culprit``), is a file.
        public static let notADirectory = Code(.notADirectory)
        /// This user may not write in (or enter) ``culprit``.
        public static let notWritable = Code(.notWritable)
        /// ``culprit`` is on a read-only file system.
        public static let readOnly = Code(.readOnly)
        /// Anything else (``errno`` says what): no space, a name too long, a loop of links.
        public static let unusable = Code(.unusable)

        public var description: String { self.base.rawValue }
    }

    /// The process that holds a data directory's lock, as far as it can be told from here.
    public struct Holder: Sendable, CustomStringConvertible {
        /// Its process id, as it wrote it into the lock file; `nil` before it has.
        public var pid: Int32?
        /// Its host name, when it is not this machine's (a data directory on a shared mount).
        public var host: String?
        /// Its command line (`/proc/PID/cmdline`), when it runs on this machine and may be read.
        public var commandLine: String?

        public init(pid: Int32?, host: String?, commandLine: String?) {
            self.pid = pid
            self.host = host
            self.commandLine = commandLine
        }

        /// `process 4242 (circle serve --data /srv/circle)`, `process 4242 on host b`, or
        /// `another process` when its PID is not written yet.
        public var description: String {
            guard let pid = self.pid else { return "another process (it has not written its PID yet)" }
            if let host = self.host { return "process \(pid) on host \(host)" }
            if let commandLine = self.commandLine { return "process \(pid) (\(commandLine))" }
            return "process \(pid)"
        }
    }

    /// What is wrong.
    public var code: Code
    /// The data directory.
    public var path: String
    /// The path that is at fault: the data directory itself, its missing parent, a file on the
    /// way, the lock file.
    public var culprit: String
    /// With ``Code/inUse``: the process that holds the lock.
    public var holder: Holder?
    /// The system's error number behind it, if any.
    public var errno: Int32?

    public init(_ code: Code, path: String, culprit: String? = nil, holder: Holder? = nil, errno: Int32? = nil) {
        self.code = code
        self.path = path
        self.culprit = culprit ?? path
        self.holder = holder
        self.errno = errno
    }

    /// The system's text for ``errno`` (`No space left on device`), or `unknown error`.
    public var reason: String {
        guard let errno = self.errno, let text = strerror(errno) else { return "unknown error" }
        return String(cString: text)
    }

    /// One sentence: which path, what is wrong, what to do.
    public var description: String {
        switch self.code {
        case .inUse:
            return "the data directory \(self.path) is in use by \(self.holder?.description ?? "another process"), which holds its lock \(self.culprit) — stop that server first, or give this one another data directory"
        case .parentMissing:
            return "cannot create the data directory \(self.path): its parent \(self.culprit) does not exist — create it first (mkdir -p \(self.culprit)), or check the path for a typo"
        case .notADirectory where self.culprit == self.path:
            return "the data directory \(self.path) is a file, not a directory — give the path of a directory (it is created if missing)"
        case .notADirectory:
            return "cannot use the data directory \(self.path): \(self.culprit) is a file, not a directory — check the path"
        case .notWritable:
            return "no permission to write in \(self.culprit) (for the data directory \(self.path)) — run the server as a user who may, or give a directory this user owns"
        case .readOnly:
            return "the data directory \(self.path) is on a read-only file system (\(self.culprit)) — give a directory on a writable one"
        default:
            if self.path.isEmpty { return "no data directory was given (the path is empty) — give the path of a directory" }
            return "cannot use the data directory \(self.path): \(self.culprit): \(self.reason)"
        }
    }
}
