import CircleWire
import Foundation
import JWTKit

/// The claims of a Circle access token.
public struct CircleTokenClaims: JWTPayload, Equatable {
    /// The user name (`sub`).
    public var sub: SubjectClaim
    /// Expiry (`exp`).
    public var exp: ExpirationClaim
    /// Issue time (`iat`).
    public var iat: IssuedAtClaim?

    public init(user: String, expires: Date, issued: Date = Date()) {
        self.sub = SubjectClaim(value: user)
        self.exp = ExpirationClaim(value: expires)
        self.iat = IssuedAtClaim(value: issued)
    }

    /// Signature and format only: expiry is checked by ``TokenAuthority`` so that an expired
    /// token can be told apart from a forged one.
    public func verify(using algorithm: some JWTAlgorithm) async throws {}
}

/// How tokens are verified (and, for development, minted).
public struct TokenKeys: Sendable {
    enum Value: Sendable {
        case hs256(secret: String)
        case es256(publicKeyPEM: String, privateKeyPEM: String?)
    }
    let value: Value

    /// A shared secret, as the app's backend would use to mint tokens.
    public static func hs256(secret: String) -> TokenKeys { TokenKeys(value: .hs256(secret: secret)) }
    /// An ECDSA P-256 public key in PEM; with the private key the server can mint tokens too.
    public static func es256(publicKeyPEM: String, privateKeyPEM: String? = nil) -> TokenKeys {
        TokenKeys(value: .es256(publicKeyPEM: publicKeyPEM, privateKeyPEM: privateKeyPEM))
    }
}

/// Why a token was not accepted.
public struct TokenError: Error, Sendable, Hashable, CustomStringConvertible {
    /// `unauthorized` (missing, malformed, wrongly signed) or `token_expired`.
    public var code: CircleErrorCode
    public var message: String
    public var description: String { "\(self.code): \(self.message)" }
}

/// Who a request is: the principal every route and action asks (never the credential).
public struct AuthenticatedUser: Sendable, Hashable {
    /// How the request signed in.
    public enum Credential: Sendable, Hashable {
        /// A JWT: the app's backend's, its identity provider's, or one the server minted.
        case token
        /// A session of the server's own: the page's cookie, a device credential, a personal token.
        case session(id: String, kind: SessionKind, csrf: String)
        /// An API key (docs/API.md, "API keys"): the user is the key's bot.
        case apiKey(id: String, scopes: Set<APIKeyScope>)
    }

    public var name: String
    /// When the credential stops working.
    public var expires: Date
    /// The account's role for sessions; `member` for tokens (admin routes read the account).
    public var role: AccountRole = .member
    public var credential: Credential = .token

    /// The session id, for sessions of the server's own.
    public var sessionID: String? {
        if case .session(let id, _, _) = self.credential { return id }
        return nil
    }

    /// The scopes of an API key; `nil` for every other credential.
    public var apiKeyScopes: Set<APIKeyScope>? {
        if case .apiKey(_, let scopes) = self.credential { return scopes }
        return nil
    }
}

/// Verifies and mints JWTs with the server's keys.
public struct TokenAuthority: Sendable {
    private let keys: JWTKeyCollection
    /// User names: at most 64 UTF-8 bytes (see ``isValidUserName(_:)``).
    public static let maxUserLength = 64
    /// HS256 secrets shorter than the SHA-256 output weaken the signature (RFC 7518 3.2).
    public static let minimumSecretLength = 32

    public init(_ keys: TokenKeys) async throws {
        let collection = JWTKeyCollection()
        switch keys.value {
        case .hs256(let secret):
            guard secret.utf8.count >= Self.minimumSecretLength else {
                throw TokenError(
                    code: .unauthorized,
                    message: "an HS256 secret needs at least \(Self.minimumSecretLength) bytes (it has \(secret.utf8.count))"
                )
            }
            await collection.add(hmac: HMACKey(from: secret), digestAlgorithm: .sha256)
        case .es256(let publicPEM, let privatePEM):
            if let privatePEM {
                await collection.add(ecdsa: try ES256PrivateKey(pem: privatePEM))
            } else {
                await collection.add(ecdsa: try ES256PublicKey(pem: publicPEM))
            }
        }
        self.keys = collection
    }

    /// Checks a token's signature, format, subject and expiry.
    public func verify(_ token: String, now: Date = Date()) async throws(TokenError) -> AuthenticatedUser {
        let claims: CircleTokenClaims
        do {
            claims = try await self.keys.verify(token, as: CircleTokenClaims.self)
        } catch {
            throw TokenError(code: .unauthorized, message: "the token is malformed or not signed by this server's key")
        }
        guard Self.isValidUserName(claims.sub.value) else {
            throw TokenError(code: .unauthorized, message: "the token's subject is not a valid user name")
        }
        guard claims.exp.value > now else {
            throw TokenError(code: .tokenExpired, message: "the token expired \(Self.describe(claims.exp.value))")
        }
        return AuthenticatedUser(name: claims.sub.value, expires: claims.exp.value)
    }

    /// Mints a token (development and tests; production tokens come from the app's backend).
    public func mint(user: String, ttl: Duration, now: Date = Date()) async throws -> String {
        let seconds = Double(ttl.components.seconds) + Double(ttl.components.attoseconds) / 1e18
        return try await self.keys.sign(CircleTokenClaims(user: user, expires: now.addingTimeInterval(seconds), issued: now))
    }

    /// "at 2026-11-24T20:00:00Z" for a date a calendar can show; the raw `exp` otherwise (a
    /// negative or absurd `exp` would print as a nonsense year).
    static func describe(_ expiry: Date) -> String {
        let seconds = expiry.timeIntervalSince1970
        // 0001-01-01 … 9999-12-31: what ISO 8601 dates show with four-digit years.
        guard seconds >= -62_135_596_800, seconds < 253_402_300_800 else {
            return "long ago (exp = \(seconds))"
        }
        return "at \(ISO8601DateFormatter().string(from: expiry))"
    }

    /// 1–64 UTF-8 bytes of letters, digits and `. _ - @`, whose letters come from one script
    /// (or Latin with East Asian scripts; see `UserNameScripts`): "аlice" with a Cyrillic "а"
    /// is refused rather than shown as a second "alice".
    public static func isValidUserName(_ name: String) -> Bool {
        !name.isEmpty && name.utf8.count <= maxUserLength
            && name.unicodeScalars.allSatisfy { CharacterSet.alphanumerics.contains($0) || "._-@".unicodeScalars.contains($0) }
            && UserNameScripts.isSingleScript(name)
    }
}
