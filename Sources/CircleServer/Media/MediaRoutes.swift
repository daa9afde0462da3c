import CircleWire
import Crypto
import HTTPTypes
import Hummingbird
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix

/// The media routes (docs/MEDIA.md) on Hummingbird's router, behind the token middleware.
///
/// Uploads (`POST /v1/media`, `PATCH /v1/media/uploads/{id}`) are streamed into their file: the
/// body is read one chunk at a time and the next chunk only after the previous one is on disk,
/// so the socket is not read faster than the disk takes the bytes. Nothing is read before the
/// upload is authorized and its file is open (a `100 Continue` goes out then).
///
/// Downloads are streamed out of the file one chunk at a time, the next chunk read only once
/// the previous one has been written. Hummingbird's `FileMiddleware` serves a directory with
/// validators derived from modification times and no access check; media here is content
/// addressed (the ETag is the SHA-256) and readable only by some users, so the file is opened
/// and ranged here after the store has said who may read it.
struct MediaRoutes: Sendable {
    let media: MediaService

    private static let downloadChunk = 256 * 1024

    func add<Context: CircleRequestContext>(to router: some RouterMethods<Context>) {
        router.post(RouterPath(HTTPAPI.Path.media)) { request, context in
            try await self.streamUpload(request, user: try context.requireUser().name, route: .upload)
        }
        router.post(RouterPath(HTTPAPI.Path.uploads)) { request, context in
            var request = request
            let body = try await request.jsonBody()
            return try await self.media.createUpload(body: body, user: try context.requireUser().name, prefix: MountPrefix.of(path: request.uri.path))
        }
        for method in [HTTPRequest.Method.head, .get] {
            router.on(RouterPath(HTTPAPI.Path.Pattern.upload.template), method: method) { _, context in
                try await self.media.uploadStatus(id: try context.pathParameter("upload"), user: try context.requireUser().name)
            }
        }
        router.patch(RouterPath(HTTPAPI.Path.Pattern.upload.template)) { request, context in
            let id = try context.pathParameter("upload")
            return try await self.streamUpload(request, user: try context.requireUser().name, route: .append(id))
        }
        router.delete(RouterPath(HTTPAPI.Path.Pattern.upload.template)) { _, context in
            try await self.media.deleteUpload(id: try context.pathParameter("upload"), user: try context.requireUser().name)
        }
        for method in [HTTPRequest.Method.get, .head] {
            router.on(RouterPath(HTTPAPI.Path.Pattern.mediaItem.template), method: method) { request, context in
                try await self.download(request, id: try context.pathParameter("id"), user: try context.requireUser().name)
            }
        }
    }

    // MARK: - Uploads

    private func streamUpload(_ request: Request, user: String, route: MediaService.StreamedUpload) async throws -> Response {
        let target: MediaService.UploadTarget
        switch await self.media.beginUpload(headers: request.headers, user: user, route: route, prefix: MountPrefix.of(path: request.uri.path)) {
        case .refuse(let response):
            // Nothing of the body was read: the connection is closed after this answer.
            return response
        case .accept(let accepted):
            target = accepted
        }
        let files = self.media.files
        let metrics = self.media.services.metrics
        var hasher: SHA256? = target.offset == 0 && target.expected == target.upload.length ? SHA256() : nil
        var prefix: [UInt8] = []
        var written: Int64 = 0
        do {
            for try await chunk in request.body {
                if target.offset == 0 && prefix.count < MediaType.sniffLength {
                    prefix += chunk.readableBytesView.prefix(MediaType.sniffLength - prefix.count)
                    let complete = prefix.count >= MediaType.sniffLength || Int64(prefix.count) >= target.upload.length
                    if complete && !MediaType.matches(prefix, target.upload.contentType) {
                        await files.close(target.fd)
                        await files.removeUpload(target.upload.id)
                        try? await self.media.services.store.deleteUpload(id: target.upload.id)
                        self.media.locks.release(target.upload.id)
                        return MediaService.mismatch(prefix, declared: target.upload.contentType).response
                    }
                }
                hasher?.update(data: chunk.readableBytesView)
                try await files.write(chunk, to: target.fd)
                written += Int64(chunk.readableBytes)
                metrics.mediaBytesReceived.increment(by: chunk.readableBytes)
            }
        } catch {
            // The connection went away (or the disk refused): what arrived stays for a resumable
            // upload, a one-shot one is dropped.
            await files.close(target.fd)
            await self.media.abandonUpload(target)
            if error is MediaFileError {
                return APIError(.internalServerError, .internalError, "could not store the upload: \(error)").response
            }
            throw error
        }
        await files.close(target.fd)
        let digest = written == target.upload.length ? hasher.map { hexString($0.finalize()) } : nil
        return await self.media.finishUpload(target, written: written, digest: digest, prefix: MountPrefix.of(path: request.uri.path))
    }

    // MARK: - Downloads

    private func download(_ request: Request, id: String, user: String) async throws -> Response {
        switch await self.media.download(id: id, user: user, headers: request.headers) {
        case .response(let response):
            return response
        case .file(let fd, let status, var headers, let offset, let length):
            let descriptor = OwnedDescriptor(fd, files: self.media.files)
            headers[.contentLength] = "\(length)"
            if request.method == .head {
                await descriptor.close()
                return Response(status: status, headers: headers)
            }
            let files = self.media.files
            let metrics = self.media.services.metrics
            let body = ResponseBody(contentLength: Int(length)) { writer in
                guard let fd = descriptor.take() else { return }
                defer { files.closeDetached(fd) }
                var position = offset
                let end = offset + length
                let allocator = ByteBufferAllocator()
                while position < end {
                    let count = Int(min(end - position, Int64(Self.downloadChunk)))
                    let buffer = try await files.read(fd, offset: position, count: count, allocator: allocator)
                    try await writer.write(buffer)
                    metrics.mediaBytesSent.increment(by: buffer.readableBytes)
                    position += Int64(buffer.readableBytes)
                }
                try await writer.finish(nil)
            }
            return Response(status: status, headers: headers, body: body)
        }
    }
}

/// A descriptor opened for a response: the body takes it; if the body never runs (the client
/// went away before the head was written), it is closed when the response is dropped.
private final class OwnedDescriptor: Sendable {
    private let fd: NIOLockedValueBox<Int32?>
    private let files: MediaFiles

    init(_ fd: Int32, files: MediaFiles) {
        self.fd = NIOLockedValueBox(fd)
        self.files = files
    }

    func take() -> Int32? {
        self.fd.withLockedValue { fd in
            defer { fd = nil }
            return fd
        }
    }

    func close() async {
        if let fd = self.take() { await self.files.close(fd) }
    }

    deinit {
        if let fd = self.take() { self.files.closeDetached(fd) }
    }
}
