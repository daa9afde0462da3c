import Crypto

/// The libFuzzer entry point for the WebAuthn verification core: it feeds arbitrary bytes
/// to every parser and to both ceremonies and ignores the errors. Any trap is a bug.
///
/// Input layout, chosen so that mutations of a real ceremony reach the signature and
/// counter checks:
///
/// ```
/// clientDataJSON length (2, big-endian) | signature length (2, big-endian)
/// | clientDataJSON | signature | attestationObject or authenticatorData
/// ```
///
/// Lengths larger than what remains are clamped. The ceremonies use a fixed relying party
/// (`chat.example.com`), challenge (``challenge``) and stored credential (the P-256 key
/// with private scalar 0x11…11, counter 1), which `scripts/webauthn_fixtures.py --seeds`
/// also uses to write seeds that pass every check.
package enum WebAuthnFuzzing {
    /// The relying party the ceremonies are verified against.
    static let relyingParty = WebAuthnRelyingParty(
        id: "chat.example.com", origins: ["https://chat.example.com", "http://localhost:8080"])
    /// The challenge the ceremonies must carry: the 32 ASCII bytes below.
    static let challenge: [UInt8] = Array("circle-webauthn-fuzz-challenge!!".utf8)
    /// The stored credential assertions are checked against.
    static let storedCredential = WebAuthnStoredCredential(publicKey: fixedPublicKey(), signCount: 1)

    /// Runs one input through all parsers and both ceremonies; never throws or traps.
    ///
    /// - Parameter bytes: the fuzzer's input.
    package static func run(_ bytes: [UInt8]) {
        parseEverything(bytes)
        guard bytes.count >= 4 else { return }
        let clientDataLength = Int(bytes[0]) << 8 | Int(bytes[1])
        let signatureLength = Int(bytes[2]) << 8 | Int(bytes[3])
        let body = bytes.dropFirst(4)
        let clientDataJSON = Array(body.prefix(clientDataLength))
        let afterClientData = body.dropFirst(clientDataLength)
        let signature = Array(afterClientData.prefix(signatureLength))
        let rest = Array(afterClientData.dropFirst(signatureLength))

        parseEverything(rest)
        _ = try? CollectedClientData(bytes: clientDataJSON)
        _ = try? relyingParty.verifyRegistration(
            clientDataJSON: clientDataJSON, attestationObject: rest, expectedChallenge: challenge)
        _ = try? relyingParty.verifyAssertion(
            credential: storedCredential, clientDataJSON: clientDataJSON, authenticatorData: rest,
            signature: signature, expectedChallenge: challenge)
    }

    /// The standalone parsers: CBOR (whole and prefix), COSE key, authenticator data,
    /// attestation object.
    private static func parseEverything(_ bytes: [UInt8]) {
        _ = try? CBORDecoder.decode(bytes)
        if let (value, consumed) = try? CBORDecoder.decodePrefix(bytes) {
            _ = try? COSEKey(value: value, bytes: Array(bytes.prefix(consumed)))
        }
        _ = try? AuthenticatorData(bytes: bytes)
        _ = try? AttestationObject(bytes: bytes)
    }

    /// COSE_Key bytes of the fixed fuzzing credential: `{1: 2, 3: -7, -1: 1, -2: x, -3: y}`.
    private static func fixedPublicKey() -> [UInt8] {
        let scalar = [UInt8](repeating: 0x11, count: 32)
        guard let key = try? P256.Signing.PrivateKey(rawRepresentation: scalar) else { return [] }
        let point = Array(key.publicKey.x963Representation)  // 0x04 | x | y
        guard point.count == 65 else { return [] }
        return [0xA5, 0x01, 0x02, 0x03, 0x26, 0x20, 0x01, 0x21, 0x58, 0x20] + point[1..<33]
            + [0x22, 0x58, 0x20] + point[33..<65]
    }
}
