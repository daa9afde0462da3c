import CircleWire
import Crypto
import Foundation
import HTTPTypes
import Hummingbird

/// Signing a terminal in from a page (a device-authorization flow, as RFC 8628 describes for
/// OAuth): `circle login --code` asks for a code, the person approves it on a page where they
/// are signed in (with a passkey, say), and the terminal's poll then gets a device credential.
extension IdentityRoutes {
    /// How long a code works.
    static let deviceCodeLifetime: Int64 = 600_000
    /// Seconds between polls.
    static let devicePollInterval = 2
    /// Letters and digits that cannot be mistaken for one another or spell words: no vowels,
    /// no 0/O, 1/I/L.
    static let deviceCodeAlphabet = Array("BCDFGHJKMNPQRSTVWXZ23456789")

    func addDeviceFlow<Context: CircleRequestContext>(public router: some RouterMethods<Context>, authenticated: some RouterMethods<Context>) {
        router.post(RouterPath(HTTPAPI.Path.deviceStart)) { request, context in
            let start = try await Self.body(request, HTTPAPI.DeviceStart.self, send: #"{"device": "build box"}"#)
            let label = start.device.trimmingCharacters(in: .whitespacesAndNewlines)
            guard !label.isEmpty, label.count <= Limits.labelLength, Self.displayNameProblem(label) == nil else {
                throw APIError(.badRequest, .badRequest, "device names have 1–\(Limits.labelLength) characters, no control characters")
            }
            var generator = SystemRandomNumberGenerator()
            let letters = (0..<8).map { _ in Self.deviceCodeAlphabet[Int.random(in: 0..<Self.deviceCodeAlphabet.count, using: &generator)] }
            let code = String(letters[0..<4]) + "-" + String(letters[4..<8])
            let pollToken = Identity.randomSecret(bytes: 24)
            let expires = Identity.now + Self.deviceCodeLifetime
            try await self.identity.startCeremony(
                StoredChallenge(
                    id: Self.deviceChallengeID(code),
                    purpose: CeremonyPurpose(kind: "device", displayName: label).encoded,
                    user: nil,
                    challenge: Array(SHA256.hash(data: Data(pollToken.utf8))),
                    expiresAt: expires
                ),
                address: context.circleRemoteSocketAddress
            )
            return Response.json(
                .created,
                HTTPAPI.DeviceCode(code: code, pollToken: pollToken, url: "\(self.pageURL(of: request))#device=\(code)", expiresAt: expires, interval: Self.devicePollInterval)
            )
        }
        router.post(RouterPath(HTTPAPI.Path.deviceToken)) { request, context in
            let poll = try await Self.body(request, HTTPAPI.DevicePoll.self, send: #"{"code": "WDJB-MJHT", "pollToken": "…"}"#)
            let expired = APIError(.notFound, .inviteInvalid, "the code is unknown or expired; start again")
            guard poll.code.utf8.count <= 20, poll.pollToken.utf8.count <= 64,
                let challenge = try await self.store.challenge(id: Self.deviceChallengeID(poll.code), now: Identity.now),
                CeremonyPurpose.decode(challenge.purpose)?.kind == "device",
                WebAuthnRelyingParty.constantTimeEqual(challenge.challenge, Array(SHA256.hash(data: Data(poll.pollToken.utf8))))
            else { throw expired }
            guard let user = challenge.user else {
                return Response.json(.accepted, ["status": "pending"])
            }
            // Taken once: a second poll with the same code finds nothing.
            guard try await self.store.takeChallenge(id: challenge.id, now: Identity.now) != nil,
                let account = try await self.store.account(named: user), account.status == .active
            else { throw expired }
            let label = CeremonyPurpose.decode(challenge.purpose)?.displayName ?? "device"
            let (secret, session) = try await self.identity.createSession(for: account.name, kind: .device, label: label, address: context.circleRemoteAddress)
            return Response.json(.ok, HTTPAPI.Credential(token: secret, user: account.name, session: Self.info(session, current: nil)))
        }
        authenticated.post(RouterPath(HTTPAPI.Path.deviceApprove)) { request, context in
            let account = try await self.requireAccount(try context.requireUser())
            let approval = try await Self.body(request, HTTPAPI.DeviceApproval.self, send: #"{"code": "WDJB-MJHT"}"#)
            // Guessing codes is throttled like guessing passwords.
            let key = ["approve:" + account.name]
            if let wait = self.identity.configuration.accountThrottle.wait(after: try await self.store.signInFailures(keys: key)[key[0]], now: Identity.now) {
                let seconds = max(1, Int(wait.components.seconds))
                throw APIError(.tooManyRequests, .rateLimited, "too many wrong codes; try again in \(seconds) s", headers: [.retryAfter: "\(seconds)"])
            }
            guard approval.code.utf8.count <= 20,
                let challenge = try await self.store.challenge(id: Self.deviceChallengeID(approval.code), now: Identity.now),
                CeremonyPurpose.decode(challenge.purpose)?.kind == "device",
                try await self.store.approveChallenge(id: challenge.id, user: account.name, now: Identity.now)
            else {
                try await self.store.recordSignInFailure(keys: key, at: Identity.now)
                throw APIError(.notFound, .inviteInvalid, "no device waits with that code (it expired, or was approved already)")
            }
            try await self.store.clearSignInFailures(keys: key)
            return Response(status: .noContent)
        }
    }

    /// The challenge id of a code: its SHA-256 (the code itself is not stored), after folding
    /// case, dashes and spaces.
    static func deviceChallengeID(_ code: String) -> String {
        Identity.hash("device:" + code.uppercased().filter { $0 != "-" && $0 != " " })
    }
}
