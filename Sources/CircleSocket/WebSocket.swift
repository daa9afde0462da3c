import CircleHTTPClient
import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
import NIOPosix
import NIOSSL

/// One WebSocket connection that async code can hold: send text and binary messages, read
/// inbound messages as an `AsyncSequence`, ping with round-trip times, close with a code.
///
/// ```swift
/// let socket = try await WebSocket.connect(to: "ws://localhost:8080/ws")
/// try await socket.send("hello")
/// for try await message in socket.messages {
///     if case .text(let text) = message { print(text) }
/// }
/// print(await socket.closeInfo)   // how it ended
/// ```
///
/// Sends never crash: ``send(_:)`` queues the message on the connection (waiting while the
/// connection's outbound buffer is full) and throws ``WebSocketError`` with code
/// ``WebSocketError/Code/notOpen`` once the connection is closing or closed. A burst of sends is
/// written and flushed together.
///
/// The connection's I/O runs on one NIO event loop. A task that reads and sends with that loop as
/// its executor preference (``taskExecutor``) does so without a thread hop per message:
///
/// ```swift
/// try await withTaskExecutorPreference(socket.taskExecutor) {
///     for try await message in socket.messages { try await socket.send(message) }
/// }
/// ```
public final class WebSocket: Sendable {
    /// The subprotocol the server chose from ``WebSocketConfiguration/subprotocols``, if any.
    public let subprotocol: String?
    /// The compression parameters agreed in the handshake, or `nil` without compression.
    public let compression: PerMessageDeflateParameters?
    /// The headers of the server's 101 response (for a server-side socket: the request's headers).
    public let handshakeHeaders: HTTPHeaders
    /// The inbound messages. It ends when a close frame arrives or after this side called
    /// ``close(code:reason:)`` (check ``closeInfo`` for how cleanly), and throws
    /// ``WebSocketError`` when the peer broke the protocol or the connection was lost without a
    /// close frame. Only one task may iterate it.
    public let messages: Messages

    /// Runs jobs on the event loop of this connection's I/O. Reading ``messages`` and calling
    /// ``send(_:fragmentSize:)`` from a task with this executor preference
    /// (`withTaskExecutorPreference(_:operation:)`, `Task(executorPreference:)`,
    /// `group.addTask(executorPreference:)`) costs no thread hop per message. Long synchronous work
    /// in such a task delays every connection on that loop.
    public var taskExecutor: any TaskExecutor { self.executor }

    private let channel: any Channel
    private let closed: EventLoopFuture<WebSocketCloseInfo>
    private let fragmentSize: Int?
    private let handler: NIOLoopBound<WebSocketChannelHandler>
    let outbound: WebSocketOutbound
    private let executor: EventLoopTaskExecutor

    init(
        channel: any Channel,
        handler: NIOLoopBound<WebSocketChannelHandler>,
        outbound: WebSocketOutbound,
        subprotocol: String?,
        compression: PerMessageDeflateParameters?,
        handshakeHeaders: HTTPHeaders,
        messages: WebSocketInboundProducer,
        closed: EventLoopFuture<WebSocketCloseInfo>,
        fragmentSize: Int?
    ) {
        self.channel = channel
        self.handler = handler
        self.outbound = outbound
        self.executor = EventLoopTaskExecutor(eventLoop: channel.eventLoop)
        self.subprotocol = subprotocol
        self.compression = compression
        self.handshakeHeaders = handshakeHeaders
        self.messages = Messages(base: messages)
        self.closed = closed
        self.fragmentSize = fragmentSize
    }

    /// Opens a connection: TCP, TLS for `wss://`, and the HTTP upgrade.
    ///
    /// - Parameters:
    ///   - url: a `ws://` or `wss://` URL; the host may be a name, an IPv4 or a bracketed IPv6 literal.
    ///   - configuration: headers, subprotocols, timeouts, limits, TLS and compression.
    ///   - eventLoopGroup: where the connection's I/O runs.
    ///   - logger: receives debug-level events of the connection.
    /// - Throws: ``WebSocketError`` (``WebSocketError/Code/handshakeRefused`` carries the HTTP status and body).
    public static func connect(
        to url: String,
        configuration: WebSocketConfiguration = .init(),
        eventLoopGroup: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton,
        logger: Logger = Logger(label: "circle.socket")
    ) async throws -> WebSocket {
        guard let parsed = URL(string: url) else {
            throw WebSocketError(.invalidURL, "\"\(url)\" is not a URL")
        }
        return try await self.connect(to: parsed, configuration: configuration, eventLoopGroup: eventLoopGroup, logger: logger)
    }

