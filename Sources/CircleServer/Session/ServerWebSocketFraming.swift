import CircleSocket
import NIOCore
import NIOWebSocket

/// The server's side of RFC 6455 for one upgraded connection, shared by chat (`/v1/ws`) and
/// echo (`/v1/echo`): it reads frames through ``WebSocketProtocolState``, answers pings, runs the
/// close handshake (with a grace for the peer's answer and a hard cap), maps the frame decoder's
/// errors to close codes, and writes messages, compressed when permessage-deflate was agreed.
/// So the Autobahn server run against `/v1/echo` exercises the framing chat connections use.
///
/// Owned by one channel handler and used only on its event loop; its methods take the handler's
/// context. A class rather than a struct: writing to the context can re-enter the handler
/// (writability changes, close), which must not find the framing in the middle of a mutation.
final class ServerWebSocketFraming {
    /// What an inbound frame means for the session.
    enum Inbound {
        /// Nothing for the session (a pong, a control frame already answered, a partial message).
        case none
        case message(WebSocketMessage)
        /// A text message's bytes, with `textBytes`: not yet checked as UTF-8 unless it was
        /// fragmented or compressed. The receiver calls ``failInvalidText(context:)`` when they are not.
        case text(ByteBuffer)
        /// The connection is closing: the peer closed, or broke the protocol and this side
        /// started the close (`failure` holds the code and error).
        case closing(failure: (WebSocketCloseCode, WebSocketError)?)
    }

    static let closeGrace: TimeAmount = .seconds(2)
    static let closeHardCap: TimeAmount = .seconds(30)

    private var protocolState: WebSocketProtocolState
    private(set) var isClosing = false
    /// Why the connection ended, for the log: the close this side started, the peer's close, or
    /// the transport's error.
    private(set) var endReason = "connection lost"

    /// permessage-deflate was agreed: messages may be compressed here.
    let compresses: Bool
    /// The frame encoder's context, found on the first write of a hub frame: writes made through
    /// it enter the pipeline below the encoder, in order with the frames the encoder writes.
    private var encoderContext: ChannelHandlerContext?

    /// - Parameter textBytes: deliver text messages as ``Inbound/text(_:)``, for a receiver that
    ///   parses the bytes and checks their UTF-8 as it goes (once, not here and there again).
    init(maxMessageSize: Int, deflate: PerMessageDeflate?, textBytes: Bool = false) {
        self.protocolState = WebSocketProtocolState(role: .server, maxMessageSize: maxMessageSize, deflate: deflate)
        self.protocolState.deliversTextBytes = textBytes
        self.compresses = deflate != nil
    }

    /// How this connection could share compressed output with others (see ``HubPayload``).
    var sharedCompression: PerMessageDeflate.SharedCompression? { self.protocolState.sharedCompression }

    // MARK: Inbound

    func receive(_ frame: WebSocketFrame, context: ChannelHandlerContext) -> Inbound {
        switch self.protocolState.receive(frame, allocator: context.channel.allocator) {
        case .none, .pong:
            return .none
        case .reply(let reply):
            context.writeAndFlush(NIOAny(reply), promise: nil)
            return .none
        case .deliver(let message):
            return .message(message)
        case .deliverText(let bytes):
            return .text(bytes)
        case .peerClosed(let code, let reason, let reply):
            self.isClosing = true
            self.endReason = "closed by the client: \(code.rawValue)\(reason.isEmpty ? "" : " \(reason)")"
            if let reply {
                let channel = context.channel
                context.writeAndFlush(NIOAny(reply)).whenComplete { _ in channel.close(promise: nil) }
            } else {
                context.close(promise: nil)
            }
            return .closing(failure: nil)
        case .fail(let code, let error):
            self.close(code: code, reason: error.message, context: context)
            return .closing(failure: (code, error))
        }
    }

    /// Fails the connection for a text message that is not UTF-8 (1007, RFC 6455 §8.1), as the
    /// protocol state does for the messages it checks itself.
    func failInvalidText(context: ChannelHandlerContext) {
        self.close(code: .invalidPayloadData, reason: "a text message was not valid UTF-8", context: context)
    }

    /// Handles an error from the pipeline (the frame decoder's, or the transport's). Returns
    /// the close code when the error was the peer's breach of the protocol.
    func errorCaught(_ error: any Error, context: ChannelHandlerContext) -> WebSocketCloseCode? {
        if case let (code, failure)? = self.protocolState.closeCode(forDecoderError: error) {
            self.close(code: code, reason: failure.message, context: context)
            return code
        }
        switch error {
        case ByteToMessageDecoderError.dataReceivedInErrorState:
            // The frame decoder failed earlier (an oversized frame, say) and the close is under
            // way. What the peer still sends (the rest of that frame, its close frame) is read and
            // dropped: closing the socket with it unread would send a reset, and the peer would
            // lose the close frame that says why (1009).
            return nil
        default:
            self.endReason = "connection error: \(error)"
            context.close(promise: nil)
            return nil
        }
    }

