import Foundation
import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
import NIOPosix
import NIOSSL
import NIOTLS

/// One HTTP/1.1 connection for media transfers: the request is written part by part (each
/// body chunk awaited, so a large upload never sits in memory) and the response is read part
/// by part (the socket is read only when the caller asks for the next part).
///
/// Opening one reports how long the TCP connect and the TLS handshake took (``Setup``), which is
/// why it is hand-written (see the top of `HTTPClientError.swift`).
package final class HTTPConnection: Sendable {
    /// Where a connection goes (see ``HTTPTarget``).
    package typealias Target = HTTPTarget

    /// How long opening the connection took.
    package struct Setup: Sendable {
        /// Name resolution and the TCP handshake.
        package var connect: Duration
        /// The TLS handshake (nil for plain HTTP).
        package var tls: Duration?
    }

    package let target: Target
    private let channel: any Channel
    private let reader: NIOLoopBound<ResponseReader>
    /// Whether the last response allowed the connection to be used again.
    private let reusable = NIOLockedValueBox(false)
    /// Set once the server closed its side (or the connection failed).
    private let ended: NIOLockedValueBox<Bool>
    /// How long a write may wait for the server to take the bytes.
    private let writeTimeout: Duration

    private init(target: Target, channel: any Channel, reader: NIOLoopBound<ResponseReader>, ended: NIOLockedValueBox<Bool>, writeTimeout: Duration) {
        self.target = target
        self.channel = channel
        self.reader = reader
        self.ended = ended
        self.writeTimeout = writeTimeout
    }

    /// Opens a connection (TCP, then TLS for `https`), within `timeout`. A later write that
    /// the server does not take within `writeTimeout` closes the connection.
    ///
    /// With `address`, the TCP connection goes to that address (one the caller resolved and
    /// checked) while TLS still names and verifies `target.host`.
    package static func connect(
        to target: Target,
        address: SocketAddress? = nil,
        tls: ClientTLSConfiguration = .init(),
        timeout: Duration,
        writeTimeout: Duration = .seconds(30),
        eventLoopGroup: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton
    ) async throws -> (HTTPConnection, Setup) {
        let ended = NIOLockedValueBox(false)
        let sslContext = target.usesTLS ? try tls.makeContext(host: target.host) : nil
        let pins = target.usesTLS ? try tls.decodedPins() : []
        let eventLoop = eventLoopGroup.next()
        let handshake = eventLoop.makePromise(of: Void.self)
        let started = ContinuousClock.now
        let bootstrap = ClientBootstrap(group: eventLoop)
            .channelOption(.socketOption(.tcp_nodelay), value: 1)
            .channelOption(.autoRead, value: false)
            // A server that answers early (413, 415) half-closes and keeps reading; the request
            // may still be sent and the answer read after the server's EOF.
            .channelOption(.allowRemoteHalfClosure, value: true)
            .connectTimeout(TimeAmount(timeout))
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    let sync = channel.pipeline.syncOperations
                    if let sslContext {
                        try sync.addHandlers(ClientTLSConfiguration.handlers(context: sslContext, pins: pins, target: target, handshake: handshake))
                    }
                    try sync.addHTTPClientHandlers()
                    try sync.addHandler(ResponseReader(ended: ended))
                }
            }
        let channel: any Channel
        do {
            if let address {
                channel = try await bootstrap.connect(to: address).get()
            } else {
                channel = try await bootstrap.connect(host: target.host, port: target.port).get()
            }
        } catch {
            handshake.fail(error)
            if case ChannelError.connectTimeout = error {
                throw HTTPClientError(.connectTimeout, "no TCP connection to \(target.address) within \(timeout)", underlying: error)
            }
            throw HTTPClientError(.connectFailed, "could not connect to \(target.address)", underlying: error)
        }
        if let local = channel.localAddress, let remote = channel.remoteAddress, local == remote {
            handshake.fail(HTTPClientError(.connectFailed, "self-connected"))
            channel.close(promise: nil)
            throw HTTPClientError(.connectFailed, "could not connect to \(target.address) (the socket connected to itself)")
        }
        let connected = ContinuousClock.now
        var setup = Setup(connect: connected - started, tls: nil)
        if sslContext == nil {
            handshake.succeed()
        } else {
            // TLS needs reads while it shakes hands; the reader asks for them only later.
            channel.read()
            let timer = eventLoop.scheduleTask(in: .seconds(Int64(max(1, timeout.components.seconds)))) {
                handshake.fail(HTTPClientError(.connectTimeout, "no TLS handshake with \(target.host) within \(timeout)"))
            }
            do {
                try await handshake.futureResult.get()
                timer.cancel()
            } catch {
                timer.cancel()
                channel.close(promise: nil)
                if error is HTTPClientError { throw error }
                throw HTTPClientError(.tlsFailed, "TLS with \(target.host) failed", underlying: error)
            }
            setup.tls = ContinuousClock.now - connected
        }
        let reader = try await channel.eventLoop.submit {
            NIOLoopBound(try channel.pipeline.syncOperations.handler(type: ResponseReader.self), eventLoop: channel.eventLoop)
        }.get()
        return (HTTPConnection(target: target, channel: channel, reader: reader, ended: ended, writeTimeout: writeTimeout), setup)
    }

    /// Whether the connection is open and its last exchange left it usable for another.
    package var isReusable: Bool {
        self.channel.isActive && self.reusable.withLockedValue { $0 } && !self.ended.withLockedValue { $0 }
    }

    /// Writes the request head. `Host` is added when missing.
    package func sendHead(method: HTTPMethod, uri: String, headers: HTTPHeaders) async throws {
        self.reusable.withLockedValue { $0 = false }
        var headers = headers
        if !headers.contains(name: "Host") { headers.add(name: "Host", value: self.target.hostHeader) }
        let head = HTTPRequestHead(version: .http1_1, method: method, uri: uri, headers: headers)
        try await self.write(.head(head))
    }

    /// Writes a whole small request (head, body, end) with one flush: one write to the socket
    /// where the part-by-part calls make three.
    package func sendRequest(method: HTTPMethod, uri: String, headers: HTTPHeaders, body: ByteBuffer?) async throws {
        self.reusable.withLockedValue { $0 = false }
        var headers = headers
        if !headers.contains(name: "Host") { headers.add(name: "Host", value: self.target.hostHeader) }
        let head = HTTPRequestHead(version: .http1_1, method: method, uri: uri, headers: headers)
        let channel = self.channel
        try await self.withWriteTimeout {
            try await channel.eventLoop.flatSubmit {
                channel.write(HTTPClientRequestPart.head(head), promise: nil)
                if let body, body.readableBytes > 0 {
                    channel.write(HTTPClientRequestPart.body(.byteBuffer(body)), promise: nil)
                }
                return channel.writeAndFlush(HTTPClientRequestPart.end(nil))
            }.get()
        }
    }

    /// Writes a body chunk and returns once it is on the socket (the caller's backpressure).
    package func sendBody(_ buffer: ByteBuffer) async throws {
        try await self.write(.body(.byteBuffer(buffer)))
    }

    /// Ends the request.
    package func sendEnd() async throws {
        try await self.write(.end(nil))
    }

    private func write(_ part: HTTPClientRequestPart) async throws {
        let channel = self.channel
        try await self.withWriteTimeout { try await channel.writeAndFlush(part).get() }
    }

    /// Runs a write; if the server does not take the bytes within the write timeout, the
    /// connection is closed (and the write fails).
    private func withWriteTimeout(_ write: () async throws -> Void) async throws {
        let channel = self.channel
        let timer = channel.eventLoop.scheduleTask(in: TimeAmount(self.writeTimeout)) {
            channel.close(promise: nil)
        }
        defer { timer.cancel() }
        do {
            try await write()
        } catch {
            throw HTTPClientError(.connectionClosed, "the connection to \(self.target.address) failed while sending", underlying: error)
        }
    }

    /// The next response part; waits at most `idleTimeout` for bytes from the server, then closes
    /// the connection and throws ``HTTPClientError`` with ``HTTPClientError/Code/idleTimeout``.
    package func next(idleTimeout: Duration) async throws -> HTTPClientResponsePart {
        let eventLoop = self.channel.eventLoop
        let promise = eventLoop.makePromise(of: HTTPClientResponsePart.self)
        let reader = self.reader
        let channel = self.channel
        let target = self.target
        eventLoop.execute { reader.value.next(promise) }
        let timer = eventLoop.scheduleTask(in: TimeAmount(idleTimeout)) {
            promise.fail(HTTPClientError(.idleTimeout, "no bytes from \(target.address) for \(idleTimeout)"))
            channel.close(promise: nil)
        }
        defer { timer.cancel() }
        let part = try await promise.futureResult.get()
        if case .head(let head) = part {
            self.reusable.withLockedValue { $0 = head.isKeepAlive }
        }
        return part
    }

    /// Whether the server has already answered (or closed) while the request is still being
    /// sent, as a server refusing an upload does. Also asks for the next read, so an answer that
    /// arrives is noticed by the next call.
    package func hasEarlyAnswer() async -> Bool {
        let reader = self.reader
        return (try? await self.channel.eventLoop.submit { reader.value.peek() }.get()) ?? true
    }

    /// Closes the connection.
    package func close() {
        self.channel.close(promise: nil)
    }
}

