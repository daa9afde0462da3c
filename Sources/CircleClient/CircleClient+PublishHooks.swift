import CircleHTTPClient
import CircleSocket
import CircleWire
import Foundation

/// Admins and API keys with `manage`: a circle's publish hook (docs/API.md, "Publish hooks"),
/// for `circle admin hook …` and an app's own tools.
extension CircleClient {
    /// Sets (or replaces) `circle`'s hook; the answer's `secret` is there only when a new one was made.
    public static func setPublishHook(
        circle: String,
        _ hook: HTTPAPI.SetPublishHook,
        token: String,
        server: String,
        tls: WebSocketTLSConfiguration = .init(),
        timeout: Duration = .seconds(30)
    ) async throws -> HTTPAPI.PublishHookInfo {
        try await Self.withAPI(server: server, token: token, tls: tls, timeout: timeout) { api in
            try await api.call(.PUT, HTTPAPI.Path.publishHook(circle), body: hook, as: HTTPAPI.PublishHookInfo.self)
        }
    }

    /// `circle`'s hook (without its secret); a `not_found` error when it has none.
    public static func publishHook(
        circle: String,
        token: String,
        server: String,
        tls: WebSocketTLSConfiguration = .init(),
        timeout: Duration = .seconds(30)
    ) async throws -> HTTPAPI.PublishHookInfo {
        try await Self.withAPI(server: server, token: token, tls: tls, timeout: timeout) { api in
            try await api.call(.GET, HTTPAPI.Path.publishHook(circle), as: HTTPAPI.PublishHookInfo.self)
        }
    }

    /// Removes `circle`'s hook: its posts are committed without asking anyone.
    public static func deletePublishHook(circle: String, token: String, server: String, tls: WebSocketTLSConfiguration = .init(), timeout: Duration = .seconds(30))
        async throws
    {
        _ = try await Self.withAPI(server: server, token: token, tls: tls, timeout: timeout) { api in
            try await api.call(.DELETE, HTTPAPI.Path.publishHook(circle), as: ServerAPI.NoContent.self)
        }
    }
}
