import CircleSocket
import CircleWire
import Foundation

/// Writes whole lines to stdout and stderr, unbuffered, so a reader at the other end of a pipe
/// sees every line as soon as it is complete. Lines from concurrent tasks never interleave.
///
/// Received messages go to stdout: `< TEXT` when stdout is a terminal, the bare text otherwise,
/// so that the output of a script is exactly what the server sent. Everything else (status,
/// pong times, errors) goes to stderr.
final class TerminalOutput: Sendable {
    /// How received binary messages are shown.
    enum BinaryFormat: String, CaseIterable, Sendable {
        case hex
        case base64
    }

    /// Whether stdout is a terminal (and received messages get the `< ` prefix).
    let stdoutIsTerminal: Bool
    /// Whether status lines are suppressed.
    let quiet: Bool
    let binaryFormat: BinaryFormat
    /// Serializes writes; `NSLock` is `Sendable`, so the class needs no unchecked conformance.
    private let lock = NSLock()

    init(quiet: Bool, binaryFormat: BinaryFormat, stdoutIsTerminal: Bool = isatty(STDOUT_FILENO) == 1) {
        self.quiet = quiet
        self.binaryFormat = binaryFormat
        self.stdoutIsTerminal = stdoutIsTerminal
    }

    /// Prints a received message to stdout.
    func received(_ message: WebSocketMessage) {
        let prefix = self.stdoutIsTerminal ? "< " : ""
        switch message {
        case .text(let text):
            self.write(prefix + text, to: STDOUT_FILENO)
        case .binary(let buffer):
            let bytes = Array(buffer.readableBytesView)
            self.write(prefix + Self.describeBinary(bytes, format: self.binaryFormat), to: STDOUT_FILENO)
        }
    }

    /// Prints a status line to stderr unless `--quiet`.
    func status(_ line: String) {
        guard !self.quiet else { return }
        self.write(line, to: STDERR_FILENO)
    }

    /// Prints a line to stderr, even with `--quiet`.
    func notice(_ line: String) {
        self.write(line, to: STDERR_FILENO)
    }

    /// Prints `circle ws: MESSAGE` to stderr, even with `--quiet`.
    func error(_ message: String) {
        self.write("circle ws: " + message, to: STDERR_FILENO)
    }

    /// `[binary N bytes] ENCODED`, the line shown for a binary message.
    static func describeBinary(_ bytes: [UInt8], format: BinaryFormat) -> String {
        let header = "[binary \(bytes.count) byte\(bytes.count == 1 ? "" : "s")]"
        guard !bytes.isEmpty else { return header }
        switch format {
        case .hex: return header + " " + Self.hex(bytes)
        case .base64: return header + " " + Data(bytes).base64EncodedString()
        }
    }

    static func hex(_ bytes: [UInt8]) -> String {
        Hex.encode(bytes)
    }

    /// A round-trip time as milliseconds with two decimals, e.g. `0.42 ms`.
    static func milliseconds(_ duration: Duration) -> String {
        let (seconds, attoseconds) = duration.components
        let milliseconds = Double(seconds) * 1000 + Double(attoseconds) / 1e15
        return String(format: "%.2f ms", milliseconds)
    }

    private func write(_ line: String, to fileDescriptor: Int32) {
        var bytes = Array(line.utf8)
        bytes.append(UInt8(ascii: "\n"))
        self.lock.lock()
        defer { self.lock.unlock() }
        bytes.withUnsafeBytes { buffer in
            var offset = 0
            while offset < buffer.count {
                let written = Foundation.write(fileDescriptor, buffer.baseAddress! + offset, buffer.count - offset)
                if written < 0 {
                    if errno == EINTR { continue }
                    return  // the reader went away; nothing sensible to do with the line
                }
                offset += written
            }
        }
    }
}
