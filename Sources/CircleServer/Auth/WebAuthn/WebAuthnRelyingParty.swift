import Crypto
import Foundation

/// A WebAuthn relying party: the registration and assertion verification procedures of
/// W3C WebAuthn Level 3 §7.1 and §7.2, as pure functions of their inputs (no I/O, no clock,
/// no store).
///
/// Policy, fixed for Circle's passkey sign-in: user presence and user verification are
/// both required; only ES256 and RS256 credentials; attestation `none` (what Circle
/// requests) or `packed` self attestation; no cross-origin iframes.
///
/// ```swift
/// let rp = WebAuthnRelyingParty(id: "chat.example.com", origins: ["https://chat.example.com"])
/// let credential = try rp.verifyRegistration(
///     clientDataJSON: cdj, attestationObject: att, expectedChallenge: issued)
/// // store credential, then at sign-in:
/// let counter = try rp.verifyAssertion(
///     credential: record.stored, clientDataJSON: cdj, authenticatorData: ad,
///     signature: sig, expectedChallenge: issued)
/// ```
///
/// Left to the caller: issuing a random challenge of at least 16 bytes per ceremony and
/// using it once; refusing a credential ID that is already registered (§7.1 step 25);
/// finding the stored credential by ID and checking it belongs to the user (§7.2 steps
/// 5–6); saving the returned counter (§7.2 step 21).
struct WebAuthnRelyingParty: Sendable {
    /// Shortest challenge accepted from the caller (§13.4.3: at least 16 random bytes).
    static let minimumChallengeLength = 16
    /// Largest signature accepted; an RSA-4096 signature is 512 bytes, ES256 DER at most 72.
    static let maximumSignatureLength = 1024

    /// The RP ID, a registrable domain such as `chat.example.com` (or `localhost`).
    var id: String
    /// The exact origins the page is served from, such as `https://chat.example.com` or
    /// `http://localhost:8080`; `clientData.origin` must equal one of them.
    var origins: [String]

    /// Creates a relying party.
    ///
    /// - Parameters:
    ///   - id: the RP ID the browser was given.
    ///   - origins: the origins ceremonies may come from.
    init(id: String, origins: [String]) {
        self.id = id
        self.origins = origins
    }

    // MARK: - Registration (§7.1)

    /// Verifies a registration ceremony's response (WebAuthn L3 §7.1).
    ///
    /// Checks, by spec step: 5–6 `clientDataJSON` parses; 7 type is `webauthn.create`;
    /// 8 challenge equals `expectedChallenge` (base64url, compared in constant time);
    /// 9 origin is one of ``origins``; 10 no `topOrigin` and `crossOrigin` not true;
    /// 12 the attestation object decodes; 13 rpIdHash is SHA-256 of ``id``; 14 UP set;
    /// 15 UV set; 16 BS not set without BE; AT set with credential data (ID of 16...1023
    /// bytes, step 24); 18 the key is ES256 or RS256; 20–21 `fmt` is `none` with an empty
    /// statement or `packed` self attestation that verifies. Steps 19 (extension outputs)
    /// and 22–23 (attestation trust) are not checked: Circle requests no extensions and
    /// no attestation.
    ///
    /// - Parameters:
    ///   - clientDataJSON: `response.clientDataJSON`, raw bytes.
    ///   - attestationObject: `response.attestationObject`, raw bytes.
    ///   - expectedChallenge: the challenge this server issued for the ceremony.
    /// - Returns: the credential to store.
    /// - Throws: ``WebAuthnError`` naming the first check that failed.
    func verifyRegistration(
        clientDataJSON: [UInt8], attestationObject: [UInt8], expectedChallenge: [UInt8]
    ) throws(WebAuthnError) -> WebAuthnCredential {
        try checkConfiguration(expectedChallenge)
        try checkClientData(clientDataJSON, type: "webauthn.create", expectedChallenge: expectedChallenge)

        let attestation = try AttestationObject(bytes: attestationObject)
        let authData = attestation.authenticatorData
        try checkAuthenticatorData(authData)
        guard let attested = authData.attestedCredentialData else {
            throw WebAuthnError(.missingCredentialData, "registration authenticator data has no attested credential data (AT flag clear)")
        }
        let key = try COSEKey(value: attested.credentialPublicKeyValue, bytes: attested.credentialPublicKey)
        try checkAttestationStatement(attestation, key: key, clientDataJSON: clientDataJSON)

        return WebAuthnCredential(
            id: attested.credentialID,
            publicKey: key.bytes,
            algorithm: key.algorithm,
            signCount: authData.signCount,
            backupEligible: authData.flags.contains(.backupEligible),
            backedUp: authData.flags.contains(.backedUp),
            aaguid: attested.aaguid,
            attestationFormat: attestation.format)
    }

