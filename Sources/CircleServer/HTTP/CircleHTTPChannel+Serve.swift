import HTTPTypes
import Hummingbird
import HummingbirdCore
import Logging
import NIOCore
import NIOHTTP1
import NIOHTTPTypes

extension CircleHTTPChannel {
    /// Answers the requests of one HTTP/1.1 connection in order, one at a time.
    ///
    /// Besides what Hummingbird's own loop does, it sends `100 Continue` when a handler starts
    /// reading a body that asked for it (so a refused upload is answered without its body ever
    /// being sent). The connection ends after the answer to a request whose body the handler
    /// began to read and left (a body over the limit, a refused upload), to one whose unread
    /// body is too large to drop, and to one after which NIO's decoder reads nothing more (an
    /// upgrade request that was not upgraded, a `CONNECT`).
    func serve(
        _ asyncChannel: NIOAsyncChannel<HTTPRequestPart, HTTPResponsePart>,
        upgradeRequest: HTTPRequest?,
        refusal: APIError?,
        drain: NIOLoopBound<InboundDrain>,
        logger: Logger
    ) async {
        let channel = asyncChannel.channel
        let metrics = self.services.metrics
        let chatPath = self.paths.chat
        do {
            try await asyncChannel.executeThenClose { inbound, outbound in
                let parts = InboundParts(inbound.makeAsyncIterator(), outbound: outbound)
                var refusal = refusal
                var upgradeRequest = upgradeRequest
                do {
                    while let head = try await parts.nextHead(consumed: upgradeRequest) {
                        upgradeRequest = nil
                        if let answer = refusal {
                            refusal = nil
                            metrics.httpRequest(route: "GET \(chatPath)", status: UInt(answer.status.code))
                            var response = answer.response
                            response.headers[.cacheControl] = "no-store"
                            response.headers[.connection] = "close"
                            try await ResponseWriter(outbound: outbound).write(response: response.head, body: response.body)
                        } else {
                            let request = Request(head: head, body: RequestBody(asyncSequence: InboundBody(parts: parts)))
                            try await self.responder(request, ResponseWriter(outbound: outbound), channel)
                        }
                        if head.headerFields[.connection]?.lowercased() == "close" { break }
                        guard try await parts.finishBody(dropping: Self.droppableBody(head)), !head.isLastOnHTTP1Connection else {
                            // Answered; half-close, drop what still comes for a moment (so the
                            // answer is read, not reset), close. The parts parsed before the
                            // drain began are read until then.
                            outbound.finish()
                            InboundDrain.drainThenClose(channel, drain: drain, grace: .seconds(5))
                            while try await parts.nextPart() != nil {}
                            return
                        }
                    }
                } catch is HTTPParserError {
                    // NIO answered 400; HTTPTimeoutHandler closes once it is out.
                }
                outbound.finish()
                try await channel.closeFuture.get()
            }
        } catch {
            logger.debug("HTTP connection ended", metadata: ["error": "\(error)"])
        }
    }

    /// How much of an unread body is read and dropped to keep the connection: a small body
    /// that was not announced with `Expect: 100-continue` (its sender waits for no answer).
    private static func droppableBody(_ head: HTTPRequest) -> Int {
        if head.headerFields[.expect]?.lowercased() == "100-continue" { return 0 }
        return Request.maxJSONBody
    }
}

/// The inbound HTTP parts of one connection, shared by the connection loop and the request
/// handler reading a body.
///
/// `@unchecked Sendable`: one task at a time uses it. The connection loop awaits the handler
/// before it reads again, and the handler reads the body only while it is being awaited.
final class InboundParts: @unchecked Sendable {
    private var iterator: NIOAsyncChannelInboundStream<HTTPRequestPart>.AsyncIterator
    private let outbound: NIOAsyncChannelOutboundWriter<HTTPResponsePart>
    /// The current request's body has parts left to read.
    private var inBody = false
    /// The current request asked for `100 Continue` and has not had it.
    private var continuePending = false
    /// The last request was one NIO's upgrade handler consumed.
    private var afterConsumed = false
    /// The handler has asked for a chunk of the current request's body.
    private var bodyStarted = false

