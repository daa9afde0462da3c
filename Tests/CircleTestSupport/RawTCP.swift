import Dispatch
#if canImport(Glibc)
import Glibc
#endif
import Foundation

/// A plain TCP connection for adversarial tests: sends exactly the bytes given (half a request
/// head, a frame and its payload in one write, …) and tells how the server ended it.
///
/// The socket calls that wait block, so each read runs on a thread of its own: never on the
/// test's cooperative threads or Dispatch's pool, which the in-process server's tasks need (a
/// few blocked reads there held up every other connection's answers).
public final class RawTCP: @unchecked Sendable {
    // @unchecked: the descriptor is used by one test task at a time.
    public let fd: Int32

    /// How a read loop ended.
    public enum Ending: Equatable, Sendable {
        /// The server closed the connection (EOF).
        case closed
        /// The server reset the connection.
        case reset
        /// Nothing ended it within the time allowed.
        case timedOut
    }

    /// Connects to `127.0.0.1:port`, from `source` (another loopback address, such as 127.0.0.2,
    /// counts as another client) when given.
    public init(port: Int, source: String? = nil) throws {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw ServerProcessError("socket() failed: errno \(errno)") }
        if let source {
            var local = sockaddr_in()
            local.sin_family = sa_family_t(AF_INET)
            local.sin_addr.s_addr = inet_addr(source)
            let bound = withUnsafePointer(to: &local) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0 }
            }
            guard bound else {
                close(fd)
                throw ServerProcessError("cannot bind to \(source): errno \(errno)")
            }
        }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = UInt16(port).bigEndian
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0 }
        }
        guard connected else {
            close(fd)
            throw ServerProcessError("cannot connect to port \(port): errno \(errno)")
        }
        self.fd = fd
    }

    deinit {
        close(self.fd)
    }

    public func send(_ text: String) {
        self.send(Array(text.utf8))
    }

    /// Writes all of `bytes` with one `write` call where the kernel takes them at once.
    public func send(_ bytes: [UInt8]) {
        var offset = 0
        while offset < bytes.count {
            let written = bytes[offset...].withUnsafeBytes { write(self.fd, $0.baseAddress, $0.count) }
            if written <= 0 { return }
            offset += written
        }
    }

    /// Reads until the server ends the connection or `timeout` passes; returns what was read and
    /// how it ended.
    public func readToEnd(timeout: Duration) async -> (bytes: [UInt8], ending: Ending) {
        await self.read(timeout: timeout) { _ in false }
    }

    /// Reads until `done` says the bytes so far are enough, the connection ends or `timeout` passes.
    public func read(until done: @escaping @Sendable ([UInt8]) -> Bool, timeout: Duration) async -> [UInt8] {
        await self.read(timeout: timeout, until: done).bytes
    }

    private func read(timeout: Duration, until done: @escaping @Sendable ([UInt8]) -> Bool) async -> (bytes: [UInt8], ending: Ending) {
        let fd = self.fd
        return await withCheckedContinuation { continuation in
            Thread {
                let deadline = ContinuousClock.now + timeout
                var received: [UInt8] = []
                var buffer = [UInt8](repeating: 0, count: 65536)
                while !done(received) {
                    guard deadline > ContinuousClock.now else { return continuation.resume(returning: (received, .timedOut)) }
                    var poller = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
                    if poll(&poller, 1, 100) <= 0 { continue }
                    let count = Glibc.read(fd, &buffer, buffer.count)
                    if count > 0 {
                        received += buffer[0..<count]
                    } else if count == 0 {
                        return continuation.resume(returning: (received, .closed))
                    } else if errno != EINTR && errno != EAGAIN {
                        return continuation.resume(returning: (received, .reset))
                    }
                }
                continuation.resume(returning: (received, .timedOut))
            }.start()
        }
    }
}

/// Resident memory and CPU time of a process, from /proc (Linux).
public struct ProcessUsage: Sendable {
    public var residentBytes: Int
    public var cpuSeconds: Double

    public static func of(pid: Int32) -> ProcessUsage? {
        guard let status = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8),
            let line = status.split(separator: "\n").first(where: { $0.hasPrefix("VmRSS:") }),
            let kilobytes = Int(line.split(separator: " ", omittingEmptySubsequences: true)[1]),
            let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
            let close = stat.lastIndex(of: ")")
        else { return nil }
        // Fields after the command name: state is field 3; utime and stime are fields 14 and 15.
        let fields = stat[stat.index(after: close)...].split(separator: " ")
        guard fields.count > 13, let user = Double(fields[11]), let system = Double(fields[12]) else { return nil }
        let ticks = Double(sysconf(Int32(_SC_CLK_TCK)))
        return ProcessUsage(residentBytes: kilobytes * 1024, cpuSeconds: (user + system) / ticks)
    }
}
