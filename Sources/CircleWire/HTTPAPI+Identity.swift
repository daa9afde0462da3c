/// The JSON shapes of sign-in and identity (docs/API.md, "Sign-in and identity").
extension HTTPAPI.Path {
    public static let authState = "/v1/auth/state"
    public static let authSetup = "/v1/auth/setup"
    public static let authInvite = "/v1/auth/invite"
    public static let authSignUp = "/v1/auth/signup"
    public static let authSignIn = "/v1/auth/signin"
    public static let authSignOut = "/v1/auth/signout"
    public static let authSignOutEverywhere = "/v1/auth/signout-everywhere"
    public static let authSessions = "/v1/auth/sessions"
    public static let authTokens = "/v1/auth/tokens"
    public static let authPassword = "/v1/auth/password"
    public static let profile = "/v1/profile"
    public static let users = "/v1/users"
    public static let adminUsers = "/v1/admin/users"
    public static let adminInvites = "/v1/admin/invites"
    public static let adminBots = "/v1/admin/bots"
    public static let deviceStart = "/v1/auth/device"
    public static let deviceApprove = "/v1/auth/device/approve"
    public static let deviceToken = "/v1/auth/device/token"

    public static func authSession(_ id: String) -> String { Pattern.authSession.path(id) }
    public static func adminUser(_ name: String) -> String { Pattern.adminUser.path(name) }
    public static func adminInvite(_ id: String) -> String { Pattern.adminInvite.path(id) }
}

extension HTTPAPI {
    /// A person as others see them.
    public struct Profile: Codable, Sendable, Hashable {
        public var name: String
        /// Empty when they set none.
        public var displayName: String
        /// A media id (`GET /v1/media/{id}`), if they have a photo.
        public var avatar: String?
        /// `admin`, `member` or `bot`.
        public var role: String
        public init(name: String, displayName: String, avatar: String?, role: String) {
            self.name = name
            self.displayName = displayName
            self.avatar = avatar
            self.role = role
        }
    }

    /// `GET /v1/auth/state`: who the request's credentials name, and what the page should offer.
    public struct AuthState: Codable, Sendable, Hashable {
        /// `nil` when the request has no valid credentials.
        public var user: Profile?
        /// `true` while the server has no account: the setup link printed by `circle serve`
        /// creates the first admin.
        public var setupRequired: Bool
        /// With a session cookie: the value to send in `X-Circle-CSRF` on requests that change
        /// something.
        public var csrf: String?
        /// The id of the session the request came with.
        public var session: String?
        /// How one signs in here: `password`, and `passkey` where the server knows its public URL.
        public var methods: [String]
        public init(user: Profile?, setupRequired: Bool, csrf: String?, session: String?, methods: [String]) {
            self.user = user
            self.setupRequired = setupRequired
            self.csrf = csrf
            self.session = session
            self.methods = methods
        }
    }

    /// `POST /v1/auth/setup`: the first admin, with the setup link's token.
    public struct Setup: Codable, Sendable, Hashable {
        public var token: String
        public var name: String
        public var password: String
        public var displayName: String?
        public init(token: String, name: String, password: String, displayName: String? = nil) {
            self.token = token
            self.name = name
            self.password = password
            self.displayName = displayName
        }
    }

    /// `POST /v1/auth/invite`: what an invite link offers, before signing up with it.
    public struct InviteCheck: Codable, Sendable, Hashable {
        public var invite: String
        public init(invite: String) { self.invite = invite }
    }

    /// The answer to ``InviteCheck``.
    public struct InviteOffer: Codable, Sendable, Hashable {
        public var circles: [String]
        /// Milliseconds since 1970.
        public var expiresAt: Int64
        public init(circles: [String], expiresAt: Int64) {
            self.circles = circles
            self.expiresAt = expiresAt
        }
    }

    /// `POST /v1/auth/signup`: a new account through an invite.
    public struct SignUp: Codable, Sendable, Hashable {
        public var invite: String
        public var name: String
        public var password: String
        public var displayName: String?
        public init(invite: String, name: String, password: String, displayName: String? = nil) {
            self.invite = invite
            self.name = name
            self.password = password
            self.displayName = displayName
        }
    }

    /// `POST /v1/auth/signin` with a password. Without `device`, the answer sets a session
    /// cookie (the page); with it, the answer carries a bearer credential for that device
    /// (`circle login`), which the cookie never is.
    public struct SignIn: Codable, Sendable, Hashable {
        public var name: String
        public var password: String
        /// A name for the device (`circle login` sends the host name).
        public var device: String?
        public init(name: String, password: String, device: String? = nil) {
            self.name = name
            self.password = password
            self.device = device
        }
    }

