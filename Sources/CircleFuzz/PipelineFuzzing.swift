import CircleServer
import Foundation
import Logging
import NIOConcurrencyHelpers

#if canImport(Glibc)
import Glibc
#endif

/// The `pipeline` target: a client's byte stream through a real Circle server on loopback, so
/// through everything its connections are made of — HTTP/1.1 parsing, the timeouts, routing and
/// the routes, the WebSocket upgrade and what follows it in the same read, the frame reader, the
/// chat and echo sessions.
///
/// The server runs in this process (a trap on any of its threads is a crash of the input being
/// run), on a fresh SQLite store with the echo endpoint, compression and the development-token
/// route on, and a circle `general` owned by user `fuzz`. Every `@TOKEN@` in an input becomes a
/// valid token for `fuzz`, so the fuzzer can pass the upgrade's token check.
///
/// The first byte of an input says how the rest is cut: 0 sends it in one write (so everything
/// after an upgrade request arrives in the same read), otherwise in pieces of 1 to 4 × that
/// byte, with a millisecond between them so that each tends to be a read of its own. Then the
/// client reads the answers until the server closes or falls silent, and leaves. Every 64th
/// input is followed by a `/healthz` request, which must be answered within 5 s, or the run
/// fails as a hang.
enum PipelineFuzzing {
    static let placeholder = Array("@TOKEN@".utf8)

    struct Target: Sendable {
        var port: UInt16
        var token: [UInt8]
    }

    /// The server, started on first use and kept for the whole run.
    static let target: Target = {
        signal(SIGPIPE, SIG_IGN)
        let result = NIOLockedValueBox<Result<Target, any Error>?>(nil)
        let started = DispatchSemaphore(value: 0)
        Task {
            let outcome: Result<Target, any Error>
            do {
                outcome = .success(try await Self.start())
            } catch {
                outcome = .failure(error)
            }
            result.withLockedValue { $0 = outcome }
            started.signal()
        }
        started.wait()
        do {
            let target = try result.withLockedValue({ $0 })!.get()
            try Self.createCircle(target)
            return target
        } catch {
            fatalError("the pipeline target's server did not start: \(error)")
        }
    }()

    private static func start() async throws -> Target {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("circle-fuzz-\(getpid())").path
        try? FileManager.default.removeItem(atPath: directory)
        let secret = "circle-fuzz-secret-0123456789abcdef-0123"
        var limits = CircleServerConfiguration.Limits()
        // Inputs run one after another: a connection of the last one may still be closing.
        limits.maxConnectionsPerUser = 1000
        limits.postsPerSecond = 100_000
        limits.postBurst = 100_000
        // Short HTTP timeouts, so that an input that leaves a request half-sent costs little.
        limits.requestHeadTimeout = .seconds(2)
        limits.requestBodyTimeout = .seconds(2)
        limits.keepAliveTimeout = .seconds(2)
        let configuration = CircleServerConfiguration(
            host: "127.0.0.1",
            port: 0,
            dataDirectory: directory,
            tokenKeys: .hs256(secret: secret),
            limits: limits,
            developmentTokens: true,
            echoEndpoint: true,
            compression: true
        )
        var logger = Logger(label: "circle.fuzz")
        logger.logLevel = .critical
        let server = try await CircleServer.start(configuration: configuration, logger: logger)
        let token = try await TokenAuthority(.hs256(secret: secret)).mint(user: "fuzz", ttl: .seconds(7 * 24 * 3600))
        return Target(port: UInt16(server.port), token: Array(token.utf8))
    }

    /// Creates the circle the seeds post in, over the server's own HTTP API (outside any task:
    /// the socket calls block, and the server's tasks need the cooperative threads).
    private static func createCircle(_ target: Target) throws {
        let body = #"{"name":"general"}"#
        let token = String(decoding: target.token, as: UTF8.self)
        let created = Self.exchange(
            Array("POST /v1/circles HTTP/1.1\r\nHost: fuzz\r\nAuthorization: Bearer \(token)\r\nContent-Length: \(body.utf8.count)\r\nConnection: close\r\n\r\n\(body)".utf8),
            cuts: 0,
            port: target.port
        )
        guard created.answer.starts(with: Array("HTTP/1.1 201".utf8)) else {
            throw FuzzSetupError(description: "could not create the circle: \(String(decoding: created.answer.prefix(200), as: UTF8.self))")
        }
    }