    /// Opens a connection: TCP, TLS for `wss://`, and the HTTP upgrade. See ``connect(to:configuration:eventLoopGroup:logger:)-(String,_,_,_)``.
    public static func connect(
        to url: URL,
        configuration: WebSocketConfiguration = .init(),
        eventLoopGroup: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton,
        logger: Logger = Logger(label: "circle.socket")
    ) async throws -> WebSocket {
        let target: HTTPTarget
        let uri: String
        let sslContext: NIOSSLContext?
        let pins: [[UInt8]]
        do {
            (target, uri) = try HTTPTarget.parse(url, schemes: ["ws", "wss"])
            sslContext = target.usesTLS ? try configuration.tls.makeContext(host: target.host) : nil
            pins = target.usesTLS ? try configuration.tls.decodedPins() : []
        } catch let error as HTTPClientError {
            throw WebSocketError(error)
        }
        let eventLoop = eventLoopGroup.next()
        let upgraded = eventLoop.makePromise(of: WebSocketUpgradeResult.self)
        // The TLS gate's own promise is not needed: its failure reaches the handshake handler too.
        let tlsHandshake = eventLoop.makePromise(of: Void.self)
        tlsHandshake.futureResult.whenFailure { _ in }
        defer { tlsHandshake.succeed() }  // completes it when no channel (or no TLS) ever did; else a no-op
        let request = WebSocketClientHandshakeHandler.Request(target: target, uri: uri, configuration: configuration)
        var logger = logger
        logger[metadataKey: "ws.url"] = "\(url.absoluteString)"
        let handshakeLogger = logger
        let bootstrap = ClientBootstrap(group: eventLoop)
            .channelOption(.socketOption(.tcp_nodelay), value: 1)
            .connectTimeout(configuration.connectTimeout)
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    let sync = channel.pipeline.syncOperations
                    if let sslContext {
                        try sync.addHandlers(ClientTLSConfiguration.handlers(context: sslContext, pins: pins, target: target, handshake: tlsHandshake))
                    }
                    try sync.addHandler(
                        WebSocketClientHandshakeHandler(request: request, promise: upgraded, logger: handshakeLogger)
                    )
                }
            }
        let channel: any Channel
        do {
            if let address = configuration.connectAddress {
                channel = try await bootstrap.connect(to: address).get()
            } else {
                channel = try await bootstrap.connect(host: target.host, port: target.port).get()
            }
        } catch {
            // The handshake handler has failed the promise as the channel went away (a second
            // completion is a no-op); when name resolution failed no channel, and so no handler,
            // ever existed, so fail it here. Prefer the handler's word when it was the timeout.
            upgraded.fail(error)
            do {
                _ = try await upgraded.futureResult.get()
            } catch let handshakeError as WebSocketError where handshakeError.code == .connectTimeout {
                throw handshakeError
            } catch {}
            if case ChannelError.connectTimeout = error {
                throw WebSocketError(.connectTimeout, "no TCP connection to \(target.address) within \(configuration.connectTimeout.nanoseconds / 1_000_000) ms", underlying: error)
            }
            throw WebSocketError(.connectionFailed, "could not connect to \(target.address)", underlying: error)
        }
        // A reconnect loop aimed at a loopback port where nothing listens can connect the socket
        // to itself (TCP simultaneous open), which would also keep the server from binding the
        // port again. Treat it as the refused connection it is.
        if let local = channel.localAddress, let remote = channel.remoteAddress, local == remote {
            channel.close(promise: nil)
            _ = try? await upgraded.futureResult.get()
            throw WebSocketError(.connectionFailed, "could not connect to \(target.address) (the socket connected to itself)")
        }
        let result = try await upgraded.futureResult.get()
        logger.debug("connected", metadata: ["ws.subprotocol": "\(result.subprotocol ?? "")"])
        return WebSocket(
            channel: channel,
            handler: result.handler,
            outbound: result.outbound,
            subprotocol: result.subprotocol,
            compression: result.compression,
            handshakeHeaders: result.headers,
            messages: result.messages,
            closed: result.closed,
            fragmentSize: configuration.fragmentSize
        )
    }

    /// Sends a text message.
    public func send(_ text: String) async throws {
        try await self.send(.text(text))
    }

    /// Sends a binary message.
    public func send(binary bytes: some Sequence<UInt8>) async throws {
        try await self.send(.binary(ByteBuffer(bytes: bytes)))
    }

    /// Sends a message, in fragments of `fragmentSize` bytes when given (else as configured).
    ///
    /// Queues the message on the connection and returns at once while the connection's outbound
    /// buffer has room; otherwise waits until it has, so a sender that awaits each send cannot
    /// outrun the network. Messages sent one after another without a suspension in between are
    /// written and flushed together. A message queued while the connection is lost is lost with
    /// it (as one in the kernel's buffer would be). Throws ``WebSocketError`` with
    /// ``WebSocketError/Code/notOpen`` when the connection is closing or closed, also when it
    /// closes while the send waits for room.
    public func send(_ message: WebSocketMessage, fragmentSize: Int? = nil) async throws {
        try self.enqueue(message, fragmentSize: fragmentSize ?? self.fragmentSize)
        try await self.outbound.waitUntilWritable()
    }

    /// Queues a message like ``send(_:fragmentSize:)`` but never waits for room in the outbound
    /// buffer: for a caller that bounds what it sends by other means (CircleClient's requests
    /// each wait for their answer).
    package func sendWithoutWaiting(_ message: WebSocketMessage) throws {
        try self.enqueue(message, fragmentSize: self.fragmentSize)
    }

    private func enqueue(_ message: WebSocketMessage, fragmentSize: Int?) throws {
        if self.channel.eventLoop.inEventLoop {
            do {
                try self.handler.value.send(message, fragmentSize: fragmentSize)
            } catch let error as WebSocketError {
                throw error
            } catch {
                throw WebSocketError(.notOpen, "the message could not be sent", underlying: error)
            }
        } else if try self.outbound.enqueue(message, fragmentSize: fragmentSize) {
            let handler = self.handler
            self.channel.eventLoop.execute { handler.value.drain() }
        }
    }

    /// Sends a ping and returns the time until its pong arrived.
    ///
    /// - Throws: ``WebSocketError`` with ``WebSocketError/Code/pingTimeout`` when no pong comes within `timeout`.
    public func ping(timeout: Duration = .seconds(10)) async throws -> Duration {
        let promise = self.channel.eventLoop.makePromise(of: TimeAmount.self)
        // When the channel is already closed the handler never sees the command: fail it here.
        self.channel.writeAndFlush(WebSocketCommand.ping(timeout: TimeAmount(timeout), promise)).whenFailure {
            promise.fail($0)
        }
        do {
            return .nanoseconds(try await promise.futureResult.get().nanoseconds)
        } catch let error as WebSocketError {
            throw error
        } catch {
            throw WebSocketError(.notOpen, "the connection is closed; no ping was sent", underlying: error)
        }
    }

    /// Starts the close handshake and waits until the connection has ended (at most the close timeout).
    ///
    /// - Returns: how the connection ended, with the code and reason the peer sent back.
    @discardableResult
    public func close(code: WebSocketCloseCode = .normalClosure, reason: String = "") async -> WebSocketCloseInfo {
        self.channel.writeAndFlush(WebSocketCommand.close(code, reason: reason, nil), promise: nil)
        return await self.closeInfo
    }

    /// How the connection ended; waits until it has.
    public var closeInfo: WebSocketCloseInfo {
        get async {
            (try? await self.closed.get()) ?? WebSocketCloseInfo(code: .abnormalClosure)
        }
    }

    /// Whether the connection is still open (not yet closed at the TCP level).
    public var isActive: Bool { self.channel.isActive }

    /// Drops the TCP connection at once, without a close handshake.
    public func abort() {
        self.channel.close(promise: nil)
    }
}