/// Hands out response parts one at a time, reading the socket only when asked.
private final class ResponseReader: ChannelInboundHandler {
    typealias InboundIn = HTTPClientResponsePart

    private var parts: [HTTPClientResponsePart] = []
    private var waiter: EventLoopPromise<HTTPClientResponsePart>?
    private var failure: (any Error)?
    private var context: ChannelHandlerContext?
    private let ended: NIOLockedValueBox<Bool>

    init(ended: NIOLockedValueBox<Bool>) {
        self.ended = ended
    }

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        self.context = nil
    }

    func peek() -> Bool {
        if !self.parts.isEmpty || self.failure != nil { return true }
        if self.waiter == nil { self.context?.read() }
        return false
    }

    func next(_ promise: EventLoopPromise<HTTPClientResponsePart>) {
        if !self.parts.isEmpty {
            promise.succeed(self.parts.removeFirst())
        } else if let failure = self.failure {
            promise.fail(failure)
        } else {
            self.waiter = promise
            self.context?.read()
        }
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let part = self.unwrapInboundIn(data)
        if let waiter = self.waiter {
            self.waiter = nil
            waiter.succeed(part)
        } else {
            self.parts.append(part)
        }
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        // A read that produced no whole part (a partial head, say): ask for more.
        if self.waiter != nil { context.read() }
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        self.fail(HTTPClientError(.connectionClosed, "the connection failed", underlying: error))
        context.close(promise: nil)
    }

    func channelInactive(context: ChannelHandlerContext) {
        self.fail(HTTPClientError(.connectionClosed, "the server closed the connection"))
        context.fireChannelInactive()
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if case ChannelEvent.inputClosed = event {
            // Everything the server sent has been read; what is not a whole response never will be.
            self.fail(HTTPClientError(.connectionClosed, "the server closed the connection"))
        }
        context.fireUserInboundEventTriggered(event)
    }

    private func fail(_ error: any Error) {
        self.ended.withLockedValue { $0 = true }
        if self.failure == nil { self.failure = error }
        if let waiter = self.waiter {
            self.waiter = nil
            waiter.fail(self.failure!)
        }
    }
}
