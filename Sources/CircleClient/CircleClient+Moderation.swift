import CircleHTTPClient
import CircleSocket
import CircleWire
import Foundation

/// Moderation (docs/API.md, "Moderation"), for `circle admin read-only`, `circle admin
/// disconnect` and an app's own tools: admins, and API keys with `moderate`.
extension CircleClient {
    /// Makes `circle` read-only for its members (or not): its owner, admins, bots and API keys still write.
    public static func setReadOnly(
        circle: String,
        _ readOnly: Bool,
        token: String,
        server: String,
        tls: WebSocketTLSConfiguration = .init(),
        timeout: Duration = .seconds(30)
    ) async throws -> HTTPAPI.ReadOnly {
        try await Self.withAPI(server: server, token: token, tls: tls, timeout: timeout) { api in
            try await api.call(.PUT, HTTPAPI.Path.readOnly(circle), body: HTTPAPI.ReadOnly(readOnly: readOnly), as: HTTPAPI.ReadOnly.self)
        }
    }

    /// Ends every connection of `user` on every node (close code 4005); their sessions stay.
    public static func disconnect(user: String, token: String, server: String, tls: WebSocketTLSConfiguration = .init(), timeout: Duration = .seconds(30))
        async throws
    {
        _ = try await Self.withAPI(server: server, token: token, tls: tls, timeout: timeout) { api in
            try await api.call(.POST, HTTPAPI.Path.adminUserDisconnect(user), as: ServerAPI.NoContent.self)
        }
    }
}