    /// Checks the attestation statement (§7.1 steps 20–21; §8.7 `none`, §8.2 `packed`).
    ///
    /// `none`: the statement must be an empty map. `packed`: only self attestation (no
    /// `x5c`) is accepted; its `alg` must be the credential key's algorithm and `sig` must
    /// verify with the credential key over `authData || SHA-256(clientDataJSON)`.
    private func checkAttestationStatement(
        _ attestation: AttestationObject, key: COSEKey, clientDataJSON: [UInt8]
    ) throws(WebAuthnError) {
        let entries = attestation.statement.mapEntries ?? []
        switch attestation.format {
        case "none":
            guard entries.isEmpty else {
                throw WebAuthnError(.malformedAttestationObject, "attestation format none must have an empty attStmt")
            }
        case "packed":
            guard attestation.statement[name: "x5c"] == nil, attestation.statement[name: "ecdaaKeyId"] == nil else {
                throw WebAuthnError(
                    .unsupportedAttestation,
                    "packed attestation with a certificate chain is not supported; request attestation \"none\"")
            }
            guard entries.count == 2,
                  let alg = attestation.statement[name: "alg"]?.int64Value,
                  let signature = attestation.statement[name: "sig"]?.bytesValue
            else {
                throw WebAuthnError(.malformedAttestationObject, "packed self attestation needs exactly alg (integer) and sig (bytes)")
            }
            guard alg == key.algorithm.rawValue else {
                throw WebAuthnError(
                    .invalidAttestation,
                    "packed self attestation alg \(alg) differs from the credential key's \(key.algorithm.rawValue)")
            }
            guard signature.count <= Self.maximumSignatureLength else {
                throw WebAuthnError(.badSignature, "attestation signature of \(signature.count) bytes is too long")
            }
            let signed = attestation.authenticatorData.bytes + Array(SHA256.hash(data: clientDataJSON))
            guard key.isValidSignature(signature, for: signed) else {
                throw WebAuthnError(.badSignature, "packed self attestation signature does not verify with the credential key")
            }
        default:
            // Keep the echoed name short: it comes from the client.
            throw WebAuthnError(
                .unsupportedAttestation,
                "attestation format \"\(attestation.format.prefix(32))\" is not supported; request attestation \"none\"")
        }
    }

    // MARK: - Assertion (§7.2)

    /// Verifies an authentication ceremony's response (WebAuthn L3 §7.2).
    ///
    /// Checks, by spec step: 10 type is `webauthn.get`; 11 challenge; 12 origin; 13 no
    /// `topOrigin` and `crossOrigin` not true; 8 and 14 authenticator data parses and its
    /// rpIdHash is SHA-256 of ``id``; 15 UP set; 16 UV set; 17 BS not set without BE,
    /// and BE equal to the stored value when that is known; 19–20 the signature verifies
    /// over `authenticatorData || SHA-256(clientDataJSON)` with the stored key; 21 when
    /// either counter is non-zero, the new one is greater than the stored one. Step 18
    /// (extension outputs) is not checked: Circle requests no extensions.
    ///
    /// - Parameters:
    ///   - credential: the stored public key, counter and BE flag of the credential whose
    ///     ID the client returned.
    ///   - clientDataJSON: `response.clientDataJSON`, raw bytes.
    ///   - authenticatorData: `response.authenticatorData`, raw bytes.
    ///   - signature: `response.signature`, raw bytes.
    ///   - expectedChallenge: the challenge this server issued for the ceremony.
    /// - Returns: the new signature counter to store.
    /// - Throws: ``WebAuthnError`` naming the first check that failed;
    ///   `.signCountNotIncreased` suggests a cloned authenticator.
    func verifyAssertion(
        credential: WebAuthnStoredCredential,
        clientDataJSON: [UInt8],
        authenticatorData: [UInt8],
        signature: [UInt8],
        expectedChallenge: [UInt8]
    ) throws(WebAuthnError) -> UInt32 {
        try checkConfiguration(expectedChallenge)
        let key = try COSEKey(bytes: credential.publicKey)
        try checkClientData(clientDataJSON, type: "webauthn.get", expectedChallenge: expectedChallenge)

        let authData = try AuthenticatorData(bytes: authenticatorData)
        try checkAuthenticatorData(authData)
        guard authData.attestedCredentialData == nil else {
            throw WebAuthnError(.malformedAuthenticatorData, "assertion authenticator data must not carry attested credential data")
        }
        if let storedEligible = credential.backupEligible,
           storedEligible != authData.flags.contains(.backupEligible) {
            throw WebAuthnError(
                .inconsistentBackupFlags, "the Backup Eligible flag changed since registration (stored \(storedEligible))")
        }

        guard signature.count <= Self.maximumSignatureLength else {
            throw WebAuthnError(.badSignature, "signature of \(signature.count) bytes is too long")
        }
        let signed = authenticatorData + Array(SHA256.hash(data: clientDataJSON))
        guard key.isValidSignature(signature, for: signed) else {
            throw WebAuthnError(.badSignature, "assertion signature does not verify with the stored credential key")
        }

        let newCount = authData.signCount
        if (newCount != 0 || credential.signCount != 0) && newCount <= credential.signCount {
            throw WebAuthnError(
                .signCountNotIncreased,
                "signature counter \(newCount) is not above the stored \(credential.signCount); the authenticator may have been cloned")
        }
        return newCount
    }

