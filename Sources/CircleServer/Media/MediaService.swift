import CircleWire
import Foundation
import HTTPTypes
import Hummingbird
import NIOConcurrencyHelpers
import NIOCore

/// The decisions of the media routes (documented in docs/MEDIA.md): the store, the files, the
/// validators. ``MediaRoutes`` moves the bytes: it streams upload bodies into files and
/// downloads out of them.
struct MediaService: Sendable {
    let services: ServerServices
    let files: MediaFiles
    let locks: UploadLocks

    init(services: ServerServices, files: MediaFiles) {
        self.services = services
        self.files = files
        self.locks = UploadLocks()
    }

    /// The routes whose request body is streamed into a file instead of buffered.
    enum StreamedUpload: Equatable {
        /// `POST /v1/media`: a whole file in one streamed request.
        case upload
        /// `PATCH /v1/media/uploads/{id}`: append at `Upload-Offset`.
        case append(String)
    }

    /// Where a streamed upload body goes.
    struct UploadTarget: Sendable {
        var upload: MediaUpload
        var user: String
        /// The upload's bytes before this request.
        var offset: Int64
        /// The bytes this request carries (its `Content-Length`).
        var expected: Int64
        /// An open descriptor appending to the upload's file.
        var fd: Int32
        /// `POST /v1/media`: an interrupted body is thrown away rather than kept for resuming.
        var oneShot: Bool
    }

    enum UploadStart: Sendable {
        /// Answered before any of the body is read.
        case refuse(Response)
        case accept(UploadTarget)
    }

    enum Download: Sendable {
        case response(Response)
        case file(fd: Int32, status: HTTPResponse.Status, headers: HTTPFields, offset: Int64, length: Int64)
    }

    var maxBytes: Int64 { self.services.configuration.limits.maxMediaBytes }

    private static func storeFailure(_ error: any Error) -> APIError {
        if let error = error as? StoreError, error.code == .unavailable {
            return APIError(.serviceUnavailable, .unavailable, error.message)
        }
        return APIError(.internalServerError, .internalError, "\(error)")
    }

    // MARK: - Streamed uploads

    /// Another request (on this node, or on another node sharing the data directory) is writing the upload.
    static func busy(_ id: String) -> APIError {
        APIError(.conflict, .conflict, "another request is writing upload \"\(id)\"; retry")
    }

    /// Decides whether a streamed upload (`POST /v1/media`, `PATCH /v1/media/uploads/{id}`) may
    /// start, before any of its body is read. On `.accept` the upload's lock is held until
    /// ``finishUpload(_:written:digest:prefix:)`` or ``abandonUpload(_:)``.
    func beginUpload(headers: HTTPFields, user: String, route: StreamedUpload, prefix: String) async -> UploadStart {
        if headers[values: .transferEncoding].contains(where: { $0.lowercased().contains("chunked") }) {
            return .refuse(APIError(.lengthRequired, .badRequest, "send the body with a Content-Length, not chunked").response)
        }
        guard let lengthText = headers[.contentLength], let length = Int64(lengthText), length >= 0 else {
            return .refuse(APIError(.lengthRequired, .badRequest, "send a Content-Length").response)
        }
        do {
            switch route {
            case .upload:
                guard let contentType = MediaType.normalize(headers[.contentType]) else {
                    return .refuse(Self.unsupportedType(headers[.contentType]).response)
                }
                guard length <= self.maxBytes else { return .refuse(self.tooLarge(length).response) }
                let upload = MediaUpload(id: Self.newUploadID(), owner: user, length: length, contentType: contentType, createdAt: Self.now())
                try await self.services.store.createUpload(upload)
                _ = await self.locks.acquire(upload.id)
                do {
                    let (fd, _) = try await self.files.openUpload(upload.id)
                    return .accept(UploadTarget(upload: upload, user: user, offset: 0, expected: length, fd: fd, oneShot: true))
                } catch {
                    self.locks.release(upload.id)
                    try? await self.services.store.deleteUpload(id: upload.id)
                    throw error
                }
            case .append(let id):
                guard let upload = try await self.services.store.upload(id: id), upload.owner == user else {
                    return .refuse(APIError(.notFound, .notFound, "no upload \"\(id)\"").response)
                }
                guard let offsetText = headers[.uploadOffset], let offset = Int64(offsetText), offset >= 0 else {
                    return .refuse(APIError(.badRequest, .badRequest, "send Upload-Offset: the offset this body starts at (HEAD the upload to learn it)").response)
                }
                guard await self.locks.acquire(id) else {
                    return .refuse(Self.busy(id).response)
                }
                let current: Int64
                do {
                    current = try await self.files.uploadSize(id)
                } catch {
                    self.locks.release(id)
                    throw error
                }
                if let media = upload.media, length == 0, offset == upload.length {
                    // The upload completed, but its answer may have been lost: answer again.
                    self.locks.release(id)
                    guard let info = try await self.services.store.media(id: media) else {
                        return .refuse(APIError(.notFound, .notFound, "no upload \"\(id)\"").response)
                    }
                    // Not an error, but an answer given before any body is read.
                    return .refuse(Self.created(info, upload: upload, prefix: prefix))
                }
                guard upload.media == nil, offset == current else {
                    self.locks.release(id)
                    return .refuse(
                        APIError(
                            .conflict,
                            .conflict,
                            upload.media == nil ? "upload \"\(id)\" is at offset \(current), not \(offset)" : "upload \"\(id)\" is complete",
                            headers: [.uploadOffset: "\(upload.media == nil ? current : upload.length)"]
                        ).response
                    )
                }
                guard offset + length <= upload.length else {
                    self.locks.release(id)
                    return .refuse(APIError(.badRequest, .badRequest, "\(length) bytes at offset \(offset) run past the upload's length of \(upload.length)").response)
                }
                do {
                    let (fd, size) = try await self.files.openUpload(id)
                    guard size == offset else {
                        await self.files.close(fd)
                        self.locks.release(id)
                        return .refuse(APIError(.conflict, .conflict, "upload \"\(id)\" is at offset \(size), not \(offset)").response)
                    }
                    return .accept(UploadTarget(upload: upload, user: user, offset: offset, expected: length, fd: fd, oneShot: false))
                } catch is UploadBusy {
                    self.locks.release(id)
                    return .refuse(Self.busy(id).response)
                } catch {
                    self.locks.release(id)
                    throw error
                }
            }
        } catch {
            return .refuse(Self.storeFailure(error).response)
        }
    }