    // MARK: Outbound

    /// Starts the close handshake; drops the connection if the peer does not answer in time.
    func close(code: WebSocketCloseCode, reason: String, context: ChannelHandlerContext) {
        guard !self.isClosing else { return }
        self.isClosing = true
        self.endReason = "closed by the server: \(code.rawValue) \(reason)"
        let channel = context.channel
        let eventLoop = context.eventLoop
        // A slow consumer's close frame waits behind its queued messages: the grace for the
        // peer's answer starts once the frame reached the socket, and a hard cap covers a peer
        // that never reads again.
        let hardCap = eventLoop.scheduleTask(in: Self.closeHardCap) { channel.close(promise: nil) }
        channel.closeFuture.whenComplete { _ in hardCap.cancel() }
        if let frame = self.protocolState.close(code: code, reason: reason) {
            context.writeAndFlush(NIOAny(frame)).whenComplete { _ in
                eventLoop.scheduleTask(in: Self.closeGrace) { channel.close(promise: nil) }
            }
        } else {
            eventLoop.scheduleTask(in: Self.closeGrace) { channel.close(promise: nil) }
        }
    }

    /// Writes one whole message, compressed when compression was agreed and the message is
    /// large enough. A message that cannot be compressed fails the connection (1011).
    func write(message: WebSocketMessage, context: ChannelHandlerContext) {
        if !self.compresses,
            let framed = ServerFrame.frame(of: message, maxBytes: WebSocketFrameWriter.headerInCopyLimit, allocator: context.channel.allocator),
            self.writeFramed(framed, flush: false, context: context)
        {
            return
        }
        let frames: [WebSocketFrame]
        do {
            frames = try self.protocolState.frames(for: message, fragmentSize: nil, allocator: context.channel.allocator)
        } catch {
            if self.protocolState.canSend { self.close(code: .internalError, reason: "could not compress a message", context: context) }
            return
        }
        for frame in frames { context.write(NIOAny(frame), promise: nil) }
    }

    /// Writes one text message whose payload is encoded already.
    func write(text payload: ByteBuffer, flush: Bool, context: ChannelHandlerContext) {
        let frame: WebSocketFrame?
        do {
            frame = try self.protocolState.frame(opcode: .text, payload: payload, allocator: context.channel.allocator)
        } catch {
            self.close(code: .internalError, reason: "could not compress a message", context: context)
            return
        }
        guard let frame else { return }
        if flush {
            context.writeAndFlush(NIOAny(frame), promise: nil)
        } else {
            context.write(NIOAny(frame), promise: nil)
        }
    }

    /// Writes an event from the hub: its shared compressed copy when the hub made one for this
    /// connection's setting, otherwise compressed (or not) here. The hub's frames, made once for
    /// every subscriber, go straight below the frame encoder.
    func write(_ payload: HubPayload, flush: Bool, context: ChannelHandlerContext) {
        if let setting = self.sharedCompression, let deflated = payload.deflated(for: setting) {
            if let framed = payload.framedDeflated(for: setting), self.writeFramed(framed, flush: flush, context: context) { return }
            guard let frame = self.protocolState.frame(opcode: .text, deflated: deflated) else { return }
            if flush {
                context.writeAndFlush(NIOAny(frame), promise: nil)
            } else {
                context.write(NIOAny(frame), promise: nil)
            }
            return
        }
        if !self.compresses, let framed = payload.framed, self.writeFramed(framed, flush: flush, context: context) { return }
        self.write(text: payload.text, flush: flush, context: context)
    }

    /// Writes a run of posts from the hub, unflushed: on a connection that does not compress,
    /// the run's frames as the one buffer the hub made for every subscriber; otherwise post by post.
    func write(_ run: HubPostRun, context: ChannelHandlerContext) {
        if !self.compresses, self.writeFramed(run.framed, flush: false, context: context) { return }
        for post in run.posts { self.write(post.payload, flush: false, context: context) }
    }

    /// Writes buffers of whole uncompressed frames (``ServerFrame/frames(of:maxBytes:allocator:)``)
    /// below the frame encoder, unflushed; `false` when there is no encoder to write below (then
    /// nothing was written).
    func write(frames buffers: [ByteBuffer], context: ChannelHandlerContext) -> Bool {
        for buffer in buffers {
            guard self.writeFramed(buffer, flush: false, context: context) else { return false }
        }
        return true
    }

    /// Writes a whole frame's bytes below the frame encoder; `false` when there is no encoder to
    /// write below (then the caller writes a frame). Nothing is written once the close began.
    private func writeFramed(_ frame: ByteBuffer, flush: Bool, context: ChannelHandlerContext) -> Bool {
        guard self.protocolState.canSend else { return true }
        if self.encoderContext == nil {
            self.encoderContext = try? context.pipeline.syncOperations.context(handlerType: WebSocketFrameWriter.self)
        }
        guard let encoder = self.encoderContext else { return false }
        encoder.write(NIOAny(frame), promise: nil)
        if flush { context.flush() }
        return true
    }
}