    /// A bearer credential, shown once: a device's (``SignIn/device``) or a personal access token.
    public struct Credential: Codable, Sendable, Hashable {
        /// `Authorization: Bearer <token>`.
        public var token: String
        public var user: String
        public var session: SessionInfo
        public init(token: String, user: String, session: SessionInfo) {
            self.token = token
            self.user = user
            self.session = session
        }
    }

    /// One signed-in session, device or personal access token.
    public struct SessionInfo: Codable, Sendable, Hashable {
        public var id: String
        /// `page`, `device` or `personal`.
        public var kind: String
        /// The browser and system (from its User-Agent), the device's or the token's name.
        public var label: String
        public var address: String
        public var createdAt: Int64
        public var lastUsedAt: Int64
        public var expiresAt: Int64
        /// The session this request came with.
        public var current: Bool
        public init(id: String, kind: String, label: String, address: String, createdAt: Int64, lastUsedAt: Int64, expiresAt: Int64, current: Bool) {
            self.id = id
            self.kind = kind
            self.label = label
            self.address = address
            self.createdAt = createdAt
            self.lastUsedAt = lastUsedAt
            self.expiresAt = expiresAt
            self.current = current
        }
    }

    /// `GET /v1/auth/sessions`, newest use first.
    public struct SessionList: Codable, Sendable, Hashable {
        public var sessions: [SessionInfo]
        public init(sessions: [SessionInfo]) { self.sessions = sessions }
    }

    /// `POST /v1/auth/tokens`: a personal access token for scripts.
    public struct CreateToken: Codable, Sendable, Hashable {
        public var name: String
        /// 1–365; 90 when absent.
        public var days: Int?
        public init(name: String, days: Int? = nil) {
            self.name = name
            self.days = days
        }
    }

    /// `POST /v1/auth/password`: a new password (`current` is required when one is set).
    public struct ChangePassword: Codable, Sendable, Hashable {
        public var current: String?
        public var new: String
        public init(current: String?, new: String) {
            self.current = current
            self.new = new
        }
    }

    /// `PATCH /v1/profile`.
    public struct UpdateProfile: Codable, Sendable, Hashable {
        public var displayName: String?
        /// A media id the user uploaded; `""` removes the photo.
        public var avatar: String?
        public init(displayName: String? = nil, avatar: String? = nil) {
            self.displayName = displayName
            self.avatar = avatar
        }
    }

    /// `GET /v1/users`: the people with accounts (active ones), for choosing members by name.
    public struct ProfileList: Codable, Sendable, Hashable {
        public var users: [Profile]
        public init(users: [Profile]) { self.users = users }
    }

    /// An account as admins see it.
    public struct UserInfo: Codable, Sendable, Hashable {
        public var name: String
        public var displayName: String
        public var avatar: String?
        public var role: String
        /// `active`, `deactivated` or `banned`.
        public var status: String
        public var createdAt: Int64
        public var lastSeenAt: Int64?
        public init(name: String, displayName: String, avatar: String?, role: String, status: String, createdAt: Int64, lastSeenAt: Int64?) {
            self.name = name
            self.displayName = displayName
            self.avatar = avatar
            self.role = role
            self.status = status
            self.createdAt = createdAt
            self.lastSeenAt = lastSeenAt
        }
    }

    /// `GET /v1/admin/users`.
    public struct UserList: Codable, Sendable, Hashable {
        public var users: [UserInfo]
        public init(users: [UserInfo]) { self.users = users }
    }

    /// `PATCH /v1/admin/users/{name}`.
    public struct UpdateUser: Codable, Sendable, Hashable {
        public var role: String?
        public var status: String?
        public init(role: String? = nil, status: String? = nil) {
            self.role = role
            self.status = status
        }
    }

    /// `POST /v1/auth/device`: a terminal asks to be signed in by someone signed in on a page.
    public struct DeviceStart: Codable, Sendable, Hashable {
        /// What the sessions list will call the device.
        public var device: String
        public init(device: String) { self.device = device }
    }

    /// The answer to ``DeviceStart``: show `code` (and `url`) to the person; poll with
    /// `code` and `pollToken` every `interval` seconds until `expiresAt`.
    public struct DeviceCode: Codable, Sendable, Hashable {
        /// Eight letters and digits in two groups (`WDJB-MJHT`), typed or confirmed on the page.
        public var code: String
        public var pollToken: String
        /// The page, with the code in its fragment.
        public var url: String
        public var expiresAt: Int64
        public var interval: Int
        public init(code: String, pollToken: String, url: String, expiresAt: Int64, interval: Int) {
            self.code = code
            self.pollToken = pollToken
            self.url = url
            self.expiresAt = expiresAt
            self.interval = interval
        }
    }

