/// What a person may do on the server.
public enum AccountRole: String, Sendable, Hashable, Codable, CaseIterable {
    /// Manages people, invites and every circle.
    case admin
    /// Chats.
    case member
    /// An app's automated user: chats through credentials of its own, never signs in on the page.
    case bot
}

/// Whether an account may sign in.
public enum AccountStatus: String, Sendable, Hashable, Codable, CaseIterable {
    case active
    /// Switched off by an admin (or the person): no sign-in, no connection; can be reactivated.
    case deactivated
    /// Shut out by an admin: no sign-in, no connection, no token of the app's backend either.
    case banned
}

/// A person's account (docs/API.md, "Sign-in and identity"). Tokens minted by an app's backend
/// work without one; the features that need an account are listed there.
public struct Account: Sendable, Hashable {
    /// The user name: ``TokenAuthority/isValidUserName(_:)``.
    public var name: String
    /// What the page and `circle chat` show; the user name when empty.
    public var displayName: String
    /// The media id of the profile photo.
    public var avatar: String?
    public var role: AccountRole
    public var status: AccountStatus
    /// Milliseconds since 1970.
    public var createdAt: Int64
    /// The last sign-in or session use (at most a minute old), milliseconds since 1970.
    public var lastSeenAt: Int64?

    public init(
        name: String,
        displayName: String = "",
        avatar: String? = nil,
        role: AccountRole = .member,
        status: AccountStatus = .active,
        createdAt: Int64,
        lastSeenAt: Int64? = nil
    ) {
        self.name = name
        self.displayName = displayName
        self.avatar = avatar
        self.role = role
        self.status = status
        self.createdAt = createdAt
        self.lastSeenAt = lastSeenAt
    }
}

/// Fields of an account to change (`nil`: keep).
public struct AccountChange: Sendable, Hashable {
    public var displayName: String?
    /// `.some(nil)` removes the photo.
    public var avatar: String??
    public var role: AccountRole?
    public var status: AccountStatus?

    public init(displayName: String? = nil, avatar: String?? = nil, role: AccountRole? = nil, status: AccountStatus? = nil) {
        self.displayName = displayName
        self.avatar = avatar
        self.role = role
        self.status = status
    }
}

/// How a stored credential was issued.
public enum SessionKind: String, Sendable, Hashable, Codable, CaseIterable {
    /// A sign-in on the page: a cookie.
    case page
    /// `circle login` on one device: a bearer credential in the user's config directory.
    case device
    /// A personal access token made on the page for scripts.
    case personal
}

/// A signed-in session, a device credential or a personal access token. The secret itself is
/// never stored: ``tokenHash`` is its SHA-256.
public struct StoredSession: Sendable, Hashable {
    /// The public id (lists, "sign out this one").
    public var id: String
    /// Lower-case hex SHA-256 of the secret the client holds.
    public var tokenHash: String
    public var user: String
    public var kind: SessionKind
    /// The device (from its User-Agent) or the token's name.
    public var label: String
    /// The address it signed in from.
    public var address: String
    /// The anti-CSRF token the page sends back in `X-Circle-CSRF` (empty for bearer credentials).
    public var csrf: String
    /// Milliseconds since 1970.
    public var createdAt: Int64
    public var lastUsedAt: Int64
    /// The absolute end, whatever its use.
    public var expiresAt: Int64

    public init(
        id: String,
        tokenHash: String,
        user: String,
        kind: SessionKind,
        label: String,
        address: String,
        csrf: String,
        createdAt: Int64,
        lastUsedAt: Int64,
        expiresAt: Int64
    ) {
        self.id = id
        self.tokenHash = tokenHash
        self.user = user
        self.kind = kind
        self.label = label
        self.address = address
        self.csrf = csrf
        self.createdAt = createdAt
        self.lastUsedAt = lastUsedAt
        self.expiresAt = expiresAt
    }
}

/// An invite link: who made it, until when and how often it works, which circles it joins.
public struct Invite: Sendable, Hashable {
    /// The public id (lists, revocation).
    public var id: String
    /// Lower-case hex SHA-256 of the link's secret.
    public var tokenHash: String
    public var createdBy: String
    public var createdAt: Int64
    public var expiresAt: Int64
    public var maxUses: Int
    public var uses: Int
    /// Circles the new account joins.
    public var circles: [String]
    public var revoked: Bool

    public init(
        id: String,
        tokenHash: String,
        createdBy: String,
        createdAt: Int64,
        expiresAt: Int64,
        maxUses: Int,
        uses: Int = 0,
        circles: [String] = [],
        revoked: Bool = false
    ) {
        self.id = id
        self.tokenHash = tokenHash
        self.createdBy = createdBy
        self.createdAt = createdAt
        self.expiresAt = expiresAt
        self.maxUses = maxUses
        self.uses = uses
        self.circles = circles
        self.revoked = revoked
    }

    /// The circles as stored: names separated by spaces (a circle name has none).
    var storedCircles: String { self.circles.joined(separator: " ") }
    static func circles(stored text: String) -> [String] { text.split(separator: " ").map(String.init) }

    /// Whether it still signs someone up at `now`.
    public func isUsable(at now: Int64) -> Bool {
        !self.revoked && self.uses < self.maxUses && now < self.expiresAt
    }
}

/// A registered passkey (WebAuthn credential).
public struct StoredPasskey: Sendable, Hashable {
    /// The credential id, base64url without padding.
    public var id: String
    public var user: String
    /// The COSE public key as the authenticator sent it.
    public var publicKey: [UInt8]
    /// The COSE algorithm (-7 ES256, -257 RS256).
    public var algorithm: Int
    public var signCount: Int64
    public var name: String
    public var createdAt: Int64
    public var lastUsedAt: Int64?