    // MARK: - Shared steps

    /// Refuses caller mistakes before looking at client input.
    private func checkConfiguration(_ expectedChallenge: [UInt8]) throws(WebAuthnError) {
        guard !id.isEmpty else {
            throw WebAuthnError(.invalidRelyingPartyInput, "the relying party ID is empty")
        }
        guard expectedChallenge.count >= Self.minimumChallengeLength else {
            throw WebAuthnError(
                .invalidRelyingPartyInput,
                "the expected challenge has \(expectedChallenge.count) bytes; issue at least \(Self.minimumChallengeLength) random bytes")
        }
    }

    /// §7.1 steps 5–10 and §7.2 steps 9–13: parse, type, challenge, origin, cross-origin.
    private func checkClientData(_ bytes: [UInt8], type: String, expectedChallenge: [UInt8]) throws(WebAuthnError) {
        let clientData = try CollectedClientData(bytes: bytes)
        guard clientData.type == type else {
            throw WebAuthnError(.wrongType, "clientData.type is not \"\(type)\"")
        }
        let expected = Array(Self.base64URLEncoded(expectedChallenge).utf8)
        guard Self.constantTimeEqual(Array(clientData.challenge.utf8), expected) else {
            throw WebAuthnError(.challengeMismatch, "clientData.challenge is not the challenge issued for this ceremony")
        }
        guard origins.contains(clientData.origin) else {
            throw WebAuthnError(
                .originNotAllowed,
                "clientData.origin is not one of the \(origins.count) allowed origins (\(origins.joined(separator: ", ")))")
        }
        guard clientData.crossOrigin != true, clientData.topOrigin == nil else {
            throw WebAuthnError(.crossOrigin, "the ceremony ran in a cross-origin frame, which is not allowed")
        }
    }

    /// §7.1 steps 13–16 and §7.2 steps 14–17: rpIdHash, UP, UV, BE/BS consistency.
    private func checkAuthenticatorData(_ authData: AuthenticatorData) throws(WebAuthnError) {
        let expectedHash = Array(SHA256.hash(data: Array(id.utf8)))
        guard Self.constantTimeEqual(authData.rpIDHash, expectedHash) else {
            throw WebAuthnError(.rpIDMismatch, "rpIdHash is not SHA-256 of the RP ID \"\(id)\"")
        }
        guard authData.flags.contains(.userPresent) else {
            throw WebAuthnError(.userNotPresent, "the authenticator did not report user presence (UP flag clear)")
        }
        guard authData.flags.contains(.userVerified) else {
            throw WebAuthnError(.userNotVerified, "the authenticator did not verify the user (UV flag clear); a PIN or biometric is required")
        }
        guard authData.flags.contains(.backupEligible) || !authData.flags.contains(.backedUp) else {
            throw WebAuthnError(.inconsistentBackupFlags, "Backup State is set but Backup Eligible is not")
        }
    }

    /// base64url without padding (RFC 4648 §5), as browsers encode `clientData.challenge`.
    static func base64URLEncoded(_ bytes: [UInt8]) -> String {
        var text = Data(bytes).base64EncodedString()
        text = text.replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
        while text.hasSuffix("=") { text.removeLast() }
        return text
    }

    /// Compares two byte strings in time that depends only on their lengths.
    static func constantTimeEqual(_ lhs: [UInt8], _ rhs: [UInt8]) -> Bool {
        guard lhs.count == rhs.count else { return false }
        var difference: UInt8 = 0
        for index in lhs.indices {
            difference |= lhs[index] ^ rhs[index]
        }
        return difference == 0
    }
}
