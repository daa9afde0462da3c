import CircleHTTPClient
import CircleSocket
import CircleWire
import Foundation

/// Erasing a person and the audit log (docs/API.md, "Erasing a person"), for `circle admin
/// erase-user` and `circle admin audit`: admins only.
extension CircleClient {
    /// Erases `user`'s data; `removeAccount` removes the account instead of anonymising it.
    public static func eraseUser(
        _ user: String,
        removeAccount: Bool = false,
        token: String,
        server: String,
        tls: WebSocketTLSConfiguration = .init(),
        timeout: Duration = .seconds(600)
    ) async throws -> HTTPAPI.Erased {
        try await Self.withAPI(server: server, token: token, tls: tls, timeout: timeout) { api in
            try await api.call(.POST, HTTPAPI.Path.adminUserErase(user) + (removeAccount ? "?account=remove" : ""), as: HTTPAPI.Erased.self)
        }
    }

    /// A page of the audit log, newest first.
    public static func auditLog(
        before: Int64? = nil,
        limit: Int = 50,
        token: String,
        server: String,
        tls: WebSocketTLSConfiguration = .init(),
        timeout: Duration = .seconds(30)
    ) async throws -> HTTPAPI.AuditLog {
        try await Self.withAPI(server: server, token: token, tls: tls, timeout: timeout) { api in
            try await api.call(.GET, HTTPAPI.Path.adminAudit + "?limit=\(limit)" + (before.map { "&before=\($0)" } ?? ""), as: HTTPAPI.AuditLog.self)
        }
    }
}
