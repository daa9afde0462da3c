import CircleWire
import Foundation
import HTTPTypes
import Hummingbird

/// The routes of sign-in and identity (docs/API.md, "Sign-in and identity"): the first admin,
/// invites, password sign-in, sessions, personal tokens, profiles, and the admin API.
struct IdentityRoutes: Sendable {
    let services: ServerServices

    var identity: Identity { self.services.identity }
    var store: any CircleStore { self.services.store }

    /// Limits of the admin API's inputs.
    enum Limits {
        static let inviteHours = 1...720
        static let inviteUses = 1...1000
        static let inviteCircles = 20
        static let tokenDays = 1...365
        static let labelLength = 60
    }

    /// The routes anyone may call (they create sessions); `authenticated` is behind the credential
    /// check; `admin`, behind the one that also takes API keys (with the `admin` scope).
    func add<Context: CircleRequestContext>(
        public router: some RouterMethods<Context>,
        authenticated: some RouterMethods<Context>,
        admin: some RouterMethods<Context>
    ) {
        router.get(RouterPath(HTTPAPI.Path.authState)) { request, context in
            try await self.state(request, context: context)
        }
        router.post(RouterPath(HTTPAPI.Path.authSetup)) { request, context in
            try await self.setup(request, context: context)
        }
        router.post(RouterPath(HTTPAPI.Path.authInvite)) { request, _ in
            try self.requireOwnOrigin(request)
            let check = try await Self.body(request, HTTPAPI.InviteCheck.self, send: #"{"invite": "…"}"#)
            let invite = try await self.usableInvite(check.invite)
            return Response.json(.ok, HTTPAPI.InviteOffer(circles: invite.circles, expiresAt: invite.expiresAt))
        }
        router.post(RouterPath(HTTPAPI.Path.authSignUp)) { request, context in
            try await self.signUp(request, context: context)
        }
        router.post(RouterPath(HTTPAPI.Path.authSignIn)) { request, context in
            try await self.signIn(request, context: context)
        }

        self.addPasskeys(public: router, authenticated: authenticated)
        self.addDeviceFlow(public: router, authenticated: authenticated)

        authenticated.post(RouterPath(HTTPAPI.Path.authSignOut)) { _, context in
            let user = try context.requireUser()
            guard let session = user.sessionID else {
                throw APIError(.badRequest, .badRequest, "a token is not a session: nothing to sign out (let the token expire)")
            }
            try await self.endSessions(of: user.name, id: session, kind: nil)
            return Response(status: .noContent, headers: [.setCookie: self.identity.clearCookie])
        }
        authenticated.post(RouterPath(HTTPAPI.Path.authSignOutEverywhere)) { _, context in
            let user = try context.requireUser()
            // Pages and devices; personal access tokens stay (they are listed and revoked one by one).
            try await self.endSessions(of: user.name, id: nil, kind: .page)
            try await self.endSessions(of: user.name, id: nil, kind: .device)
            // Their devices' push subscriptions too: a device signed out gets no more previews.
            try await self.store.deletePushSubscriptions(user: user.name)
            self.services.hub.endConnections(of: user.name, session: nil)
            return Response(status: .noContent, headers: [.setCookie: self.identity.clearCookie])
        }
        authenticated.get(RouterPath(HTTPAPI.Path.authSessions)) { _, context in
            let user = try context.requireUser()
            let sessions = try await self.store.sessions(of: try await self.requireAccount(user).name)
            return Response.json(.ok, HTTPAPI.SessionList(sessions: sessions.map { Self.info($0, current: user.sessionID) }))
        }
        authenticated.delete(RouterPath(HTTPAPI.Path.Pattern.authSession.template)) { _, context in
            let user = try context.requireUser()
            let id = try context.pathParameter("id")
            guard try await !self.store.deleteSessions(of: user.name, id: id, kind: nil).isEmpty else {
                throw APIError(.notFound, .notFound, "you have no session \"\(id)\"")
            }
            self.identity.sessionsEnded([id])
            self.services.hub.endConnections(of: user.name, session: id)
            return Response(status: .noContent)
        }
        authenticated.post(RouterPath(HTTPAPI.Path.authTokens)) { request, context in
            try await self.createToken(request, context: context)
        }
        authenticated.post(RouterPath(HTTPAPI.Path.authPassword)) { request, context in
            try await self.changePassword(request, context: context)
        }
        authenticated.patch(RouterPath(HTTPAPI.Path.profile)) { request, context in
            try await self.updateProfile(request, context: context)
        }
        authenticated.get(RouterPath(HTTPAPI.Path.users)) { _, context in
            _ = try context.requireUser()
            let accounts = try await self.store.accounts().filter { $0.status == .active }
            return Response.json(.ok, HTTPAPI.ProfileList(users: accounts.map(Self.profile)))
        }

        // Admins.
        admin.get(RouterPath(HTTPAPI.Path.adminUsers)) { _, context in
            _ = try await self.requireAdmin(context)
            return Response.json(.ok, HTTPAPI.UserList(users: try await self.store.accounts().map(Self.userInfo)))
        }
        admin.patch(RouterPath(HTTPAPI.Path.Pattern.adminUser.template)) { request, context in
            try await self.updateUser(request, context: context)
        }
        admin.post(RouterPath(HTTPAPI.Path.adminBots)) { request, context in
            try await self.createBot(request, context: context)
        }
        admin.get(RouterPath(HTTPAPI.Path.adminInvites)) { _, context in
            _ = try await self.requireAdmin(context)
            return Response.json(.ok, HTTPAPI.InviteList(invites: try await self.store.invites().map { Self.inviteInfo($0) }))
        }
        admin.post(RouterPath(HTTPAPI.Path.adminInvites)) { request, context in
            try await self.createInvite(request, context: context)
        }
        admin.delete(RouterPath(HTTPAPI.Path.Pattern.adminInvite.template)) { _, context in
            _ = try await self.requireAdmin(context)
            let id = try context.pathParameter("id")
            guard try await self.store.revokeInvite(id: id) else { throw APIError(.notFound, .notFound, "no invite \"\(id)\"") }
            return Response(status: .noContent)
        }
    }

    // MARK: - Signing in

    private func state(_ request: Request, context: some CircleRequestContext) async throws -> Response {
        var user: AuthenticatedUser?
        var credentials = request.credentials(address: context.circleRemoteAddress)
        credentials.changesState = false
        if credentials.bearer != nil || self.identity.sessionCookie(in: credentials.cookieHeader) != nil {
            user = try? await self.identity.authenticate(credentials)
        }
        var profile: HTTPAPI.Profile?
        if let user {
            let account = try await self.store.account(named: user.name)
            profile = account.map(Self.profile) ?? HTTPAPI.Profile(name: user.name, displayName: "", avatar: nil, role: user.role.rawValue)
        }
        var csrf: String?
        if case .session(_, .page, let token) = user?.credential { csrf = token }
        let setupRequired = try await self.store.accountCount() == 0
        var methods = ["password"]
        if self.identity.publicOrigin != nil { methods.append("passkey") }
        return Response.json(
            .ok,
            HTTPAPI.AuthState(user: profile, setupRequired: setupRequired, csrf: csrf, session: user?.sessionID, methods: methods)
        )
    }

    private func setup(_ request: Request, context: some CircleRequestContext) async throws -> Response {
        try self.requireOwnOrigin(request)
        let setup = try await Self.body(request, HTTPAPI.Setup.self, send: #"{"token": "…", "name": "…", "password": "…"}"#)
        try self.checkNewAccount(name: setup.name, password: setup.password, displayName: setup.displayName)
        guard self.identity.consumeSetupToken(setup.token) else {
            throw APIError(.notFound, .inviteInvalid, "the setup link is wrong, expired or used; restart the server for a new one while no account exists")
        }
        let account: Account
        do {
            guard try await self.store.accountCount() == 0 else {
                throw APIError(.notFound, .inviteInvalid, "the first admin exists already; sign in")
            }
            let hash = try await self.identity.hashPassword(setup.password)
            account = try await self.store.createAccount(
                Account(name: setup.name, displayName: setup.displayName ?? "", role: .admin, createdAt: Identity.now),
                passwordHash: hash,
                invite: nil,
                now: Identity.now
            )
        } catch {
            self.identity.restoreSetupToken(setup.token)
            throw error
        }
        self.services.logger.notice("the first admin signed up", metadata: ["circle.user": "\(account.name)"])
        return try await self.signedIn(account, request: request, context: context, status: .created)
    }

    private func signUp(_ request: Request, context: some CircleRequestContext) async throws -> Response {
        try self.requireOwnOrigin(request)
        let signUp = try await Self.body(request, HTTPAPI.SignUp.self, send: #"{"invite": "…", "name": "…", "password": "…"}"#)
        try self.checkNewAccount(name: signUp.name, password: signUp.password, displayName: signUp.displayName)
        _ = try await self.usableInvite(signUp.invite)
        let hash = try await self.identity.hashPassword(signUp.password)
        let account: Account
        do {
            account = try await self.store.createAccount(
                Account(name: signUp.name, displayName: signUp.displayName ?? "", role: .member, createdAt: Identity.now),
                passwordHash: hash,
                invite: Identity.hash(signUp.invite),
                now: Identity.now
            )
        } catch let error as StoreError where error.code == .conflict {
            throw APIError(.conflict, .conflict, "the name \"\(signUp.name)\" is taken; pick another")
        } catch let error as StoreError where error.code == .notFound {
            throw APIError(.notFound, .inviteInvalid, "the invite is unknown, revoked, used up or expired; ask for a new one")
        }
        return try await self.signedIn(account, request: request, context: context, status: .created)
    }

    private func signIn(_ request: Request, context: some CircleRequestContext) async throws -> Response {
        try self.requireOwnOrigin(request)
        let signIn = try await Self.body(request, HTTPAPI.SignIn.self, send: #"{"name": "…", "password": "…"}"#)
        guard signIn.password.utf8.count <= IdentityConfiguration.maximumPasswordBytes, signIn.name.utf8.count <= 256 else {
            throw APIError(.unauthorized, .unauthorized, "the name or the password is wrong")
        }
        let account = try await self.identity.signIn(name: signIn.name, password: signIn.password, address: context.circleRemoteAddress)
        if let device = signIn.device {
            let label = device.trimmingCharacters(in: .whitespacesAndNewlines)
            guard !label.isEmpty, label.count <= Limits.labelLength else {
                throw APIError(.badRequest, .badRequest, "device names have 1–\(Limits.labelLength) characters")
            }
            let (secret, session) = try await self.identity.createSession(
                for: account.name,
                kind: .device,
                label: label,
                address: context.circleRemoteAddress
            )
            return Response.json(.ok, HTTPAPI.Credential(token: secret, user: account.name, session: Self.info(session, current: nil)))
        }
        return try await self.signedIn(account, request: request, context: context, status: .ok)
    }

    /// A page session for `account`: the cookie, and the state the page needs.
    func signedIn(_ account: Account, request: Request, context: some CircleRequestContext, status: HTTPResponse.Status) async throws
        -> Response
    {
        let (secret, session) = try await self.identity.createSession(
            for: account.name,
            kind: .page,
            label: Self.deviceLabel(userAgent: request.headers[.userAgent]),
            address: context.circleRemoteAddress
        )
        var methods = ["password"]
        if self.identity.publicOrigin != nil { methods.append("passkey") }
        return Response.json(
            status,
            HTTPAPI.AuthState(user: Self.profile(account), setupRequired: false, csrf: session.csrf, session: session.id, methods: methods),
            headers: [.setCookie: self.identity.setCookie(secret)]
        )
    }

    /// Requests that create sessions without one must come from the page's own origin when a
    /// browser sends them (login CSRF): a browser always sends `Origin` on a cross-site POST.
    func requireOwnOrigin(_ request: Request) throws {
        if let origin = request.headers[.origin], !self.identity.isOwnOrigin(origin, host: request.head.authority) {
            throw APIError(.forbidden, .forbidden, "sign-in requests must come from this server's page (Origin \(origin.prefix(100)))")
        }
    }

    /// A new account's name, password (`nil`: signing up with a passkey) and display name.
    func checkNewAccount(name: String, password: String?, displayName: String?) throws {
        guard TokenAuthority.isValidUserName(name) else {
            throw APIError(.badRequest, .badRequest, "a user name has 1–64 bytes of letters (of one script), digits, . _ - @")
        }
        if let password, let problem = self.identity.passwordProblem(password, name: name) {
            throw APIError(.badRequest, .badRequest, problem)
        }
        if let displayName, let problem = Self.displayNameProblem(displayName) {
            throw APIError(.badRequest, .badRequest, problem)
        }
    }

    static func displayNameProblem(_ name: String) -> String? {
        if name.count > IdentityConfiguration.maximumDisplayNameLength {
            return "a display name has at most \(IdentityConfiguration.maximumDisplayNameLength) characters"
        }
        if name.unicodeScalars.contains(where: { $0.properties.generalCategory == .control || $0.properties.generalCategory == .format }) {
            return "a display name has no control or formatting characters"
        }
        return nil
    }

    func usableInvite(_ token: String) async throws -> Invite {
        guard token.utf8.count <= 200, let invite = try await self.store.invite(tokenHash: Identity.hash(token)), invite.isUsable(at: Identity.now)
        else {
            throw APIError(.notFound, .inviteInvalid, "the invite is unknown, revoked, used up or expired; ask for a new one")
        }
        return invite
    }

    // MARK: - Sessions and tokens

    private func endSessions(of user: String, id: String?, kind: SessionKind?) async throws {
        let ended = try await self.store.deleteSessions(of: user, id: id, kind: kind)
        self.identity.sessionsEnded(ended)
        for session in ended { self.services.hub.endConnections(of: user, session: session) }
    }

    private func createToken(_ request: Request, context: some CircleRequestContext) async throws -> Response {
        let user = try await self.requireAccount(try context.requireUser())
        let create = try await Self.body(request, HTTPAPI.CreateToken.self, send: #"{"name": "deploy script", "days": 90}"#)
        let name = create.name.trimmingCharacters(in: .whitespacesAndNewlines)
        guard !name.isEmpty, name.count <= Limits.labelLength, Self.displayNameProblem(name) == nil else {
            throw APIError(.badRequest, .badRequest, "a token's name has 1–\(Limits.labelLength) characters, no control characters")
        }
        let days = create.days ?? 90
        guard Limits.tokenDays.contains(days) else { throw APIError(.badRequest, .badRequest, "days is between 1 and 365") }
        let held = try await self.store.sessions(of: user.name).filter { $0.kind == .personal }.count
        guard held < IdentityConfiguration.maximumPersonalTokens else {
            throw APIError(.conflict, .conflict, "you hold \(held) personal tokens, the most there may be; revoke one first")
        }
        let (secret, session) = try await self.identity.createSession(
            for: user.name,
            kind: .personal,
            label: name,
            address: context.circleRemoteAddress,
            lifetime: .seconds(days * 24 * 3600)
        )
        return Response.json(.created, HTTPAPI.Credential(token: secret, user: user.name, session: Self.info(session, current: nil)))
    }

    private func changePassword(_ request: Request, context: some CircleRequestContext) async throws -> Response {
        let account = try await self.requireAccount(try context.requireUser())
        let change = try await Self.body(request, HTTPAPI.ChangePassword.self, send: #"{"current": "…", "new": "…"}"#)
        if let existing = try await self.store.passwordHash(of: account.name) {
            guard let current = change.current, current.utf8.count <= IdentityConfiguration.maximumPasswordBytes,
                try await self.identity.verifyPassword(current, hash: existing)
            else {
                throw APIError(.forbidden, .forbidden, "the current password is wrong")
            }
        }
        if let problem = self.identity.passwordProblem(change.new, name: account.name) {
            throw APIError(.badRequest, .badRequest, problem)
        }
        try await self.store.setPasswordHash(try await self.identity.hashPassword(change.new), of: account.name)
        return Response(status: .noContent)
    }

    private func updateProfile(_ request: Request, context: some CircleRequestContext) async throws -> Response {
        let account = try await self.requireAccount(try context.requireUser())
        let update = try await Self.body(request, HTTPAPI.UpdateProfile.self, send: #"{"displayName": "…", "avatar": "<media id>"}"#)
        var change = AccountChange()
        if let displayName = update.displayName {
            let trimmed = displayName.trimmingCharacters(in: .whitespacesAndNewlines)
            if let problem = Self.displayNameProblem(trimmed) { throw APIError(.badRequest, .badRequest, problem) }
            change.displayName = trimmed
        }
        if let avatar = update.avatar {
            if avatar.isEmpty {
                change.avatar = .some(nil)
            } else {
                guard avatar.utf8.count == 64, try await self.store.isUploader(account.name, of: avatar),
                    let media = try await self.store.media(id: avatar), media.contentType.hasPrefix("image/")
                else {
                    throw APIError(.badRequest, .invalidAttachment, "avatar is the id of a photo you uploaded (POST /v1/media), or \"\" to remove it")
                }
                change.avatar = .some(avatar)
            }
        }
        let updated = try await self.store.updateAccount(account.name, change)
        return Response.json(.ok, Self.profile(updated))
    }

    // MARK: - Admins

    private func updateUser(_ request: Request, context: some CircleRequestContext) async throws -> Response {
        let admin = try await self.requireAdmin(context)
        let name = try context.pathParameter("name")
        let update = try await Self.body(request, HTTPAPI.UpdateUser.self, send: #"{"role": "admin|member|bot", "status": "active|deactivated|banned"}"#)
        var change = AccountChange()
        if let role = update.role {
            guard let known = AccountRole(rawValue: role) else { throw APIError(.badRequest, .badRequest, "role is admin, member or bot") }
            change.role = known
        }
        if let status = update.status {
            guard let known = AccountStatus(rawValue: status) else {
                throw APIError(.badRequest, .badRequest, "status is active, deactivated or banned")
            }
            change.status = known
        }
        if name == admin.name, change.role.map({ $0 != .admin }) ?? false || change.status.map({ $0 != .active }) ?? false {
            throw APIError(.badRequest, .badRequest, "an admin cannot demote or disable themselves; ask another admin")
        }
        let updated: Account
        do {
            updated = try await self.store.updateAccount(name, change)
        } catch let error as StoreError where error.code == .notFound {
            throw APIError(.notFound, .notFound, "no account \"\(name)\"")
        }
        self.identity.accountChanged(updated)
        if updated.status != .active {
            self.services.hub.endConnections(of: updated.name, session: nil)
        }
        self.services.logger.notice(
            "an admin changed an account",
            metadata: ["circle.admin": "\(admin.name)", "circle.user": "\(name)", "circle.role": "\(updated.role)", "circle.status": "\(updated.status)"]
        )
        return Response.json(.ok, Self.userInfo(updated))
    }

    /// A bot: an account with the `bot` role and no password (it never signs in on the page),
    /// and a personal access token of its own.
    private func createBot(_ request: Request, context: some CircleRequestContext) async throws -> Response {
        let admin = try await self.requireAdmin(context)
        let create = try await Self.body(request, HTTPAPI.CreateBot.self, send: #"{"name": "deploy-bot", "displayName": "Deploys"}"#)
        try self.checkNewAccount(name: create.name, password: nil, displayName: create.displayName)
        let days = create.days ?? 365
        guard Limits.tokenDays.contains(days) else { throw APIError(.badRequest, .badRequest, "days is between 1 and 365") }
        let account: Account
        do {
            account = try await self.store.createAccount(
                Account(name: create.name, displayName: create.displayName ?? "", role: .bot, createdAt: Identity.now),
                passwordHash: nil,
                invite: nil,
                now: Identity.now
            )
        } catch let error as StoreError where error.code == .conflict {
            throw APIError(.conflict, .conflict, "the name \"\(create.name)\" is taken; pick another")
        }
        let (secret, session) = try await self.identity.createSession(
            for: account.name,
            kind: .personal,
            label: "made by \(admin.name)",
            address: context.circleRemoteAddress,
            lifetime: .seconds(days * 24 * 3600)
        )
        self.services.logger.notice("an admin made a bot", metadata: ["circle.admin": "\(admin.name)", "circle.user": "\(account.name)"])
        return Response.json(.created, HTTPAPI.Credential(token: secret, user: account.name, session: Self.info(session, current: nil)))
    }

    private func createInvite(_ request: Request, context: some CircleRequestContext) async throws -> Response {
        let admin = try await self.requireAdmin(context)
        let create = try await Self.body(request, HTTPAPI.CreateInvite.self, send: #"{"hours": 168, "uses": 1, "circles": ["general"]}"#)
        let hours = create.hours ?? 168
        let uses = create.uses ?? 1
        let circles = create.circles ?? []
        guard Limits.inviteHours.contains(hours) else { throw APIError(.badRequest, .badRequest, "hours is between 1 and 720") }
        guard Limits.inviteUses.contains(uses) else { throw APIError(.badRequest, .badRequest, "uses is between 1 and 1000") }
        guard circles.count <= Limits.inviteCircles, Set(circles).count == circles.count else {
            throw APIError(.badRequest, .badRequest, "an invite joins at most \(Limits.inviteCircles) circles, each once")
        }
        for circle in circles where try await self.store.circle(named: circle) == nil {
            throw APIError(.noSuchCircle(circle))
        }
        let token = Identity.randomSecret(bytes: 24)
        let now = Identity.now
        let invite = Invite(
            id: Identity.randomSecret(bytes: 6),
            tokenHash: Identity.hash(token),
            createdBy: admin.name,
            createdAt: now,
            expiresAt: now + Int64(hours) * 3_600_000,
            maxUses: uses,
            circles: circles
        )
        try await self.store.createInvite(invite)
        return Response.json(.created, Self.inviteInfo(invite, token: token, url: "\(self.pageURL(of: request))#invite=\(token)"))
    }

    /// The account behind a principal: routes about one's account need one (a token of the
    /// app's backend may name a user without one).
    func requireAccount(_ user: AuthenticatedUser) async throws -> Account {
        guard let account = try await self.store.account(named: user.name) else {
            throw APIError(.notFound, .notFound, "\(user.name) has no account here (the app's tokens work without one)")
        }
        return account
    }

    /// The signed-in admin (an active account with the admin role), or the bot of an API key
    /// with the `admin` scope; 403 for anyone else.
    func requireAdmin(_ context: some CircleRequestContext) async throws -> Account {
        let user = try context.requirePrincipal(.admin)
        let isAdminKey = user.apiKeyScopes?.contains(.admin) ?? false
        guard let account = try await self.store.account(named: user.name), account.role == .admin || isAdminKey, account.status == .active else {
            throw APIError(.forbidden, .forbidden, "only admins do this")
        }
        return account
    }

    // MARK: - Shapes

    static func body<Value: Decodable>(_ request: Request, _ type: Value.Type, send example: String) async throws -> Value {
        var request = request
        let body = try await request.jsonBody()
        return try body.decodeJSON(type, send: example)
    }

    static func origin(of request: Request) -> String {
        "\(request.uri.scheme.map { "\($0)" } ?? "http")://\(request.head.authority ?? "localhost")"
    }

    /// The page's URL, for links made in answer to `request`: the public origin (else the
    /// request's) and the prefix Circle is mounted under (``MountPrefix``), with a trailing `/`.
    func pageURL(of request: Request) -> String {
        "\(self.identity.publicOrigin ?? Self.origin(of: request))\(MountPrefix.of(path: request.uri.path))/"
    }

    static func profile(_ account: Account) -> HTTPAPI.Profile {
        HTTPAPI.Profile(name: account.name, displayName: account.displayName, avatar: account.avatar, role: account.role.rawValue)
    }

    static func userInfo(_ account: Account) -> HTTPAPI.UserInfo {
        HTTPAPI.UserInfo(
            name: account.name,
            displayName: account.displayName,
            avatar: account.avatar,
            role: account.role.rawValue,
            status: account.status.rawValue,
            createdAt: account.createdAt,
            lastSeenAt: account.lastSeenAt
        )
    }

    static func info(_ session: StoredSession, current: String?) -> HTTPAPI.SessionInfo {
        HTTPAPI.SessionInfo(
            id: session.id,
            kind: session.kind.rawValue,
            label: session.label,
            address: session.address,
            createdAt: session.createdAt,
            lastUsedAt: session.lastUsedAt,
            expiresAt: session.expiresAt,
            current: session.id == current
        )
    }

    static func inviteInfo(_ invite: Invite, token: String? = nil, url: String? = nil) -> HTTPAPI.InviteInfo {
        HTTPAPI.InviteInfo(
            id: invite.id,
            createdBy: invite.createdBy,
            createdAt: invite.createdAt,
            expiresAt: invite.expiresAt,
            maxUses: invite.maxUses,
            uses: invite.uses,
            circles: invite.circles,
            revoked: invite.revoked,
            token: token,
            url: url
        )
    }

    /// "Firefox on Linux" from a User-Agent: enough for a person to recognise a session.
    static func deviceLabel(userAgent: String?) -> String {
        guard let agent = userAgent?.prefix(512) else { return "unknown browser" }
        let browsers = [("Edg/", "Edge"), ("OPR/", "Opera"), ("Firefox/", "Firefox"), ("Chrome/", "Chrome"), ("Safari/", "Safari"), ("curl/", "curl")]
        let systems = [("Android", "Android"), ("iPhone", "iOS"), ("iPad", "iPadOS"), ("Mac OS X", "macOS"), ("Windows", "Windows"), ("Linux", "Linux")]
        let browser = browsers.first { agent.contains($0.0) }?.1 ?? "a browser"
        guard let system = systems.first(where: { agent.contains($0.0) })?.1 else { return browser }
        return "\(browser) on \(system)"
    }
}
