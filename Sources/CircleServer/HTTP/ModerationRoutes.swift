import CircleWire
import Foundation
import Hummingbird

/// Moderation over HTTP (docs/API.md, "Moderation"): read-only circles, and ending a user's
/// connections on every node. Admins, and API keys with `moderate` (or `admin`).
struct ModerationRoutes: Sendable {
    let services: ServerServices

    var store: any CircleStore { self.services.store }

    func add<Context: CircleRequestContext>(authenticated router: some RouterMethods<Context>) {
        router.put(RouterPath(HTTPAPI.Path.Pattern.readOnly.template)) { request, context in
            let principal = try context.requirePrincipal(.moderate, .admin)
            let name = try context.pathParameter("name")
            guard let circle = try await self.store.circle(named: name) else { throw APIError(.noSuchCircle(name)) }
            if principal.apiKeyScopes == nil, circle.owner != principal.name {
                _ = try await self.requireAdminAccount(principal)
            }
            let change = try await IdentityRoutes.body(request, HTTPAPI.ReadOnly.self, send: #"{"readOnly": true}"#)
            try await self.store.setReadOnly(circle.name, change.readOnly, by: principal.name, at: Identity.now)
            // This node applies it from the next entry on; the others within their refresh.
            await self.services.publishHooks.reload()
            return Response.json(.ok, HTTPAPI.ReadOnly(circle: circle.name, readOnly: change.readOnly))
        }
        router.post(RouterPath(HTTPAPI.Path.Pattern.adminUserDisconnect.template)) { _, context in
            let principal = try context.requirePrincipal(.moderate, .admin)
            if principal.apiKeyScopes == nil { _ = try await self.requireAdminAccount(principal) }
            let user = try context.pathParameter("name")
            guard TokenAuthority.isValidUserName(user) else { throw APIError(.badRequest, .badRequest, "\"\(user.prefix(64))\" is not a valid user name") }
            // The log first: a node that misses the signal still closes them at its next poll.
            try await self.store.logDisconnect(of: user, at: Identity.now)
            self.services.hub.endConnections(of: user, session: nil)
            return Response(status: .noContent)
        }
    }

    private func requireAdminAccount(_ principal: AuthenticatedUser) async throws -> Account {
        guard let account = try await self.store.account(named: principal.name), account.role == .admin, account.status == .active else {
            throw APIError(.forbidden, .forbidden, "only admins, the circle's owner (for read-only) and API keys with moderate do this")
        }
        return account
    }
}
