import CircleHTTPClient
import CircleSocket
import Crypto
import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1

/// The client's media transfers: the photo-post queue (upload with retry, backoff and resume
/// from the server's offset; persisted with the state file, so it continues after a restart;
/// then the post, through the outbox) and downloads (progress, resume with `Range` and the
/// validator, the on-disk cache).
actor MediaTransfers {
    private let configuration: CircleClientConfiguration
    private var transfer: TransferConfiguration { self.configuration.transfers }
    private let store: any ClientStateStore
    private let core: ClientCore
    private let http: MediaHTTPClient
    private let pool: HTTPConnectionPool
    private let spool: String?
    private let cache: MediaCache?
    private let logger: Logger
    private var token: String?

    private var jobs: [PhotoJob]
    /// Callers waiting for a photo post, by post id (several when the same id is posted again).
    private var waiters: [String: [UUID: CheckedContinuation<PostReceipt, any Error>]] = [:]
    /// Photo posts whose upload is done and whose post is in the outbox.
    private var posting: Set<String> = []
    private var worker: Task<Void, Never>?

    /// Who hears about progress: reported from the transfer's I/O without hopping onto the
    /// actor, so progress arrives in order.
    private struct Listeners {
        var progress: [String: @Sendable (TransferProgress) -> Void] = [:]
        var subscribers: [UUID: AsyncStream<TransferEvent>.Continuation] = [:]
        /// Set by ``finishEvents()``: streams made later end at once.
        var finished = false
    }
    private nonisolated let listeners = NIOLockedValueBox(Listeners())

    init(configuration: CircleClientConfiguration, store: any ClientStateStore, core: ClientCore, jobs: [PhotoJob], pool: HTTPConnectionPool) throws {
        self.configuration = configuration
        self.store = store
        self.core = core
        self.jobs = jobs
        self.logger = configuration.logger
        self.pool = pool
        let base = try Self.base(configuration)
        self.http = MediaHTTPClient(target: base.target, prefix: base.prefix, tls: configuration.socket.tls, configuration: configuration.transfers, pool: pool)
        // Both directories are made when first needed.
        self.spool = configuration.stateFile.map { $0 + "-spool" }
        self.cache = (configuration.transfers.cacheDirectory ?? configuration.stateFile.map { $0 + "-media" }).map {
            MediaCache(directory: $0, capacity: configuration.transfers.cacheCapacity)
        }
    }

    /// The HTTP server and path prefix of the transfers' base URL, or else of the first
    /// WebSocket URL (`wss://host:port/v1/ws` → `https://host:port`, and
    /// `wss://host/chat/v1/ws` → `https://host` with the prefix `/chat`, for a server mounted
    /// under a prefix).
    static func base(_ configuration: CircleClientConfiguration) throws(CircleClientError) -> (target: HTTPTarget, prefix: String) {
        let url = configuration.transfers.baseURL ?? configuration.servers[0]
        let parsed: (target: HTTPTarget, uri: String)
        do {
            parsed = try HTTPTarget.parse(url)
        } catch {
            throw CircleClientError(.badRequest, "\(url) is not an http(s):// or ws(s):// URL with a host")
        }
        var prefix = String(parsed.uri.split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false).first ?? "")
        if configuration.transfers.baseURL == nil, prefix.hasSuffix(HTTPAPI.Path.webSocket) {
            prefix.removeLast(HTTPAPI.Path.webSocket.count)
        }
        while prefix.hasSuffix("/") { prefix.removeLast() }
        return (parsed.target, prefix)
    }

    // MARK: Events

    nonisolated func events() -> AsyncStream<TransferEvent> {
        let (stream, continuation) = AsyncStream<TransferEvent>.makeStream(bufferingPolicy: .bufferingNewest(1000))
        let id = UUID()
        let open = self.listeners.withLockedValue { listeners in
            guard !listeners.finished else { return false }
            listeners.subscribers[id] = continuation
            return true
        }
        guard open else {
            continuation.finish()
            return stream
        }
        continuation.onTermination = { [listeners] _ in listeners.withLockedValue { _ = $0.subscribers.removeValue(forKey: id) } }
        return stream
    }

    /// Ends every events stream, and those made later (the client shut down).
    nonisolated func finishEvents() {
        let subscribers = self.listeners.withLockedValue { listeners in
            listeners.finished = true
            defer { listeners.subscribers = [:] }
            return Array(listeners.subscribers.values)
        }
        for continuation in subscribers { continuation.finish() }
    }

    private nonisolated func emit(_ event: TransferEvent) {
        let (subscribers, handler) = self.listeners.withLockedValue { listeners in
            let handler: (@Sendable (TransferProgress) -> Void)?
            if case .progress(let progress) = event { handler = listeners.progress[progress.id] } else { handler = nil }
            return (Array(listeners.subscribers.values), handler)
        }
        for continuation in subscribers { continuation.yield(event) }
        if case .progress(let progress) = event { handler?(progress) }
    }

    private nonisolated func reportProgress(_ progress: TransferProgress) {
        self.emit(.progress(progress))
    }

    private nonisolated func setProgressHandler(_ id: String, _ handler: (@Sendable (TransferProgress) -> Void)?) {
        self.listeners.withLockedValue { $0.progress[id] = handler }
    }

    // MARK: Photo posts

    /// Queues a photo post and waits until the post resolves.
    func postPhoto(
        path: String,
        contentType: String?,
        caption: String?,
        circle: String,
        id chosen: String?,
        progress: (@Sendable (TransferProgress) -> Void)?
    ) async throws -> PostReceipt {
        let id = chosen ?? UUID().uuidString.lowercased()
        if self.jobs.contains(where: { $0.id == id }) || self.posting.contains(id) {
            // Queued before (by an earlier run): wait for that one instead of posting twice.
            if let progress { self.setProgressHandler(id, progress) }
            return try await self.awaitJob(id)
        }
        let (size, type) = try await Self.inspect(path, declared: contentType)
        var file = path
        var owns = false
        if let spool = self.spool {
            // The job outlives this call (and the app's file may not): keep a copy.
            file = (spool as NSString).appendingPathComponent(id)
            try? FileManager.default.removeItem(atPath: file)  // left by a run that died before cleaning up
            do {
                try FileManager.default.createDirectory(atPath: spool, withIntermediateDirectories: true)
                try FileManager.default.copyItem(atPath: path, toPath: file)
            } catch {
                throw CircleClientError(.fileError, "cannot copy \(path) to \(file): \(error)")
            }
            owns = true
        }
        let job = PhotoJob(
            id: id,
            circle: circle,
            caption: caption,
            path: file,
            contentType: type,
            size: size,
            uploadID: nil,
            mediaID: nil,
            createdAt: Int64(Date().timeIntervalSince1970 * 1000),
            ownsFile: owns
        )
        try await self.store.savePhotoJob(job)
        self.jobs.append(job)
        if let progress { self.setProgressHandler(id, progress) }
        return try await self.awaitJob(id)
    }

    private func awaitJob(_ id: String) async throws -> PostReceipt {
        let token = UUID()
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { continuation in
                self.waiters[id, default: [:]][token] = continuation
                self.startWorker()
            }
        } onCancel: {
            Task { await self.cancelWaiter(id, token) }
        }
    }

    /// The caller stopped waiting; the photo post itself goes on.
    private func cancelWaiter(_ id: String, _ token: UUID) {
        self.waiters[id]?.removeValue(forKey: token)?.resume(throwing: CancellationError())
    }

    /// Photo posts queued and not yet handed to the outbox (restored ones included).
    var pendingPhotoPosts: [String] { self.jobs.map(\.id) }

    /// Starts (or keeps) working through the queue.
    func startWorker() {
        guard self.worker == nil, !self.jobs.isEmpty else { return }
        self.worker = Task { await self.work() }
    }

    /// Stops working; waiting callers get ``CircleClientError/Code/stopped``; persisted jobs stay.
    func stop() async {
        let worker = self.worker
        worker?.cancel()
        await worker?.value
        self.worker = nil
        for waiter in self.waiters.values.flatMap(\.values) {
            waiter.resume(throwing: CircleClientError(.stopped, "the client stopped; the photo post stays queued in the state file"))
        }
        self.waiters = [:]
        self.listeners.withLockedValue { $0.progress = [:] }
        await self.pool.closeAll()
    }

    private func work() async {
        while !Task.isCancelled, let job = self.jobs.first {
            await self.run(job)
        }
        self.worker = nil
    }

    private func run(_ job: PhotoJob) async {
        var job = job
        do {
            if job.mediaID == nil {
                let result = try await self.upload(
                    path: job.path,
                    contentType: job.contentType,
                    size: job.size,
                    progressID: job.id,
                    uploadID: job.uploadID,
                    created: { uploadID in
                        job.uploadID = uploadID
                        try await self.store.savePhotoJob(job)
                    }
                )
                job.mediaID = result.mediaID
                try await self.store.savePhotoJob(job)
                self.emit(.finished(id: job.id, result.metrics))
            }
        } catch {
            if Task.isCancelled { return }
            // A refused transfer carries the server's reason: pass that on, not the wrapper.
            let failure = (error as? TransferError)?.error ?? error as? CircleClientError ?? CircleClientError(.fileError, "\(error)")
            self.emit(.failed(id: job.id, failure, (error as? TransferError)?.metrics ?? TransferMetrics(requests: [], total: .zero, retries: 0, resumedFrom: 0, fromCache: false)))
            await self.finish(job, .failure(failure))
            return
        }
        guard let mediaID = job.mediaID else { return }
        // The post goes through the outbox with the job's id: a repeat after a restart is stored once.
        self.jobs.removeAll { $0.id == job.id }
        self.posting.insert(job.id)
        let core = self.core
        let finishedJob = job
        Task {
            do {
                let receipt = try await core.post(text: finishedJob.caption, attachment: mediaID, to: finishedJob.circle, id: finishedJob.id)
                await self.finish(finishedJob, .success(receipt))
            } catch let error as CircleClientError where error.code == .stopped {
                // Stays queued (the job row still has the media id); the next run posts it.
                self.posting.remove(finishedJob.id)
                self.resume(finishedJob.id, .failure(error))
            } catch {
                await self.finish(finishedJob, .failure(error))
            }
        }
    }

    private func finish(_ job: PhotoJob, _ result: Result<PostReceipt, any Error>) async {
        self.jobs.removeAll { $0.id == job.id }
        self.posting.remove(job.id)
        if job.ownsFile { try? FileManager.default.removeItem(atPath: job.path) }
        try? await self.store.removePhotoJob(id: job.id)
        self.resume(job.id, result)
    }

    private func resume(_ id: String, _ result: Result<PostReceipt, any Error>) {
        self.setProgressHandler(id, nil)
        for waiter in (self.waiters.removeValue(forKey: id) ?? [:]).values {
            switch result {
            case .success(let receipt): waiter.resume(returning: receipt)
            case .failure(let error): waiter.resume(throwing: error)
            }
        }
    }

    // MARK: Upload

    /// A transfer that failed, with its metrics.
    struct TransferError: Error {
        var error: CircleClientError
        var metrics: TransferMetrics
    }

    func uploadFile(path: String, contentType: String?, progress: (@Sendable (TransferProgress) -> Void)?) async throws -> UploadResult {
        let (size, type) = try await Self.inspect(path, declared: contentType)
        let id = UUID().uuidString.lowercased()
        if let progress { self.setProgressHandler(id, progress) }
        defer { self.setProgressHandler(id, nil) }
        do {
            let result = try await self.upload(path: path, contentType: type, size: size, progressID: id, uploadID: nil, created: { _ in })
            self.emit(.finished(id: id, result.metrics))
            return result
        } catch let error as TransferError {
            self.emit(.failed(id: id, error.error, error.metrics))
            throw error.error
        }
    }

    /// Uploads a file through a resumable upload: create it (unless `uploadID` continues one),
    /// then `PATCH` from the server's offset until it is complete, retrying with backoff.
    private func upload(
        path: String,
        contentType: String,
        size: Int64,
        progressID: String,
        uploadID existing: String?,
        created: (String) async throws -> Void
    ) async throws -> UploadResult {
        var metrics = TransferMetrics(requests: [], total: .zero, retries: 0, resumedFrom: 0, fromCache: false)
        let started = ContinuousClock.now
        var uploadID = existing
        var knownOffset: Int64? = existing == nil ? 0 : nil
        var retries = RetryState(transfer: self.transfer)
        var refreshedToken = false
        func fail(_ error: CircleClientError) -> TransferError {
            metrics.total = ContinuousClock.now - started
            return TransferError(error: error, metrics: metrics)
        }
        while true {
            if Task.isCancelled { throw fail(CircleClientError(.stopped, "the upload was stopped")) }
            guard ContinuousClock.now - started < self.transfer.transferTimeout else {
                throw fail(CircleClientError(.timedOut, "the upload did not finish within \(self.transfer.transferTimeout)"))
            }
            do {
                let token = try await self.currentToken()
                var headers = HTTPHeaders()
                headers.add(name: "Authorization", value: "Bearer \(token)")
                if uploadID == nil {
                    var createHeaders = headers
                    createHeaders.add(name: "Content-Type", value: "application/json")
                    let body = HTTPAPI.encode(HTTPAPI.CreateUpload(length: size, contentType: contentType))
                    let answer = try await self.http.exchange(.POST, HTTPAPI.Path.uploads, headers: createHeaders, body: .bytes(Array(body)))
                    metrics.requests.append(answer.metrics)
                    retries.reachedServer()
                    guard answer.head.status == .created, let json = HTTPAPI.decode(HTTPAPI.Upload.self, from: answer.body) else {
                        try self.check(answer.head.status, answer.body, refreshedToken: &refreshedToken)
                        continue
                    }
                    uploadID = json.upload
                    knownOffset = 0
                    do { try await created(json.upload) } catch { throw fail(CircleClientError(.fileError, "\(error)")) }
                }
                guard let upload = uploadID else { continue }
                let offset: Int64
                if let knownOffset {
                    offset = knownOffset
                } else {
                    let answer = try await self.http.exchange(.GET, HTTPAPI.Path.upload(upload), headers: headers)
                    metrics.requests.append(answer.metrics)
                    retries.reachedServer()
                    if answer.head.status == .notFound {
                        // The server forgot the upload (deleted, or another server): start over.
                        uploadID = nil
                        continue
                    }
                    guard answer.head.status == .ok, let json = HTTPAPI.decode(HTTPAPI.Upload.self, from: answer.body) else {
                        try self.check(answer.head.status, answer.body, refreshedToken: &refreshedToken)
                        continue
                    }
                    offset = json.offset
                    if metrics.resumedFrom == 0 { metrics.resumedFrom = offset }
                }
                knownOffset = nil
                self.reportProgress(TransferProgress(id: progressID, completed: offset, total: size))
                var patchHeaders = headers
                patchHeaders.add(name: "Upload-Offset", value: "\(offset)")
                patchHeaders.add(name: "Content-Type", value: "application/offset+octet-stream")
                let answer = try await self.http.exchange(
                    .PATCH,
                    HTTPAPI.Path.upload(upload),
                    headers: patchHeaders,
                    body: .file(path: path, offset: offset, length: size - offset),
                    progress: { [weak self] sent in
                        self?.reportProgress(TransferProgress(id: progressID, completed: offset + sent, total: size))
                    }
                )
                metrics.requests.append(answer.metrics)
                switch answer.head.status {
                case .created:
                    guard let media = HTTPAPI.decode(HTTPAPI.Media.self, from: answer.body) else {
                        throw fail(CircleClientError(.httpError, "the server's answer to the upload is not media JSON"))
                    }
                    metrics.total = ContinuousClock.now - started
                    return UploadResult(mediaID: media.id, size: media.size, metrics: metrics)
                case .noContent, .conflict:
                    // Not all of it arrived, or the offset moved: ask again, at once.
                    continue
                default:
                    try self.check(answer.head.status, answer.body, refreshedToken: &refreshedToken)
                }
            } catch {
                try retries.absorb(error, metrics: &metrics, started: started)
            }
            try await retries.retry(after: "the upload", metrics: &metrics, started: started)
        }
    }

    /// Turns an unexpected answer into a thrown error: permanent ones as ``CircleClientError``
    /// (so the caller stops), retryable ones as a ``RequestFailure`` with a transient error.
    private func check(_ status: HTTPResponseStatus, _ body: [UInt8], refreshedToken: inout Bool) throws(RequestFailure) {
        let refusal = ServerAPI.refusal(status, body: body)
        let message = refusal.message
        let noMetrics = RequestMetrics(method: "", path: "", status: Int(status.code), connect: nil, tls: nil, timeToFirstByte: nil, total: .zero, bytesSent: 0, bytesReceived: 0, reusedConnection: false, error: message)
        switch status.code {
        case 401 where !refreshedToken:
            refreshedToken = true
            self.token = nil
            throw RequestFailure(error: Retry(), metrics: noMetrics, unreachable: false)
        case 408, 409, 423, 429, 500...599:
            throw RequestFailure(error: Retry(), metrics: noMetrics, unreachable: false)
        default:
            throw RequestFailure(error: refusal, metrics: noMetrics, unreachable: false)
        }
    }

    private struct Retry: Error {}

    private func currentToken() async throws(RequestFailure) -> String {
        if let token = self.token { return token }
        do {
            let token = try await self.configuration.tokenProvider()
            self.token = token
            return token
        } catch {
            throw RequestFailure(
                error: error,
                metrics: RequestMetrics(method: "", path: "token", status: nil, connect: nil, tls: nil, timeToFirstByte: nil, total: .zero, bytesSent: 0, bytesReceived: 0, reusedConnection: false, error: "\(error)"),
                unreachable: true
            )
        }
    }

    /// The size and content type of a file to upload: the declared type, else by extension,
    /// else by its first bytes.
    static func inspect(_ path: String, declared: String?) async throws -> (Int64, String) {
        guard let attributes = try? FileManager.default.attributesOfItem(atPath: path), let size = (attributes[.size] as? NSNumber)?.int64Value else {
            throw CircleClientError(.fileError, "cannot read \(path)")
        }
        if let declared { return (size, declared) }
        switch (path as NSString).pathExtension.lowercased() {
        case "jpg", "jpeg": return (size, "image/jpeg")
        case "png": return (size, "image/png")
        case "gif": return (size, "image/gif")
        case "webp": return (size, "image/webp")
        default: break
        }
        let file = try await BlockingFile.reading(path)
        let head = try await file.read(at: 0, count: 12)
        await file.close()
        if head.starts(with: [0xFF, 0xD8, 0xFF]) { return (size, "image/jpeg") }
        if head.starts(with: [0x89, 0x50, 0x4E, 0x47]) { return (size, "image/png") }
        if head.starts(with: Array("GIF8".utf8)) { return (size, "image/gif") }
        if head.starts(with: Array("RIFF".utf8)) && head.count >= 12 && Array(head[8..<12]) == Array("WEBP".utf8) { return (size, "image/webp") }
        return (size, "application/octet-stream")
    }

    // MARK: Download

    /// Downloads media `id`: from the cache when fresh (revalidated with `If-None-Match` when
    /// stale), else from the server, resuming a partial file with `Range` + `If-Range`.
    /// With `destination`, the bytes end up there; otherwise in the cache (or a temporary file).
    func download(_ id: String, to destination: String?, progress: (@Sendable (TransferProgress) -> Void)?) async throws -> DownloadResult {
        if let progress { self.setProgressHandler(id, progress) }
        defer { self.setProgressHandler(id, nil) }
        do {
            let result = try await self.fetch(id, to: destination)
            self.emit(.finished(id: id, result.metrics))
            return result
        } catch let error as TransferError {
            self.emit(.failed(id: id, error.error, error.metrics))
            throw error.error
        }
    }

    private func fetch(_ id: String, to destination: String?) async throws -> DownloadResult {
        var metrics = TransferMetrics(requests: [], total: .zero, retries: 0, resumedFrom: 0, fromCache: false)
        let started = ContinuousClock.now
        func fail(_ error: CircleClientError) -> TransferError {
            metrics.total = ContinuousClock.now - started
            return TransferError(error: error, metrics: metrics)
        }
        func deliver(_ cached: String, size: Int64, contentType: String?) throws -> DownloadResult {
            var path = cached
            if let destination, destination != cached {
                try? FileManager.default.removeItem(atPath: destination)
                do { try FileManager.default.copyItem(atPath: cached, toPath: destination) } catch {
                    throw fail(CircleClientError(.fileError, "cannot write \(destination): \(error)"))
                }
                path = destination
            }
            metrics.total = ContinuousClock.now - started
            return DownloadResult(path: path, size: size, contentType: contentType, metrics: metrics)
        }
        var revalidate: MediaCache.Entry?
        if let cache = self.cache {
            do { try cache.prepare() } catch {
                throw fail(CircleClientError(.fileError, "cannot create the cache directory \(cache.directory): \(error)"))
            }
        }
        if let cache = self.cache, let entry = cache.lookup(id) {
            if entry.expires > Date().timeIntervalSince1970 {
                cache.touch(id)
                metrics.fromCache = true
                self.reportProgress(TransferProgress(id: id, completed: entry.size, total: entry.size))
                return try deliver(cache.path(id), size: entry.size, contentType: entry.contentType)
            }
            revalidate = entry
        }
        let partial = self.cache?.partialPath(id) ?? (destination ?? NSTemporaryDirectory() + "/circle-\(id)") + ".part"
        var retries = RetryState(transfer: self.transfer)
        var refreshedToken = false
        while true {
            if Task.isCancelled { throw fail(CircleClientError(.stopped, "the download was stopped")) }
            guard ContinuousClock.now - started < self.transfer.transferTimeout else {
                throw fail(CircleClientError(.timedOut, "the download did not finish within \(self.transfer.transferTimeout)"))
            }
            let have = (try? FileManager.default.attributesOfItem(atPath: partial)[.size] as? NSNumber)?.int64Value ?? 0
            let sink = DownloadSink(path: partial, existing: have, id: id, report: { [weak self] progress in self?.reportProgress(progress) })
            defer { Task { _ = try? await sink.finish() } }
            do {
                let token = try await self.currentToken()
                var headers = HTTPHeaders()
                headers.add(name: "Authorization", value: "Bearer \(token)")
                let validator = self.partialValidator(partial)
                if have > 0, let validator {
                    headers.add(name: "Range", value: "bytes=\(have)-")
                    headers.add(name: "If-Range", value: validator)
                } else if let etag = revalidate?.etag {
                    headers.add(name: "If-None-Match", value: etag)
                }
                let answer = try await self.http.exchange(
                    .GET,
                    HTTPAPI.Path.mediaItem(id),
                    headers: headers,
                    onHead: { head in try await sink.begin(head) },
                    onBody: { buffer in try await sink.write(buffer) }
                )
                metrics.requests.append(answer.metrics)
                retries.reachedServer()
                let head = answer.head
                switch head.status {
                case .notModified:
                    guard let cache = self.cache, var entry = revalidate else { continue }
                    entry.expires = Date().timeIntervalSince1970 + Self.maxAge(head.headers)
                    cache.touch(id, entry: entry)
                    metrics.fromCache = true
                    return try deliver(cache.path(id), size: entry.size, contentType: entry.contentType)
                case .ok, .partialContent:
                    let written = try await sink.finish()
                    if head.status == .partialContent && metrics.resumedFrom == 0 { metrics.resumedFrom = have }
                    let expected = sink.expectedTotal
                    guard expected == nil || written == expected else { continue }
                    guard try await Self.sha256(of: partial) == id else {
                        self.removePartial(partial)
                        throw fail(CircleClientError(.corrupt, "the downloaded bytes do not hash to \(id)"))
                    }
                    let contentType = head.headers.first(name: "Content-Type")
                    if let cache = self.cache {
                        let entry = MediaCache.Entry(
                            etag: head.headers.first(name: "ETag"),
                            expires: Date().timeIntervalSince1970 + Self.maxAge(head.headers),
                            contentType: contentType,
                            size: written
                        )
                        do { try cache.store(id, from: partial, entry: entry) } catch {
                            throw fail(CircleClientError(.fileError, "cannot store \(id) in the cache: \(error)"))
                        }
                        self.removePartial(partial)
                        return try deliver(cache.path(id), size: written, contentType: contentType)
                    }
                    let final = destination ?? NSTemporaryDirectory() + "/circle-\(id)"
                    try? FileManager.default.removeItem(atPath: final)
                    do { try FileManager.default.moveItem(atPath: partial, toPath: final) } catch {
                        throw fail(CircleClientError(.fileError, "cannot write \(final): \(error)"))
                    }
                    self.removePartial(partial)
                    metrics.total = ContinuousClock.now - started
                    return DownloadResult(path: final, size: written, contentType: contentType, metrics: metrics)
                case .rangeNotSatisfiable:
                    // The partial file is not a prefix of this media: start over.
                    self.removePartial(partial)
                    try? FileManager.default.removeItem(atPath: partial)
                default:
                    try self.check(head.status, answer.body, refreshedToken: &refreshedToken)
                }
            } catch {
                try retries.absorb(error, metrics: &metrics, started: started)
            }
            try await retries.retry(after: "the download", metrics: &metrics, started: started)
        }
    }

    private func partialValidator(_ partial: String) -> String? {
        guard let data = FileManager.default.contents(atPath: partial + ".etag") else { return nil }
        return String(decoding: data, as: UTF8.self)
    }

    private func removePartial(_ partial: String) {
        try? FileManager.default.removeItem(atPath: partial)
        try? FileManager.default.removeItem(atPath: partial + ".etag")
    }

    /// `max-age` of `Cache-Control` (0 with `no-cache`/`no-store` or none).
    static func maxAge(_ headers: HTTPHeaders) -> Double {
        let directives = headers["Cache-Control"].flatMap { $0.split(separator: ",") }.map { $0.trimmingCharacters(in: .whitespaces).lowercased() }
        if directives.contains("no-cache") || directives.contains("no-store") { return 0 }
        for directive in directives where directive.hasPrefix("max-age=") {
            return Double(directive.dropFirst(8)) ?? 0
        }
        return 0
    }

    static func sha256(of path: String) async throws -> String {
        let file = try await BlockingFile.reading(path)
        var hasher = SHA256()
        var offset: Int64 = 0
        while true {
            let chunk = try await file.read(at: offset, count: 1 << 20)
            if chunk.isEmpty { break }
            hasher.update(data: chunk)
            offset += Int64(chunk.count)
        }
        await file.close()
        return hasher.finalize().map { String(format: "%02x", $0) }.joined()
    }
}