    /// The body of an accepted upload has been written (`written` bytes) and its descriptor
    /// closed. Completes the media when the upload has all its bytes. `digest` is the SHA-256 of
    /// the whole file when this request carried all of it from offset 0.
    func finishUpload(_ target: UploadTarget, written: Int64, digest: String?, prefix: String) async -> Response {
        let upload = target.upload
        defer { self.locks.release(upload.id) }
        let size = target.offset + written
        guard size >= upload.length else {
            return Response(status: .noContent, headers: [.uploadOffset: "\(size)"])
        }
        do {
            let inspected = try await self.files.inspectUpload(upload.id, knownDigest: digest)
            guard MediaType.matches(inspected.prefix, upload.contentType) else {
                await self.files.removeUpload(upload.id)
                try? await self.services.store.deleteUpload(id: upload.id)
                return Self.mismatch(inspected.prefix, declared: upload.contentType).response
            }
            try await self.files.promoteUpload(upload.id, to: inspected.digest)
            let info = try await self.services.store.completeUpload(
                id: upload.id,
                media: MediaInfo(id: inspected.digest, size: inspected.size, contentType: upload.contentType, createdAt: Self.now()),
                uploader: target.user
            )
            self.services.metrics.mediaStored.increment()
            self.services.logger.info(
                "stored an upload",
                metadata: ["circle.user": "\(target.user)", "circle.media": "\(inspected.digest.prefix(12))", "circle.bytes": "\(inspected.size)", "circle.type": "\(upload.contentType)"]
            )
            return Self.created(info, upload: upload, prefix: prefix)
        } catch {
            return Self.storeFailure(error).response
        }
    }

    /// The connection ended (or the upload was refused) before the body was complete; the
    /// descriptor is closed. A resumable upload keeps what arrived; a one-shot one is dropped.
    func abandonUpload(_ target: UploadTarget) async {
        if target.oneShot {
            await self.files.removeUpload(target.upload.id)
            try? await self.services.store.deleteUpload(id: target.upload.id)
        }
        self.locks.release(target.upload.id)
    }

    static func mismatch(_ prefix: [UInt8], declared: String) -> APIError {
        APIError(.unsupportedMediaType, .unsupportedMediaType, "the bytes are \(MediaType.sniff(prefix)), not \(declared)")
    }

