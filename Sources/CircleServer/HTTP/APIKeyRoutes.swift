import CircleWire
import Foundation
import Hummingbird

/// The admin API of API keys (docs/API.md, "API keys"): admins (or keys with `admin`) only.
struct APIKeyRoutes: Sendable {
    let services: ServerServices

    var store: any CircleStore { self.services.store }

    /// Keys one server may have, revoked ones included (an admin revokes before making more).
    static let maximumKeys = 500
    /// A key's name.
    static let nameLength = 1...60

    func add<Context: CircleRequestContext>(authenticated router: some RouterMethods<Context>) {
        router.post(RouterPath(HTTPAPI.Path.adminAPIKeys)) { request, context in
            let admin = try await IdentityRoutes(services: self.services).requireAdmin(context)
            let create = try await IdentityRoutes.body(
                request,
                HTTPAPI.CreateAPIKey.self,
                send: #"{"name": "deploys", "bot": "deploy-bot", "scopes": ["post_as_bot"]}"#
            )
            let (key, secret) = try await self.newKey(create, by: admin)
            try await self.store.createAPIKey(key)
            self.services.logger.notice(
                "an admin made an API key",
                metadata: ["circle.admin": "\(admin.name)", "circle.key": "\(key.id)", "circle.user": "\(key.bot)", "circle.scopes": "\(APIKeyScope.stored(key.scopes))"]
            )
            return Response.json(.created, Self.info(key, secret: secret))
        }
        router.get(RouterPath(HTTPAPI.Path.adminAPIKeys)) { _, context in
            _ = try await IdentityRoutes(services: self.services).requireAdmin(context)
            return Response.json(.ok, HTTPAPI.APIKeyList(keys: try await self.store.apiKeys().map { Self.info($0) }))
        }
        router.delete(RouterPath(HTTPAPI.Path.Pattern.adminAPIKey.template)) { _, context in
            let admin = try await IdentityRoutes(services: self.services).requireAdmin(context)
            let id = try context.pathParameter("id")
            guard id.utf8.count <= 64, try await self.store.revokeAPIKey(id: id, at: Identity.now) else {
                throw APIError(.notFound, .notFound, "no API key \"\(id.prefix(64))\"")
            }
            self.services.logger.notice("an admin revoked an API key", metadata: ["circle.admin": "\(admin.name)", "circle.key": "\(id)"])
            return Response(status: .noContent)
        }
    }

    /// Checks what an admin asked for and makes the key (and its bot, when it is new).
    private func newKey(_ create: HTTPAPI.CreateAPIKey, by admin: Account) async throws -> (APIKey, String) {
        let name = create.name.trimmingCharacters(in: .whitespacesAndNewlines)
        guard Self.nameLength.contains(name.count), IdentityRoutes.displayNameProblem(name) == nil else {
            throw APIError(.badRequest, .badRequest, "a key's name has 1–60 characters, no control characters")
        }
        var scopes = Set<APIKeyScope>()
        for text in create.scopes {
            guard let scope = APIKeyScope(rawValue: text) else {
                throw APIError(
                    .badRequest,
                    .badRequest,
                    "unknown scope \"\(text.prefix(40))\"; scopes are \(APIKeyScope.allCases.map(\.rawValue).joined(separator: ", "))"
                )
            }
            scopes.insert(scope)
        }
        guard !scopes.isEmpty, scopes.count == create.scopes.count else {
            throw APIError(.badRequest, .badRequest, "give one or more scopes, each once")
        }
        let now = Identity.now
        if let expiry = create.expiresAt {
            let latest = now + Int64(HTTPAPI.maxAPIKeyLifetimeDays) * 86_400_000
            guard expiry > now, expiry <= latest else {
                throw APIError(
                    .badRequest, .badRequest,
                    "expiresAt is a time in milliseconds since 1970, after now and at most \(HTTPAPI.maxAPIKeyLifetimeDays) days ahead"
                )
            }
        }
        guard TokenAuthority.isValidUserName(create.bot) else {
            throw APIError(.badRequest, .badRequest, "bot is a user name: 1–64 bytes of letters (of one script), digits, . _ - @")
        }
        guard try await self.store.apiKeys().count < Self.maximumKeys else {
            throw APIError(.conflict, .conflict, "there are \(Self.maximumKeys) API keys, the most there may be")
        }
        if let account = try await self.store.account(named: create.bot) {
            guard account.role == .bot else {
                throw APIError(.conflict, .conflict, "\"\(create.bot)\" is a person's account, not a bot; name a bot or a new name")
            }
        } else {
            do {
                _ = try await self.store.createAccount(
                    Account(name: create.bot, role: .bot, createdAt: Identity.now),
                    passwordHash: nil,
                    invite: nil,
                    now: Identity.now
                )
            } catch let error as StoreError where error.code == .conflict {
                // Made meanwhile by another request: checked again below.
            }
            guard try await self.store.account(named: create.bot)?.role == .bot else {
                throw APIError(.conflict, .conflict, "\"\(create.bot)\" is a person's account, not a bot")
            }
        }
        let id = Identity.randomSecret(bytes: 9)
        let secret = APIKey.prefix + id + "." + Identity.randomSecret(bytes: 32)
        let key = APIKey(
            id: id,
            name: name,
            secretHash: Identity.hash(secret),
            bot: create.bot,
            scopes: scopes,
            createdBy: admin.name,
            createdAt: now,
            expiresAt: create.expiresAt
        )
        return (key, secret)
    }

    static func info(_ key: APIKey, secret: String? = nil) -> HTTPAPI.APIKeyInfo {
        HTTPAPI.APIKeyInfo(
            id: key.id,
            name: key.name,
            bot: key.bot,
            scopes: key.scopes.sorted().map(\.rawValue),
            createdBy: key.createdBy,
            createdAt: key.createdAt,
            lastUsedAt: key.lastUsedAt,
            revokedAt: key.revokedAt,
            key: secret,
            expiresAt: key.expiresAt
        )
    }
}
