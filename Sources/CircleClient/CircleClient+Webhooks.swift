import CircleHTTPClient
import CircleSocket
import CircleWire
import Foundation

/// Admins: webhook subscriptions (docs/API.md, "Webhooks"), for `circle admin webhook …` and
/// an app's own tools.
extension CircleClient {
    /// Subscribes an endpoint; the answer's `secret` is shown only here.
    public static func createWebhook(
        _ webhook: HTTPAPI.CreateWebhook,
        token: String,
        server: String,
        tls: WebSocketTLSConfiguration = .init(),
        timeout: Duration = .seconds(30)
    ) async throws -> HTTPAPI.WebhookInfo {
        try await Self.withAPI(server: server, token: token, tls: tls, timeout: timeout) { api in
            try await api.call(.POST, HTTPAPI.Path.adminWebhooks, body: webhook, as: HTTPAPI.WebhookInfo.self)
        }
    }

    public static func webhooks(token: String, server: String, tls: WebSocketTLSConfiguration = .init(), timeout: Duration = .seconds(30)) async throws
        -> [HTTPAPI.WebhookInfo]
    {
        try await Self.withAPI(server: server, token: token, tls: tls, timeout: timeout) { api in
            try await api.call(.GET, HTTPAPI.Path.adminWebhooks, as: HTTPAPI.WebhookList.self).webhooks
        }
    }

    /// Enables or disables a subscription.
    public static func setWebhook(
        id: String,
        enabled: Bool,
        token: String,
        server: String,
        tls: WebSocketTLSConfiguration = .init(),
        timeout: Duration = .seconds(30)
    ) async throws -> HTTPAPI.WebhookInfo {
        try await Self.withAPI(server: server, token: token, tls: tls, timeout: timeout) { api in
            try await api.call(.PATCH, HTTPAPI.Path.adminWebhook(id), body: HTTPAPI.UpdateWebhook(enabled: enabled), as: HTTPAPI.WebhookInfo.self)
        }
    }

    /// A new signing secret (in the answer's `secret`); the previous one keeps signing unless `keepPrevious` is false.
    public static func rotateWebhookSecret(
        id: String,
        keepPrevious: Bool = true,
        token: String,
        server: String,
        tls: WebSocketTLSConfiguration = .init(),
        timeout: Duration = .seconds(30)
    ) async throws -> HTTPAPI.WebhookInfo {
        try await Self.withAPI(server: server, token: token, tls: tls, timeout: timeout) { api in
            try await api.call(.POST, HTTPAPI.Path.adminWebhookRotate(id), body: HTTPAPI.RotateWebhookSecret(keepPrevious: keepPrevious), as: HTTPAPI.WebhookInfo.self)
        }
    }

    public static func deleteWebhook(id: String, token: String, server: String, tls: WebSocketTLSConfiguration = .init(), timeout: Duration = .seconds(30))
        async throws
    {
        _ = try await Self.withAPI(server: server, token: token, tls: tls, timeout: timeout) { api in
            try await api.call(.DELETE, HTTPAPI.Path.adminWebhook(id), as: ServerAPI.NoContent.self)
        }
    }

    /// A subscription's newest deliveries (1…200).
    public static func webhookDeliveries(
        id: String,
        limit: Int = 50,
        token: String,
        server: String,
        tls: WebSocketTLSConfiguration = .init(),
        timeout: Duration = .seconds(30)
    ) async throws -> [HTTPAPI.WebhookDeliveryInfo] {
        try await Self.withAPI(server: server, token: token, tls: tls, timeout: timeout) { api in
            try await api.call(.GET, HTTPAPI.Path.adminWebhookDeliveries(id) + "?limit=\(limit)", as: HTTPAPI.WebhookDeliveryList.self).deliveries
        }
    }

    /// Makes a failed delivery pending again.
    public static func retryWebhookDelivery(
        id: String,
        delivery: String,
        token: String,
        server: String,
        tls: WebSocketTLSConfiguration = .init(),
        timeout: Duration = .seconds(30)
    ) async throws {
        _ = try await Self.withAPI(server: server, token: token, tls: tls, timeout: timeout) { api in
            try await api.call(.POST, HTTPAPI.Path.adminWebhookRetry(id, delivery: delivery), as: ServerAPI.NoContent.self)
        }
    }
}
