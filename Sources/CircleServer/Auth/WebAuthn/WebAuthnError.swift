/// Why a WebAuthn registration or assertion was refused.
///
/// `code` is for programs (an HTTP route maps it to a status and a log field); `message`
/// says which check failed in words a person can act on. Messages quote sizes, offsets and
/// short expected values, never the (attacker-controlled) input itself.
struct WebAuthnError: Error, Hashable, Sendable, CustomStringConvertible {
    /// The check that failed.
    enum Code: String, Hashable, Sendable, CaseIterable {
        /// Some CBOR (attestation object, COSE key, extensions) could not be decoded.
        case malformedCBOR
        /// `clientDataJSON` is too large, not JSON, or lacks a required string member.
        case malformedClientData
        /// The attestation object lacks `fmt`, `attStmt` or `authData`, or they have the
        /// wrong types, or a format's statement has members it must not have.
        case malformedAttestationObject
        /// Authenticator data is too short, too long, or its flags disagree with its contents.
        case malformedAuthenticatorData
        /// A COSE key is missing members or has members of the wrong type or size.
        case malformedCOSEKey
        /// The credential uses an algorithm or key size other than ES256 (P-256) or RS256
        /// with a 2048...4096-bit modulus.
        case unsupportedAlgorithm
        /// The attestation statement format is not `none` or `packed` self attestation.
        case unsupportedAttestation
        /// A `packed` self attestation names an algorithm other than the credential's.
        case invalidAttestation
        /// `clientData.type` is not `webauthn.create` (registration) or `webauthn.get` (assertion).
        case wrongType
        /// `clientData.challenge` is not the challenge this server issued.
        case challengeMismatch
        /// `clientData.origin` is not one of the relying party's origins.
        case originNotAllowed
        /// The ceremony ran in a cross-origin iframe (`crossOrigin` true or `topOrigin` set).
        case crossOrigin
        /// `rpIdHash` is not SHA-256 of the relying party ID.
        case rpIDMismatch
        /// The User Present flag is not set.
        case userNotPresent
        /// The User Verified flag is not set.
        case userNotVerified
        /// Backup State is set without Backup Eligible, or Backup Eligible changed since registration.
        case inconsistentBackupFlags
        /// A registration's authenticator data has no attested credential data (AT flag clear).
        case missingCredentialData
        /// The signature does not verify with the credential's public key.
        case badSignature
        /// The signature counter did not increase: the authenticator may have been cloned.
        case signCountNotIncreased
        /// The caller passed something unusable (an empty RP ID, a challenge under 16 bytes).
        case invalidRelyingPartyInput
    }

    /// The check that failed.
    var code: Code
    /// A human-readable explanation.
    var message: String

    /// Creates an error.
    ///
    /// - Parameters:
    ///   - code: the failed check.
    ///   - message: what was wrong, without echoing large input.
    init(_ code: Code, _ message: String) {
        self.code = code
        self.message = message
    }

    /// Wraps a CBOR decoding failure, naming which structure it was found in.
    ///
    /// - Parameters:
    ///   - error: the decoder's error.
    ///   - context: what was being decoded, such as "attestationObject".
    init(cbor error: CBORDecodingError, in context: String) {
        self.init(.malformedCBOR, "\(context): \(error.description)")
    }

    /// `code: message`.
    var description: String { "WebAuthnError.\(code.rawValue): \(message)" }
}
