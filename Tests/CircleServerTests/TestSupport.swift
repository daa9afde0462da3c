import CircleServer
import CircleTestSupport
import CircleSocket
import CircleWire
import Foundation
import NIOCore
import NIOHTTP1
import Testing

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// A `circle.v1` connection for tests: sends requests and reads server messages in order.
final class TestClient: @unchecked Sendable {
    // @unchecked: used by one test task at a time.
    let socket: WebSocket
    private var iterator: WebSocket.Messages.AsyncIterator
    private var counter = 0
    /// Request ids are `<idPrefix><n>`: give a new connection of the same user another prefix
    /// when its requests must not be taken for retries of the earlier connection's.
    var idPrefix = "r"

    init(url: String, token: String?, subprotocol: Bool = true, compression: Bool = false, headers: [(String, String)] = []) async throws {
        var configuration = WebSocketConfiguration()
        for (name, value) in headers { configuration.headers.add(name: name, value: value) }
        if subprotocol { configuration.subprotocols = [circleSubprotocol] }
        if compression { configuration.compression = .init() }
        if let token { configuration.headers.add(name: "Authorization", value: "Bearer \(token)") }
        self.socket = try await WebSocket.connect(to: url, configuration: configuration)
        self.iterator = self.socket.messages.makeAsyncIterator()
    }

    static func connect(_ server: TestServer, user: String) async throws -> TestClient {
        try await TestClient(url: server.wsURL, token: try await server.token(user))
    }

    func nextID() -> String {
        self.counter += 1
        return "\(self.idPrefix)\(self.counter)"
    }

    func send(_ request: CircleRequest) async throws {
        let data = try JSONEncoder().encode(request)
        try await self.socket.send(String(decoding: data, as: UTF8.self))
    }

    func sendRaw(_ text: String) async throws {
        try await self.socket.send(text)
    }

    /// The next server message, or `nil` when the connection ended. Fails the test after `timeout`.
    func next(timeout: Duration = .seconds(10)) async throws -> CircleServerMessage? {
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
    func reply(to id: String, timeout: Duration = .seconds(10)) async throws -> (reply: CircleServerMessage, others: [CircleServerMessage]) {
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

    /// Sends a request and waits for its reply.
    @discardableResult
    func request(_ make: (String) -> CircleRequest) async throws -> CircleServerMessage {
        let request = make(self.nextID())
        try await self.send(request)
        return try await self.reply(to: request.id).reply
    }

    func close() async {
        await self.socket.close()
    }
}

struct TestFailure: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}

extension CircleServerMessage {
    var errorCode: CircleErrorCode? {
        if case .error(_, let code, _) = self { return code }
        return nil
    }

    var ackSeq: Int64? {
        if case .ack(_, let seq, _, _) = self { return seq }
        return nil
    }

    var isDuplicateAck: Bool {
        if case .ack(_, _, _, let duplicate) = self { return duplicate }
        return false
    }

    var post: CirclePost? {
        if case .post(let post) = self { return post }
        return nil
    }
}