    private static func unsupportedType(_ header: String?) -> APIError {
        APIError(
            .unsupportedMediaType,
            .unsupportedMediaType,
            "Content-Type \(header.map { "\"\($0)\"" } ?? "(none)") is not one of \(MediaType.accepted.joined(separator: ", "))"
        )
    }

    private func tooLarge(_ length: Int64) -> APIError {
        APIError(.contentTooLarge, .tooLarge, "the file has \(length) bytes; the limit is \(self.maxBytes)")
    }

    /// - Parameter prefix: Where Circle is mounted (``MountPrefix``): the photo's `url` and
    ///   `Location` are under it.
    private static func created(_ info: MediaInfo, upload: MediaUpload, prefix: String) -> Response {
        let url = prefix + HTTPAPI.Path.mediaItem(info.id)
        return .json(
            .created,
            HTTPAPI.Media(id: info.id, size: info.size, contentType: info.contentType, url: url),
            headers: [.location: url, .uploadOffset: "\(upload.length)"]
        )
    }

    private static func newUploadID() -> String {
        "u" + hexString((0..<16).map { _ in UInt8.random(in: 0...255) })
    }

    private static func now() -> Int64 { Int64(Date().timeIntervalSince1970 * 1000) }

    // MARK: - Buffered routes

    /// `POST /v1/media/uploads`: creates a resumable upload.
    func createUpload(body: ByteBuffer, user: String, prefix: String) async throws -> Response {
        let create = try body.decodeJSON(HTTPAPI.CreateUpload.self, send: #"{"length": BYTES, "contentType": "image/jpeg"}"#)
        // An empty file is no photo (its type could never be checked against its bytes).
        guard create.length >= 1 else {
            throw APIError(.badRequest, .badRequest, "length is the photo's size in bytes: 1 or more")
        }
        guard let contentType = MediaType.normalize(create.contentType) else { throw Self.unsupportedType(create.contentType) }
        guard create.length <= self.maxBytes else { throw self.tooLarge(create.length) }
        do {
            let limit = self.services.configuration.limits.maxPendingUploadsPerUser
            guard try await self.services.store.pendingUploadCount(owner: user) < limit else {
                throw APIError(.tooManyRequests, .rateLimited, "\(user) has \(limit) unfinished uploads; finish or DELETE one first")
            }
            let upload = MediaUpload(id: Self.newUploadID(), owner: user, length: create.length, contentType: contentType, createdAt: Self.now())
            try await self.services.store.createUpload(upload)
            return .json(
                .created,
                HTTPAPI.Upload(upload: upload.id, offset: 0, length: upload.length, contentType: contentType, media: nil),
                headers: [.location: prefix + HTTPAPI.Path.upload(upload.id), .uploadOffset: "0", .uploadLength: "\(upload.length)"]
            )
        } catch let error as APIError {
            throw error
        } catch {
            throw Self.storeFailure(error)
        }
    }

    /// `HEAD`/`GET /v1/media/uploads/{id}`: the upload's offset.
    func uploadStatus(id: String, user: String) async throws -> Response {
        do {
            guard let upload = try await self.services.store.upload(id: id), upload.owner == user else {
                throw APIError(.notFound, .notFound, "no upload \"\(id)\"")
            }
            // Wait for a request still writing (one whose client went away, say), so the
            // offset is final; after the wait, answer with what is there.
            let locked = await self.locks.acquire(id)
            if locked { self.locks.release(id) }
            let offset = upload.media == nil ? try await self.files.uploadSize(id) : upload.length
            return .json(
                .ok,
                HTTPAPI.Upload(upload: id, offset: offset, length: upload.length, contentType: upload.contentType, media: upload.media),
                headers: [.uploadOffset: "\(offset)", .uploadLength: "\(upload.length)"]
            )
        } catch let error as APIError {
            throw error
        } catch {
            throw Self.storeFailure(error)
        }
    }

    /// `DELETE /v1/media/uploads/{id}`.
    func deleteUpload(id: String, user: String) async throws -> Response {
        do {
            guard let upload = try await self.services.store.upload(id: id), upload.owner == user else {
                throw APIError(.notFound, .notFound, "no upload \"\(id)\"")
            }
            guard await self.locks.acquire(id) else {
                throw Self.busy(id)
            }
            defer { self.locks.release(id) }
            await self.files.removeUpload(id)
            try await self.services.store.deleteUpload(id: id)
            return Response(status: .noContent)
        } catch let error as APIError {
            throw error
        } catch {
            throw Self.storeFailure(error)
        }
    }

    /// Deletes uploads older than the expiry: their bytes (when not completed) and records.
    /// Returns how many went.
    @discardableResult
    func expireUploads() async -> Int {
        let expiry = self.services.configuration.limits.uploadExpiry
        let cutoff = Self.now() - expiry.nanoseconds / 1_000_000
        guard let ids = try? await self.services.store.uploads(createdBefore: cutoff) else { return 0 }
        var removed = 0
        for id in ids {
            // One in the middle of a request is left for the next sweep.
            guard await self.locks.acquire(id, timeout: .zero) else { continue }
            await self.files.removeUpload(id)
            try? await self.services.store.deleteUpload(id: id)
            self.locks.release(id)
            removed += 1
        }
        return removed
    }

    /// Sweeps expired uploads until cancelled: at start, then every quarter of the expiry (at
    /// most hourly), timed by `clock`.
    func runExpiry(clock: some Clock<Duration> = ContinuousClock()) async {
        let quarter = self.services.configuration.limits.uploadExpiry.nanoseconds / 4
        let interval = Duration.nanoseconds(max(10_000_000, min(quarter, 3_600_000_000_000)))
        while !Task.isCancelled {
            let removed = await self.expireUploads()
            if removed > 0 { self.services.logger.info("expired unfinished uploads", metadata: ["circle.media.expired": "\(removed)"]) }
            try? await clock.sleep(for: interval)
        }
    }

    // MARK: - Downloads

    /// `GET`/`HEAD /v1/media/{id}`: access check, validators, ranges.
    func download(id: String, user: String, headers requestHeaders: HTTPFields) async -> Download {
        // Media that does not exist and media this user may not see get the same answer, so
        // nobody learns whether some content was uploaded by someone.
        let notFound = APIError(.notFound, .notFound, "no media \"\(id)\" that you can see").response
        guard id.utf8.count == 64, id.utf8.allSatisfy({ ($0 >= 0x30 && $0 <= 0x39) || ($0 >= 0x61 && $0 <= 0x66) }) else {
            return .response(notFound)
        }
        let info: MediaInfo
        do {
            guard let found = try await self.services.store.media(id: id), try await self.services.store.canRead(media: id, user: user) else {
                return .response(notFound)
            }
            info = found
        } catch {
            return .response(Self.storeFailure(error).response)
        }
        let etag = "\"\(info.id)\""
        var headers: HTTPFields = [
            .eTag: etag,
            // Content-addressed: the bytes behind this URL never change.
            .cacheControl: "private, max-age=31536000, immutable",
            .acceptRanges: "bytes",
            .xContentTypeOptions: "nosniff",
        ]
        if info.contentType == "application/octet-stream" { headers[.contentDisposition] = "attachment" }

        if let match = requestHeaders[.ifNoneMatch], Self.matches(match, etag: etag) {
            headers[.contentType] = info.contentType
            return .response(Response(status: .notModified, headers: headers))
        }
        var status = HTTPResponse.Status.ok
        var offset: Int64 = 0
        var length = info.size
        if let rangeHeader = requestHeaders[.range] {
            // If-Range with another validator: the client's partial copy is stale; send it all.
            let ifRange = requestHeaders[.ifRange]
            if ifRange == nil || ifRange?.trimmingCharacters(in: .whitespaces) == etag {
                switch Self.parseRange(rangeHeader, size: info.size) {
                case .none:
                    break
                case .unsatisfiable:
                    return .response(
                        APIError(
                            .rangeNotSatisfiable,
                            .rangeNotSatisfiable,
                            "\(rangeHeader) is outside the \(info.size) bytes of the media",
                            headers: [.contentRange: "bytes */\(info.size)"]
                        ).response
                    )
                case .range(let first, let last):
                    status = .partialContent
                    offset = first
                    length = last - first + 1
                    headers[.contentRange] = "bytes \(first)-\(last)/\(info.size)"
                }
            }
        }
        headers[.contentType] = info.contentType
        do {
            let fd = try await self.files.openMedia(info.id)
            return .file(fd: fd, status: status, headers: headers, offset: offset, length: length)
        } catch {
            return .response(APIError(.internalServerError, .internalError, "the media file is missing: \(error)").response)
        }
    }

    private static func matches(_ header: String, etag: String) -> Bool {
        header.split(separator: ",").contains { candidate in
            let tag = candidate.trimmingCharacters(in: .whitespaces)
            return tag == "*" || tag == etag || tag == "W/" + etag
        }
    }

    enum ParsedRange: Equatable {
        /// Not a single byte range this server serves partially: answer with the whole file.
        case none
        case unsatisfiable
        case range(Int64, Int64)
    }

    /// One range of `bytes=first-last`, `bytes=first-` or `bytes=-suffix`. Several ranges are
    /// answered with the whole file (RFC 9110 lets a server ignore `Range`).
    static func parseRange(_ header: String, size: Int64) -> ParsedRange {
        let text = header.trimmingCharacters(in: .whitespaces)
        guard text.lowercased().hasPrefix("bytes=") else { return .none }
        let spec = text.dropFirst(6).trimmingCharacters(in: .whitespaces)
        guard !spec.contains(","), let dash = spec.firstIndex(of: "-") else { return .none }
        let firstText = spec[..<dash].trimmingCharacters(in: .whitespaces)
        let lastText = spec[spec.index(after: dash)...].trimmingCharacters(in: .whitespaces)
        if firstText.isEmpty {
            guard let suffix = Int64(lastText), suffix >= 0 else { return .none }
            guard suffix > 0, size > 0 else { return .unsatisfiable }
            return .range(max(0, size - suffix), size - 1)
        }
        guard let first = Int64(firstText), first >= 0 else { return .none }
        var last = size - 1
        if !lastText.isEmpty {
            guard let value = Int64(lastText), value >= first else { return .none }
            last = min(value, size - 1)
        }
        guard first < size else { return .unsatisfiable }
        return .range(first, last)
    }
}