/// Writes a download's body into its partial file: appended after a 206, from scratch after
/// a 200. Remembers the validator next to the file so a later attempt can resume.
private final class DownloadSink: @unchecked Sendable {
    // @unchecked: used by one exchange at a time; its callbacks run one after another.
    let path: String
    let existing: Int64
    let id: String
    let report: @Sendable (TransferProgress) -> Void
    private var file: BlockingFile?
    private var written: Int64 = 0
    private(set) var expectedTotal: Int64?

    init(path: String, existing: Int64, id: String, report: @escaping @Sendable (TransferProgress) -> Void) {
        self.path = path
        self.existing = existing
        self.id = id
        self.report = report
    }

    func begin(_ head: HTTPResponseHead) async throws {
        guard head.status == .ok || head.status == .partialContent else { return }
        let append = head.status == .partialContent
        self.written = append ? self.existing : 0
        if let length = head.headers.first(name: "Content-Length").flatMap(Int64.init) {
            self.expectedTotal = self.written + length
        }
        let etag = head.headers.first(name: "ETag") ?? ""
        _ = FileManager.default.createFile(atPath: self.path + ".etag", contents: Data(etag.utf8))
        self.file = try await BlockingFile.appending(self.path, truncate: !append)
        self.report(TransferProgress(id: self.id, completed: self.written, total: self.expectedTotal))
    }

