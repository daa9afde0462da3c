import CircleSocket
import Foundation
import NIOCore
import NIOHTTP1
import NIOPosix

/// Kept-alive connections per server, so consecutive requests skip TCP and TLS setup.
actor HTTPConnectionPool {
    private var idle: [HTTPConnection.Target: [HTTPConnection]] = [:]
    private let maxIdlePerTarget = 4

    func take(_ target: HTTPConnection.Target) -> HTTPConnection? {
        while var list = self.idle[target], !list.isEmpty {
            let connection = list.removeLast()
            self.idle[target] = list
            if connection.isReusable { return connection }
            connection.close()
        }
        return nil
    }

    func give(_ connection: HTTPConnection) {
        guard connection.isReusable, self.idle[connection.target, default: []].count < self.maxIdlePerTarget else {
            connection.close()
            return
        }
        self.idle[connection.target, default: []].append(connection)
    }

    func closeAll() {
        for connection in self.idle.values.joined() { connection.close() }
        self.idle = [:]
    }
}

/// What a request sends as its body.
enum RequestBody: Sendable {
    case none
    case bytes([UInt8])
    /// `length` bytes of a file from `offset`, read a chunk at a time.
    case file(path: String, offset: Int64, length: Int64)
}

/// A request that failed, with what it cost so far.
struct RequestFailure: Error, CustomStringConvertible {
    var error: any Error
    var metrics: RequestMetrics
    /// Whether no connection could be made at all (the server is unreachable).
    var unreachable: Bool
    var description: String { "\(self.error)" }
}

/// A file read or written from the thread pool, one call at a time.
final class BlockingFile: @unchecked Sendable {
    // @unchecked: the handle is used by one transfer task at a time, each call on the pool.
    private let handle: FileHandle

    private init(handle: FileHandle) {
        self.handle = handle
    }

    static func reading(_ path: String) async throws -> BlockingFile {
        try await NIOThreadPool.singleton.runIfActive {
            guard let handle = FileHandle(forReadingAtPath: path) else {
                throw CircleClientError(.fileError, "cannot read \(path)")
            }
            return BlockingFile(handle: handle)
        }
    }

    /// Opens `path` for appending, creating it; `truncate` empties it first.
    static func appending(_ path: String, truncate: Bool) async throws -> BlockingFile {
        try await NIOThreadPool.singleton.runIfActive {
            if truncate || !FileManager.default.fileExists(atPath: path) {
                guard FileManager.default.createFile(atPath: path, contents: nil) else {
                    throw CircleClientError(.fileError, "cannot create \(path)")
                }
            }
            guard let handle = FileHandle(forWritingAtPath: path) else {
                throw CircleClientError(.fileError, "cannot write \(path)")
            }
            try handle.seekToEnd()
            return BlockingFile(handle: handle)
        }
    }

    func read(at offset: Int64, count: Int) async throws -> [UInt8] {
        try await NIOThreadPool.singleton.runIfActive {
            try self.handle.seek(toOffset: UInt64(offset))
            return Array(try self.handle.read(upToCount: count) ?? Data())
        }
    }

    func append(_ buffer: ByteBuffer) async throws {
        try await NIOThreadPool.singleton.runIfActive {
            try self.handle.write(contentsOf: Data(buffer.readableBytesView))
        }
    }

    func close() async {
        _ = try? await NIOThreadPool.singleton.runIfActive { try self.handle.close() }
    }
}

/// HTTP requests of media transfers over ``HTTPConnection``s from a pool.
struct MediaHTTPClient: Sendable {
    let target: HTTPConnection.Target
    let pool: HTTPConnectionPool
    let tls: WebSocketTLSConfiguration
    let configuration: TransferConfiguration

