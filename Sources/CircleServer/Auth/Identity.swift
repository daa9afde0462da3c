import CircleWire
import Crypto
import Foundation
import HTTPTypes
import HummingbirdBcrypt
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix

/// What a request brings to be authenticated: its bearer token, its session cookie, and what
/// the origin checks need. Built from a Hummingbird request or from the WebSocket upgrade's
/// head, so both go through ``Identity/authenticate(_:)``.
struct CredentialsInput: Sendable {
    var bearer: String?
    var cookieHeader: String?
    var origin: String?
    var host: String?
    /// The request changes something (not GET, HEAD or OPTIONS): cookie sessions need the CSRF header.
    var changesState: Bool
    var csrfHeader: String?
    var isUpgrade: Bool
    var address: String?
    /// API keys are taken only where ``TokenAuthMiddleware`` checks the route's scope; elsewhere
    /// (the WebSocket, the public routes) they are refused.
    var acceptsAPIKeys = false
}

/// Accounts, passwords, sessions, the setup link and the sign-in throttle: the one place that
/// decides who a request is (docs/API.md, "Sign-in and identity"; docs/SECURITY.md).
///
/// A request is authenticated once, into an ``AuthenticatedUser`` (the principal: name, role,
/// and how it signed in); routes and the WebSocket session ask the principal, never the credential.
final class Identity: Sendable {
    let store: any CircleStore
    let configuration: IdentityConfiguration
    /// JWTs: the server's own key and the identity providers' (JWKS).
    let verifier: TokenVerifier
    let logger: Logger
    /// Whether the server speaks TLS itself (the cookie is `Secure` then, as with an https public URL).
    let servesTLS: Bool
    /// The first-run setup link's token and its end, while no account exists.
    private let setupToken = NIOLockedValueBox<(token: String, expires: ContinuousClock.Instant)?>(nil)
    /// Accounts that may not sign in or connect (deactivated, banned): asked on every
    /// authentication without a store read, kept current by ``accountChanged(_:)``.
    private let disabled = NIOLockedValueBox<Set<String>>([])
    /// When each session's use was last written (a use is written at most once a minute).
    private let touched = NIOLockedValueBox<[String: Int64]>([:])
    /// A hash at the configured cost of nothing anyone knows: a sign-in with an unknown name is
    /// checked against it, so it takes as long as one with a known name.
    private let decoyHash: String
    /// Ceremony starts per address (``CeremonyLimits``).
    private let ceremonyStarts: NIOLockedValueBox<AddressRateLimiter>

    /// Opaque credentials (sessions, device credentials, personal tokens) start with this, so a
    /// bearer token is told from a JWT without trying to parse it.
    static let secretPrefix = "circle_"

    init(store: any CircleStore, configuration: IdentityConfiguration, verifier: TokenVerifier, servesTLS: Bool, logger: Logger) {
        self.store = store
        self.configuration = configuration
        self.verifier = verifier
        self.servesTLS = servesTLS
        self.logger = logger
        self.decoyHash = Bcrypt.hash(Self.prehash(Self.randomSecret(bytes: 16)), cost: configuration.passwordCost)
        let limits = configuration.ceremonyLimits
        self.ceremonyStarts = NIOLockedValueBox(AddressRateLimiter(rate: Double(limits.perMinute) / 60, burst: Double(limits.burst)))
    }

    // MARK: - Start

    /// Loads the accounts that may not sign in and, on an empty store, makes the setup link.
    /// - Returns: The setup link, when the store has no account yet.
    /// - Parameters:
    ///   - origin: The listening address's origin, for when no public URL is configured.
    ///   - pathPrefix: `--path-prefix` (an app that mounts Circle under a group of its own has
    ///     its prefix only in requests: this link, made before any, does not carry it).
    func start(listeningAt origin: String, pathPrefix: String) async throws -> String? {
        let accounts = try await self.store.accounts()
        self.disabled.withLockedValue { $0 = Set(accounts.filter { $0.status != .active }.map(\.name)) }
        guard accounts.isEmpty else { return nil }
        let token = Self.randomSecret(bytes: 24)
        self.setupToken.withLockedValue { $0 = (token, .now + self.configuration.setupLinkLifetime) }
        return "\(self.publicOrigin ?? origin)\(pathPrefix)/#setup=\(token)"
    }

