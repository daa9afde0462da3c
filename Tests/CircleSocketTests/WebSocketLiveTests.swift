import CircleSocket
import Foundation
import NIOCore
import NIOHTTP1
import NIOPosix
import NIOSSL
import Testing

/// Echoes every message back; `close:CODE:REASON` makes the server close with that code.
private func echoServer(
    _ configuration: WebSocketServerConfiguration = .init(),
    decide: @escaping WebSocketServer.Decider = { _ in .accept }
) async throws -> WebSocketServer {
    try await WebSocketServer.start(configuration: configuration, decide: decide) { socket, _ in
        do {
            for try await message in socket.messages {
                if case .text(let text) = message, text.hasPrefix("close:") {
                    let parts = text.split(separator: ":", maxSplits: 2).map(String.init)
                    await socket.close(code: WebSocketCloseCode(UInt16(parts[1])!), reason: parts.count > 2 ? parts[2] : "")
                    return
                }
                try await socket.send(message)
            }
        } catch {}
    }
}

private func withEcho<T>(
    _ configuration: WebSocketServerConfiguration = .init(),
    decide: @escaping WebSocketServer.Decider = { _ in .accept },
    _ body: (WebSocketServer) async throws -> T
) async throws -> T {
    let server = try await echoServer(configuration, decide: decide)
    do {
        let result = try await body(server)
        await server.shutdown()
        return result
    } catch {
        await server.shutdown()
        throw error
    }
}

private func nextMessage(_ socket: WebSocket) async throws -> WebSocketMessage? {
    var iterator = socket.messages.makeAsyncIterator()
    return try await iterator.next()
}

@Suite("WebSocket on loopback")
struct WebSocketLiveTests {
    @Test("text, binary, empty and fragmented messages round-trip")
    func roundTrips() async throws {
        try await withEcho { server in
            let socket = try await WebSocket.connect(to: "ws://127.0.0.1:\(server.port)/echo")
            var iterator = socket.messages.makeAsyncIterator()
            let messages: [WebSocketMessage] = [
                .text("hello"),
                .text("grüße 👋"),
                .binary([0, 1, 2, 255]),
                .text(""),
                .binary([]),
            ]
            for message in messages {
                try await socket.send(message)
                #expect(try await iterator.next() == message)
            }
            let large = String(repeating: "fragment ", count: 5000)
            try await socket.send(.text(large), fragmentSize: 1000)
            #expect(try await iterator.next() == .text(large))
            let info = await socket.close(code: .normalClosure, reason: "bye")
            #expect(info.code == .normalClosure)
            #expect(info.wasClean)
            #expect(try await iterator.next() == nil)
        }
    }

    @Test("a 16 MiB message round-trips")
    func sixteenMebibytes() async throws {
        try await withEcho { server in
            let socket = try await WebSocket.connect(to: "ws://127.0.0.1:\(server.port)/")
            var bytes = [UInt8](repeating: 0, count: 16 * 1024 * 1024)
            for index in stride(from: 0, to: bytes.count, by: 4096) { bytes[index] = UInt8(truncatingIfNeeded: index / 4096) }
            try await socket.send(binary: bytes)
            let echoed = try await nextMessage(socket)
            guard case .binary(let buffer) = echoed else {
                Issue.record("expected a binary message, got \(String(describing: echoed))")
                return
            }
            #expect(buffer.readableBytes == bytes.count)
            #expect(Array(buffer.readableBytesView) == bytes)
            await socket.close()
        }
    }

    @Test("IPv6 literal URLs connect")
    func ipv6() async throws {
        let server = try await echoServer(.init(host: "::1"))
        defer { Task { await server.shutdown() } }
        let socket = try await WebSocket.connect(to: "ws://[::1]:\(server.port)/v6")
        try await socket.send("over v6")
        #expect(try await nextMessage(socket) == .text("over v6"))
        await socket.close()
    }