extension WebSocket {
    /// The inbound messages of a connection; see ``WebSocket/messages``.
    public struct Messages: AsyncSequence, Sendable {
        public typealias Element = WebSocketMessage
        let base: WebSocketInboundProducer

        public func makeAsyncIterator() -> AsyncIterator {
            AsyncIterator(base: self.base.makeAsyncIterator())
        }

        public struct AsyncIterator: AsyncIteratorProtocol {
            var base: WebSocketInboundProducer.AsyncIterator

            public mutating func next() async throws -> WebSocketMessage? {
                try await self.base.next()
            }
        }
    }
}

extension WebSocket {
    /// An event loop of the group connections use by default (`MultiThreadedEventLoopGroup.singleton`):
    /// for a caller that wants its own work on the thread of its connections' I/O.
    package static func defaultEventLoop() -> any EventLoop {
        MultiThreadedEventLoopGroup.singleton.next()
    }
}

/// No connection within the deadline of ``WebSocket/connect(to:configuration:logger:deadline:)``.
package struct WebSocketConnectDeadlineExceeded: Error, CustomStringConvertible {
    package var deadline: Duration
    package var description: String { "no WebSocket connection within \(self.deadline)" }

    package init(deadline: Duration) {
        self.deadline = deadline
    }
}

extension WebSocket {
    /// Opens a connection like ``connect(to:configuration:eventLoopGroup:logger:)-(String,_,_,_)``,
    /// but gives up at `deadline` even while a host name is still being resolved (which the
    /// connect timeout does not bound): throws ``WebSocketConnectDeadlineExceeded`` then. A
    /// connection that completes after the deadline is dropped.
    package static func connect(
        to url: String,
        configuration: WebSocketConfiguration,
        logger: Logger,
        deadline: Duration
    ) async throws -> WebSocket {
        let outcome: Result<WebSocket, any Error> = await withDeadline(
            deadline,
            timedOut: { .failure(WebSocketConnectDeadlineExceeded(deadline: deadline)) },
            cancelled: { .failure(CancellationError()) },
            late: { result in
                // Connected after the deadline was reported: nobody uses it.
                if case .success(let socket) = result { socket.abort() }
            },
            {
                do {
                    return .success(try await WebSocket.connect(to: url, configuration: configuration, logger: logger))
                } catch {
                    return .failure(error)
                }
            }
        )
        return try outcome.get()
    }
}