    /// The configured public origin (`https://chat.example.com`), without a trailing slash.
    var publicOrigin: String? {
        guard let url = self.configuration.publicURL, let parsed = URL(string: url), let scheme = parsed.scheme, let host = parsed.host
        else { return nil }
        return "\(scheme)://\(host)\(parsed.port.map { ":\($0)" } ?? "")"
    }

    /// Whether the setup link still works (no account exists and it has not expired).
    var setupPending: Bool {
        self.setupToken.withLockedValue { setup in
            guard let current = setup else { return false }
            return current.expires > .now
        }
    }

    /// Takes the setup token once: `true` when `token` is the current one (which is then gone).
    func consumeSetupToken(_ token: String) -> Bool {
        self.setupToken.withLockedValue { setup in
            guard let current = setup, current.expires > .now, Self.constantTimeEqual(current.token, token) else { return false }
            setup = nil
            return true
        }
    }

    /// Puts the setup token back (the account it was to create could not be made).
    func restoreSetupToken(_ token: String) {
        self.setupToken.withLockedValue { setup in
            if setup == nil { setup = (token, .now + self.configuration.setupLinkLifetime) }
        }
    }

    // MARK: - Secrets

    /// `bytes` random bytes, base64url without padding.
    static func randomSecret(bytes: Int) -> String {
        var generator = SystemRandomNumberGenerator()
        let raw = (0..<bytes).map { _ in UInt8.random(in: 0...255, using: &generator) }
        return Self.base64URL(raw)
    }

    static func base64URL(_ bytes: some Sequence<UInt8>) -> String {
        WebAuthnRelyingParty.base64URLEncoded(Array(bytes))
    }

    /// Bytes from base64url (with or without padding), or `nil`; at most `limit` characters.
    static func bytes(base64URL text: String, limit: Int = 8192) -> [UInt8]? {
        guard text.utf8.count <= limit else { return nil }
        var standard = text.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        while standard.utf8.count % 4 != 0 { standard += "=" }
        return Data(base64Encoded: standard).map { Array($0) }
    }

    /// Lower-case hex SHA-256: what the store keeps of a secret.
    static func hash(_ secret: String) -> String {
        hexString(SHA256.hash(data: Data(secret.utf8)))
    }

    static func constantTimeEqual(_ a: String, _ b: String) -> Bool {
        WebAuthnRelyingParty.constantTimeEqual(Array(a.utf8), Array(b.utf8))
    }

    // MARK: - Passwords

    /// bcrypt reads only the first 72 bytes of its input: every password is first hashed with
    /// SHA-256 (base64, 44 bytes), so all of a long password counts.
    static func prehash(_ password: String) -> String {
        Data(SHA256.hash(data: Data(password.utf8))).base64EncodedString()
    }

    /// Why a new password is refused, or `nil`.
    func passwordProblem(_ password: String, name: String) -> String? {
        if password.count < self.configuration.minimumPasswordLength {
            return "a password needs at least \(self.configuration.minimumPasswordLength) characters"
        }
        if password.utf8.count > IdentityConfiguration.maximumPasswordBytes {
            return "a password has at most \(IdentityConfiguration.maximumPasswordBytes) bytes"
        }
        if password.lowercased() == name.lowercased() {
            return "the password may not be the user name"
        }
        return nil
    }

    /// bcrypt runs on NIO's thread pool: a quarter second of CPU must not hold an event loop
    /// or a cooperative thread (this machine has two).
    func hashPassword(_ password: String) async throws -> String {
        let cost = self.configuration.passwordCost
        return try await NIOThreadPool.singleton.runIfActive { Bcrypt.hash(Self.prehash(password), cost: cost) }
    }

    func verifyPassword(_ password: String, hash: String?) async throws -> Bool {
        let stored = hash ?? self.decoyHash
        let matches = try await NIOThreadPool.singleton.runIfActive { Bcrypt.verify(Self.prehash(password), hash: stored) }
        return hash != nil && matches
    }

    // MARK: - Ceremonies

