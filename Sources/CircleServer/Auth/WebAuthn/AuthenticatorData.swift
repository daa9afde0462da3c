/// Authenticator data (WebAuthn L3 §6.1), parsed and checked for internal consistency:
///
/// ```
/// rpIdHash (32) | flags (1) | signCount (4, big-endian)
/// [ attestedCredentialData: aaguid (16) | credentialIdLength (2) | credentialId | credentialPublicKey (CBOR) ]  if AT
/// [ extensions (CBOR map) ]                                                                                   if ED
/// ```
///
/// Refused: fewer than 37 bytes; more than ``maximumSize``; AT set without credential data
/// or clear with bytes where it would be; a credential ID outside 16...1023 bytes; a
/// credential public key that is not one CBOR map; ED set without an extensions map, or
/// clear with bytes left over; anything after the extensions. The credential public key
/// is only delimited and kept here; ``COSEKey`` interprets it.
struct AuthenticatorData: Sendable {
    /// The flags byte (§6.1 "flags").
    struct Flags: OptionSet, Hashable, Sendable {
        /// The flags byte as sent.
        var rawValue: UInt8

        /// Creates flags from the byte.
        ///
        /// - Parameter rawValue: the flags byte.
        init(rawValue: UInt8) { self.rawValue = rawValue }

        /// Bit 0, UP: the user was present.
        static let userPresent = Flags(rawValue: 0x01)
        /// Bit 2, UV: the user was verified (PIN, biometric).
        static let userVerified = Flags(rawValue: 0x04)
        /// Bit 3, BE: the credential may be backed up (a synced passkey).
        static let backupEligible = Flags(rawValue: 0x08)
        /// Bit 4, BS: the credential is currently backed up.
        static let backedUp = Flags(rawValue: 0x10)
        /// Bit 6, AT: attested credential data follows.
        static let attestedCredentialData = Flags(rawValue: 0x40)
        /// Bit 7, ED: an extensions map follows.
        static let extensionData = Flags(rawValue: 0x80)
    }

    /// Attested credential data (§6.5.2), present when AT is set.
    struct AttestedCredentialData: Sendable {
        /// The authenticator model's AAGUID (all zeros when not disclosed).
        var aaguid: [UInt8]
        /// The credential ID.
        var credentialID: [UInt8]
        /// The credential public key's COSE_Key encoding, exactly as sent.
        var credentialPublicKey: [UInt8]
        /// The decoded credential public key map.
        var credentialPublicKeyValue: CBORValue
    }

    /// Bytes before any optional part: rpIdHash, flags, signCount.
    static let fixedSize = 37
    /// Largest authenticator data accepted: the fixed part, attested credential data with
    /// the largest credential ID (1023) and an RSA-4096 key (about 530 bytes), and
    /// extensions, fit with room in 16 KiB.
    static let maximumSize = 16 * 1024
    /// Shortest credential ID accepted (§6.1 asks for at least 16 bytes of entropy).
    static let minimumCredentialIDLength = 16
    /// Longest credential ID accepted (§7.1 step 24: at most 1023 bytes).
    static let maximumCredentialIDLength = 1023

    /// SHA-256 of the RP ID the authenticator used.
    let rpIDHash: [UInt8]
    /// The flags byte.
    let flags: Flags
    /// The signature counter (0 when the authenticator does not keep one).
    let signCount: UInt32
    /// The attested credential data, when AT is set.
    let attestedCredentialData: AttestedCredentialData?
    /// The authenticator extension outputs, when ED is set.
    let extensions: CBORValue?
    /// The whole authenticator data as received (signed over in assertions and `packed`).
    let bytes: [UInt8]

    /// Parses and checks authenticator data.
    ///
    /// - Parameter bytes: the raw authenticator data.
    /// - Throws: `.malformedAuthenticatorData` for layout or flag problems, `.malformedCBOR`
    ///   when the credential public key or extensions cannot be decoded.
    init(bytes: [UInt8]) throws(WebAuthnError) {
        guard bytes.count >= Self.fixedSize else {
            throw WebAuthnError(
                .malformedAuthenticatorData,
                "authenticator data is \(bytes.count) bytes; at least \(Self.fixedSize) are needed")
        }
        guard bytes.count <= Self.maximumSize else {
            throw WebAuthnError(
                .malformedAuthenticatorData,
                "authenticator data is \(bytes.count) bytes; at most \(Self.maximumSize) are accepted")
        }
        self.bytes = bytes
        self.rpIDHash = Array(bytes[0..<32])
        self.flags = Flags(rawValue: bytes[32])
        self.signCount = bytes[33..<37].reduce(UInt32(0)) { ($0 << 8) | UInt32($1) }
        var offset = Self.fixedSize

        if flags.contains(.attestedCredentialData) {
            let header = 16 + 2
            guard bytes.count - offset >= header else {
                throw WebAuthnError(.malformedAuthenticatorData, "AT flag is set but attested credential data is missing or short")
            }
            let aaguid = Array(bytes[offset..<(offset + 16)])
            let idLength = Int(bytes[offset + 16]) << 8 | Int(bytes[offset + 17])
            offset += header
            guard idLength >= Self.minimumCredentialIDLength, idLength <= Self.maximumCredentialIDLength else {
                throw WebAuthnError(
                    .malformedAuthenticatorData,
                    "credential ID is \(idLength) bytes; \(Self.minimumCredentialIDLength)...\(Self.maximumCredentialIDLength) are accepted")
            }
            guard bytes.count - offset >= idLength else {
                throw WebAuthnError(.malformedAuthenticatorData, "credential ID length \(idLength) exceeds the authenticator data")
            }
            let credentialID = Array(bytes[offset..<(offset + idLength)])
            offset += idLength
            let key: CBORValue
            let keyLength: Int
            do {
                (key, keyLength) = try CBORDecoder.decodePrefix(bytes, from: offset)
            } catch {
                throw WebAuthnError(cbor: error, in: "credential public key")
            }
            guard key.mapEntries != nil else {
                throw WebAuthnError(.malformedCOSEKey, "credential public key is not a CBOR map")
            }
            let keyBytes = Array(bytes[offset..<(offset + keyLength)])
            offset += keyLength
            self.attestedCredentialData = AttestedCredentialData(
                aaguid: aaguid, credentialID: credentialID, credentialPublicKey: keyBytes, credentialPublicKeyValue: key)
        } else {
            self.attestedCredentialData = nil
        }

        if flags.contains(.extensionData) {
            guard offset < bytes.count else {
                throw WebAuthnError(.malformedAuthenticatorData, "ED flag is set but no extensions follow")
            }
            let value: CBORValue
            let length: Int
            do {
                (value, length) = try CBORDecoder.decodePrefix(bytes, from: offset)
            } catch {
                throw WebAuthnError(cbor: error, in: "authenticator extensions")
            }
            guard value.mapEntries != nil else {
                throw WebAuthnError(.malformedAuthenticatorData, "authenticator extensions are not a CBOR map")
            }
            offset += length
            self.extensions = value
        } else {
            self.extensions = nil
        }

        guard offset == bytes.count else {
            let why = flags.contains(.extensionData)
                ? "after the extensions"
                : flags.contains(.attestedCredentialData) ? "after the credential public key without the ED flag" : "with neither AT nor ED set"
            throw WebAuthnError(.malformedAuthenticatorData, "\(bytes.count - offset) unexpected bytes \(why)")
        }
    }
}
