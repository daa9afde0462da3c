import CircleWire
import Foundation
import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1

/// The decisions of the media routes (documented in docs/MEDIA.md): authentication, the store,
/// the files. ``HTTPChannelHandler`` moves the bytes: it streams upload bodies into files with
/// backpressure and streams downloads out of them.
struct MediaService: Sendable {
    let services: ServerServices
    let files: MediaFiles
    let locks = UploadLocks()

    /// The media routes.
    enum Route: Equatable {
        /// `POST /v1/media`: a whole file in one streamed request.
        case upload
        /// `POST /v1/media/uploads`: create a resumable upload.
        case createUpload
        /// `HEAD`/`GET /v1/media/uploads/{id}`: its offset.
        case uploadStatus(String)
        /// `PATCH /v1/media/uploads/{id}`: append at `Upload-Offset` (streamed).
        case append(String)
        /// `DELETE /v1/media/uploads/{id}`.
        case deleteUpload(String)
        /// `GET`/`HEAD /v1/media/{id}`.
        case download(String)

        init?(method: HTTPMethod, path: String) {
            let parts = path.split(separator: "/").map(String.init)
            guard parts.count >= 2, parts[0] == "v1", parts[1] == "media" else { return nil }
            switch (method, Array(parts.dropFirst(2))) {
            case (.POST, []): self = .upload
            case (.POST, ["uploads"]): self = .createUpload
            case (.HEAD, let rest) where rest.count == 2 && rest[0] == "uploads": self = .uploadStatus(rest[1])
            case (.GET, let rest) where rest.count == 2 && rest[0] == "uploads": self = .uploadStatus(rest[1])
            case (.PATCH, let rest) where rest.count == 2 && rest[0] == "uploads": self = .append(rest[1])
            case (.DELETE, let rest) where rest.count == 2 && rest[0] == "uploads": self = .deleteUpload(rest[1])
            case (.GET, let rest) where rest.count == 1 && rest[0] != "uploads": self = .download(rest[0])
            case (.HEAD, let rest) where rest.count == 1 && rest[0] != "uploads": self = .download(rest[0])
            default: return nil
            }
        }

        /// Whether the request body is streamed to a file instead of buffered.
        var streamsBody: Bool {
            switch self {
            case .upload, .append: return true
            default: return false
            }
        }
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
        case refuse(APIResponse)
        case accept(UploadTarget)
    }

    enum Download: Sendable {
        case response(APIResponse)
        case file(fd: Int32, status: HTTPResponseStatus, headers: HTTPHeaders, offset: Int64, length: Int64)
    }

    struct MediaBody: Codable, Sendable {
        var id: String
        var size: Int64
        var contentType: String
        var url: String
    }

    struct UploadBody: Codable, Sendable {
        var upload: String
        var offset: Int64
        var length: Int64
        var contentType: String
        var media: String?
    }

    private struct CreateUpload: Codable {
        var length: Int64
        var contentType: String
    }

    var maxBytes: Int64 { self.services.configuration.limits.maxMediaBytes }

    // MARK: - Authentication

    private enum Authentication {
        case success(String)
        case failure(APIResponse)
    }

    private func authenticate(_ request: APIRequest) async -> Authentication {
        guard let token = request.token else {
            return .failure(.error(.unauthorized, .unauthorized, "send a token as \"Authorization: Bearer …\" or ?token="))
        }
        do throws(TokenError) {
            return .success(try await self.services.authority.verify(token).name)
        } catch {
            return .failure(.error(.unauthorized, error.code, error.message))
        }
    }

    private static func storeFailure(_ error: any Error) -> APIResponse {
        if let error = error as? StoreError, error.code == .unavailable {
            return .error(.serviceUnavailable, .unavailable, error.message)
        }
        return .error(.internalServerError, .internalError, "\(error)")
    }

    // MARK: - Streamed uploads

