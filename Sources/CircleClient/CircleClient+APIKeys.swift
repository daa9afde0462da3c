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