    public init(id: String, user: String, publicKey: [UInt8], algorithm: Int, signCount: Int64, name: String, createdAt: Int64, lastUsedAt: Int64? = nil) {
        self.id = id
        self.user = user
        self.publicKey = publicKey
        self.algorithm = algorithm
        self.signCount = signCount
        self.name = name
        self.createdAt = createdAt
        self.lastUsedAt = lastUsedAt
    }
}

/// A challenge handed out for one WebAuthn ceremony or one device sign-in; used once.
public struct StoredChallenge: Sendable, Hashable {
    public var id: String
    /// `passkey-register`, `passkey-signin`, `device`.
    public var purpose: String
    /// The account it is for, when known.
    public var user: String?
    public var challenge: [UInt8]
    public var expiresAt: Int64

    public init(id: String, purpose: String, user: String?, challenge: [UInt8], expiresAt: Int64) {
        self.id = id
        self.purpose = purpose
        self.user = user
        self.challenge = challenge
        self.expiresAt = expiresAt
    }
}

/// Failed sign-ins counted under one key (`user:NAME` or `address:IP`).
public struct SignInFailures: Sendable, Hashable {
    public var count: Int
    /// The last failure, milliseconds since 1970.
    public var last: Int64

    public init(count: Int, last: Int64) {
        self.count = count
        self.last = last
    }
}

/// Accounts, sessions, invites, passkeys and sign-in throttling: the identity half of a store.
/// Both stores implement it with one schema step each (StoreContractTests run it on both).
public protocol IdentityStore: Sendable {
    /// How many accounts exist (0: the server is waiting for its first admin).
    func accountCount() async throws -> Int
    func account(named name: String) async throws -> Account?
    /// Every account, by name.
    func accounts() async throws -> [Account]
    /// Creates `account` with its password hash. With `invite` (a token hash), atomically takes
    /// one use of that invite and adds the account to the invite's circles that still exist:
    /// `StoreError(.notFound)` when the invite is unknown, revoked, used up or expired at `now`.
    /// `StoreError(.conflict)` when the name is taken.
    func createAccount(_ account: Account, passwordHash: String?, invite: String?, now: Int64) async throws -> Account
    /// Changes an account; a status other than `active` also ends its sessions and, through
    /// ``SharedCircleStore/accountEvents(after:)``, its connections on every node.
    /// `StoreError(.notFound)` when there is none.
    func updateAccount(_ name: String, _ change: AccountChange) async throws -> Account
    func passwordHash(of name: String) async throws -> String?
    func setPasswordHash(_ hash: String?, of name: String) async throws
    func touchAccount(_ name: String, at time: Int64) async throws

    func createSession(_ session: StoredSession) async throws
    /// The session whose secret hashes to `tokenHash`, if it has not reached its absolute end.
    func session(tokenHash: String, now: Int64) async throws -> StoredSession?
    func touchSession(id: String, at time: Int64) async throws
    func sessions(of user: String) async throws -> [StoredSession]
    /// Deletes the user's sessions (one by `id`, or all of `kind`, or all); logs the end for the
    /// other nodes; returns the ids deleted.
    @discardableResult
    func deleteSessions(of user: String, id: String?, kind: SessionKind?) async throws -> [String]
    /// Deletes sessions past their absolute end or idle for longer than `idleBefore`.
    func deleteExpiredSessions(now: Int64, idleBefore: Int64) async throws -> Int

    func createInvite(_ invite: Invite) async throws
    func invites() async throws -> [Invite]
    func invite(tokenHash: String) async throws -> Invite?
    /// `false` when there is no such invite.
    func revokeInvite(id: String) async throws -> Bool

    func signInFailures(keys: [String]) async throws -> [String: SignInFailures]
    func recordSignInFailure(keys: [String], at time: Int64) async throws
    func clearSignInFailures(keys: [String]) async throws

    /// `StoreError(.conflict)` when the credential id is registered already.
    func addPasskey(_ passkey: StoredPasskey) async throws
    func passkeys(of user: String) async throws -> [StoredPasskey]
    func passkey(id: String) async throws -> StoredPasskey?
    func usePasskey(id: String, signCount: Int64, at time: Int64) async throws
    func deletePasskey(id: String, of user: String) async throws -> Bool

    /// Stores a challenge unless `outstandingLimit` challenges that have not expired at `now`
    /// are stored already (then `false`); expired ones are deleted first.
    func createChallenge(_ challenge: StoredChallenge, now: Int64, outstandingLimit: Int) async throws -> Bool
    /// Removes and returns the challenge (once), if it has not expired at `now`.
    func takeChallenge(id: String, now: Int64) async throws -> StoredChallenge?
    /// The challenge, left in place, if it has not expired at `now`.
    func challenge(id: String, now: Int64) async throws -> StoredChallenge?
    /// Sets the user of a challenge that has none yet and has not expired (a device sign-in
    /// approved by `user`); `false` when there is no such challenge.
    func approveChallenge(id: String, user: String, now: Int64) async throws -> Bool
}

/// One "end these connections" entry of the account log (a ban, a deactivation, a sign-out).
public struct AccountEvent: Sendable, Hashable {
    public var user: String
    /// The session whose connections end; `nil`: all of the user's.
    public var session: String?

    public init(user: String, session: String?) {
        self.user = user
        self.session = session
    }
}
