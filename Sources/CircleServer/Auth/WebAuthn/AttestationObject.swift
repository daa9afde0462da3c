/// An attestation object (WebAuthn L3 §6.5.4): the CBOR map `{fmt, attStmt, authData}`
/// returned by `navigator.credentials.create()`.
///
/// Checked here (§7.1 step 12): the input is one CBOR map with nothing after it; `fmt` is
/// a text string, `attStmt` a map and `authData` a byte string that parses as
/// ``AuthenticatorData``. Unknown members are ignored. The statement itself is checked
/// by ``WebAuthnRelyingParty`` according to `fmt`.
struct AttestationObject: Sendable {
    /// The attestation statement format identifier, such as `none` or `packed`.
    let format: String
    /// The attestation statement, a CBOR map whose layout depends on ``format``.
    let statement: CBORValue
    /// The parsed authenticator data.
    let authenticatorData: AuthenticatorData

    /// Decodes and checks an attestation object.
    ///
    /// - Parameter bytes: the CBOR-encoded attestation object.
    /// - Throws: `.malformedCBOR`, `.malformedAttestationObject`, or the errors of
    ///   ``AuthenticatorData/init(bytes:)``.
    init(bytes: [UInt8]) throws(WebAuthnError) {
        let value: CBORValue
        do {
            value = try CBORDecoder.decode(bytes)
        } catch {
            throw WebAuthnError(cbor: error, in: "attestationObject")
        }
        guard value.mapEntries != nil else {
            throw WebAuthnError(.malformedAttestationObject, "attestationObject is not a CBOR map")
        }
        guard let format = value[name: "fmt"]?.textValue else {
            throw WebAuthnError(.malformedAttestationObject, "attestationObject has no text fmt")
        }
        guard let statement = value[name: "attStmt"], statement.mapEntries != nil else {
            throw WebAuthnError(.malformedAttestationObject, "attestationObject has no attStmt map")
        }
        guard let authData = value[name: "authData"]?.bytesValue else {
            throw WebAuthnError(.malformedAttestationObject, "attestationObject has no authData byte string")
        }
        self.format = format
        self.statement = statement
        self.authenticatorData = try AuthenticatorData(bytes: authData)
    }
}
