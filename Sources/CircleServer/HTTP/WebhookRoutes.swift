import CircleWire
import Foundation
import Hummingbird
import NIOCore

/// The admin API of webhooks (docs/API.md, "Webhooks"): admins only.
struct WebhookRoutes: Sendable {
    let services: ServerServices

    var store: any CircleStore { self.services.store }

    /// Deliveries one list answer shows at most.
    static let deliveryPage = 1...200

    func add<Context: CircleRequestContext>(authenticated router: some RouterMethods<Context>) {
        router.post(RouterPath(HTTPAPI.Path.adminWebhooks)) { request, context in
            let admin = try await self.requireAdmin(context)
            let create = try await IdentityRoutes.body(request, HTTPAPI.CreateWebhook.self, send: #"{"url": "https://example.com/hook", "events": ["post"]}"#)
            let webhook = try await self.newWebhook(create, by: admin)
            try await self.store.createWebhook(webhook)
            self.services.webhooks.webhooksChanged()
            return Response.json(.created, try await self.info(webhook, secret: webhook.secrets[0]))
        }
        router.get(RouterPath(HTTPAPI.Path.adminWebhooks)) { _, context in
            _ = try await self.requireAdmin(context)
            var list: [HTTPAPI.WebhookInfo] = []
            for webhook in try await self.store.webhooks() { list.append(try await self.info(webhook)) }
            return Response.json(.ok, HTTPAPI.WebhookList(webhooks: list))
        }
        router.get(RouterPath(HTTPAPI.Path.Pattern.adminWebhook.template)) { _, context in
            _ = try await self.requireAdmin(context)
            return Response.json(.ok, try await self.info(try await self.webhook(context)))
        }
        router.patch(RouterPath(HTTPAPI.Path.Pattern.adminWebhook.template)) { request, context in
            let admin = try await self.requireAdmin(context)
            var webhook = try await self.webhook(context)
            let change = try await IdentityRoutes.body(request, HTTPAPI.UpdateWebhook.self, send: #"{"enabled": true}"#)
            webhook.status = change.enabled ? .active : .disabled
            webhook.disabledReason = change.enabled ? nil : "disabled by \(admin.name)"
            _ = try await self.store.updateWebhook(webhook)
            self.services.webhooks.webhooksChanged()
            return Response.json(.ok, try await self.info(webhook))
        }
        router.delete(RouterPath(HTTPAPI.Path.Pattern.adminWebhook.template)) { _, context in
            _ = try await self.requireAdmin(context)
            guard try await self.store.deleteWebhook(id: try context.pathParameter("id")) else { throw Self.noSuchWebhook }
            self.services.webhooks.webhooksChanged()
            return Response(status: .noContent)
        }
        router.post(RouterPath(HTTPAPI.Path.Pattern.adminWebhookRotate.template)) { request, context in
            _ = try await self.requireAdmin(context)
            var webhook = try await self.webhook(context)
            let rotate = try await IdentityRoutes.body(request, HTTPAPI.RotateWebhookSecret.self, send: #"{"keepPrevious": true}"#)
            let secret = WebhookSignature.newSecret()
            webhook.secrets = [secret] + (rotate.keepPrevious ?? true ? Array(webhook.secrets.prefix(1)) : [])
            _ = try await self.store.updateWebhook(webhook)
            self.services.webhooks.webhooksChanged()
            return Response.json(.ok, try await self.info(webhook, secret: secret))
        }
        router.get(RouterPath(HTTPAPI.Path.Pattern.adminWebhookDeliveries.template)) { request, context in
            _ = try await self.requireAdmin(context)
            let webhook = try await self.webhook(context)
            let limit: Int
            if let text = request.uri.queryParameters.get("limit") {
                guard let value = Int(text), Self.deliveryPage.contains(value) else {
                    throw APIError(.badRequest, .badRequest, "limit is \(Self.deliveryPage.lowerBound)…\(Self.deliveryPage.upperBound)")
                }
                limit = value
            } else {
                limit = 50
            }
            let deliveries = try await self.store.deliveries(of: webhook.id, limit: limit)
            return Response.json(.ok, HTTPAPI.WebhookDeliveryList(deliveries: deliveries.map(Self.info)))
        }
        router.post(RouterPath(HTTPAPI.Path.Pattern.adminWebhookRetry.template)) { _, context in
            _ = try await self.requireAdmin(context)
            let webhook = try await self.webhook(context)
            guard try await self.store.retryDelivery(try context.pathParameter("delivery"), of: webhook.id, now: Identity.now) else {
                throw APIError(.notFound, .notFound, "webhook \(webhook.id) has no failed delivery with that id")
            }
            self.services.webhooks.webhooksChanged()
            return Response(status: .noContent)
        }
    }

    static let noSuchWebhook = APIError(.notFound, .notFound, "no such webhook")

    private func requireAdmin(_ context: some CircleRequestContext) async throws -> Account {
        try await IdentityRoutes(services: self.services).requireAdmin(context)
    }

    private func webhook(_ context: some CircleRequestContext) async throws -> Webhook {
        guard let webhook = try await self.store.webhook(id: try context.pathParameter("id")) else { throw Self.noSuchWebhook }
        return webhook
    }

    /// Checks what an admin asked for; refuses what would never be delivered.
    private func newWebhook(_ create: HTTPAPI.CreateWebhook, by admin: Account) async throws -> Webhook {
        let url = create.url.trimmingCharacters(in: .whitespaces)
        guard url.utf8.count <= WebhookSettings.maximumURLBytes else {
            throw APIError(.badRequest, .badRequest, "a webhook URL has at most \(WebhookSettings.maximumURLBytes) bytes")
        }
        guard let components = URLComponents(string: url), let scheme = components.scheme?.lowercased(), ["http", "https"].contains(scheme),
            let host = components.host, !host.isEmpty, components.user == nil, components.password == nil, components.fragment == nil
        else {
            throw APIError(.badRequest, .badRequest, "a webhook URL is http:// or https://, with a host, no user and no fragment")
        }
        let allowsPrivate = self.services.configuration.allowPrivateOutbound || self.services.configuration.webhooks.allowPrivateAddresses
        let bareHost = host.hasPrefix("[") && host.hasSuffix("]") ? String(host.dropFirst().dropLast()) : host
        if let address = try? SocketAddress(ipAddress: bareHost, port: 0),
            let refusal = OutboundAddressPolicy(allowsPrivate: allowsPrivate).refusal(of: address)
        {
            throw APIError(.badRequest, .badRequest, "\(host) is \(refusal): webhooks go to public addresses only (--allow-private-outbound allows others)")
        }
        var events = Set(WebhookEvent.allCases)
        if let names = create.events {
            events = []
            for name in names {
                guard let event = WebhookEvent(rawValue: name) else {
                    throw APIError(.badRequest, .badRequest, "unknown event \"\(name.prefix(40))\"; events are \(WebhookEvent.allCases.map(\.rawValue).joined(separator: ", "))")
                }
                events.insert(event)
            }
            guard !events.isEmpty else { throw APIError(.badRequest, .badRequest, "give at least one event, or leave events out for all") }
        }
        if let circle = create.circle, try await self.store.circle(named: circle) == nil {
            throw APIError(.noSuchCircle(circle))
        }
        if let bot = create.bot {
            guard let account = try await self.store.account(named: bot), account.role == .bot else {
                throw APIError(.badRequest, .badRequest, "\"\(bot.prefix(64))\" is not a bot account (circle admin bot NAME makes one)")
            }
        }
        guard try await self.store.webhooks().count < WebhookSettings.maximumWebhooks else {
            throw APIError(.conflict, .conflict, "there are \(WebhookSettings.maximumWebhooks) webhooks, the most there may be; delete one first")
        }
        return Webhook(
            id: "wh_" + Identity.randomSecret(bytes: 12),
            url: url,
            circle: create.circle,
            events: events,
            secrets: [WebhookSignature.newSecret()],
            bot: create.bot,
            createdBy: admin.name,
            createdAt: Identity.now
        )
    }

    private func info(_ webhook: Webhook, secret: String? = nil) async throws -> HTTPAPI.WebhookInfo {
        let counts = try await self.store.deliveryCounts(of: webhook.id)
        return HTTPAPI.WebhookInfo(
            id: webhook.id,
            url: webhook.url,
            circle: webhook.circle,
            events: webhook.events.sorted().map(\.rawValue),
            status: webhook.status.rawValue,
            disabledReason: webhook.disabledReason,
            bot: webhook.bot,
            createdBy: webhook.createdBy,
            createdAt: webhook.createdAt,
            secrets: webhook.secrets.count,
            deliveries: Dictionary(uniqueKeysWithValues: counts.map { ($0.key.rawValue, $0.value) }),
            secret: secret
        )
    }

    static func info(_ delivery: WebhookDelivery) -> HTTPAPI.WebhookDeliveryInfo {
        HTTPAPI.WebhookDeliveryInfo(
            id: delivery.id,
            circle: delivery.circle,
            seq: delivery.seq,
            event: delivery.event.rawValue,
            status: delivery.status.rawValue,
            attempts: delivery.attempts,
            createdAt: delivery.createdAt,
            nextAttemptAt: delivery.status == .pending ? delivery.nextAttemptAt : nil,
            lastAttemptAt: delivery.lastAttemptAt,
            lastStatus: delivery.lastStatus,
            lastError: delivery.lastError
        )
    }
}
