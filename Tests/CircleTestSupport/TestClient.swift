import CircleSocket
import CircleWire
import Foundation
import NIOCore
import NIOHTTP1
import Testing

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// A bare `circle.v1` connection for tests: sends requests and reads exactly what the server
/// sends, in order, without the SDK's de-duplication and gap handling in between (a test that
/// must see the server's own stream, every post once and in order, reads it through this).
public final class TestClient: @unchecked Sendable {
    // @unchecked: used by one test task at a time.
    public let socket: WebSocket
    private var iterator: WebSocket.Messages.AsyncIterator
    private var counter = 0
    /// Request ids are `<idPrefix><n>`: give a new connection of the same user another prefix
    /// when its requests must not be taken for retries of the earlier connection's.
    public var idPrefix = "r"

    public init(url: String, token: String?, subprotocol: Bool = true, compression: Bool = false, headers: [(String, String)] = []) async throws {
        var configuration = WebSocketConfiguration()
        for (name, value) in headers { configuration.headers.add(name: name, value: value) }
        if subprotocol { configuration.subprotocols = [circleSubprotocol] }
        if compression { configuration.compression = .init() }
        if let token { configuration.headers.add(name: "Authorization", value: "Bearer \(token)") }
        self.socket = try await WebSocket.connect(to: url, configuration: configuration)
        self.iterator = self.socket.messages.makeAsyncIterator()
    }

    public static func connect(_ server: TestServer, user: String) async throws -> TestClient {
        try await TestClient(url: server.wsURL, token: try await server.token(user))
    }

    public func nextID() -> String {
        self.counter += 1
        return "\(self.idPrefix)\(self.counter)"
    }

    public func send(_ request: CircleRequest) async throws {
        let data = try JSONEncoder().encode(request)
        try await self.socket.send(String(decoding: data, as: UTF8.self))
    }

    public func sendRaw(_ text: String) async throws {
        try await self.socket.send(text)
    }

    /// The next server message, or `nil` when the connection ended. Fails the test after `timeout`.
    public func next(timeout: Duration = .seconds(10)) async throws -> CircleServerMessage? {
        let deadline = Task {
            try await Task.sleep(for: timeout)
            self.socket.abort()
        }
        defer { deadline.cancel() }
        guard let message = try await self.iterator.next() else { return nil }
        guard case .text(let text) = message else {
            Issue.record("binary frame from the server")
            return nil
        }
        return try CircleServerMessage.decode(text)
    }

    /// Reads until the reply to `id` (ack, error or history), collecting other messages.
    public func reply(to id: String, timeout: Duration = .seconds(10)) async throws -> (reply: CircleServerMessage, others: [CircleServerMessage]) {
        var others: [CircleServerMessage] = []
        while let message = try await self.next(timeout: timeout) {
            switch message {
            case .ack(let ackID, _, _, _) where ackID == id: return (message, others)
            case .error(let errorID, _, _) where errorID == id: return (message, others)
            case .history(let historyID, _, _, _, _) where historyID == id: return (message, others)
            case .circles(let listID, _) where listID == id: return (message, others)
            case .search(let searchID, _) where searchID == id: return (message, others)
            default: others.append(message)
            }
        }
        throw TestFailure("connection ended before the reply to \(id)")
    }

    /// Sends `join` (with `since` when given) and waits for its ack; the ack's `seq`.
    /// Posts that arrive before the ack are a protocol error here and fail the call.
    @discardableResult
    public func join(_ circle: String, since: Int64?, timeout: Duration = .seconds(30)) async throws -> Int64? {
        let id = self.nextID()
        try await self.send(CircleRequest(action: .join, id: id, circle: circle, since: since))
        while let message = try await self.next(timeout: timeout) {
            switch message {
            case .ack(let ackID, let seq, _, _) where ackID == id: return seq
            case .error(let errorID, let code, let text) where errorID == id:
                throw TestFailure("join \(circle) refused: \(code) \(text)")
            case .joined, .left, .typing: continue
            default: throw TestFailure("before the join's ack: \(message)")
            }
        }
        throw TestFailure("the connection ended before the join's ack")
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

    /// Sends a request and waits for its reply.
    @discardableResult
    public func request(_ make: (String) -> CircleRequest) async throws -> CircleServerMessage {
        let request = make(self.nextID())
        try await self.send(request)
        return try await self.reply(to: request.id).reply
    }

    public func close() async {
        await self.socket.close()
    }
}

public struct TestFailure: Error, CustomStringConvertible {
    public var description: String
    public init(_ description: String) { self.description = description }
}

extension CircleServerMessage {
    public var errorCode: CircleErrorCode? {
        if case .error(_, let code, _) = self { return code }
        return nil
    }

    public var ackSeq: Int64? {
        if case .ack(_, let seq, _, _) = self { return seq }
        return nil
    }

    public var isDuplicateAck: Bool {
        if case .ack(_, _, _, let duplicate) = self { return duplicate }
        return false
    }

    public var post: CirclePost? {
        if case .post(let post) = self { return post }
        return nil
    }
}
