import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Standard output and standard error for every command, written with `write(2)`.
///
/// `FileHandle.write(_:)` traps when the reader has gone away (`circle tail | head -1`); these
/// never do. When stdout's reader has gone, the process ends at once and quietly, the way a
/// classic Unix filter ends on SIGPIPE (status 141 in the shell). A gone stderr is ignored.
enum Console {
    private static let lock = NSLock()

    /// Writes `text` to stdout as is (add the newline yourself).
    static func out(_ text: String) {
        if !self.write(text, to: STDOUT_FILENO) { self.stdoutClosed() }
    }

    /// Writes `text` and a newline to stdout.
    static func line(_ text: String) {
        self.out(text + "\n")
    }

    /// Writes `text` to stderr as is.
    static func err(_ text: String) {
        _ = self.write(text, to: STDERR_FILENO)
    }

    /// Whether stdout, stderr or stdin is a terminal.
    static var stdoutIsTerminal: Bool { isatty(STDOUT_FILENO) == 1 }
    static var stderrIsTerminal: Bool { isatty(STDERR_FILENO) == 1 }
    static var stdinIsTerminal: Bool { isatty(STDIN_FILENO) == 1 }

    /// Whether a terminal on `descriptor` should get colours: not when `NO_COLOR` is set
    /// (https://no-color.org) or `TERM` is `dumb` or missing.
    static func colours(on descriptor: Int32) -> Bool {
        let environment = ProcessInfo.processInfo.environment
        guard isatty(descriptor) == 1, environment["NO_COLOR"] == nil else { return false }
        guard let term = environment["TERM"], !term.isEmpty, term != "dumb" else { return false }
        return true
    }

    /// Returns `false` when the reader has gone away (EPIPE) or the descriptor is unusable.
    private static func write(_ text: String, to descriptor: Int32) -> Bool {
        let bytes = Array(text.utf8)
        guard !bytes.isEmpty else { return true }
        self.lock.lock()
        defer { self.lock.unlock() }
        return bytes.withUnsafeBytes { buffer -> Bool in
            guard let base = buffer.baseAddress else { return true }
            var offset = 0
            while offset < buffer.count {
                let written = Foundation.write(descriptor, base + offset, buffer.count - offset)
                if written < 0 {
                    if errno == EINTR || errno == EAGAIN { continue }
                    return false
                }
                offset += written
            }
            return true
        }
    }

    /// Ends the process as a filter whose reader went away does: by SIGPIPE, printing nothing.
    private static func stdoutClosed() -> Never {
        signal(SIGPIPE, SIG_DFL)
        raise(SIGPIPE)
        exit(141)
    }
}
