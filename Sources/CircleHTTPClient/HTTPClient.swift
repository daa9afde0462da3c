import NIOCore
import NIOConcurrencyHelpers
import NIOHTTP1

/// HTTP/1.1 requests over pooled ``HTTPConnection``s: the one request path of the SDK's API
/// calls and media transfers.
///
/// ```swift
/// let client = HTTPClient(configuration: .init(tls: tls))
/// let answer = try await client.execute(.GET, url: "https://chat.example.com/v1/circles", headers: ["Authorization": "Bearer \(token)"])
/// ```
package struct HTTPClient: Sendable {
    /// Timeouts and TLS.
    package struct Configuration: Sendable {
        /// TCP connect plus TLS handshake.
        package var connectTimeout: Duration
        /// How long the server may go without taking or sending a byte.
        package var idleTimeout: Duration
        /// Trust and pins for `https`.
        package var tls: ClientTLSConfiguration

        package init(connectTimeout: Duration = .seconds(10), idleTimeout: Duration = .seconds(30), tls: ClientTLSConfiguration = .init()) {
            self.connectTimeout = connectTimeout
            self.idleTimeout = idleTimeout
            self.tls = tls
        }
    }

    /// What a request sends as its body.
    package enum Body: Sendable {
        case none
        case bytes([UInt8])
        /// `length` bytes, written by the closure through the writer (each write awaited).
        case stream(length: Int64, @Sendable (HTTPBodyWriter) async throws -> Void)
    }

    /// What one exchange cost.
    package struct Timings: Sendable {
        /// Name resolution and TCP connect (nil on a reused connection).
        package var connect: Duration?
        /// The TLS handshake (nil for plain HTTP or a reused connection).
        package var tls: Duration?
        /// From the start of the request to the answer's head.
        package var timeToFirstByte: Duration?
        package var total: Duration = .zero
        package var bytesSent: Int64 = 0
        package var bytesReceived: Int64 = 0
        package var reusedConnection = false
        /// The answer's status, once one arrived.
        package var status: Int?
    }

    /// A failed exchange, with what it cost so far.
    package struct Failure: Error, CustomStringConvertible {
        /// An ``HTTPClientError``, or what the body closure or a callback threw.
        package var error: any Error
        package var timings: Timings
        /// Whether no connection could be made at all (the server is unreachable).
        package var unreachable: Bool
        package var description: String { "\(self.error)" }
    }

    /// An answer read whole.
    package struct Response: Sendable {
        package var head: HTTPResponseHead
        /// The body (at most 1 MiB is kept; the rest is read and dropped).
        package var body: [UInt8]
        package var timings: Timings
        package var status: Int { Int(self.head.status.code) }
    }

    package let configuration: Configuration
    package let pool: HTTPConnectionPool

    package init(configuration: Configuration = .init(), pool: HTTPConnectionPool = HTTPConnectionPool()) {
        self.configuration = configuration
        self.pool = pool
    }

    /// One request to a URL with a small body; the answer is read whole.
    ///
    /// - Throws: ``HTTPClientError`` (the server's answer, whatever its status, is returned).
    package func execute(_ method: HTTPMethod, url: String, headers: HTTPHeaders = [:], body: [UInt8]? = nil) async throws(HTTPClientError) -> Response {
        let (target, uri) = try Self.parse(url)
        do {
            return try await self.exchange(method, target: target, uri: uri, headers: headers, body: body.map { .bytes($0) } ?? .none)
        } catch {
            throw error.error as? HTTPClientError ?? HTTPClientError(.connectionClosed, "\(error.error)", underlying: error.error)
        }
    }

    private static func parse(_ url: String) throws(HTTPClientError) -> (HTTPTarget, String) {
        do {
            return try HTTPTarget.parse(url, schemes: ["http", "https"])
        } catch let error as HTTPClientError {
            throw error
        } catch {
            throw HTTPClientError(.invalidURL, "\"\(url)\" is not a URL")
        }
    }

    /// One request. Small answers are collected and returned; with `onBody`, the body chunks of
    /// a 200 or 206 answer go there instead. A kept-alive connection that turns out to be closed
    /// is replaced by a new one once.
    package func exchange(
        _ method: HTTPMethod,
        target: HTTPTarget,
        uri: String,
        headers: HTTPHeaders,
        body: Body = .none,
        onHead: (@Sendable (HTTPResponseHead) async throws -> Void)? = nil,
        onBody: (@Sendable (ByteBuffer) async throws -> Void)? = nil,
        newConnection: Bool = false
    ) async throws(Failure) -> Response {
        let started = ContinuousClock.now
        var timings = Timings()
        var connection: HTTPConnection?
        do {
            if !newConnection, let pooled = await self.pool.take(target) {
                connection = pooled
                timings.reusedConnection = true
            } else {
                do {
                    let (opened, setup) = try await HTTPConnection.connect(
                        to: target,
                        tls: self.configuration.tls,
                        timeout: self.configuration.connectTimeout,
                        writeTimeout: self.configuration.idleTimeout
                    )
                    connection = opened
                    timings.connect = setup.connect
                    timings.tls = setup.tls
                } catch let error as HTTPClientError where error.code == .tlsFailed || error.code == .pinMismatch {
                    // Not a network hiccup: retrying will not make the certificate trusted.
                    timings.total = ContinuousClock.now - started
                    throw Failure(error: error, timings: timings, unreachable: false)
                } catch {
                    timings.total = ContinuousClock.now - started
                    throw Failure(error: error, timings: timings, unreachable: true)
                }
            }
            guard let connection else { throw HTTPClientError(.connectFailed, "no connection to \(target.address)") }
            var requestHeaders = headers
            switch body {
            case .none: if method == .POST || method == .PATCH || method == .PUT { requestHeaders.replaceOrAdd(name: "Content-Length", value: "0") }
            case .bytes(let bytes): requestHeaders.replaceOrAdd(name: "Content-Length", value: "\(bytes.count)")
            case .stream(let length, _): requestHeaders.replaceOrAdd(name: "Content-Length", value: "\(length)")
            }
            let sendStarted = ContinuousClock.now
            var sendFailure: HTTPClientError?
            let writer = HTTPBodyWriter(connection: connection)
            do {
                try await connection.sendHead(method: method, uri: uri, headers: requestHeaders)
                switch body {
                case .none: break
                case .bytes(let bytes): if !bytes.isEmpty { try await writer.write(ByteBuffer(bytes: bytes)) }
                case .stream(_, let produce): try await produce(writer)
                }
                try await connection.sendEnd()
            } catch let error as HTTPClientError {
                // The connection failed while sending: the server may have answered early
                // (413, 415) and closed. Its answer, if it is there, says more than the failure.
                sendFailure = error
            }
            timings.bytesSent = writer.sent
            var answer: HTTPResponseHead?
            var collected: [UInt8] = []
            reading: while true {
                let part: HTTPClientResponsePart
                do {
                    part = try await connection.next(idleTimeout: self.configuration.idleTimeout)
                } catch {
                    if let sendFailure { throw sendFailure }
                    throw error
                }
                switch part {
                case .head(let head):
                    // 1xx answers are not sent by Circle's server; a stray one is skipped.
                    if head.status.code < 200 { continue }
                    timings.timeToFirstByte = ContinuousClock.now - sendStarted
                    timings.status = Int(head.status.code)
                    answer = head
                    try await onHead?(head)
                case .body(let buffer):
                    timings.bytesReceived += Int64(buffer.readableBytes)
                    if let onBody, let status = answer?.status, status == .ok || status == .partialContent {
                        try await onBody(buffer)
                    } else if collected.count < 1 << 20 {
                        collected += buffer.readableBytesView
                    }
                case .end:
                    break reading
                }
            }
            guard let answer else { throw HTTPClientError(.connectionClosed, "no answer from \(target.address)") }
            if sendFailure == nil {
                await self.pool.give(connection)
            } else {
                connection.close()
            }
            timings.total = ContinuousClock.now - started
            return Response(head: answer, body: collected, timings: timings)
        } catch let failure as Failure {
            throw failure
        } catch {
            connection?.close()
            if timings.reusedConnection, timings.status == nil, error is HTTPClientError {
                // A kept-alive connection the server had given up on: once more on a new one.
                return try await self.exchange(method, target: target, uri: uri, headers: headers, body: body, onHead: onHead, onBody: onBody, newConnection: true)
            }
            timings.total = ContinuousClock.now - started
            throw Failure(error: error, timings: timings, unreachable: false)
        }
    }
}

/// Writes a request body on its connection; see ``HTTPClient/Body/stream(length:_:)``.
package final class HTTPBodyWriter: Sendable {
    private let connection: HTTPConnection
    private let count = NIOLockedValueBox<Int64>(0)

    init(connection: HTTPConnection) {
        self.connection = connection
    }

    /// Body bytes handed to the socket so far.
    package var sent: Int64 { self.count.withLockedValue { $0 } }

    /// Writes a chunk and returns once it is on the socket (the caller's backpressure).
    package func write(_ buffer: ByteBuffer) async throws(HTTPClientError) {
        do {
            try await self.connection.sendBody(buffer)
        } catch let error as HTTPClientError {
            throw error
        } catch {
            throw HTTPClientError(.connectionClosed, "the connection failed while sending", underlying: error)
        }
        self.count.withLockedValue { $0 += Int64(buffer.readableBytes) }
    }

    /// Whether the server has answered (or closed) already, so the rest need not be sent.
    package func serverAnsweredEarly() async -> Bool {
        await self.connection.hasEarlyAnswer()
    }
}
