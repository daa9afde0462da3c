import CircleSocket
import Foundation

/// How media transfers (photo uploads, downloads) behave; part of ``CircleClientConfiguration``.
public struct TransferConfiguration: Sendable {
    /// The server's HTTP base URL (`https://chat.example.com`, or with the path prefix the
    /// server is mounted under, `https://example.com/chat`), for transfers and the API calls.
    /// `nil` derives it from the first of ``CircleClientConfiguration/servers``
    /// (`wss://h:p/v1/ws` → `https://h:p`; `wss://h/chat/v1/ws` → `https://h/chat`).
    public var baseURL: String?
    /// Per request: no bytes from the server for this long fails the request (it is retried).
    public var requestTimeout: Duration
    /// Per transfer: everything, retries included, must be done within this, or it fails with
    /// ``CircleClientError/Code/timedOut``. Counted per process run for a queued photo post.
    public var transferTimeout: Duration
    /// When the server cannot be reached, keep trying (with backoff) for up to
    /// ``connectivityTimeout`` instead of failing at once — `URLSession`'s
    /// `waitsForConnectivity`.
    public var waitsForConnectivity: Bool
    /// How long a transfer waits for the server to become reachable, when it waits at all;
    /// then it fails with ``CircleClientError/Code/notConnected``.
    public var connectivityTimeout: Duration
    /// TCP connect (and TLS handshake) time limit of one connection.
    public var connectTimeout: Duration
    /// Backoff between retries (full jitter) and the most attempts per transfer.
    public var retry: ReconnectPolicy
    /// Bytes per request body write.
    public var chunkSize: Int
    /// Upload at most this many bytes per second (`nil`: as fast as the network allows), for
    /// background uploads on metered networks.
    public var maxUploadBytesPerSecond: Int?
    /// Directory of the download cache; `nil` derives `<stateFile>-media` from the state file,
    /// or keeps no cache without one.
    public var cacheDirectory: String?
    /// Largest total size of the download cache; least recently used files go first.
    public var cacheCapacity: Int64

    public init(
        baseURL: String? = nil,
        requestTimeout: Duration = .seconds(30),
        transferTimeout: Duration = .seconds(600),
        waitsForConnectivity: Bool = true,
        connectivityTimeout: Duration = .seconds(60),
        connectTimeout: Duration = .seconds(10),
        retry: ReconnectPolicy = .init(base: .milliseconds(250), cap: .seconds(10), maxAttempts: 10),
        chunkSize: Int = 256 * 1024,
        maxUploadBytesPerSecond: Int? = nil,
        cacheDirectory: String? = nil,
        cacheCapacity: Int64 = 200 * 1024 * 1024
    ) {
        self.baseURL = baseURL
        self.requestTimeout = requestTimeout
        self.transferTimeout = transferTimeout
        self.waitsForConnectivity = waitsForConnectivity
        self.connectivityTimeout = connectivityTimeout
        self.connectTimeout = connectTimeout
        self.retry = retry
        self.chunkSize = chunkSize
        self.maxUploadBytesPerSecond = maxUploadBytesPerSecond
        self.cacheDirectory = cacheDirectory
        self.cacheCapacity = cacheCapacity
    }
}

/// Timings of one HTTP request of a transfer (the role of `URLSessionTaskTransactionMetrics`).
public struct RequestMetrics: Sendable, Hashable, CustomStringConvertible {
    /// `GET`, `POST`, `PATCH`, …
    public var method: String
    /// The request's path, without the query (which may hold a token).
    public var path: String
    /// The HTTP status, or `nil` when the request failed before an answer.
    public var status: Int?
    /// TCP connect time; `nil` when the connection was reused.
    public var connect: Duration?
    /// TLS handshake time; `nil` for plain HTTP or a reused connection.
    public var tls: Duration?
    /// From the start of sending the request to the first byte of the answer.
    public var timeToFirstByte: Duration?
    /// From asking for a connection to the end of the answer (or the failure).
    public var total: Duration
    /// Body bytes sent.
    public var bytesSent: Int64
    /// Body bytes received.
    public var bytesReceived: Int64
    /// Whether a kept-alive connection was used.
    public var reusedConnection: Bool
    /// Why it failed, when it did.
    public var error: String?

