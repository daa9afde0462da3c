/// The stored state of a credential that an assertion is checked against
/// (WebAuthn L3 §7.2, "credentialRecord").
struct WebAuthnStoredCredential: Hashable, Sendable {
    /// The COSE_Key bytes saved at registration (``WebAuthnCredential/publicKey``).
    var publicKey: [UInt8]
    /// The last signature counter seen for this credential.
    var signCount: UInt32
    /// The BE flag saved at registration; `nil` skips the §7.2 step 17 check that it has
    /// not changed (for records saved before it was kept).
    var backupEligible: Bool?

    /// Creates a stored credential.
    ///
    /// - Parameters:
    ///   - publicKey: the COSE_Key bytes saved at registration.
    ///   - signCount: the last counter seen.
    ///   - backupEligible: the BE flag saved at registration, if known.
    init(publicKey: [UInt8], signCount: UInt32, backupEligible: Bool? = nil) {
        self.publicKey = publicKey
        self.signCount = signCount
        self.backupEligible = backupEligible
    }
}
