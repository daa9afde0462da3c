import Crypto
import Foundation
import _CryptoExtras

/// A credential public key in COSE_Key form (RFC 9052 §7, RFC 9053 §2.1 and §7.1,
/// RFC 8230 §4), limited to the two algorithms Circle accepts for passkeys:
///
/// - ES256 (alg -7): kty 2 (EC2), crv 1 (P-256), `x` and `y` of 32 bytes each; the point
///   must be on the curve. Signatures are DER-encoded ECDSA over SHA-256 (WebAuthn L3 §6.5.5).
/// - RS256 (alg -257): kty 3 (RSA), `n` of 2048...4096 bits and `e`; signatures are
///   RSASSA-PKCS1-v1_5 with SHA-256.
///
/// The original encoding is kept in ``bytes`` so it can be stored and parsed again at
/// assertion time exactly as the authenticator sent it.
struct COSEKey: Sendable {
    /// The COSE algorithms Circle accepts (IANA "COSE Algorithms" registry values).
    enum Algorithm: Int64, Hashable, Sendable, CaseIterable {
        /// ECDSA with P-256 and SHA-256.
        case es256 = -7
        /// RSASSA-PKCS1-v1_5 with SHA-256.
        case rs256 = -257
    }

    /// Smallest RSA modulus accepted, in bits (NIST SP 800-131A disallows less).
    static let minimumRSABits = 2048
    /// Largest RSA modulus accepted, in bits; bounds verification cost per request.
    static let maximumRSABits = 4096
    /// Largest RSA public exponent accepted, in bytes (65537 needs 3).
    static let maximumRSAExponentBytes = 4

    // COSE labels (RFC 9052 §7.1, RFC 9053 §7.1.1, RFC 8230 §4).
    private static let labelKeyType: Int64 = 1
    private static let labelAlgorithm: Int64 = 3
    private static let labelCurveOrModulus: Int64 = -1
    private static let labelXOrExponent: Int64 = -2
    private static let labelY: Int64 = -3
    private static let labelPrivate: Int64 = -4
    private static let keyTypeEC2: Int64 = 2
    private static let keyTypeRSA: Int64 = 3
    private static let curveP256: Int64 = 1

    private enum Verifier: Sendable {
        case p256(P256.Signing.PublicKey)
        case rsa(_RSA.Signing.PublicKey)
    }

    /// The key's algorithm.
    let algorithm: Algorithm
    /// The COSE_Key encoding exactly as received.
    let bytes: [UInt8]
    private let verifier: Verifier

    /// Parses a COSE_Key that must occupy all of `bytes` (as stored after registration).
    ///
    /// - Parameter bytes: the CBOR-encoded COSE_Key.
    /// - Throws: `.malformedCBOR`, `.malformedCOSEKey` or `.unsupportedAlgorithm`.
    init(bytes: [UInt8]) throws(WebAuthnError) {
        let value: CBORValue
        do {
            value = try CBORDecoder.decode(bytes)
        } catch {
            throw WebAuthnError(cbor: error, in: "credential public key")
        }
        try self.init(value: value, bytes: bytes)
    }

    /// Builds a key from an already decoded COSE_Key map and its encoding.
    ///
    /// Checks, in order: the value is a map; `alg` (3) is present and is -7 or -257;
    /// `kty` (1) matches the algorithm; then the algorithm's members as described on the
    /// type. A private member (-4) is refused: a credential public key must not carry one.
    ///
    /// - Parameters:
    ///   - value: the decoded map.
    ///   - bytes: its encoding, kept in ``bytes``.
    /// - Throws: `.malformedCOSEKey` or `.unsupportedAlgorithm`.
    init(value: CBORValue, bytes: [UInt8]) throws(WebAuthnError) {
        guard value.mapEntries != nil else {
            throw WebAuthnError(.malformedCOSEKey, "credential public key is not a CBOR map")
        }
        guard let alg = value[label: Self.labelAlgorithm]?.int64Value else {
            throw WebAuthnError(.malformedCOSEKey, "credential public key has no integer alg (3)")
        }
        guard let algorithm = Algorithm(rawValue: alg) else {
            throw WebAuthnError(
                .unsupportedAlgorithm, "COSE algorithm \(alg) is not supported; use ES256 (-7) or RS256 (-257)")
        }
        guard let keyType = value[label: Self.labelKeyType]?.int64Value else {
            throw WebAuthnError(.malformedCOSEKey, "credential public key has no integer kty (1)")
        }
        guard value[label: Self.labelPrivate] == nil else {
            throw WebAuthnError(.malformedCOSEKey, "credential public key carries private key material (-4)")
        }
        switch algorithm {
        case .es256:
            self.verifier = .p256(try Self.parseP256(value, keyType: keyType))
        case .rs256:
            self.verifier = .rsa(try Self.parseRSA(value, keyType: keyType))
        }
        self.algorithm = algorithm
        self.bytes = bytes
    }

