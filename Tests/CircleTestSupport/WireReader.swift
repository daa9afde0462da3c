import CircleSocket
import CircleWire
import Foundation

/// A bare `circle.v1` connection that records exactly what the server sends, without the SDK's
/// de-duplication and gap handling in between: a test that must see the server's own stream
/// (every post once, in order) reads it through this.
public final class WireReader: @unchecked Sendable {
    // @unchecked: one test task sends and reads at a time.
    private let socket: WebSocket
    private var iterator: WebSocket.Messages.AsyncIterator
    private var counter = 0

    /// Connects to a `ws://…/v1/ws` URL with `token` (sent as `?token=`).
    public init(url: String, token: String) async throws {
        var configuration = WebSocketConfiguration()
        configuration.subprotocols = [circleSubprotocol]
        self.socket = try await WebSocket.connect(to: url + "?token=" + token, configuration: configuration)
        self.iterator = self.socket.messages.makeAsyncIterator()
    }

    /// Sends `join` (with `since` when given) and waits for its ack; the ack's `seq`.
    /// Posts that arrive before the ack are a protocol error here and fail the call.
    @discardableResult
    public func join(_ circle: String, since: Int64?, timeout: Duration = .seconds(30)) async throws -> Int64? {
        self.counter += 1
        let id = "join\(self.counter)"
        let request = CircleRequest(action: .join, id: id, circle: circle, since: since)
        try await self.socket.send(String(decoding: try JSONEncoder().encode(request), as: UTF8.self))
        while let message = try await self.next(timeout: timeout) {
            switch message {
            case .ack(let ackID, let seq, _, _) where ackID == id: return seq
            case .error(let errorID, let code, let text) where errorID == id:
                throw WireReaderError("join \(circle) refused: \(code) \(text)")
            case .joined, .left, .typing: continue
            default: throw WireReaderError("before the join's ack: \(message)")
            }
        }
        throw WireReaderError("the connection ended before the join's ack")
    }

    /// Reads posts of `circle` until `last` returns true for one (that post included), or until
    /// `timeout` has passed or the connection ended (then what arrived so far). Other events
    /// (presence, typing) are skipped; a `gap` is recorded.
    public func posts(
        in circle: String,
        timeout: Duration,
        until last: @Sendable (CirclePost) -> Bool
    ) async -> (posts: [CirclePost], gaps: [ClosedRange<Int64>], ended: String?) {
        var posts: [CirclePost] = []
        var gaps: [ClosedRange<Int64>] = []
        let deadline = ContinuousClock.now + timeout
        do {
            while ContinuousClock.now < deadline {
                guard let message = try await self.next(timeout: deadline - ContinuousClock.now) else {
                    return (posts, gaps, "the connection ended")
                }
                switch message {
                case .post(let post) where post.circle == circle:
                    posts.append(post)
                    if last(post) { return (posts, gaps, nil) }
                case .gap(let gapCircle, let from, let to) where gapCircle == circle:
                    gaps.append(from...max(from, to))
                default:
                    continue
                }
            }
            return (posts, gaps, "timed out after \(timeout)")
        } catch {
            return (posts, gaps, "\(error)")
        }
    }

    /// The next server message, or `nil` when the connection ended (also when `timeout` passed:
    /// the connection is then aborted).
    private func next(timeout: Duration) async throws -> CircleServerMessage? {
        let socket = self.socket
        let watchdog = Task {
            try await Task.sleep(for: timeout)
            socket.abort()
        }
        defer { watchdog.cancel() }
        while let message = try await self.iterator.next() {
            if case .text(let text) = message { return try CircleServerMessage.decode(text) }
        }
        return nil
    }

    public func close() async {
        _ = await self.socket.close()
    }
}

public struct WireReaderError: Error, CustomStringConvertible {
    public var description: String
    public init(_ description: String) { self.description = description }
}
