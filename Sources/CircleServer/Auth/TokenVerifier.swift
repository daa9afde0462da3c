import CircleWire
import Foundation
import JWTKit
import Logging

/// The server's token check: the server's own keys (``TokenAuthority``: HS256 or ES256) and
/// the identity providers configured as ``TokenIssuer``s, whose keys come from their JWKS.
///
/// A token whose unverified `iss` names a configured issuer is verified with that issuer's keys
/// only: its header must name a `kid` the issuer's JWKS lists and an `alg` that key allows
/// (RS256 or PS256 for RSA, ES256 for P-256, EdDSA for Ed25519; never HS256). Its `aud` must
/// name one of the issuer's audiences (when configured), its `exp` must be in the future, its
/// `nbf` (if any) not after now plus ``clockSkew``, and the user claim must be a valid user
/// name. Every other token is checked with the server's own keys.
final class TokenVerifier: Sendable {
    /// How far a token's `nbf` may be ahead of the server's clock.
    static let clockSkew: TimeInterval = 60

    let authority: TokenAuthority
    private let issuers: [String: IssuerKeys]

    init(authority: TokenAuthority, issuers: [TokenIssuer], settings: JWKSSettings, allowPrivateOutbound: Bool, logger: Logger) {
        self.authority = authority
        var table: [String: IssuerKeys] = [:]
        for issuer in issuers {
            table[issuer.issuer] = IssuerKeys(issuer: issuer, settings: settings, allowPrivateOutbound: allowPrivateOutbound, logger: logger)
        }
        self.issuers = table
    }

    /// The issuers' key sets, for the periodic refresh.
    var issuerKeys: [IssuerKeys] { Array(self.issuers.values) }

    /// Checks a token; see the type's summary for the rules.
    func verify(_ token: String, now: Date = Date()) async throws(TokenError) -> AuthenticatedUser {
        let unverified = UnverifiedJWT.parse(token)
        if let issuer = unverified?.issuer, let keys = self.issuers[issuer], let unverified {
            return try await Self.verify(token, unverified, with: keys, now: now)
        }
        do throws(TokenError) {
            return try await self.authority.verify(token, now: now)
        } catch {
            if !self.issuers.isEmpty, let issuer = unverified?.issuer, error.code == .unauthorized {
                throw TokenError(code: .unauthorized, message: "the token's issuer \"\(issuer.prefix(200))\" is not configured, and the token is not signed by this server's key")
            }
            throw error
        }
    }

    /// Signature only: the claims are read from the token's (then verified) payload by the verifier.
    private struct SignedPayload: JWTPayload {
        func verify(using algorithm: some JWTAlgorithm) async throws {}
    }

    private static func verify(_ token: String, _ unverified: UnverifiedJWT, with keys: IssuerKeys, now: Date) async throws(TokenError) -> AuthenticatedUser {
        let issuer = keys.issuer
        func refuse(_ message: String) -> TokenError { TokenError(code: .unauthorized, message: message) }
        guard JWKSDocument.supportedAlgorithms.contains(unverified.algorithm) else {
            throw refuse("tokens of issuer \"\(issuer.issuer)\" must be signed with RS256, PS256, ES256 or EdDSA, not \"\(unverified.algorithm.prefix(20))\"")
        }
        guard let kid = unverified.keyID else {
            throw refuse("the token names no key (\"kid\")")
        }
        guard let entry = await keys.key(kid) else {
            throw refuse("the JWKS of issuer \"\(issuer.issuer)\" has no key \"\(kid.prefix(100))\"")
        }
        guard entry.algorithms.contains(unverified.algorithm), let verifier = entry.verifiers[unverified.algorithm] else {
            throw refuse("key \"\(kid.prefix(100))\" is for \(entry.algorithms.sorted().joined(separator: ", ")), not \(unverified.algorithm)")
        }
        do {
            _ = try await verifier.verify(token, as: SignedPayload.self)
        } catch {
            throw refuse("the token's signature does not verify with key \"\(kid.prefix(100))\" of issuer \"\(issuer.issuer)\"")
        }
        let claims = unverified.claims
        if !issuer.audiences.isEmpty {
            let audiences: [String]
            switch claims["aud"] {
            case .string(let value)?: audiences = [value]
            case .array(let values)?: audiences = values.compactMap { if case .string(let value) = $0 { return value } else { return nil } }
            default: audiences = []
            }
            guard audiences.contains(where: issuer.audiences.contains) else {
                throw refuse("the token's audience (\"aud\") is not one of this server's")
            }
        }
        guard case .number(let expText)? = claims["exp"], let exp = Double(expText), exp.isFinite else {
            throw refuse("the token has no numeric expiry (\"exp\")")
        }
        switch claims["nbf"] {
        case nil:
            break
        case .number(let nbfText)?:
            guard let nbf = Double(nbfText), nbf.isFinite, nbf <= now.timeIntervalSince1970 + Self.clockSkew else {
                throw refuse("the token is not valid yet (\"nbf\")")
            }
        default:
            throw refuse("the token's \"nbf\" is not a number")
        }
        guard case .string(let user)? = claims[issuer.userClaim], TokenAuthority.isValidUserName(user) else {
            throw refuse("the token's \"\(issuer.userClaim)\" is not a valid user name")
        }
        let expires = Date(timeIntervalSince1970: exp)
        guard expires > now else {
            throw TokenError(code: .tokenExpired, message: "the token expired \(TokenAuthority.describe(expires))")
        }
        return AuthenticatedUser(name: user, expires: expires)
    }
}
