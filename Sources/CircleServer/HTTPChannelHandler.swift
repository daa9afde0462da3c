import CircleWire
import Crypto
import NIOCore
import NIOHTTP1

/// What the WebSocket upgrade decided for a channel, for the handlers that run after it.
final class UpgradeDecision {
    var user: AuthenticatedUser?
    var refusal: APIResponse?
}

/// Serves plain HTTP requests (the API) and answers upgrade requests that were refused with
/// their status and JSON body. Requests are handled one at a time per connection; NIO's
/// pipelining handler keeps responses in order.
///
/// API bodies are buffered (at most 1 MiB). Media uploads (`POST /v1/media`, `PATCH
/// /v1/media/uploads/{id}`) are streamed into their file instead: while a write to disk is
/// pending the handler holds back `read`, so the socket is not read faster than the disk
/// takes the bytes. Media downloads are streamed out of the file one chunk at a time, the next
/// chunk read only once the previous one has been written to the socket.
final class HTTPChannelHandler: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundIn = HTTPServerResponsePart
    typealias OutboundOut = HTTPServerResponsePart

    private static let maxBody = 1024 * 1024
    private static let downloadChunk = 256 * 1024

    /// A streamed upload on this connection.
    private final class Upload {
        let head: HTTPRequestHead
        let route: MediaService.Route
        var target: MediaService.UploadTarget?
        /// Body bytes received but not yet handed to the disk.
        var queued: [ByteBuffer] = []
        var written: Int64 = 0
        var writing = false
        var ended = false
        /// Answered, failed or abandoned: nothing more is written.
        var finished = false
        var hasher: SHA256?
        var prefix: [UInt8] = []

        init(head: HTTPRequestHead, route: MediaService.Route) {
            self.head = head
            self.route = route
        }
    }

    private enum Mode {
        case idle
        case buffering(HTTPRequestHead)
        case upload(Upload)
        /// An answer went out before the request's body was read: the rest is read and dropped.
        case discarding
    }

    private let router: APIRouter
    private let decision: UpgradeDecision
    private var mode = Mode.idle
    private var body: ByteBuffer?
    private var tooLarge = false
    private var readsHeld = false
    private var readPending = false
    private var isActive = true
    /// A complete request waiting for the socket to drain before it is answered.
    private var deferredRequest: HTTPRequestHead?

    init(router: APIRouter, decision: UpgradeDecision) {
        self.router = router
        self.decision = decision
    }

    private var media: MediaService { self.router.media }

    // MARK: - Reads

    func read(context: ChannelHandlerContext) {
        if self.readsHeld {
            self.readPending = true
        } else {
            context.read()
        }
    }

    private func holdReads() {
        self.readsHeld = true
    }

    private func releaseReads(context: ChannelHandlerContext) {
        self.readsHeld = false
        if self.readPending {
            self.readPending = false
            context.read()
        }
    }

    func channelInactive(context: ChannelHandlerContext) {
        self.isActive = false
        if case .upload(let upload) = self.mode, !upload.finished {
            upload.finished = true
            // With a write in flight, its completion closes the file; otherwise close it now.
            if !upload.writing, let target = upload.target { self.abandon(target, context: context) }
        }
        context.fireChannelInactive()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch self.unwrapInboundIn(data) {
        case .head(let head):
            self.body = nil
            self.tooLarge = false
            if self.decision.refusal == nil, let route = MediaService.Route(method: head.method, path: splitURI(head.uri).path), route.streamsBody {
                self.startUpload(context: context, head: head, route: route)
            } else {
                self.mode = .buffering(head)
            }
        case .body(var chunk):
            switch self.mode {
            case .buffering:
                guard !self.tooLarge else { return }
                if (self.body?.readableBytes ?? 0) + chunk.readableBytes > Self.maxBody {
                    self.tooLarge = true
                    self.body = nil
                } else {
                    self.body.setOrWriteBuffer(&chunk)
                }
            case .upload(let upload):
                guard !upload.finished else { return }
                upload.queued.append(chunk)
                self.pump(upload, context: context)
            case .idle, .discarding:
                break
            }
        case .end:
            switch self.mode {
            case .buffering(let head):
                self.mode = .idle
                self.requestEnded(context: context, head: head)
            case .upload(let upload):
                upload.ended = true
                self.pump(upload, context: context)
            case .discarding:
                self.mode = .idle
            case .idle:
                break
            }
        }
    }

    func channelWritabilityChanged(context: ChannelHandlerContext) {
        if context.channel.isWritable, let head = self.deferredRequest {
            self.deferredRequest = nil
            self.requestEnded(context: context, head: head)
        }
        context.fireChannelWritabilityChanged()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        guard error is HTTPParserError else {
            context.fireErrorCaught(error)
            return
        }
        // NIO's HTTPServerProtocolErrorHandler has written a 400 with "Connection: close", and
        // the decoder reads nothing more: shut the connection once the 400 is out. (A body cut
        // short by the peer also ends here, from channelInactive: the channel is closing then.)
        guard self.isActive else { return }
        Self.close(afterAnswerOn: context.channel)
    }

    /// Half-closes once everything written has gone out, keeps reading (and dropping) what the
    /// client still sends for a moment, so its unread upload does not turn the answer into a
    /// reset before it is read, then closes.
    private static func close(afterAnswerOn channel: any Channel) {
        channel.close(mode: .output).whenComplete { result in
            if case .failure = result {
                channel.close(promise: nil)
            } else {
                channel.eventLoop.scheduleTask(in: .seconds(5)) { channel.close(promise: nil) }
            }
        }
    }

    private func requestEnded(context: ChannelHandlerContext, head: HTTPRequestHead) {
        // A client that does not read its answers gets no more of them: the request waits until
        // the socket drains (NIO's pipelining handler holds later requests meanwhile), so pipelined
        // requests cannot pile responses up in memory. HTTPTimeoutHandler closes the connection if
        // the socket stays full.
        guard context.channel.isWritable else {
            self.deferredRequest = head
            return
        }
        if let refusal = self.decision.refusal {
            self.decision.refusal = nil
            self.respond(context: context, head: head, refusal, route: "GET /v1/ws")
            return
        }
        let route = APIRouter.routeLabel(method: head.method, path: splitURI(head.uri).path)
        if self.tooLarge {
            self.respond(context: context, head: head, .error(.payloadTooLarge, .tooLarge, "bodies are limited to 1 MiB"), route: route)
            return
        }
        let request = APIRequest(head: head, body: self.body)
        self.body = nil
        let eventLoop = context.eventLoop
        let loopBound = NIOLoopBound((self, context), eventLoop: eventLoop)
        if case .download(let id)? = MediaService.Route(method: head.method, path: request.path) {
            let media = self.media
            Task {
                let plan = await media.download(request, id: id)
                eventLoop.execute {
                    let (handler, context) = loopBound.value
                    switch plan {
                    case .response(let response):
                        handler.respond(context: context, head: head, response, route: route)
                    case .file(let fd, let status, let headers, let offset, let length):
                        handler.sendFile(context: context, head: head, route: route, fd: fd, status: status, headers: headers, offset: offset, length: length)
                    }
                }
            }
            return
        }
        let router = self.router
        Task {
            let response = await router.handle(request)
            eventLoop.execute {
                let (handler, context) = loopBound.value
                handler.respond(context: context, head: head, response, route: route)
            }
        }
    }

    // MARK: - Uploads

    private func startUpload(context: ChannelHandlerContext, head: HTTPRequestHead, route: MediaService.Route) {
        let upload = Upload(head: head, route: route)
        self.mode = .upload(upload)
        // Nothing is read until the upload is authorized and its file is open.
        self.holdReads()
        let media = self.media
        let request = APIRequest(head: head, body: nil)
        let eventLoop = context.eventLoop
        let loopBound = NIOLoopBound((self, context, upload), eventLoop: eventLoop)
        Task {
            let start = await media.beginUpload(request, route: route)
            eventLoop.execute {
                let (handler, context, upload) = loopBound.value
                handler.uploadStarted(upload, start, context: context)
            }
        }
    }

    private func uploadStarted(_ upload: Upload, _ start: MediaService.UploadStart, context: ChannelHandlerContext) {
        switch start {
        case .refuse(let response):
            upload.finished = true
            if self.isActive { self.answerEarly(upload, response, context: context) }
        case .accept(let target):
            upload.target = target
            guard self.isActive, !upload.finished else {
                upload.finished = true
                self.abandon(target, context: context)
                return
            }
            if target.offset == 0 && target.expected == target.upload.length { upload.hasher = SHA256() }
            if !upload.ended, upload.head.headers["Expect"].contains(where: { $0.lowercased() == "100-continue" }) {
                // The client waits for this before sending the body (curl does for large files).
                let proceed = HTTPResponseHead(version: upload.head.version, status: .continue)
                context.writeAndFlush(self.wrapOutboundOut(.head(proceed)), promise: nil)
            }
            self.pump(upload, context: context)
        }
    }

    /// Answers an upload before its body was read; the connection is closed after the answer
    /// (the body that may still come is read and dropped until then).
    private func answerEarly(_ upload: Upload, _ response: APIResponse, context: ChannelHandlerContext) {
        let label = APIRouter.routeLabel(method: upload.head.method, path: splitURI(upload.head.uri).path)
        let bodyDone = upload.ended
        self.mode = bodyDone ? .idle : .discarding
        self.respond(context: context, head: upload.head, response, route: label, close: !bodyDone || !upload.queued.isEmpty)
        upload.queued = []
        self.releaseReads(context: context)
    }

    /// Moves queued body bytes to the disk one write at a time, and finishes the upload once
    /// the request has ended and everything is written.
    private func pump(_ upload: Upload, context: ChannelHandlerContext) {
        guard !upload.writing, !upload.finished, let target = upload.target else { return }
        if !upload.queued.isEmpty {
            var buffer = upload.queued.removeFirst()
            while !upload.queued.isEmpty {
                var next = upload.queued.removeFirst()
                buffer.writeBuffer(&next)
            }
            if target.offset == 0 && upload.prefix.count < MediaType.sniffLength {
                upload.prefix += buffer.readableBytesView.prefix(MediaType.sniffLength - upload.prefix.count)
                let complete = upload.prefix.count >= MediaType.sniffLength || Int64(upload.prefix.count) >= target.upload.length
                if complete && !MediaType.matches(upload.prefix, target.upload.contentType) {
                    upload.finished = true
                    let media = self.media
                    let files = media.files
                    let id = target.upload.id
                    self.answerEarly(upload, MediaService.mismatch(upload.prefix, declared: target.upload.contentType), context: context)
                    Task {
                        await files.close(target.fd)
                        await files.removeUpload(id)
                        try? await media.services.store.deleteUpload(id: id)
                        media.locks.release(id)
                    }
                    return
                }
            }
            upload.hasher?.update(data: buffer.readableBytesView)
            let count = Int64(buffer.readableBytes)
            upload.writing = true
            self.holdReads()
            self.media.files.write(buffer, to: target.fd, eventLoop: context.eventLoop).assumeIsolated().whenComplete { result in
                upload.writing = false
                switch result {
                case .success:
                    upload.written += count
                    self.router.services.metrics.mediaBytesReceived.increment(by: Int(count))
                    if upload.finished {
                        // The connection went away while this write was pending.
                        self.abandon(target, context: context)
                    } else {
                        self.pump(upload, context: context)
                    }
                case .failure(let error):
                    let wasFinished = upload.finished
                    upload.finished = true
                    self.abandon(target, context: context)
                    if !wasFinished && self.isActive {
                        self.answerEarly(upload, .error(.internalServerError, .internalError, "could not store the upload: \(error)"), context: context)
                    }
                }
            }
            return
        }
        guard upload.ended else {
            self.releaseReads(context: context)
            return
        }
        upload.finished = true
        let digest = upload.written == target.upload.length ? upload.hasher.map { hexString($0.finalize()) } : nil
        let written = upload.written
        let media = self.media
        let eventLoop = context.eventLoop
        let loopBound = NIOLoopBound((self, context), eventLoop: eventLoop)
        let head = upload.head
        let label = APIRouter.routeLabel(method: head.method, path: splitURI(head.uri).path)
        Task {
            await media.files.close(target.fd)
            let response = await media.finishUpload(target, written: written, digest: digest)
            eventLoop.execute {
                let (handler, context) = loopBound.value
                handler.mode = .idle
                handler.releaseReads(context: context)
                handler.respond(context: context, head: head, response, route: label)
            }
        }
    }

    private func abandon(_ target: MediaService.UploadTarget, context: ChannelHandlerContext) {
        let media = self.media
        Task {
            await media.files.close(target.fd)
            await media.abandonUpload(target)
        }
    }

    // MARK: - Downloads

    private func sendFile(
        context: ChannelHandlerContext,
        head: HTTPRequestHead,
        route: String,
        fd: Int32,
        status: HTTPResponseStatus,
        headers: HTTPHeaders,
        offset: Int64,
        length: Int64
    ) {
        let files = self.media.files
        guard self.isActive else {
            _ = files.closeFuture(fd, eventLoop: context.eventLoop)
            return
        }
        self.router.services.metrics.httpRequest(route: route, status: status.code)
        var headers = headers
        headers.add(name: "Content-Length", value: "\(length)")
        if !head.isKeepAlive { headers.add(name: "Connection", value: "close") }
        context.write(self.wrapOutboundOut(.head(HTTPResponseHead(version: head.version, status: status, headers: headers))), promise: nil)
        let keepAlive = head.isKeepAlive
        let channel = context.channel
        func finish() {
            _ = files.closeFuture(fd, eventLoop: context.eventLoop)
            context.writeAndFlush(self.wrapOutboundOut(.end(nil))).assumeIsolated().whenComplete { _ in
                if !keepAlive { channel.close(promise: nil) }
            }
        }
        func next(_ position: Int64) {
            let remaining = offset + length - position
            guard remaining > 0 else { return finish() }
            let count = Int(min(remaining, Int64(Self.downloadChunk)))
            files.read(fd, offset: position, count: count, allocator: context.channel.allocator, eventLoop: context.eventLoop)
                .assumeIsolated()
                .whenComplete { result in
                    switch result {
                    case .success(let buffer):
                        let sent = buffer.readableBytes
                        context.writeAndFlush(self.wrapOutboundOut(.body(.byteBuffer(buffer)))).assumeIsolated().whenComplete { written in
                            switch written {
                            case .success:
                                self.router.services.metrics.mediaBytesSent.increment(by: sent)
                                next(position + Int64(sent))
                            case .failure:
                                _ = files.closeFuture(fd, eventLoop: channel.eventLoop)
                            }
                        }
                    case .failure:
                        // The response is under way: all that is left is to cut it short.
                        _ = files.closeFuture(fd, eventLoop: channel.eventLoop)
                        channel.close(promise: nil)
                    }
                }
        }
        if head.method == .HEAD {
            finish()
        } else {
            next(offset)
        }
    }

    // MARK: - Responses

    private func respond(context: ChannelHandlerContext, head: HTTPRequestHead, _ response: APIResponse, route: String, close: Bool = false) {
        guard self.isActive else { return }
        self.router.services.metrics.httpRequest(route: route, status: response.status.code)
        var headers = response.headers
        let hasBody = response.status != .noContent && response.status != .notModified
        if hasBody {
            headers.replaceOrAdd(name: "Content-Type", value: response.contentType)
            headers.replaceOrAdd(name: "Content-Length", value: "\(response.body.readableBytes)")
        }
        if !headers.contains(name: "Cache-Control") { headers.add(name: "Cache-Control", value: "no-store") }
        let keepAlive = head.isKeepAlive && response.status != .payloadTooLarge && !close
        if !keepAlive { headers.add(name: "Connection", value: "close") }
        let responseHead = HTTPResponseHead(version: head.version, status: response.status, headers: headers)
        context.write(self.wrapOutboundOut(.head(responseHead)), promise: nil)
        if hasBody && head.method != .HEAD {
            context.write(self.wrapOutboundOut(.body(.byteBuffer(response.body))), promise: nil)
        }
        let channel = context.channel
        context.writeAndFlush(self.wrapOutboundOut(.end(nil))).whenComplete { _ in
            guard !keepAlive else { return }
            Self.close(afterAnswerOn: channel)
        }
    }
}
