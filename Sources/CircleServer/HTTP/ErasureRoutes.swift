import CircleWire
import Foundation
import Hummingbird

/// Erasing a person and the audit log over HTTP (docs/API.md, "Erasing a person"): admins only
/// (an admin account, or an API key with `admin`).
struct ErasureRoutes: Sendable {
    let services: ServerServices

    /// Audit log entries one page holds at most.
    static let maxAuditPage = 200

    func add<Context: CircleRequestContext>(authenticated router: some RouterMethods<Context>) {
        router.post(RouterPath(HTTPAPI.Path.Pattern.adminUserErase.template)) { request, context in
            let admin = try await IdentityRoutes(services: self.services).requireAdmin(context)
            let user = try context.pathParameter("name")
            guard TokenAuthority.isValidUserName(user) else { throw APIError(.badRequest, .badRequest, "\"\(user.prefix(64))\" is not a valid user name") }
            let mode = request.uri.queryParameters.get("account") ?? "anonymise"
            guard mode == "anonymise" || mode == "remove" else { throw APIError(.badRequest, .badRequest, "account is anonymise (the default) or remove") }
            let erased = try await Erasure(services: self.services).erase(user, by: admin.name, removeAccount: mode == "remove")
            return Response.json(.ok, erased)
        }
        router.get(RouterPath(HTTPAPI.Path.adminAudit)) { request, context in
            _ = try await IdentityRoutes(services: self.services).requireAdmin(context)
            let limit = try Self.integer(request.uri.queryParameters.get("limit"), "limit", 1...Int64(Self.maxAuditPage)) ?? 50
            let before = try Self.integer(request.uri.queryParameters.get("before"), "before", 1...Int64.max)
            let entries = try await self.services.store.auditLog(before: before, limit: Int(limit) + 1)
            let page = entries.prefix(Int(limit)).map {
                HTTPAPI.AuditEntryInfo(id: $0.id, time: $0.time, actor: $0.actor, action: $0.action, subject: $0.subject, detail: $0.detail)
            }
            return Response.json(.ok, HTTPAPI.AuditLog(entries: Array(page), next: entries.count > Int(limit) ? page.last?.id : nil))
        }
    }

    private static func integer(_ text: String?, _ name: String, _ range: ClosedRange<Int64>) throws -> Int64? {
        guard let text else { return nil }
        guard let value = Int64(text), range.contains(value) else {
            throw APIError(.badRequest, .badRequest, "\(name) is an integer from \(range.lowerBound) to \(range.upperBound)")
        }
        return value
    }
}