    /// `POST /v1/auth/device/approve` (signed in): approves the device showing `code`.
    public struct DeviceApproval: Codable, Sendable, Hashable {
        public var code: String
        public init(code: String) { self.code = code }
    }

    /// `POST /v1/auth/device/token`: 202 while not approved, 200 with a ``Credential`` once.
    public struct DevicePoll: Codable, Sendable, Hashable {
        public var code: String
        public var pollToken: String
        public init(code: String, pollToken: String) {
            self.code = code
            self.pollToken = pollToken
        }
    }

    /// `POST /v1/admin/bots`: a bot account and its first credential (a personal access token
    /// of the bot, shown once).
    public struct CreateBot: Codable, Sendable, Hashable {
        public var name: String
        public var displayName: String?
        /// 1–365; 365 when absent.
        public var days: Int?
        public init(name: String, displayName: String? = nil, days: Int? = nil) {
            self.name = name
            self.displayName = displayName
            self.days = days
        }
    }

    /// `POST /v1/admin/invites`.
    public struct CreateInvite: Codable, Sendable, Hashable {
        /// 1–720 (30 days); 168 (a week) when absent.
        public var hours: Int?
        /// 1–1000; 1 when absent.
        public var uses: Int?
        /// Circles the new accounts join (existing ones; at most 20).
        public var circles: [String]?
        public init(hours: Int? = nil, uses: Int? = nil, circles: [String]? = nil) {
            self.hours = hours
            self.uses = uses
            self.circles = circles
        }
    }

    /// An invite as admins see it; `url` and `token` only in the answer that created it.
    public struct InviteInfo: Codable, Sendable, Hashable {
        public var id: String
        public var createdBy: String
        public var createdAt: Int64
        public var expiresAt: Int64
        public var maxUses: Int
        public var uses: Int
        public var circles: [String]
        public var revoked: Bool
        public var token: String?
        public var url: String?
        public init(
            id: String,
            createdBy: String,
            createdAt: Int64,
            expiresAt: Int64,
            maxUses: Int,
            uses: Int,
            circles: [String],
            revoked: Bool,
            token: String? = nil,
            url: String? = nil
        ) {
            self.id = id
            self.createdBy = createdBy
            self.createdAt = createdAt
            self.expiresAt = expiresAt
            self.maxUses = maxUses
            self.uses = uses
            self.circles = circles
            self.revoked = revoked
            self.token = token
            self.url = url
        }
    }

    /// `GET /v1/admin/invites`, newest first.
    public struct InviteList: Codable, Sendable, Hashable {
        public var invites: [InviteInfo]
        public init(invites: [InviteInfo]) { self.invites = invites }
    }
}

// MARK: - Passkeys

extension HTTPAPI.Path {
    public static let passkeys = "/v1/auth/passkeys"
    public static let passkeyRegisterOptions = "/v1/auth/passkeys/register/options"
    public static let passkeyRegister = "/v1/auth/passkeys/register"
    public static let passkeySignInOptions = "/v1/auth/passkeys/signin/options"
    public static let passkeySignIn = "/v1/auth/passkeys/signin"

    public static func passkey(_ id: String) -> String { Pattern.passkey.path(id) }
}

extension HTTPAPI {
    /// `POST /v1/auth/passkeys/register/options`: signed in, nothing (a passkey for oneself);
    /// signing up, `invite` and `name`; creating the first admin, `setup` and `name`.
    public struct PasskeyRegistrationStart: Codable, Sendable, Hashable {
        public var invite: String?
        public var setup: String?
        public var name: String?
        public var displayName: String?
        public init(invite: String? = nil, setup: String? = nil, name: String? = nil, displayName: String? = nil) {
            self.invite = invite
            self.setup = setup
            self.name = name
            self.displayName = displayName
        }
    }

    /// A credential descriptor (`excludeCredentials`, `allowCredentials`).
    public struct PasskeyDescriptor: Codable, Sendable, Hashable {
        public var type: String
        /// The credential id, base64url.
        public var id: String
        public init(id: String) {
            self.type = "public-key"
            self.id = id
        }
    }

    /// `PublicKeyCredentialCreationOptions` in the JSON form of WebAuthn L3 (binary fields are
    /// base64url): pass it to `PublicKeyCredential.parseCreationOptionsFromJSON`.
    public struct PasskeyCreationOptions: Codable, Sendable, Hashable {
        public struct Party: Codable, Sendable, Hashable {
            public var id: String
            public var name: String
        }
        public struct User: Codable, Sendable, Hashable {
            public var id: String
            public var name: String
            public var displayName: String
        }
        public struct Parameter: Codable, Sendable, Hashable {
            public var type: String
            public var alg: Int
        }
        public struct Selection: Codable, Sendable, Hashable {
            public var residentKey: String
            public var requireResidentKey: Bool
            public var userVerification: String
        }
        public var rp: Party
        public var user: User
        public var challenge: String
        public var pubKeyCredParams: [Parameter]
        public var timeout: Int
        public var attestation: String
        public var authenticatorSelection: Selection
        public var excludeCredentials: [PasskeyDescriptor]