    /// Decides whether a streamed upload (`POST /v1/media`, `PATCH /v1/media/uploads/{id}`) may
    /// start, before any of its body is read. On `.accept` the upload's lock is held until
    /// ``finishUpload(_:written:digest:)`` or ``abandonUpload(_:)``.
    func beginUpload(_ request: APIRequest, route: Route) async -> UploadStart {
        let user: String
        switch await self.authenticate(request) {
        case .success(let name): user = name
        case .failure(let response): return .refuse(response)
        }
        if request.headers["Transfer-Encoding"].contains(where: { $0.lowercased().contains("chunked") }) {
            return .refuse(.error(.lengthRequired, .badRequest, "send the body with a Content-Length, not chunked"))
        }
        guard let lengthText = request.headers.first(name: "Content-Length"), let length = Int64(lengthText), length >= 0 else {
            return .refuse(.error(.lengthRequired, .badRequest, "send a Content-Length"))
        }
        do {
            switch route {
            case .upload:
                guard let contentType = MediaType.normalize(request.headers.first(name: "Content-Type")) else {
                    return .refuse(Self.unsupportedType(request.headers.first(name: "Content-Type")))
                }
                guard length <= self.maxBytes else { return .refuse(self.tooLarge(length)) }
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
                    return .refuse(.error(.notFound, .notFound, "no upload \"\(id)\""))
                }
                guard let offsetText = request.headers.first(name: "Upload-Offset"), let offset = Int64(offsetText), offset >= 0 else {
                    return .refuse(.error(.badRequest, .badRequest, "send Upload-Offset: the offset this body starts at (HEAD the upload to learn it)"))
                }
                guard await self.locks.acquire(id) else {
                    return .refuse(.error(.conflict, .conflict, "another request is writing upload \"\(id)\"; retry"))
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
                        return .refuse(.error(.notFound, .notFound, "no upload \"\(id)\""))
                    }
                    return .refuse(Self.created(info, upload: upload))
                }
                guard upload.media == nil, offset == current else {
                    self.locks.release(id)
                    var response = APIResponse.error(
                        .conflict,
                        .conflict,
                        upload.media == nil ? "upload \"\(id)\" is at offset \(current), not \(offset)" : "upload \"\(id)\" is complete"
                    )
                    response.headers.add(name: "Upload-Offset", value: "\(upload.media == nil ? current : upload.length)")
                    return .refuse(response)
                }
                guard offset + length <= upload.length else {
                    self.locks.release(id)
                    return .refuse(.error(.badRequest, .badRequest, "\(length) bytes at offset \(offset) run past the upload's length of \(upload.length)"))
                }
                do {
                    let (fd, size) = try await self.files.openUpload(id)
                    guard size == offset else {
                        await self.files.close(fd)
                        self.locks.release(id)
                        return .refuse(.error(.conflict, .conflict, "upload \"\(id)\" is at offset \(size), not \(offset)"))
                    }
                    return .accept(UploadTarget(upload: upload, user: user, offset: offset, expected: length, fd: fd, oneShot: false))
                } catch {
                    self.locks.release(id)
                    throw error
                }
            default:
                return .refuse(.error(.notFound, .notFound, "no route \(request.method.rawValue) \(request.path)"))
            }
        } catch {
            return .refuse(Self.storeFailure(error))
        }
    }

    /// The body of an accepted upload has been written (`written` bytes) and its descriptor
    /// closed. Completes the media when the upload has all its bytes. `digest` is the SHA-256 of
    /// the whole file when this request carried all of it from offset 0.
    func finishUpload(_ target: UploadTarget, written: Int64, digest: String?) async -> APIResponse {
        let upload = target.upload
        defer { self.locks.release(upload.id) }
        let size = target.offset + written
        guard size >= upload.length else {
            var response = APIResponse(status: .noContent, contentType: "application/json", body: ByteBuffer())
            response.headers.add(name: "Upload-Offset", value: "\(size)")
            return response
        }
        do {
            let inspected = try await self.files.inspectUpload(upload.id, knownDigest: digest)
            guard MediaType.matches(inspected.prefix, upload.contentType) else {
                await self.files.removeUpload(upload.id)
                try? await self.services.store.deleteUpload(id: upload.id)
                return Self.mismatch(inspected.prefix, declared: upload.contentType)
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
            return Self.created(info, upload: upload)
        } catch {
            return Self.storeFailure(error)
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

    static func mismatch(_ prefix: [UInt8], declared: String) -> APIResponse {
        .error(.unsupportedMediaType, .unsupportedMediaType, "the bytes are \(MediaType.sniff(prefix)), not \(declared)")
    }

    private static func unsupportedType(_ header: String?) -> APIResponse {
        .error(
            .unsupportedMediaType,
            .unsupportedMediaType,
            "Content-Type \(header.map { "\"\($0)\"" } ?? "(none)") is not one of \(MediaType.accepted.joined(separator: ", "))"
        )
    }

    private func tooLarge(_ length: Int64) -> APIResponse {
        .error(.payloadTooLarge, .tooLarge, "the file has \(length) bytes; the limit is \(self.maxBytes)")
    }

    private static func created(_ info: MediaInfo, upload: MediaUpload) -> APIResponse {
        var response = APIResponse.json(.created, MediaBody(id: info.id, size: info.size, contentType: info.contentType, url: "/v1/media/\(info.id)"))
        response.headers.add(name: "Location", value: "/v1/media/\(info.id)")
        response.headers.add(name: "Upload-Offset", value: "\(upload.length)")
        return response
    }

    private static func newUploadID() -> String {
        "u" + hexString((0..<16).map { _ in UInt8.random(in: 0...255) })
    }

    private static func now() -> Int64 { Int64(Date().timeIntervalSince1970 * 1000) }

    // MARK: - Buffered routes

    /// `POST /v1/media/uploads`, `HEAD`/`GET`/`DELETE /v1/media/uploads/{id}`.
    func handle(_ request: APIRequest, route: Route) async -> APIResponse {
        let user: String
        switch await self.authenticate(request) {
        case .success(let name): user = name
        case .failure(let response): return response
        }
        do {
            switch route {
            case .createUpload:
                guard let body = request.body, let create = try? JSONDecoder().decode(CreateUpload.self, from: Data(body.readableBytesView)),
                    create.length >= 0
                else {
                    return .error(.badRequest, .badRequest, "send {\"length\": BYTES, \"contentType\": \"image/jpeg\"}")
                }
                guard let contentType = MediaType.normalize(create.contentType) else { return Self.unsupportedType(create.contentType) }
                guard create.length <= self.maxBytes else { return self.tooLarge(create.length) }
                let limit = self.services.configuration.limits.maxPendingUploadsPerUser
                guard try await self.services.store.pendingUploadCount(owner: user) < limit else {
                    return .error(.tooManyRequests, .rateLimited, "\(user) has \(limit) unfinished uploads; finish or DELETE one first")
                }
                let upload = MediaUpload(id: Self.newUploadID(), owner: user, length: create.length, contentType: contentType, createdAt: Self.now())
                try await self.services.store.createUpload(upload)
                var response = APIResponse.json(
                    .created,
                    UploadBody(upload: upload.id, offset: 0, length: upload.length, contentType: contentType, media: nil)
                )
                response.headers.add(name: "Location", value: "/v1/media/uploads/\(upload.id)")
                response.headers.add(name: "Upload-Offset", value: "0")
                response.headers.add(name: "Upload-Length", value: "\(upload.length)")
                return response
            case .uploadStatus(let id):
                guard let upload = try await self.services.store.upload(id: id), upload.owner == user else {
                    return .error(.notFound, .notFound, "no upload \"\(id)\"")
                }
                // Wait for a request still writing (one whose client went away, say), so the
                // offset is final; after the wait, answer with what is there.
                let locked = await self.locks.acquire(id)
                if locked { self.locks.release(id) }
                let offset = upload.media == nil ? try await self.files.uploadSize(id) : upload.length
                var response = APIResponse.json(
                    .ok,
                    UploadBody(upload: id, offset: offset, length: upload.length, contentType: upload.contentType, media: upload.media)
                )
                response.headers.add(name: "Upload-Offset", value: "\(offset)")
                response.headers.add(name: "Upload-Length", value: "\(upload.length)")
                return response
            case .deleteUpload(let id):
                guard let upload = try await self.services.store.upload(id: id), upload.owner == user else {
                    return .error(.notFound, .notFound, "no upload \"\(id)\"")
                }
                guard await self.locks.acquire(id) else {
                    return .error(.conflict, .conflict, "another request is writing upload \"\(id)\"; retry")
                }
                defer { self.locks.release(id) }
                await self.files.removeUpload(id)
                try await self.services.store.deleteUpload(id: id)
                return APIResponse(status: .noContent, contentType: "application/json", body: ByteBuffer())
            default:
                return .error(.notFound, .notFound, "no route \(request.method.rawValue) \(request.path)")
            }
        } catch {
            return Self.storeFailure(error)
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

    /// Sweeps expired uploads until cancelled: at start, then every quarter of the expiry (at most hourly).
    func runExpiry() async {
        let quarter = self.services.configuration.limits.uploadExpiry.nanoseconds / 4
        let interval = Duration.nanoseconds(max(10_000_000, min(quarter, 3_600_000_000_000)))
        while !Task.isCancelled {
            let removed = await self.expireUploads()
            if removed > 0 { self.services.logger.info("expired unfinished uploads", metadata: ["circle.media.expired": "\(removed)"]) }
            try? await Task.sleep(for: interval)
        }
    }

    // MARK: - Downloads

    /// `GET`/`HEAD /v1/media/{id}`: access check, validators, ranges.
    func download(_ request: APIRequest, id: String) async -> Download {
        let user: String
        switch await self.authenticate(request) {
        case .success(let name): user = name
        case .failure(let response): return .response(response)
        }
        // Media that does not exist and media this user may not see get the same answer, so
        // nobody learns whether some content was uploaded by someone.
        let notFound = APIResponse.error(.notFound, .notFound, "no media \"\(id)\" that you can see")
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
            return .response(Self.storeFailure(error))
        }
        let etag = "\"\(info.id)\""
        var headers = HTTPHeaders()
        headers.add(name: "ETag", value: etag)
        // Content-addressed: the bytes behind this URL never change.
        headers.add(name: "Cache-Control", value: "private, max-age=31536000, immutable")
        headers.add(name: "Accept-Ranges", value: "bytes")
        headers.add(name: "X-Content-Type-Options", value: "nosniff")
        if info.contentType == "application/octet-stream" { headers.add(name: "Content-Disposition", value: "attachment") }

        if let match = request.headers.first(name: "If-None-Match"), Self.matches(match, etag: etag) {
            return .response(APIResponse(status: .notModified, contentType: info.contentType, body: ByteBuffer(), headers: headers))
        }
        var status = HTTPResponseStatus.ok
        var offset: Int64 = 0
        var length = info.size
        if let rangeHeader = request.headers.first(name: "Range") {
            // If-Range with another validator: the client's partial copy is stale; send it all.
            let ifRange = request.headers.first(name: "If-Range")
            if ifRange == nil || ifRange?.trimmingCharacters(in: .whitespaces) == etag {
                switch Self.parseRange(rangeHeader, size: info.size) {
                case .none:
                    break
                case .unsatisfiable:
                    var response = APIResponse.error(.rangeNotSatisfiable, .rangeNotSatisfiable, "\(rangeHeader) is outside the \(info.size) bytes of the media")
                    response.headers.add(name: "Content-Range", value: "bytes */\(info.size)")
                    return .response(response)
                case .range(let first, let last):
                    status = .partialContent
                    offset = first
                    length = last - first + 1
                    headers.add(name: "Content-Range", value: "bytes \(first)-\(last)/\(info.size)")
                }
            }
        }
        headers.add(name: "Content-Type", value: info.contentType)
        do {
            let fd = try await self.files.openMedia(info.id)
            return .file(fd: fd, status: status, headers: headers, offset: offset, length: length)
        } catch {
            return .response(.error(.internalServerError, .internalError, "the media file is missing: \(error)"))
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

/// Which uploads a request is writing: one writer per upload at a time.
final class UploadLocks: Sendable {
    private let held = NIOLockedValueBox(Set<String>())

    /// Takes the lock of `id`, waiting up to `timeout` for its holder (a request whose client
    /// went away finishes its last write and lets go within milliseconds).
    func acquire(_ id: String, timeout: Duration = .seconds(5)) async -> Bool {
        let deadline = ContinuousClock.now + timeout
        while true {
            if self.held.withLockedValue({ $0.insert(id).inserted }) { return true }
            guard ContinuousClock.now < deadline else { return false }
            try? await Task.sleep(for: .milliseconds(10))
        }
    }

    func release(_ id: String) {
        _ = self.held.withLockedValue { $0.remove(id) }
    }
}