    func write(_ buffer: ByteBuffer) async throws {
        // A cancelled download stops here; the bytes so far stay for a resume.
        try Task.checkCancellation()
        guard let file = self.file else { return }
        try await file.append(buffer)
        self.written += Int64(buffer.readableBytes)
        self.report(TransferProgress(id: self.id, completed: self.written, total: self.expectedTotal))
    }

    func finish() async throws -> Int64 {
        await self.file?.close()
        self.file = nil
        return self.written
    }
}

/// The retry decisions that uploads and downloads share: which failures are retried, how long
/// an unreachable server is waited for, how many attempts there may be, and the backoff between.
struct RetryState {
    let transfer: TransferConfiguration
    private(set) var attempt = 0
    /// Since when no connection could be made, while the server stays unreachable.
    private var unreachableSince: ContinuousClock.Instant?

    init(transfer: TransferConfiguration) {
        self.transfer = transfer
    }

    /// A request reached the server: waiting for connectivity starts afresh next time.
    mutating func reachedServer() {
        self.unreachableSince = nil
    }

    /// Returns when the failed request may be retried; throws the error that ends the transfer.
    mutating func absorb(_ failure: RequestFailure) throws(CircleClientError) {
        if let error = failure.error as? CircleClientError, error.code != .notConnected {
            throw error
        }
        guard failure.unreachable else { return }
        guard self.transfer.waitsForConnectivity else {
            throw CircleClientError(.notConnected, "the server is unreachable: \(failure.error)")
        }
        let since = self.unreachableSince ?? .now
        self.unreachableSince = since
        guard ContinuousClock.now - since < self.transfer.connectivityTimeout else {
            throw CircleClientError(.notConnected, "the server stayed unreachable for \(self.transfer.connectivityTimeout): \(failure.error)")
        }
    }

