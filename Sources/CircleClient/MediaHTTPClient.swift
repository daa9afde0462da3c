import CircleHTTPClient
import Foundation
import NIOCore
import NIOHTTP1
import NIOPosix

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

/// HTTP requests of media transfers through the shared ``HTTPClient``, with their metrics.
struct MediaHTTPClient: Sendable {
    let target: HTTPTarget
    /// Put before every path: where the server is mounted (empty at the root).
    let prefix: String
    let http: HTTPClient
    let configuration: TransferConfiguration

    init(target: HTTPTarget, prefix: String, tls: ClientTLSConfiguration, configuration: TransferConfiguration, pool: HTTPConnectionPool) {
        self.target = target
        self.prefix = prefix
        self.configuration = configuration
        self.http = HTTPClient(
            configuration: .init(connectTimeout: configuration.connectTimeout, idleTimeout: configuration.requestTimeout, tls: tls),
            pool: pool
        )
    }

    /// One request. Small answers are collected and returned; with `onBody`, body chunks go
    /// there instead. `progress` gets the body bytes sent so far.
    func exchange(
        _ method: HTTPMethod,
        _ uri: String,
        headers: HTTPHeaders,
        body: RequestBody = .none,
        progress: (@Sendable (Int64) -> Void)? = nil,
        onHead: (@Sendable (HTTPResponseHead) async throws -> Void)? = nil,
        onBody: (@Sendable (ByteBuffer) async throws -> Void)? = nil
    ) async throws(RequestFailure) -> (head: HTTPResponseHead, body: [UInt8], metrics: RequestMetrics) {
        let path = String(uri.split(separator: "?", maxSplits: 1).first ?? "")
        let httpBody: HTTPClient.Body
        switch body {
        case .none:
            httpBody = .none
        case .bytes(let bytes):
            httpBody = .bytes(bytes)
            progress?(Int64(bytes.count))
        case .file(let path, let offset, let length):
            let configuration = self.configuration
            httpBody = .stream(length: length) { writer in
                try await Self.send(path: path, offset: offset, length: length, configuration: configuration, writer: writer, progress: progress)
            }
        }
        do {
            let answer = try await self.http.exchange(method, target: self.target, uri: self.prefix + uri, headers: headers, body: httpBody, onHead: onHead, onBody: onBody)
            return (answer.head, answer.body, Self.metrics(method, path, answer.timings, error: nil))
        } catch {
            let metrics = Self.metrics(method, path, error.timings, error: "\(error.error)")
            if let failure = error.error as? HTTPClientError, failure.code == .tlsFailed || failure.code == .pinMismatch {
                throw RequestFailure(error: CircleClientError(.tlsFailed, "\(failure)"), metrics: metrics, unreachable: false)
            }
            throw RequestFailure(error: error.error, metrics: metrics, unreachable: error.unreachable)
        }
    }

    private static func metrics(_ method: HTTPMethod, _ path: String, _ timings: HTTPClient.Timings, error: String?) -> RequestMetrics {
        RequestMetrics(
            method: method.rawValue,
            path: path,
            status: timings.status,
            connect: timings.connect,
            tls: timings.tls,
            timeToFirstByte: timings.timeToFirstByte,
            total: timings.total,
            bytesSent: timings.bytesSent,
            bytesReceived: timings.bytesReceived,
            reusedConnection: timings.reusedConnection,
            error: error
        )
    }

    /// Sends `length` bytes of a file from `offset`, a chunk at a time, stopping early when the
    /// server has answered already (a refusal) and pacing to the configured rate.
    private static func send(
        path: String,
        offset: Int64,
        length: Int64,
        configuration: TransferConfiguration,
        writer: HTTPBodyWriter,
        progress: (@Sendable (Int64) -> Void)?
    ) async throws {
        let file = try await BlockingFile.reading(path)
        let started = ContinuousClock.now
        do {
            var sent: Int64 = 0
            while sent < length {
                try Task.checkCancellation()
                if await writer.serverAnsweredEarly() { break }
                let count = Int(min(Int64(configuration.chunkSize), length - sent))
                let chunk = try await file.read(at: offset + sent, count: count)
                guard !chunk.isEmpty else { throw CircleClientError(.fileError, "\(path) is shorter than expected") }
                try await writer.write(ByteBuffer(bytes: chunk))
                sent += Int64(chunk.count)
                progress?(sent)
                if let rate = configuration.maxUploadBytesPerSecond, rate > 0 {
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