        public init(rpID: String, rpName: String, userID: String, userName: String, displayName: String, challenge: String, timeout: Int, exclude: [PasskeyDescriptor]) {
            self.rp = Party(id: rpID, name: rpName)
            self.user = User(id: userID, name: userName, displayName: displayName)
            self.challenge = challenge
            // ES256 first (every authenticator has it), RS256 for Windows Hello's older keys.
            self.pubKeyCredParams = [Parameter(type: "public-key", alg: -7), Parameter(type: "public-key", alg: -257)]
            self.timeout = timeout
            self.attestation = "none"
            self.authenticatorSelection = Selection(residentKey: "required", requireResidentKey: true, userVerification: "required")
            self.excludeCredentials = exclude
        }
    }

    /// `PublicKeyCredentialRequestOptions` in WebAuthn L3's JSON form.
    public struct PasskeyRequestOptions: Codable, Sendable, Hashable {
        public var challenge: String
        public var rpId: String
        public var timeout: Int
        public var userVerification: String
        public var allowCredentials: [PasskeyDescriptor]
        public init(challenge: String, rpId: String, timeout: Int) {
            self.challenge = challenge
            self.rpId = rpId
            self.timeout = timeout
            self.userVerification = "required"
            self.allowCredentials = []
        }
    }

    /// The options of one ceremony and the id of its challenge (send it back with the result).
    public struct PasskeyCeremony<Options: Codable & Sendable & Hashable>: Codable, Sendable, Hashable {
        public var challengeId: String
        public var publicKey: Options
        public init(challengeId: String, publicKey: Options) {
            self.challengeId = challengeId
            self.publicKey = publicKey
        }
    }

    /// A `PublicKeyCredential` as its `toJSON()` gives it (binary fields base64url).
    public struct PasskeyCredential: Codable, Sendable, Hashable {
        public struct Response: Codable, Sendable, Hashable {
            public var clientDataJSON: String
            /// Registration.
            public var attestationObject: String?
            /// Sign-in.
            public var authenticatorData: String?
            public var signature: String?
            public var userHandle: String?
            public init(clientDataJSON: String, attestationObject: String? = nil, authenticatorData: String? = nil, signature: String? = nil, userHandle: String? = nil) {
                self.clientDataJSON = clientDataJSON
                self.attestationObject = attestationObject
                self.authenticatorData = authenticatorData
                self.signature = signature
                self.userHandle = userHandle
            }
        }
        public var id: String
        public var type: String?
        public var response: Response
        public init(id: String, type: String? = "public-key", response: Response) {
            self.id = id
            self.type = type
            self.response = response
        }
    }

    /// `POST /v1/auth/passkeys/register`.
    public struct PasskeyRegistration: Codable, Sendable, Hashable {
        public var challengeId: String
        /// What to call the passkey ("laptop"); the browser's name when absent.
        public var name: String?
        public var credential: PasskeyCredential
        public init(challengeId: String, name: String? = nil, credential: PasskeyCredential) {
            self.challengeId = challengeId
            self.name = name
            self.credential = credential
        }
    }

    /// `POST /v1/auth/passkeys/signin`; with `device`, a device credential instead of a cookie.
    public struct PasskeySignIn: Codable, Sendable, Hashable {
        public var challengeId: String
        public var credential: PasskeyCredential
        public var device: String?
        public init(challengeId: String, credential: PasskeyCredential, device: String? = nil) {
            self.challengeId = challengeId
            self.credential = credential
            self.device = device
        }
    }

    /// A registered passkey.
    public struct PasskeyInfo: Codable, Sendable, Hashable {
        public var id: String
        public var name: String
        public var createdAt: Int64
        public var lastUsedAt: Int64?
        public init(id: String, name: String, createdAt: Int64, lastUsedAt: Int64?) {
            self.id = id
            self.name = name
            self.createdAt = createdAt
            self.lastUsedAt = lastUsedAt
        }
    }

    /// `GET /v1/auth/passkeys`.
    public struct PasskeyList: Codable, Sendable, Hashable {
        public var passkeys: [PasskeyInfo]
        public init(passkeys: [PasskeyInfo]) { self.passkeys = passkeys }
    }
}
