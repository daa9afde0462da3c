import CircleWire
import Foundation
import Hummingbird
import NIOCore

/// A circle's publish hook (docs/API.md, "Publish hooks"): set, shown and removed by admins and
/// API keys with `manage` (or `admin`).
struct PublishHookRoutes: Sendable {
    let services: ServerServices

    var store: any CircleStore { self.services.store }

    func add<Context: CircleRequestContext>(authenticated router: some RouterMethods<Context>) {
        let path = RouterPath(HTTPAPI.Path.Pattern.publishHook.template)
        router.put(path) { request, context in
            let principal = try await self.requireManager(context)
            let circle = try await self.circle(context)
            let set = try await IdentityRoutes.body(request, HTTPAPI.SetPublishHook.self, send: #"{"url": "https://example.com/publish", "timeoutMs": 2000, "onFailure": "refuse"}"#)
            let url = try self.checkedURL(set.url)
            let timeout = set.timeoutMs ?? PublishHook.defaultTimeoutMilliseconds
            guard PublishHook.timeoutRange.contains(timeout) else {
                throw APIError(.badRequest, .badRequest, "\"timeoutMs\" is \(PublishHook.timeoutRange.lowerBound)…\(PublishHook.timeoutRange.upperBound)")
            }
            var policy = PublishHook.FailurePolicy.refuse
            if let name = set.onFailure {
                guard let known = PublishHook.FailurePolicy(rawValue: name) else {
                    throw APIError(.badRequest, .badRequest, "\"onFailure\" is \"refuse\" or \"accept\"")
                }
                policy = known
            }
            let existing = try await self.store.publishHooks().first { $0.circle == circle.name }
            // The secret stays unless asked to change; a new one is shown once, in this answer.
            let kept = (set.rotateSecret ?? false) ? nil : existing?.secret
            let secret = kept ?? WebhookSignature.newSecret()
            let hook = PublishHook(
                circle: circle.name, url: url, secret: secret, timeoutMilliseconds: timeout, onFailure: policy, createdBy: principal.name, createdAt: Identity.now
            )
            try await self.store.setPublishHook(hook)
            // This node asks the new hook from the next post on; the others within their refresh.
            await self.services.publishHooks.reload()
            return Response.json(existing == nil ? .created : .ok, Self.info(hook, secret: kept == nil ? secret : nil))
        }
        router.get(path) { _, context in
            _ = try await self.requireManager(context)
            let circle = try await self.circle(context)
            guard let hook = try await self.store.publishHooks().first(where: { $0.circle == circle.name }) else { throw Self.noHook }
            return Response.json(.ok, Self.info(hook, secret: nil))
        }
        router.delete(path) { _, context in
            _ = try await self.requireManager(context)
            let circle = try await self.circle(context)
            guard try await self.store.deletePublishHook(circle: circle.name) else { throw Self.noHook }
            await self.services.publishHooks.reload()
            return Response(status: .noContent)
        }
    }

    static let noHook = APIError(.notFound, .notFound, "the circle has no publish hook")

    static func info(_ hook: PublishHook, secret: String?) -> HTTPAPI.PublishHookInfo {
        HTTPAPI.PublishHookInfo(
            circle: hook.circle, url: hook.url, timeoutMs: hook.timeoutMilliseconds, onFailure: hook.onFailure.rawValue, createdBy: hook.createdBy,
            createdAt: hook.createdAt, secret: secret
        )
    }

    /// An admin, or an API key with `manage` or `admin`.
    private func requireManager(_ context: some CircleRequestContext) async throws -> AuthenticatedUser {
        let principal = try context.requirePrincipal(.manage, .admin)
        if principal.apiKeyScopes != nil { return principal }
        guard let account = try await self.store.account(named: principal.name), account.role == .admin, account.status == .active else {
            throw APIError(.forbidden, .forbidden, "only admins (and API keys with manage) set publish hooks")
        }
        return principal
    }

    private func circle(_ context: some CircleRequestContext) async throws -> CircleInfo {
        let name = try context.pathParameter("name")
        guard let info = try await self.store.circle(named: name) else { throw APIError(.noSuchCircle(name)) }
        return info
    }

    /// The webhooks' rules: http or https, a host, no user or fragment, at most
    /// ``WebhookSettings/maximumURLBytes``, no private address unless the server allows them.
    private func checkedURL(_ text: String) throws -> String {
        let url = text.trimmingCharacters(in: .whitespaces)
        guard url.utf8.count <= WebhookSettings.maximumURLBytes else {
            throw APIError(.badRequest, .badRequest, "a publish hook URL has at most \(WebhookSettings.maximumURLBytes) bytes")
        }
        guard let components = URLComponents(string: url), let scheme = components.scheme?.lowercased(), ["http", "https"].contains(scheme),
            let host = components.host, !host.isEmpty, components.user == nil, components.password == nil, components.fragment == nil
        else {
            throw APIError(.badRequest, .badRequest, "a publish hook URL is http:// or https://, with a host, no user and no fragment")
        }
        let allowsPrivate = self.services.configuration.allowPrivateOutbound || self.services.configuration.webhooks.allowPrivateAddresses
        let bareHost = host.hasPrefix("[") && host.hasSuffix("]") ? String(host.dropFirst().dropLast()) : host
        if let address = try? SocketAddress(ipAddress: bareHost, port: 0), let refusal = OutboundAddressPolicy(allowsPrivate: allowsPrivate).refusal(of: address) {
            throw APIError(.badRequest, .badRequest, "\(host) is \(refusal): publish hooks go to public addresses only (--allow-private-outbound allows others)")
        }
        return url
    }
}
