/// A credential accepted by ``WebAuthnRelyingParty/verifyRegistration(clientDataJSON:attestationObject:expectedChallenge:)``:
/// what the store keeps for the user (WebAuthn L3 §7.1 step 27, "credential record").
struct WebAuthnCredential: Hashable, Sendable {
    /// The credential ID (16...1023 bytes); the store must refuse one it already holds
    /// (§7.1 step 25), which this library cannot see.
    var id: [UInt8]
    /// The COSE_Key encoding of the public key, exactly as the authenticator sent it.
    var publicKey: [UInt8]
    /// The key's algorithm.
    var algorithm: COSEKey.Algorithm
    /// The signature counter at registration (0 when the authenticator keeps none).
    var signCount: UInt32
    /// BE: the credential may be synced to other devices; fixed for its lifetime.
    var backupEligible: Bool
    /// BS: the credential is currently backed up.
    var backedUp: Bool
    /// The authenticator model's AAGUID (16 bytes, all zeros when not disclosed).
    var aaguid: [UInt8]
    /// The attestation statement format that was verified (`none` or `packed`).
    var attestationFormat: String

    /// What ``WebAuthnRelyingParty/verifyAssertion(credential:clientDataJSON:authenticatorData:signature:expectedChallenge:)``
    /// needs from this record.
    var stored: WebAuthnStoredCredential {
        WebAuthnStoredCredential(publicKey: publicKey, signCount: signCount, backupEligible: backupEligible)
    }
}
