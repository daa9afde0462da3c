import CircleWire
import Crypto
import Foundation
import HTTPTypes
import Hummingbird

/// Passkeys (WebAuthn): registration (for oneself, at sign-up through an invite, for the first
/// admin) and sign-in, on top of ``WebAuthnRelyingParty``. They need the public URL: its host
/// is the RP ID and its origin the one origin ceremonies may come from.
extension IdentityRoutes {
    /// What a challenge was issued for, kept as JSON in the challenge's `purpose`.
    struct CeremonyPurpose: Codable, Sendable, Hashable {
        /// `add`, `signup`, `setup`, `signin`.
        var kind: String
        /// `signup`: the invite's token hash; `setup`: the setup token (checked again at the end).
        var secret: String?
        var displayName: String?

        var encoded: String { String(decoding: HTTPAPI.encode(self), as: UTF8.self) }
        static func decode(_ text: String) -> CeremonyPurpose? { HTTPAPI.decode(Self.self, from: Array(text.utf8)) }
    }

    /// How long a ceremony's challenge works (also the browser's `timeout`).
    static let ceremonyTimeout = 300_000
    /// Passkeys one account may register.
    static let maximumPasskeys = 20

    func addPasskeys<Context: CircleRequestContext>(public router: some RouterMethods<Context>, authenticated: some RouterMethods<Context>) {
        router.post(RouterPath(HTTPAPI.Path.passkeyRegisterOptions)) { request, context in
            try await self.registrationOptions(request, context: context)
        }
        router.post(RouterPath(HTTPAPI.Path.passkeyRegister)) { request, context in
            try await self.register(request, context: context)
        }
        router.post(RouterPath(HTTPAPI.Path.passkeySignInOptions)) { request, context in
            try self.requireOwnOrigin(request)
            let party = try self.relyingParty()
            let challenge = try await self.issueChallenge(CeremonyPurpose(kind: "signin"), user: nil, context: context)
            return Response.json(
                .ok,
                HTTPAPI.PasskeyCeremony(
                    challengeId: challenge.id,
                    publicKey: HTTPAPI.PasskeyRequestOptions(challenge: Identity.base64URL(challenge.challenge), rpId: party.id, timeout: Self.ceremonyTimeout)
                )
            )
        }
        router.post(RouterPath(HTTPAPI.Path.passkeySignIn)) { request, context in
            try await self.passkeySignIn(request, context: context)
        }
        authenticated.get(RouterPath(HTTPAPI.Path.passkeys)) { _, context in
            let account = try await self.requireAccount(try context.requireUser())
            let passkeys = try await self.store.passkeys(of: account.name)
            return Response.json(.ok, HTTPAPI.PasskeyList(passkeys: passkeys.map { HTTPAPI.PasskeyInfo(id: $0.id, name: $0.name, createdAt: $0.createdAt, lastUsedAt: $0.lastUsedAt) }))
        }
        authenticated.delete(RouterPath(HTTPAPI.Path.Pattern.passkey.template)) { _, context in
            let user = try context.requireUser()
            let id = try context.pathParameter("id")
            guard try await self.store.deletePasskey(id: id, of: user.name) else {
                throw APIError(.notFound, .notFound, "you have no passkey \"\(id.prefix(100))\"")
            }
            return Response(status: .noContent)
        }
    }

    /// The relying party of the public URL; 404 without one.
    func relyingParty() throws -> WebAuthnRelyingParty {
        guard let origin = self.identity.publicOrigin, let host = URL(string: origin)?.host else {
            throw APIError(.notFound, .notFound, "passkeys need the server's public URL (circle serve --public-url)")
        }
        return WebAuthnRelyingParty(id: host, origins: [origin])
    }

    private func issueChallenge(_ purpose: CeremonyPurpose, user: String?, context: some CircleRequestContext) async throws -> StoredChallenge {
        var generator = SystemRandomNumberGenerator()
        let challenge = StoredChallenge(
            id: Identity.randomSecret(bytes: 12),
            purpose: purpose.encoded,
            user: user,
            challenge: (0..<32).map { _ in UInt8.random(in: 0...255, using: &generator) },
            expiresAt: Identity.now + Int64(Self.ceremonyTimeout)
        )
        try await self.identity.startCeremony(challenge, address: context.circleRemoteSocketAddress)
        return challenge
    }

    /// The WebAuthn user handle of an account: opaque (no name in it), stable, 16 bytes.
    static func userHandle(of name: String) -> [UInt8] {
        Array(SHA256.hash(data: Data("circle-user-handle:\(name)".utf8)).prefix(16))
    }

    // MARK: - Registration