    private static func parseP256(_ value: CBORValue, keyType: Int64) throws(WebAuthnError) -> P256.Signing.PublicKey {
        guard keyType == keyTypeEC2 else {
            throw WebAuthnError(.malformedCOSEKey, "ES256 key has kty \(keyType); expected 2 (EC2)")
        }
        guard let curve = value[label: labelCurveOrModulus]?.int64Value else {
            throw WebAuthnError(.malformedCOSEKey, "EC2 key has no integer crv (-1)")
        }
        guard curve == curveP256 else {
            throw WebAuthnError(.unsupportedAlgorithm, "ES256 key uses curve \(curve); only P-256 (1) is supported")
        }
        guard let x = value[label: labelXOrExponent]?.bytesValue, x.count == 32,
              let y = value[label: labelY]?.bytesValue, y.count == 32
        else {
            throw WebAuthnError(.malformedCOSEKey, "P-256 key needs x (-2) and y (-3) byte strings of 32 bytes")
        }
        do {
            // SEC 1 uncompressed point; the initializer checks that it lies on the curve.
            return try P256.Signing.PublicKey(x963Representation: [0x04] + x + y)
        } catch {
            throw WebAuthnError(.malformedCOSEKey, "P-256 key is not a point on the curve")
        }
    }

    private static func parseRSA(_ value: CBORValue, keyType: Int64) throws(WebAuthnError) -> _RSA.Signing.PublicKey {
        guard keyType == keyTypeRSA else {
            throw WebAuthnError(.malformedCOSEKey, "RS256 key has kty \(keyType); expected 3 (RSA)")
        }
        guard let n = value[label: labelCurveOrModulus]?.bytesValue,
              let e = value[label: labelXOrExponent]?.bytesValue
        else {
            throw WebAuthnError(.malformedCOSEKey, "RSA key needs n (-1) and e (-2) byte strings")
        }
        let modulus = n.drop(while: { $0 == 0 })
        let bits = modulus.first.map { modulus.count * 8 - $0.leadingZeroBitCount } ?? 0
        guard bits >= minimumRSABits, bits <= maximumRSABits else {
            throw WebAuthnError(
                .unsupportedAlgorithm,
                "RSA modulus of \(bits) bits is outside \(minimumRSABits)...\(maximumRSABits)")
        }
        let exponent = e.drop(while: { $0 == 0 })
        guard let lowest = exponent.last, exponent.count <= maximumRSAExponentBytes, lowest & 1 == 1,
              exponent.count > 1 || lowest >= 3
        else {
            throw WebAuthnError(.malformedCOSEKey, "RSA exponent must be odd, at least 3 and at most \(maximumRSAExponentBytes) bytes")
        }
        do {
            return try _RSA.Signing.PublicKey(n: Array(modulus), e: Array(exponent))
        } catch {
            throw WebAuthnError(.malformedCOSEKey, "RSA key was refused by the crypto library")
        }
    }

    /// Checks a signature made with this key's algorithm over `data`.
    ///
    /// - Parameters:
    ///   - signature: DER-encoded ECDSA (ES256) or a PKCS#1 v1.5 signature block (RS256).
    ///   - data: the signed bytes; hashed here with SHA-256.
    /// - Returns: `true` only when the signature verifies; malformed signatures give `false`.
    func isValidSignature(_ signature: [UInt8], for data: [UInt8]) -> Bool {
        switch verifier {
        case .p256(let key):
            guard let ecdsa = try? P256.Signing.ECDSASignature(derRepresentation: signature) else {
                return false
            }
            return key.isValidSignature(ecdsa, for: data)
        case .rsa(let key):
            let rsa = _RSA.Signing.RSASignature(rawRepresentation: signature)
            return key.isValidSignature(rsa, for: data, padding: .insecurePKCS1v1_5)
        }
    }
}
