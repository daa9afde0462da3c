import CircleHTTPClient
import CircleSocket
import CircleWire
import Foundation

/// Posting over HTTP (docs/API.md, "Posting over HTTP"): an app's backend with an API key, or a
/// person's credential, writes a post without a WebSocket.
extension CircleClient {
    /// Posts `message` in `circle` and returns its ack (`duplicate` for a repeat of its `id`).
    /// - Parameters:
    ///   - message: The text, and an `id` that makes a retry safe (recommended), an attachment,
    ///     the post it answers, and for keys with `post_as_user` the author (`as`).
    ///   - token: An API key (`circle_key_…`) or a person's credential.
    ///   - server: The server's WebSocket URL (as for the other calls).
    public static func postMessage(
        _ message: HTTPAPI.NewMessage,
        in circle: String,
        token: String,
        server: String,
        tls: WebSocketTLSConfiguration = .init(),
        timeout: Duration = .seconds(30)
    ) async throws -> HTTPAPI.MessageAck {
        try await Self.withAPI(server: server, token: token, tls: tls, timeout: timeout) { api in
            try await api.call(.POST, HTTPAPI.Path.messages(circle), body: message, as: HTTPAPI.MessageAck.self)
        }
    }
}
