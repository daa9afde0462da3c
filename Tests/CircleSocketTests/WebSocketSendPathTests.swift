@testable import CircleSocket
import Foundation
import NIOConcurrencyHelpers
import NIOCore
import Testing

/// The send path: bursts written and flushed together, from the event loop or from elsewhere,
/// in order; backpressure when the peer does not read.
@Suite("WebSocket send path")
struct WebSocketSendPathTests {
    /// Echoes every message back.
    private func echoServer() async throws -> WebSocketServer {
        try await WebSocketServer.start { socket, _ in
            do {
                for try await message in socket.messages { try await socket.send(message) }
            } catch {}
        }
    }

    private func collect(_ count: Int, from socket: WebSocket) async throws -> [String] {
        var seen: [String] = []
        for try await message in socket.messages {
            guard case .text(let text) = message else { continue }
            seen.append(text)
            if seen.count == count { break }
        }
        return seen
    }

    @Test("a burst sent from a task on the socket's event loop comes back whole and in order")
    func burstOnTheLoop() async throws {
        let server = try await self.echoServer()
        defer { Task { await server.shutdown() } }
        let socket = try await WebSocket.connect(to: "ws://127.0.0.1:\(server.port)/")
        let count = 2_000
        let seen = try await withTaskExecutorPreference(socket.taskExecutor) {
            for index in 0..<count { try await socket.send("m\(index)") }
            return try await self.collect(count, from: socket)
        }
        #expect(seen == (0..<count).map { "m\($0)" })
        await socket.close()
    }

    @Test("sends from off the loop and then from the loop keep their order")
    func offLoopThenOnLoop() async throws {
        let server = try await self.echoServer()
        defer { Task { await server.shutdown() } }
        let socket = try await WebSocket.connect(to: "ws://127.0.0.1:\(server.port)/")
        // Queued off the loop (the default executor), then written on the loop at once: the
        // loop's sends must wait behind the queue.
        for index in 0..<500 { try await socket.send("m\(index)") }
        try await withTaskExecutorPreference(socket.taskExecutor) {
            for index in 500..<1_000 { try await socket.send("m\(index)") }
        }
        let seen = try await self.collect(1_000, from: socket)
        #expect(seen == (0..<1_000).map { "m\($0)" })
        await socket.close()
    }

    @Test("a sender waits while the peer does not read, and the wait ends with notOpen when the connection goes")
    func backpressure() async throws {
        let connected = AsyncStream<Void>.makeStream()
        let release = AsyncStream<Void>.makeStream()
        // Reads nothing: the server stops reading its socket, the kernel buffers fill up.
        let server = try await WebSocketServer.start { socket, _ in
            connected.continuation.yield()
            for await _ in release.stream { break }
            socket.abort()
        }
        defer { Task { await server.shutdown() } }
        let socket = try await WebSocket.connect(to: "ws://127.0.0.1:\(server.port)/")
        for await _ in connected.stream { break }
        let total = 1_024
        let sent = NIOLockedValueBox(0)
        let payload = WebSocketMessage.binary(ByteBuffer(repeating: 7, count: 1 << 20))
        let sender = Task {
            for _ in 0..<total {
                try await socket.send(payload)
                sent.withLockedValue { $0 += 1 }
            }
        }
        // Without backpressure the 1,024 sends would all return at once; with it the sender
        // ends up waiting for room (the kernel holds a few MiB at most).
        let deadline = ContinuousClock.now + .seconds(60)
        while socket.outbound.state.withLockedValue({ $0.waiters.isEmpty }) && ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(10))
        }
        #expect(!socket.outbound.state.withLockedValue { $0.waiters.isEmpty })
        #expect(sent.withLockedValue { $0 } < total)
        release.continuation.yield()
        await #expect {
            try await sender.value
        } throws: { error in
            (error as? WebSocketError)?.code == .notOpen
        }
    }
}