    /// `CIRCLE_FUZZ_PRINT=1`: print what the server answered to each input (when replaying).
    static let printsAnswers = ProcessInfo.processInfo.environment["CIRCLE_FUZZ_PRINT"] == "1"

    /// Inputs run so far: every 64th is followed by a health check.
    nonisolated(unsafe) private static var inputs = 0

    static func run(_ bytes: [UInt8]) {
        guard let cuts = bytes.first else { return }
        let target = Self.target
        let stream = Self.substituting(Self.placeholder, with: target.token, in: bytes.dropFirst())
        let result = Self.exchange(stream, cuts: cuts, port: target.port)
        if Self.printsAnswers {
            print(String(decoding: result.answer, as: UTF8.self).debugDescription, result.closedByServer ? "(closed by the server)" : "")
        }
        // Bound to the fuzzer's one thread (libFuzzer runs inputs one at a time).
        Self.inputs += 1
        if Self.inputs % 64 == 1 {
            // A server that stopped answering (a stuck event loop, a lost accept loop) fails the
            // run, with this input named. 8 s, under libFuzzer's 10 s hang limit: under
            // AddressSanitizer on a loaded 2-core CI machine the server once gave no byte within
            // the 5 s this waited before, and the input then replayed in 0.6 s with an ordinary
            // build (reports in the issue 33 note).
            let health = Self.exchange(Array("GET /healthz HTTP/1.1\r\nHost: fuzz\r\nConnection: close\r\n\r\n".utf8), cuts: 0, port: target.port, patience: 8_000)
            precondition(health.answer.starts(with: Array("HTTP/1.1 200".utf8)), "the server stopped answering after this input")
        }
    }

    private static func substituting(_ pattern: [UInt8], with replacement: [UInt8], in input: ArraySlice<UInt8>) -> [UInt8] {
        var output: [UInt8] = []
        output.reserveCapacity(input.count)
        var index = input.startIndex
        while index < input.endIndex {
            if input[index] == pattern[0], input[index...].starts(with: pattern) {
                output += replacement
                index += pattern.count
            } else {
                output.append(input[index])
                index += 1
            }
        }
        return output
    }

    /// Sends `stream` on a new connection, cut as `cuts` says, then reads what the server
    /// answers until it closes the connection, or until it has been silent for a moment
    /// (`patience` ms before its first byte, 10 ms after one), and leaves. (A client's FIN would
    /// end the connection at once: Circle does not keep half-closed connections.)
    static func exchange(_ stream: [UInt8], cuts: UInt8, port: UInt16, patience: Int32 = 100) -> (answer: [UInt8], closedByServer: Bool) {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        precondition(fd >= 0, "socket: \(errno)")
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = port.bigEndian
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0 }
        }
        // Refused only when the listener is gone or its backlog is full for a moment.
        guard connected else { return ([], true) }
        var one: Int32 = 1
        setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
        var timeout = timeval(tv_sec: 3, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))

        var offset = 0
        var piece = 0
        var random = UInt32(cuts) &* 2_654_435_761
        while offset < stream.count {
            var length = stream.count - offset
            if cuts != 0 && piece < 32 {
                random = random &* 1_103_515_245 &+ 12345
                length = min(length, 1 + Int(random >> 16) % (4 * Int(cuts)))
            }
            let sent = stream[offset..<(offset + length)].withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            // The server closed or reset the connection: what it answered is still to be read.
            guard sent > 0 else { break }
            offset += sent
            piece += 1
            if cuts != 0 && offset < stream.count { usleep(1000) }
        }
        var answer: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 16 * 1024)
        var received = false
        while true {
            var poller = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            guard poll(&poller, 1, received ? 10 : patience) > 0 else { return (answer, false) }
            let count = recv(fd, &buffer, buffer.count, 0)
            if count == 0 { return (answer, true) }
            if count < 0 { return (answer, errno == ECONNRESET) }
            received = true
            if answer.count < 4096 { answer += buffer[0..<count] }
        }
    }
}

struct FuzzSetupError: Error, CustomStringConvertible {
    var description: String
}