    /// After a failed attempt of a transfer: a ``RequestFailure`` is recorded in `metrics` and,
    /// when it may be retried, absorbed (the caller goes on to ``retry(after:metrics:started:)``);
    /// anything else ends the transfer, thrown as a `TransferError` with the metrics so far.
    mutating func absorb(_ error: any Error, metrics: inout TransferMetrics, started: ContinuousClock.Instant) throws(MediaTransfers.TransferError) {
        switch error {
        case let failure as RequestFailure:
            metrics.requests.append(failure.metrics)
            do { try self.absorb(failure) } catch { throw Self.end(error, metrics: &metrics, started: started) }
        case let error as MediaTransfers.TransferError:
            throw error
        default:
            throw Self.end(error as? CircleClientError ?? CircleClientError(.fileError, "\(error)"), metrics: &metrics, started: started)
        }
    }

    /// Counts a retry of `what` and waits its backoff delay; throws what ends the transfer
    /// (attempts used up, or stopped).
    mutating func retry(after what: String, metrics: inout TransferMetrics, started: ContinuousClock.Instant) async throws(MediaTransfers.TransferError) {
        metrics.retries += 1
        do { try await self.backOff(after: what, lastError: metrics.requests.last?.error) } catch {
            throw Self.end(error, metrics: &metrics, started: started)
        }
    }

    /// The error that ends a transfer, with its total time.
    private static func end(_ error: CircleClientError, metrics: inout TransferMetrics, started: ContinuousClock.Instant) -> MediaTransfers.TransferError {
        metrics.total = ContinuousClock.now - started
        return MediaTransfers.TransferError(error: error, metrics: metrics)
    }

    /// Counts the attempt and sleeps the backoff delay; throws when the attempts are used up
    /// (attempts while waiting for connectivity do not count) or the task was cancelled.
    mutating func backOff(after what: String, lastError: String?) async throws(CircleClientError) {
        self.attempt += 1
        if let maxAttempts = self.transfer.retry.maxAttempts, self.unreachableSince == nil, self.attempt >= maxAttempts {
            throw CircleClientError(.timedOut, "\(what) failed \(self.attempt) times; the last: \(lastError ?? "?")")
        }
        do {
            try await Task.sleep(for: self.transfer.retry.delay(attempt: self.attempt, random: .random(in: 0..<1)))
        } catch {
            throw CircleClientError(.stopped, "\(what) was stopped")
        }
    }
}