/// Which uploads a request is writing: one writer per upload at a time. A request that wants a
/// held lock waits for its release (an event), up to a timeout on the injected clock.
final class UploadLocks: Sendable {
    private struct Waiter {
        var id: String
        var token: Int
        var continuation: CheckedContinuation<Bool, Never>
    }

    private struct State {
        var held: Set<String> = []
        var waiters: [Waiter] = []
        /// Waits whose timeout came before their waiter was registered.
        var expired: Set<Int> = []
        var nextToken = 0
    }

    private let state = NIOLockedValueBox(State())
    private let clock: any Clock<Duration>

    init(clock: any Clock<Duration> = ContinuousClock()) {
        self.clock = clock
    }

    /// Takes the lock of `id`, waiting up to `timeout` for its holder (a request whose client
    /// went away finishes its last write and lets go within milliseconds).
    func acquire(_ id: String, timeout: Duration = .seconds(5)) async -> Bool {
        let token = self.state.withLockedValue { state -> Int? in
            if state.held.insert(id).inserted { return nil }
            state.nextToken += 1
            return state.nextToken
        }
        guard let token else { return true }
        guard timeout > .zero else { return false }
        return await withTaskGroup(of: Bool?.self) { group in
            group.addTask {
                await withCheckedContinuation { continuation in
                    let immediate = self.state.withLockedValue { state -> Bool? in
                        if state.expired.remove(token) != nil { return false }
                        if state.held.insert(id).inserted { return true }
                        state.waiters.append(Waiter(id: id, token: token, continuation: continuation))
                        return nil
                    }
                    if let immediate { continuation.resume(returning: immediate) }
                }
            }
            group.addTask {
                try? await self.clock.sleep(for: timeout)
                // Gives up unless the release already handed the lock over.
                let waiter = self.state.withLockedValue { state -> Waiter? in
                    guard let index = state.waiters.firstIndex(where: { $0.token == token }) else {
                        // Not registered yet (or already handed the lock): a late waiter gives up.
                        state.expired.insert(token)
                        return nil
                    }
                    return state.waiters.remove(at: index)
                }
                waiter?.continuation.resume(returning: false)
                return nil
            }
            var acquired = false
            while let result = await group.next() {
                if let result {
                    acquired = result
                    group.cancelAll()
                }
            }
            // A handed-over lock whose timeout also fired leaves a stale mark; drop it.
            self.state.withLockedValue { _ = $0.expired.remove(token) }
            return acquired
        }
    }

    /// Lets go of `id`, handing it to the first waiter if there is one.
    func release(_ id: String) {
        let next = self.state.withLockedValue { state -> Waiter? in
            if let index = state.waiters.firstIndex(where: { $0.id == id }) {
                // The lock passes straight to the waiter: `held` keeps `id`.
                return state.waiters.remove(at: index)
            }
            state.held.remove(id)
            return nil
        }
        next?.continuation.resume(returning: true)
    }
}

extension HTTPField.Name {
    /// The resumable-upload offset (docs/MEDIA.md).
    static let uploadOffset = HTTPField.Name("Upload-Offset")!
    static let uploadLength = HTTPField.Name("Upload-Length")!
    static let xContentTypeOptions = HTTPField.Name("X-Content-Type-Options")!
}