    @Test("ping reports a round-trip time")
    func pingRTT() async throws {
        try await withEcho { server in
            let socket = try await WebSocket.connect(to: "ws://127.0.0.1:\(server.port)/")
            let rtt = try await socket.ping()
            #expect(rtt > .zero)
            // A sanity bound only: on a loaded machine a task may resume seconds late.
            #expect(rtt < .seconds(60))
            await socket.close()
        }
    }

    @Test("the server's close code and reason reach the client")
    func serverCloses() async throws {
        try await withEcho { server in
            let socket = try await WebSocket.connect(to: "ws://127.0.0.1:\(server.port)/")
            try await socket.send("close:4001:room closed")
            #expect(try await nextMessage(socket) == nil)
            let info = await socket.closeInfo
            #expect(info.code == WebSocketCloseCode(4001))
            #expect(info.reason == "room closed")
            #expect(info.initiatedByPeer)
            #expect(info.wasClean)
        }
    }

    @Test("the client's close code reaches the server, and sending afterwards throws notOpen")
    func clientCloses() async throws {
        let received = AsyncStream<WebSocketCloseInfo>.makeStream()
        let server = try await WebSocketServer.start { socket, _ in
            do { for try await _ in socket.messages {} } catch {}
            received.continuation.yield(await socket.closeInfo)
        }
        defer { Task { await server.shutdown() } }
        let socket = try await WebSocket.connect(to: "ws://127.0.0.1:\(server.port)/")
        let info = await socket.close(code: .goingAway, reason: "app in background")
        #expect(info.code == .goingAway)  // the server echoes the code back
        #expect(info.sentCode == .goingAway)
        var serverSide = received.stream.makeAsyncIterator()
        let seen = await serverSide.next()
        #expect(seen?.code == .goingAway)
        #expect(seen?.reason == "app in background")
        await #expect(throws: WebSocketError.self) { try await socket.send("too late") }
        do {
            try await socket.send("too late")
        } catch let error as WebSocketError {
            #expect(error.code == .notOpen)
        }
        await #expect(throws: WebSocketError.self) { _ = try await socket.ping() }
    }

    @Test("a refused handshake carries the HTTP status and body")
    func handshakeRefused() async throws {
        try await withEcho(decide: { head in
            head.headers["Authorization"].isEmpty ? .refuse(.unauthorized, body: #"{"error":"missing_token"}"#) : .accept
        }) { server in
            do {
                _ = try await WebSocket.connect(to: "ws://127.0.0.1:\(server.port)/")
                Issue.record("connect should have thrown")
            } catch let error as WebSocketError {
                #expect(error.code == .handshakeRefused)
                #expect(error.httpStatus == 401)
                #expect(error.httpBody == #"{"error":"missing_token"}"#)
            }
            var configuration = WebSocketConfiguration()
            configuration.headers.add(name: "Authorization", value: "Bearer x")
            let socket = try await WebSocket.connect(to: "ws://127.0.0.1:\(server.port)/", configuration: configuration)
            await socket.close()
        }
    }

    @Test("subprotocol negotiation")
    func subprotocols() async throws {
        try await withEcho(.init(subprotocols: ["circle.v1"])) { server in
            var configuration = WebSocketConfiguration()
            configuration.subprotocols = ["circle.v2", "circle.v1"]
            let socket = try await WebSocket.connect(to: "ws://127.0.0.1:\(server.port)/", configuration: configuration)
            #expect(socket.subprotocol == "circle.v1")
            await socket.close()
            let plain = try await WebSocket.connect(to: "ws://127.0.0.1:\(server.port)/")
            #expect(plain.subprotocol == nil)
            await plain.close()
        }
    }

    @Test("a server that never answers the upgrade hits the connect timeout")
    func connectTimeout() async throws {
        let silent = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .childChannelInitializer { $0.eventLoop.makeSucceededVoidFuture() }
            .bind(host: "127.0.0.1", port: 0).get()
        defer { silent.close(promise: nil) }
        var configuration = WebSocketConfiguration()
        configuration.connectTimeout = .milliseconds(300)
        do {
            _ = try await WebSocket.connect(to: "ws://127.0.0.1:\(silent.localAddress!.port!)/", configuration: configuration)
            Issue.record("connect should have timed out")
        } catch let error as WebSocketError {
            #expect(error.code == .connectTimeout)
            // The configured timeout fired, not the 10 s default. (The elapsed time is no proof:
            // on a loaded machine the task that sees the error may resume seconds later.)
            #expect(error.message.hasSuffix("within 300 ms"), "\(error.message)")
        }
    }

    @Test("a refused TCP connection throws connectionFailed, a bad URL invalidURL")
    func connectionFailures() async throws {
        let probe = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .childChannelInitializer { $0.eventLoop.makeSucceededVoidFuture() }
            .bind(host: "127.0.0.1", port: 0).get()
        let port = probe.localAddress!.port!
        try await probe.close()
        await #expect(throws: WebSocketError.self) {
            _ = try await WebSocket.connect(to: "ws://127.0.0.1:\(port)/")
        }
        do {
            _ = try await WebSocket.connect(to: "ws://127.0.0.1:\(port)/")
        } catch let error as WebSocketError {
            #expect(error.code == .connectionFailed)
        }
        do {
            _ = try await WebSocket.connect(to: "http://127.0.0.1/")
            Issue.record("an http URL must be refused")
        } catch let error as WebSocketError {
            #expect(error.code == .invalidURL)
        }
    }

