import CircleClient
import Foundation
import NIOConcurrencyHelpers

/// A `circle.v1` endpoint on loopback whose answers the test writes: each request is handed to
/// `answer`, and what it returns is sent back (nothing: the request goes unanswered, as from a
/// server that took it and died before the reply). Every request also comes out of
/// ``requests``, in the order received.
final class FakeCircleServer: Sendable {
    typealias Answer = @Sendable (CircleRequest) -> [CircleServerMessage]

    let requests: AsyncStream<CircleRequest>
    private let server: WebSocketServer
    var url: String { "ws://127.0.0.1:\(self.server.port)/v1/ws" }

    private init(server: WebSocketServer, requests: AsyncStream<CircleRequest>) {
        self.server = server
        self.requests = requests
    }

    static func start(answer: @escaping Answer) async throws -> FakeCircleServer {
        let (requests, continuation) = AsyncStream<CircleRequest>.makeStream(bufferingPolicy: .unbounded)
        let server = try await WebSocketServer.start(configuration: .init(subprotocols: [circleSubprotocol])) { socket, _ in
            do {
                for try await message in socket.messages {
                    guard case .text(let text) = message,
                        let request = try? JSONDecoder().decode(CircleRequest.self, from: Data(text.utf8))
                    else { continue }
                    continuation.yield(request)
                    for reply in answer(request) { try await socket.send(reply.encodedJSON()) }
                }
            } catch {
                // The client went away; nothing to clean up.
            }
        }
        return FakeCircleServer(server: server, requests: requests)
    }

    func shutdown() async { await self.server.shutdown() }
}

/// A JWT-shaped token whose `sub` is `user` (the fake server checks nothing; the client reads `sub`).
func unsignedToken(for user: String) -> String {
    let payload = Data(#"{"sub":"\#(user)"}"#.utf8).base64EncodedString()
        .replacingOccurrences(of: "=", with: "").replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
    return "eyJhbGciOiJIUzI1NiJ9.\(payload).sig"
}