    private func registrationOptions(_ request: Request, context: some CircleRequestContext) async throws -> Response {
        try self.requireOwnOrigin(request)
        let party = try self.relyingParty()
        let start = try await Self.body(request, HTTPAPI.PasskeyRegistrationStart.self, send: #"{} signed in, or {"invite": "…", "name": "…"}"#)
        let name: String
        let displayName: String
        let purpose: CeremonyPurpose
        var exclude: [HTTPAPI.PasskeyDescriptor] = []
        if let invite = start.invite ?? start.setup {
            guard let wanted = start.name else { throw APIError(.badRequest, .badRequest, "give the new account's name") }
            try self.checkNewAccount(name: wanted, password: nil, displayName: start.displayName)
            if start.invite != nil {
                _ = try await self.usableInvite(invite)
                purpose = CeremonyPurpose(kind: "signup", secret: Identity.hash(invite), displayName: start.displayName)
            } else {
                guard self.identity.setupPending, try await self.store.accountCount() == 0 else {
                    throw APIError(.notFound, .inviteInvalid, "the setup link is wrong, expired or used")
                }
                purpose = CeremonyPurpose(kind: "setup", secret: invite, displayName: start.displayName)
            }
            guard try await self.store.account(named: wanted) == nil else {
                throw APIError(.conflict, .conflict, "the name \"\(wanted)\" is taken; pick another")
            }
            name = wanted
            displayName = start.displayName ?? wanted
        } else {
            let user = try await self.services.authenticate(request.credentials(address: context.circleRemoteAddress))
            let account = try await self.requireAccount(user)
            let existing = try await self.store.passkeys(of: account.name)
            guard existing.count < Self.maximumPasskeys else {
                throw APIError(.conflict, .conflict, "you have \(existing.count) passkeys, the most there may be; remove one first")
            }
            exclude = existing.map { HTTPAPI.PasskeyDescriptor(id: $0.id) }
            name = account.name
            displayName = account.displayName.isEmpty ? account.name : account.displayName
            purpose = CeremonyPurpose(kind: "add")
        }
        let challenge = try await self.issueChallenge(purpose, user: name, context: context)
        let options = HTTPAPI.PasskeyCreationOptions(
            rpID: party.id,
            rpName: "Circle",
            userID: Identity.base64URL(Self.userHandle(of: name)),
            userName: name,
            displayName: displayName,
            challenge: Identity.base64URL(challenge.challenge),
            timeout: Self.ceremonyTimeout,
            exclude: exclude
        )
        return Response.json(.ok, HTTPAPI.PasskeyCeremony(challengeId: challenge.id, publicKey: options))
    }

    private func register(_ request: Request, context: some CircleRequestContext) async throws -> Response {
        // Finishing a sign-up or setup signs the browser in: from another site, that is login CSRF.
        try self.requireOwnOrigin(request)
        let party = try self.relyingParty()
        let registration = try await Self.body(request, HTTPAPI.PasskeyRegistration.self, send: #"{"challengeId": "…", "credential": {…}}"#)
        let label = (registration.name ?? "").trimmingCharacters(in: .whitespacesAndNewlines)
        guard label.count <= Limits.labelLength, Self.displayNameProblem(label) == nil else {
            throw APIError(.badRequest, .badRequest, "a passkey's name has at most \(Limits.labelLength) characters, no control characters")
        }
        guard registration.challengeId.utf8.count <= 64, let challenge = try await self.store.takeChallenge(id: registration.challengeId, now: Identity.now),
            let purpose = CeremonyPurpose.decode(challenge.purpose), ["add", "signup", "setup"].contains(purpose.kind), let name = challenge.user
        else {
            throw APIError(.badRequest, .badRequest, "the ceremony's challenge is unknown, used or expired; start again")
        }
        guard let clientData = Identity.bytes(base64URL: registration.credential.response.clientDataJSON),
            let attestation = registration.credential.response.attestationObject.flatMap({ Identity.bytes(base64URL: $0, limit: 96 * 1024) })
        else {
            throw APIError(.badRequest, .badRequest, "clientDataJSON and attestationObject are base64url")
        }
        let credential: WebAuthnCredential
        do throws(WebAuthnError) {
            credential = try party.verifyRegistration(clientDataJSON: clientData, attestationObject: attestation, expectedChallenge: challenge.challenge)
        } catch {
            self.services.logger.info("refused a passkey registration", metadata: ["circle.reason": "\(error)"])
            throw APIError(.badRequest, .badRequest, "the passkey was not accepted: \(error.message)")
        }
        let now = Identity.now
        var account: Account
        switch purpose.kind {
        case "add":
            // The same person who started the ceremony finishes it.
            let user = try await self.services.authenticate(request.credentials(address: context.circleRemoteAddress))
            guard user.name == name else { throw APIError(.forbidden, .forbidden, "this ceremony was started by someone else") }
            account = try await self.requireAccount(user)
        case "signup":
            do {
                account = try await self.store.createAccount(
                    Account(name: name, displayName: purpose.displayName ?? "", role: .member, createdAt: now),
                    passwordHash: nil,
                    invite: purpose.secret,
                    now: now
                )
            } catch let error as StoreError where error.code == .conflict {
                throw APIError(.conflict, .conflict, "the name \"\(name)\" is taken; pick another")
            } catch let error as StoreError where error.code == .notFound {
                throw APIError(.notFound, .inviteInvalid, "the invite is unknown, revoked, used up or expired; ask for a new one")
            }
        default:
            guard let token = purpose.secret, self.identity.consumeSetupToken(token) else {
                throw APIError(.notFound, .inviteInvalid, "the setup link is wrong, expired or used")
            }
            do {
                account = try await self.store.createAccount(
                    Account(name: name, displayName: purpose.displayName ?? "", role: .admin, createdAt: now),
                    passwordHash: nil,
                    invite: nil,
                    now: now
                )
            } catch {
                self.identity.restoreSetupToken(token)
                throw error
            }
        }
        let passkey = StoredPasskey(
            id: Identity.base64URL(credential.id),
            user: account.name,
            publicKey: credential.publicKey,
            algorithm: Int(credential.algorithm.rawValue),
            signCount: Int64(credential.signCount),
            name: label.isEmpty ? Self.deviceLabel(userAgent: request.headers[.userAgent]) : label,
            createdAt: now
        )
        do {
            try await self.store.addPasskey(passkey)
        } catch let error as StoreError where error.code == .conflict {
            throw APIError(.conflict, .conflict, "this passkey is registered already")
        }
        if purpose.kind == "add" {
            return Response.json(.created, HTTPAPI.PasskeyInfo(id: passkey.id, name: passkey.name, createdAt: passkey.createdAt, lastUsedAt: nil))
        }
        account = try await self.store.account(named: account.name) ?? account
        return try await self.signedIn(account, request: request, context: context, status: .created)
    }

    // MARK: - Sign-in

    private func passkeySignIn(_ request: Request, context: some CircleRequestContext) async throws -> Response {
        try self.requireOwnOrigin(request)
        let party = try self.relyingParty()
        let signIn = try await Self.body(request, HTTPAPI.PasskeySignIn.self, send: #"{"challengeId": "…", "credential": {…}}"#)
        guard signIn.challengeId.utf8.count <= 64, let challenge = try await self.store.takeChallenge(id: signIn.challengeId, now: Identity.now),
            CeremonyPurpose.decode(challenge.purpose)?.kind == "signin"
        else {
            throw APIError(.badRequest, .badRequest, "the ceremony's challenge is unknown, used or expired; start again")
        }
        let response = signIn.credential.response
        guard let clientData = Identity.bytes(base64URL: response.clientDataJSON),
            let authenticatorData = response.authenticatorData.flatMap({ Identity.bytes(base64URL: $0) }),
            let signature = response.signature.flatMap({ Identity.bytes(base64URL: $0) })
        else {
            throw APIError(.badRequest, .badRequest, "clientDataJSON, authenticatorData and signature are base64url")
        }
        let refused = APIError(.unauthorized, .unauthorized, "this passkey is not registered here")
        guard signIn.credential.id.utf8.count <= 1400, let passkey = try await self.store.passkey(id: signIn.credential.id) else { throw refused }
        if let handle = response.userHandle, !handle.isEmpty, Identity.bytes(base64URL: handle) != Self.userHandle(of: passkey.user) {
            throw refused
        }
        let count: UInt32
        do throws(WebAuthnError) {
            count = try party.verifyAssertion(
                credential: WebAuthnStoredCredential(publicKey: passkey.publicKey, signCount: UInt32(clamping: passkey.signCount)),
                clientDataJSON: clientData,
                authenticatorData: authenticatorData,
                signature: signature,
                expectedChallenge: challenge.challenge
            )
        } catch {
            self.services.logger.info("refused a passkey sign-in", metadata: ["circle.reason": "\(error)", "circle.user": "\(passkey.user)"])
            throw APIError(.unauthorized, .unauthorized, "the passkey's answer was not accepted: \(error.message)")
        }
        try await self.store.usePasskey(id: passkey.id, signCount: Int64(count), at: Identity.now)
        guard let account = try await self.store.account(named: passkey.user) else { throw refused }
        guard account.status == .active else {
            throw APIError(.forbidden, .accountDisabled, "this account is \(account.status.rawValue)")
        }
        if let device = signIn.device {
            let label = device.trimmingCharacters(in: .whitespacesAndNewlines)
            guard !label.isEmpty, label.count <= Limits.labelLength else {
                throw APIError(.badRequest, .badRequest, "device names have 1–\(Limits.labelLength) characters")
            }
            let (secret, session) = try await self.identity.createSession(for: account.name, kind: .device, label: label, address: context.circleRemoteAddress)
            return Response.json(.ok, HTTPAPI.Credential(token: secret, user: account.name, session: Self.info(session, current: nil)))
        }
        return try await self.signedIn(account, request: request, context: context, status: .ok)
    }
}