    @Test("a message over the limit closes with 1009")
    func tooBig() async throws {
        try await withEcho { server in
            var configuration = WebSocketConfiguration()
            configuration.maxMessageSize = 1024
            let socket = try await WebSocket.connect(to: "ws://127.0.0.1:\(server.port)/", configuration: configuration)
            try await socket.send(.binary(ByteBuffer(repeating: 7, count: 2048)))
            do {
                for try await _ in socket.messages {}
                Issue.record("the sequence should have thrown")
            } catch let error as WebSocketError {
                #expect(error.code == .messageTooBig)
            }
            let info = await socket.closeInfo
            #expect(info.sentCode == .messageTooBig)
        }
    }

    @Test("permessage-deflate round-trips", arguments: [
        PerMessageDeflateConfiguration(),
        PerMessageDeflateConfiguration(serverNoContextTakeover: true, clientNoContextTakeover: true),
        PerMessageDeflateConfiguration(serverMaxWindowBits: 10, clientMaxWindowBits: 9),
    ])
    func deflate(_ compression: PerMessageDeflateConfiguration) async throws {
        try await withEcho { server in
            var configuration = WebSocketConfiguration()
            configuration.compression = compression
            let socket = try await WebSocket.connect(to: "ws://127.0.0.1:\(server.port)/", configuration: configuration)
            #expect(socket.compression != nil)
            #expect(socket.compression?.serverNoContextTakeover == compression.serverNoContextTakeover)
            #expect(socket.compression?.serverMaxWindowBits == (compression.serverMaxWindowBits ?? 15))
            var iterator = socket.messages.makeAsyncIterator()
            let text = String(repeating: "circle chat compresses well. ", count: 400)
            for round in 0..<5 {
                try await socket.send(.text("\(round) \(text)"), fragmentSize: round == 2 ? 100 : nil)
                #expect(try await iterator.next() == .text("\(round) \(text)"))
            }
            var random = SystemRandomNumberGenerator()
            let noise = (0..<100_000).map { _ in UInt8.random(in: 0...255, using: &random) }
            try await socket.send(binary: noise)
            #expect(try await iterator.next() == .binary(ByteBuffer(bytes: noise)))
            try await socket.send("tiny")
            #expect(try await iterator.next() == .text("tiny"))
            await socket.close()
        }
    }

    @Test("no compression when the server declines it")
    func deflateDeclined() async throws {
        try await withEcho(.init(compression: false)) { server in
            var configuration = WebSocketConfiguration()
            configuration.compression = .init()
            let socket = try await WebSocket.connect(to: "ws://127.0.0.1:\(server.port)/", configuration: configuration)
            #expect(socket.compression == nil)
            try await socket.send(String(repeating: "a", count: 1000))
            #expect(try await nextMessage(socket) == .text(String(repeating: "a", count: 1000)))
            await socket.close()
        }
    }
}