    /// Stores a ceremony's challenge if `address` may start one now and the store holds fewer
    /// than ``CeremonyLimits/outstanding``; otherwise throws 429 or 503 with `Retry-After`.
    func startCeremony(_ challenge: StoredChallenge, address: SocketAddress?) async throws {
        if let wait = self.ceremonyStarts.withLockedValue({ $0.take(address, now: .now()) }) {
            let seconds = max(1, Int((Double(wait.nanoseconds) / 1e9).rounded(.up)))
            throw APIError(.tooManyRequests, .rateLimited, "too many sign-in attempts from your address; try again in \(seconds) s", headers: [.retryAfter: "\(seconds)"])
        }
        guard try await self.store.createChallenge(challenge, now: Self.now, outstandingLimit: self.configuration.ceremonyLimits.outstanding) else {
            self.logger.warning("sign-in ceremonies at their limit", metadata: ["circle.limit": "\(self.configuration.ceremonyLimits.outstanding)"])
            throw APIError(.serviceUnavailable, .unavailable, "too many sign-ins are under way; try again in a minute", headers: [.retryAfter: "60"])
        }
    }

    // MARK: - Sign-in

    /// Checks a name and password with the throttle: the same answer, in about the same time,
    /// whether the name exists, has no password, or the password is wrong.
    func signIn(name: String, password: String, address: String?) async throws -> Account {
        let now = Self.now
        let keys = Self.throttleKeys(name: name, address: address)
        let failures = try await self.store.signInFailures(keys: keys)
        let waits = [
            self.configuration.accountThrottle.wait(after: failures[keys[0]], now: now),
            keys.count > 1 ? self.configuration.addressThrottle.wait(after: failures[keys[1]], now: now) : nil,
        ].compactMap { $0 }
        if let wait = waits.max() {
            let seconds = max(1, Int((Double(wait.components.seconds) + Double(wait.components.attoseconds) / 1e18).rounded(.up)))
            throw APIError(
                .tooManyRequests,
                .rateLimited,
                "too many failed sign-ins; try again in \(seconds) s",
                headers: [.retryAfter: "\(seconds)"]
            )
        }
        let account = TokenAuthority.isValidUserName(name) ? try await self.store.account(named: name) : nil
        let hash = account == nil ? nil : try await self.store.passwordHash(of: name)
        guard try await self.verifyPassword(password, hash: hash), let account else {
            try await self.store.recordSignInFailure(keys: keys, at: now)
            self.logger.info("a sign-in failed", metadata: ["circle.address": "\(address ?? "-")"])
            throw APIError(.unauthorized, .unauthorized, "the name or the password is wrong")
        }
        try await self.store.clearSignInFailures(keys: [keys[0]])
        guard account.status == .active else {
            throw APIError(.forbidden, .accountDisabled, "this account is \(account.status.rawValue)")
        }
        return account
    }

    /// The throttle's keys: the name tried (folded to lower case: "Alice" and "alice" share a
    /// count) and the address.
    static func throttleKeys(name: String, address: String?) -> [String] {
        let nameKey = "user:" + String(name.lowercased().prefix(80))
        guard let address else { return [nameKey] }
        return [nameKey, "address:" + address]
    }

    // MARK: - Sessions

    /// Makes a session (or device credential, or personal token) and returns its secret, which
    /// is shown once and never stored.
    func createSession(for user: String, kind: SessionKind, label: String, address: String?, lifetime: Duration? = nil) async throws -> (
        secret: String, session: StoredSession
    ) {
        let now = Self.now
        let secret = Self.secretPrefix + Self.randomSecret(bytes: 32)
        let life = lifetime ?? self.configuration.sessionLifetime
        let session = StoredSession(
            id: Self.randomSecret(bytes: 9),
            tokenHash: Self.hash(secret),
            user: user,
            kind: kind,
            label: String(label.prefix(120)),
            address: address ?? "",
            csrf: kind == .page ? Self.randomSecret(bytes: 18) : "",
            createdAt: now,
            lastUsedAt: now,
            expiresAt: now + Self.milliseconds(life)
        )
        try await self.store.createSession(session)
        try await self.store.touchAccount(user, at: now)
        return (secret, session)
    }

    // MARK: - Cookies

    /// The cookie is `Secure` (and named with the `__Host-` prefix, which pins it to this
    /// origin, path `/`) when the page is served over https.
    var cookieIsSecure: Bool {
        self.servesTLS || (self.configuration.publicURL?.lowercased().hasPrefix("https://") ?? false)
    }

    var cookieName: String { self.cookieIsSecure ? "__Host-circle_session" : "circle_session" }