    /// One line: `PATCH /v1/media/uploads/u… → 201 connect=- tls=- ttfb=18.4ms …`.
    public var description: String {
        func ms(_ duration: Duration?) -> String {
            guard let duration else { return "-" }
            let value = Double(duration.components.seconds) * 1000 + Double(duration.components.attoseconds) / 1e15
            return String(format: "%.1fms", value)
        }
        return "\(self.method) \(self.path) → \(self.status.map(String.init) ?? "failed") connect=\(ms(self.connect)) tls=\(ms(self.tls)) ttfb=\(ms(self.timeToFirstByte)) total=\(ms(self.total)) sent=\(self.bytesSent) received=\(self.bytesReceived) reused=\(self.reusedConnection)\(self.error.map { " error=\($0)" } ?? "")"
    }
}

/// What a whole transfer cost (the role of `URLSessionTaskMetrics`): every request it made,
/// retries included, and totals.
public struct TransferMetrics: Sendable, Hashable, CustomStringConvertible {
    /// Every request, in order.
    public var requests: [RequestMetrics]
    /// From the start of the transfer to its end.
    public var total: Duration
    /// Requests that were repeated after a failure.
    public var retries: Int
    /// The offset a resumed upload or download continued from (0 when it started at the beginning).
    public var resumedFrom: Int64
    /// A download answered from the on-disk cache (fresh, or revalidated with a 304).
    public var fromCache: Bool

    /// Body bytes sent by all requests.
    public var bytesSent: Int64 { self.requests.reduce(0) { $0 + $1.bytesSent } }
    /// Body bytes received by all requests.
    public var bytesReceived: Int64 { self.requests.reduce(0) { $0 + $1.bytesReceived } }
    /// Connect time of the requests that opened a connection.
    public var connect: Duration { self.requests.compactMap(\.connect).reduce(.zero, +) }
    /// TLS handshake time of the requests that opened a connection.
    public var tls: Duration { self.requests.compactMap(\.tls).reduce(.zero, +) }
    /// Time to first byte of the last request.
    public var timeToFirstByte: Duration? { self.requests.last?.timeToFirstByte }
    /// Whether any request used a kept-alive connection.
    public var reusedConnection: Bool { self.requests.contains { $0.reusedConnection } }

    /// A summary line, then one line per request.
    public var description: String {
        "transfer: \(self.requests.count) request(s), \(self.retries) retr\(self.retries == 1 ? "y" : "ies"), sent=\(self.bytesSent) received=\(self.bytesReceived) resumedFrom=\(self.resumedFrom) cache=\(self.fromCache) total=\(self.total)\n"
            + self.requests.map { "  " + $0.description }.joined(separator: "\n")
    }
}

/// How far a transfer is.
public struct TransferProgress: Sendable, Hashable {
    /// For a photo post: the post's id; for a download: the media id.
    public var id: String
    /// Bytes the server has (upload) or that are on disk (download).
    public var completed: Int64
    /// The file's size, when known.
    public var total: Int64?

    public init(id: String, completed: Int64, total: Int64?) {
        self.id = id
        self.completed = completed
        self.total = total
    }
}

/// What a download produced.
public struct DownloadResult: Sendable {
    /// Where the bytes are.
    public var path: String
    /// Its size in bytes.
    public var size: Int64
    /// The server's `Content-Type`.
    public var contentType: String?
    /// What the download cost.
    public var metrics: TransferMetrics
}

/// What an upload produced.
public struct UploadResult: Sendable {
    /// The media id, to use as a post's attachment.
    public var mediaID: String
    /// The stored size in bytes.
    public var size: Int64
    /// What the upload cost.
    public var metrics: TransferMetrics
}

/// Transfer events for logging and UI: progress, and the metrics of each finished transfer.
public enum TransferEvent: Sendable {
    /// Bytes moved (acknowledged by the server, or written to disk).
    case progress(TransferProgress)
    /// A transfer ended well: a photo post's upload (by post id), an upload or a download (by media id).
    case finished(id: String, TransferMetrics)
    /// A transfer failed for good.
    case failed(id: String, CircleClientError, TransferMetrics)
}
