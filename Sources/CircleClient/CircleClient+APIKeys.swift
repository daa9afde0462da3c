import CircleHTTPClient
import CircleSocket
import CircleWire
import Foundation

/// Admins: API keys (docs/API.md, "API keys"), for `circle admin api-key …` and an app's own tools.
extension CircleClient {
    /// Makes a key (and its bot, when the name is new); the answer's `key` is shown only here.
    public static func createAPIKey(
        _ key: HTTPAPI.CreateAPIKey,
        token: String,
        server: String,
        tls: WebSocketTLSConfiguration = .init(),
        timeout: Duration = .seconds(30)
    ) async throws -> HTTPAPI.APIKeyInfo {
        try await Self.withAPI(server: server, token: token, tls: tls, timeout: timeout) { api in
            try await api.call(.POST, HTTPAPI.Path.adminAPIKeys, body: key, as: HTTPAPI.APIKeyInfo.self)
        }
    }

    /// Every key, revoked ones too, oldest first.
    public static func apiKeys(token: String, server: String, tls: WebSocketTLSConfiguration = .init(), timeout: Duration = .seconds(30)) async throws
        -> [HTTPAPI.APIKeyInfo]
    {
        try await Self.withAPI(server: server, token: token, tls: tls, timeout: timeout) { api in
            try await api.call(.GET, HTTPAPI.Path.adminAPIKeys, as: HTTPAPI.APIKeyList.self).keys
        }
    }

    /// Revokes a key: it authenticates nothing from now on, on every node.
    public static func revokeAPIKey(id: String, token: String, server: String, tls: WebSocketTLSConfiguration = .init(), timeout: Duration = .seconds(30))
        async throws
    {
        _ = try await Self.withAPI(server: server, token: token, tls: tls, timeout: timeout) { api in
            try await api.call(.DELETE, HTTPAPI.Path.adminAPIKey(id), as: ServerAPI.NoContent.self)
        }
    }
}

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