    init(_ iterator: NIOAsyncChannelInboundStream<HTTPRequestPart>.AsyncIterator, outbound: NIOAsyncChannelOutboundWriter<HTTPResponsePart>) {
        self.iterator = iterator
        self.outbound = outbound
    }

    func nextPart() async throws -> HTTPRequestPart? {
        try await self.iterator.next()
    }

    /// The next request's head, or nil when the connection has ended. A `consumed` request (its
    /// parts were read by NIO's upgrade handler) comes first, with an empty body.
    func nextHead(consumed: HTTPRequest? = nil) async throws -> HTTPRequest? {
        if let consumed {
            self.inBody = false
            self.continuePending = false
            self.afterConsumed = true
            return consumed
        }
        guard var part = try await self.iterator.next() else { return nil }
        if self.afterConsumed, case .end = part {
            // The end of a consumed request that NIO's upgrade handler let through.
            guard let next = try await self.iterator.next() else { return nil }
            part = next
        }
        self.afterConsumed = false
        guard case .head(let head) = part else { throw HTTPParserError.invalidInternalState }
        self.inBody = true
        self.bodyStarted = false
        self.continuePending = head.headerFields[.expect]?.lowercased() == "100-continue"
        return head
    }

    /// The next chunk of the current request's body; nil at its end. Throws when the connection
    /// ends before the body does.
    func nextBodyChunk() async throws -> ByteBuffer? {
        guard self.inBody else { return nil }
        self.bodyStarted = true
        if self.continuePending {
            self.continuePending = false
            try await self.outbound.write(.head(HTTPResponse(status: .continue)))
        }
        switch try await self.iterator.next() {
        case .body(let chunk):
            return chunk
        case .end:
            self.inBody = false
            return nil
        case .head, nil:
            self.inBody = false
            throw BodyCutShort()
        }
    }

    /// Reads past what the handler left of the body, up to `limit` bytes; false when more was
    /// left (the connection should end), or when the handler began reading the body and
    /// stopped before its end: it refused the body (413), and the client is still sending it.
    func finishBody(dropping limit: Int) async throws -> Bool {
        if self.inBody && self.bodyStarted { return false }
        var dropped = 0
        while self.inBody {
            if self.continuePending {
                // It waits for our go-ahead before sending the body it announced.
                return false
            }
            switch try await self.iterator.next() {
            case .body(let chunk):
                dropped += chunk.readableBytes
                if dropped > limit { return false }
            case .end:
                self.inBody = false
            case .head, nil:
                return false
            }
        }
        return true
    }
}

/// The connection ended in the middle of a request body.
struct BodyCutShort: Error, CustomStringConvertible {
    var description: String { "the connection ended before the request body did" }
}

/// A request's body as Hummingbird reads it: the parts of ``InboundParts`` up to the request's end.
struct InboundBody: AsyncSequence, Sendable {
    typealias Element = ByteBuffer
    let parts: InboundParts

    struct AsyncIterator: AsyncIteratorProtocol {
        let parts: InboundParts
        mutating func next() async throws -> ByteBuffer? {
            try await self.parts.nextBodyChunk()
        }
    }

    func makeAsyncIterator() -> AsyncIterator {
        AsyncIterator(parts: self.parts)
    }
}

extension HTTPRequest {
    /// NIO's HTTP/1.1 decoder reads nothing after a request that asks for an upgrade (with or
    /// without `Connection: upgrade`: either way it is not one this server went on to make) or
    /// is a `CONNECT`, so such a request is answered as its connection's last.
    var isLastOnHTTP1Connection: Bool {
        self.method == .connect || self.headerFields[.upgrade] != nil
    }
}