    /// `Set-Cookie` for a new session.
    func setCookie(_ secret: String) -> String {
        let maxAge = Self.milliseconds(self.configuration.sessionLifetime) / 1000
        return "\(self.cookieName)=\(secret); Path=/; Max-Age=\(maxAge); HttpOnly; SameSite=Lax" + (self.cookieIsSecure ? "; Secure" : "")
    }

    /// `Set-Cookie` that removes it.
    var clearCookie: String {
        "\(self.cookieName)=; Path=/; Max-Age=0; HttpOnly; SameSite=Lax" + (self.cookieIsSecure ? "; Secure" : "")
    }

    /// The session cookie's value in a `Cookie` header, if any.
    func sessionCookie(in header: String?) -> String? {
        guard let header else { return nil }
        for pair in header.split(separator: ";") {
            let parts = pair.split(separator: "=", maxSplits: 1)
            guard parts.count == 2 else { continue }
            if parts[0].trimmingCharacters(in: .whitespaces) == self.cookieName {
                let value = parts[1].trimmingCharacters(in: .whitespaces)
                return value.isEmpty ? nil : value
            }
        }
        return nil
    }

    // MARK: - Origins

    /// Whether `origin` (an `Origin` header) is the page's own: the public URL's origin, or
    /// without one, the origin the request's `Host` names.
    func isOwnOrigin(_ origin: String, host: String?) -> Bool {
        let origin = origin.lowercased()
        if let publicOrigin = self.publicOrigin?.lowercased() { return origin == publicOrigin }
        guard let host = host?.lowercased() else { return false }
        return origin == "http://\(host)" || origin == "https://\(host)"
    }

    // MARK: - Authentication

    /// The one check of every credential: a JWT (the app's or the server's), an opaque bearer
    /// credential (device, personal token), or the page's session cookie. Cookie sessions must
    /// come from the page's own origin: a WebSocket upgrade must send its `Origin` (cross-site
    /// WebSocket hijacking), and a request that changes something must send `X-Circle-CSRF`
    /// with the session's value (a cross-site form cannot set a header).
    func authenticate(_ input: CredentialsInput) async throws(APIError) -> AuthenticatedUser {
        let user: AuthenticatedUser
        if let bearer = input.bearer {
            if let keyID = APIKey.id(in: bearer) {
                guard input.acceptsAPIKeys else {
                    throw APIError(
                        .forbidden,
                        .forbidden,
                        "this route (or the WebSocket) does not take API keys; docs/API.md, \"API keys\", lists the routes that do"
                    )
                }
                user = try await self.apiKeyUser(id: keyID, key: bearer)
            } else if bearer.hasPrefix(Self.secretPrefix) {
                user = try await self.sessionUser(secret: bearer, cookie: false)
            } else {
                do throws(TokenError) {
                    user = try await self.verifier.verify(bearer)
                } catch {
                    throw APIError(.unauthorized, error.code, error.message)
                }
            }
        } else if let cookie = self.sessionCookie(in: input.cookieHeader) {
            if input.isUpgrade {
                guard let origin = input.origin, self.isOwnOrigin(origin, host: input.host) else {
                    throw APIError(.forbidden, .forbidden, "a WebSocket signed in by cookie must come from this server's page (Origin)")
                }
            }
            user = try await self.sessionUser(secret: cookie, cookie: true)
            if input.changesState {
                if let origin = input.origin, !self.isOwnOrigin(origin, host: input.host) {
                    throw APIError(.forbidden, .forbidden, "requests signed in by cookie must come from this server's page (Origin)")
                }
                guard case .session(_, _, let csrf) = user.credential, let sent = input.csrfHeader, Self.constantTimeEqual(sent, csrf) else {
                    throw APIError(.forbidden, .forbidden, "send the session's X-Circle-CSRF header (GET /v1/auth/state has it)")
                }
            }
        } else {
            throw APIError.missingToken
        }
        if self.disabled.withLockedValue({ $0.contains(user.name) }) {
            throw APIError(.forbidden, .accountDisabled, "the account \(user.name) is deactivated or banned")
        }
        return user
    }