    /// One request. Small answers are collected and returned; with `onBody`, body chunks go
    /// there instead. `progress` gets the body bytes sent so far.
    func exchange(
        _ method: HTTPMethod,
        _ uri: String,
        headers: HTTPHeaders,
        body: RequestBody = .none,
        progress: (@Sendable (Int64) -> Void)? = nil,
        onHead: (@Sendable (HTTPResponseHead) async throws -> Void)? = nil,
        onBody: (@Sendable (ByteBuffer) async throws -> Void)? = nil,
        newConnection: Bool = false
    ) async throws(RequestFailure) -> (head: HTTPResponseHead, body: [UInt8], metrics: RequestMetrics) {
        let started = ContinuousClock.now
        var metrics = RequestMetrics(
            method: method.rawValue,
            path: String(uri.split(separator: "?", maxSplits: 1).first ?? ""),
            status: nil,
            connect: nil,
            tls: nil,
            timeToFirstByte: nil,
            total: .zero,
            bytesSent: 0,
            bytesReceived: 0,
            reusedConnection: false,
            error: nil
        )
        var connection: HTTPConnection?
        do {
            if !newConnection, let pooled = await self.pool.take(self.target) {
                connection = pooled
                metrics.reusedConnection = true
            } else {
                do {
                    let (opened, setup) = try await HTTPConnection.connect(
                        to: self.target,
                        tls: self.tls,
                        timeout: self.configuration.connectTimeout,
                        writeTimeout: self.configuration.requestTimeout
                    )
                    connection = opened
                    metrics.connect = setup.connect
                    metrics.tls = setup.tls
                } catch let error as WebSocketError where error.code == .tlsFailed || error.code == .pinMismatch {
                    // Not a network hiccup: retrying will not make the certificate trusted.
                    metrics.total = ContinuousClock.now - started
                    metrics.error = "\(error)"
                    throw RequestFailure(error: CircleClientError(.tlsFailed, "\(error)"), metrics: metrics, unreachable: false)
                } catch {
                    metrics.total = ContinuousClock.now - started
                    metrics.error = "\(error)"
                    throw RequestFailure(error: error, metrics: metrics, unreachable: true)
                }
            }
            guard let connection else { throw CircleClientError(.notConnected, "no connection") }
            var requestHeaders = headers
            switch body {
            case .none: if method == .POST || method == .PATCH { requestHeaders.replaceOrAdd(name: "Content-Length", value: "0") }
            case .bytes(let bytes): requestHeaders.replaceOrAdd(name: "Content-Length", value: "\(bytes.count)")
            case .file(_, _, let length): requestHeaders.replaceOrAdd(name: "Content-Length", value: "\(length)")
            }
            let sendStarted = ContinuousClock.now
            var sendFailure: (any Error)?
            do {
                try await connection.sendHead(method: method, uri: uri, headers: requestHeaders)
                try await self.sendBody(body, on: connection, metrics: &metrics, progress: progress)
                try await connection.sendEnd()
            } catch is CancellationError {
                throw CancellationError()
            } catch let error as CircleClientError {
                // The local file failed; the server waits for bytes that will not come.
                throw error
            } catch {
                // The connection failed while sending: the server may have answered early
                // (413, 415) and closed. Its answer, if it is there, says more than the failure.
                sendFailure = error
            }
            var answer: HTTPResponseHead?
            var collected: [UInt8] = []
            reading: while true {
                let part: HTTPClientResponsePart
                do {
                    part = try await connection.next(idleTimeout: self.configuration.requestTimeout)
                } catch {
                    throw sendFailure ?? error
                }
                switch part {
                case .head(let head):
                    // 1xx answers are not sent by this server; a stray one is skipped.
                    if head.status.code < 200 { continue }
                    metrics.timeToFirstByte = ContinuousClock.now - sendStarted
                    metrics.status = Int(head.status.code)
                    answer = head
                    try await onHead?(head)
                case .body(let buffer):
                    metrics.bytesReceived += Int64(buffer.readableBytes)
                    if let onBody, let status = answer?.status, status == .ok || status == .partialContent {
                        try await onBody(buffer)
                    } else if collected.count < 1 << 20 {
                        collected += buffer.readableBytesView
                    }
                case .end:
                    break reading
                }
            }
            guard let answer else { throw CircleClientError(.notConnected, "no answer") }
            if sendFailure == nil {
                await self.pool.give(connection)
            } else {
                connection.close()
            }
            metrics.total = ContinuousClock.now - started
            return (answer, collected, metrics)
        } catch let failure as RequestFailure {
            throw failure
        } catch {
            connection?.close()
            if metrics.reusedConnection, metrics.status == nil, !(error is CancellationError), !(error is CircleClientError) {
                // A kept-alive connection the server had given up on: once more on a new one.
                return try await self.exchange(method, uri, headers: headers, body: body, progress: progress, onHead: onHead, onBody: onBody, newConnection: true)
            }
            metrics.total = ContinuousClock.now - started
            metrics.error = "\(error)"
            throw RequestFailure(error: error, metrics: metrics, unreachable: false)
        }
    }

    private func sendBody(
        _ body: RequestBody,
        on connection: HTTPConnection,
        metrics: inout RequestMetrics,
        progress: (@Sendable (Int64) -> Void)?
    ) async throws {
        switch body {
        case .none:
            return
        case .bytes(let bytes):
            if !bytes.isEmpty { try await connection.sendBody(ByteBuffer(bytes: bytes)) }
            metrics.bytesSent += Int64(bytes.count)
            progress?(metrics.bytesSent)
        case .file(let path, let offset, let length):
            let file = try await BlockingFile.reading(path)
            let started = ContinuousClock.now
            do {
                var sent: Int64 = 0
                while sent < length {
                    try Task.checkCancellation()
                    if await connection.hasEarlyAnswer() { break }
                    let count = Int(min(Int64(self.configuration.chunkSize), length - sent))
                    let chunk = try await file.read(at: offset + sent, count: count)
                    guard !chunk.isEmpty else { throw CircleClientError(.fileError, "\(path) is shorter than expected") }
                    try await connection.sendBody(ByteBuffer(bytes: chunk))
                    sent += Int64(chunk.count)
                    metrics.bytesSent = sent
                    progress?(sent)
                    if let rate = self.configuration.maxUploadBytesPerSecond, rate > 0 {
                        let due = started + .seconds(Double(sent) / Double(rate))
                        if due > .now { try await Task.sleep(until: due, clock: .continuous) }
                    }
                }
                await file.close()
            } catch {
                await file.close()
                throw error
            }
        }
    }
}
