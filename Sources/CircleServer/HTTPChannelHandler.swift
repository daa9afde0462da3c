import CircleWire
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
final class HTTPChannelHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart

    private static let maxBody = 1024 * 1024

    private let router: APIRouter
    private let decision: UpgradeDecision
    private var head: HTTPRequestHead?
    private var body: ByteBuffer?
    private var tooLarge = false

    init(router: APIRouter, decision: UpgradeDecision) {
        self.router = router
        self.decision = decision
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch self.unwrapInboundIn(data) {
        case .head(let head):
            self.head = head
            self.body = nil
            self.tooLarge = false
        case .body(var chunk):
            guard !self.tooLarge else { return }
            if (self.body?.readableBytes ?? 0) + chunk.readableBytes > Self.maxBody {
                self.tooLarge = true
                self.body = nil
            } else {
                self.body.setOrWriteBuffer(&chunk)
            }
        case .end:
            guard let head = self.head else { return }
            self.head = nil
            if let refusal = self.decision.refusal {
                self.decision.refusal = nil
                self.respond(context: context, head: head, refusal, route: "GET /v1/ws")
                return
            }
            if self.tooLarge {
                self.respond(context: context, head: head, .error(.payloadTooLarge, .tooLarge, "bodies are limited to 1 MiB"), route: APIRouter.routeLabel(method: head.method, path: splitURI(head.uri).path))
                return
            }
            let request = APIRequest(head: head, body: self.body)
            self.body = nil
            let router = self.router
            let eventLoop = context.eventLoop
            let loopBound = NIOLoopBound((self, context), eventLoop: eventLoop)
            Task {
                let response = await router.handle(request)
                eventLoop.execute {
                    let (handler, context) = loopBound.value
                    handler.respond(context: context, head: head, response, route: APIRouter.routeLabel(method: head.method, path: request.path))
                }
            }
        }
    }

    private func respond(context: ChannelHandlerContext, head: HTTPRequestHead, _ response: APIResponse, route: String) {
        self.router.services.metrics.httpRequest(route: route, status: response.status.code)
        var headers = HTTPHeaders()
        headers.add(name: "Content-Type", value: response.contentType)
        headers.add(name: "Content-Length", value: "\(response.body.readableBytes)")
        headers.add(name: "Cache-Control", value: "no-store")
        let keepAlive = head.isKeepAlive && response.status != .payloadTooLarge
        if !keepAlive { headers.add(name: "Connection", value: "close") }
        let responseHead = HTTPResponseHead(version: head.version, status: response.status, headers: headers)
        context.write(self.wrapOutboundOut(.head(responseHead)), promise: nil)
        context.write(self.wrapOutboundOut(.body(.byteBuffer(response.body))), promise: nil)
        let channel = context.channel
        context.writeAndFlush(self.wrapOutboundOut(.end(nil))).whenComplete { _ in
            if !keepAlive { channel.close(promise: nil) }
        }
    }
}