    /// The principal of an API key: its bot, with the key's scopes. The hash is compared in
    /// constant time, also for an id that does not exist.
    private func apiKeyUser(id: String, key: String) async throws(APIError) -> AuthenticatedUser {
        let now = Self.now
        let stored: APIKey?
        let account: Account?
        do {
            stored = try await self.store.apiKey(id: id)
            if let stored {
                account = try await self.store.account(named: stored.bot)
            } else {
                account = nil
            }
        } catch {
            throw APIError(.serviceUnavailable, .unavailable, "cannot read API keys now: \(error)")
        }
        let matches = Self.constantTimeEqual(Self.hash(key), stored?.secretHash ?? String(repeating: "0", count: 64))
        guard let stored, matches, stored.revokedAt == nil else {
            throw APIError(.unauthorized, .unauthorized, "the API key is unknown or was revoked")
        }
        if let expiry = stored.expiresAt, expiry <= now {
            throw APIError(.unauthorized, .keyExpired, "the API key \(stored.id) expired; an admin makes a new one")
        }
        guard let account, account.role == .bot else {
            throw APIError(.forbidden, .accountDisabled, "the key's bot account \(stored.bot) is gone or no longer a bot")
        }
        let touchKey = "key:" + stored.id
        let last = self.touched.withLockedValue { $0[touchKey] } ?? stored.lastUsedAt ?? 0
        if now - last >= 60_000 {
            self.touched.withLockedValue { $0[touchKey] = now }
            try? await self.store.touchAPIKey(id: stored.id, at: now)
        }
        return AuthenticatedUser(name: account.name, expires: .distantFuture, role: .bot, credential: .apiKey(id: stored.id, scopes: stored.scopes))
    }

    private func sessionUser(secret: String, cookie: Bool) async throws(APIError) -> AuthenticatedUser {
        let now = Self.now
        let session: StoredSession?
        let account: Account?
        do {
            session = try await self.store.session(tokenHash: Self.hash(secret), now: now)
            if let session {
                account = try await self.store.account(named: session.user)
            } else {
                account = nil
            }
        } catch {
            throw APIError(.serviceUnavailable, .unavailable, "cannot read sessions now: \(error)")
        }
        guard let session, let account else {
            throw APIError(.unauthorized, .unauthorized, cookie ? "the session ended; sign in again" : "the credential is unknown or was revoked")
        }
        if session.kind == .page, now - session.lastUsedAt > Self.milliseconds(self.configuration.sessionIdleTimeout) {
            throw APIError(.unauthorized, .unauthorized, "the session ended after a long time unused; sign in again")
        }
        if cookie != (session.kind == .page) {
            throw APIError(.unauthorized, .unauthorized, cookie ? "the session ended; sign in again" : "the credential is unknown or was revoked")
        }
        let last = self.touched.withLockedValue { $0[session.id] } ?? session.lastUsedAt
        if now - last >= 60_000 {
            self.touched.withLockedValue { $0[session.id] = now }
            try? await self.store.touchSession(id: session.id, at: now)
        }
        return AuthenticatedUser(
            name: session.user,
            expires: Date(timeIntervalSince1970: Double(session.expiresAt) / 1000),
            role: account.role,
            credential: .session(id: session.id, kind: session.kind, csrf: session.csrf)
        )
    }

    /// The account's status changed (here or, learnt from the account log, on another node).
    func accountChanged(_ account: Account) {
        self.disabled.withLockedValue { set in
            if account.status == .active { set.remove(account.name) } else { set.insert(account.name) }
        }
    }

    /// Forgets what it remembered of sessions that ended.
    func sessionsEnded(_ ids: [String]) {
        self.touched.withLockedValue { touched in for id in ids { touched[id] = nil } }
    }

    // MARK: - Upkeep

    /// Until cancelled: deletes sessions past their end, once an hour (and once at start).
    func runCleanup() async {
        while !Task.isCancelled {
            let now = Self.now
            do {
                let removed = try await self.store.deleteExpiredSessions(
                    now: now,
                    idleBefore: now - Self.milliseconds(self.configuration.sessionIdleTimeout)
                )
                if removed > 0 { self.logger.debug("deleted ended sessions", metadata: ["circle.sessions": "\(removed)"]) }
            } catch {
                self.logger.warning("could not delete ended sessions; next hour", metadata: ["error": "\(error)"])
            }
            try? await Task.sleep(for: .seconds(3600))
        }
    }

    // MARK: - Time

    static var now: Int64 { Int64(Date().timeIntervalSince1970 * 1000) }

    static func milliseconds(_ duration: Duration) -> Int64 {
        duration.components.seconds * 1000 + duration.components.attoseconds / 1_000_000_000_000_000
    }
}
