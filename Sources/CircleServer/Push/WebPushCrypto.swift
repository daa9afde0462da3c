import CircleWire
import Crypto
import Foundation

extension Base64URL {
    /// Base64url without padding (RFC 4648 §5), as Web Push writes keys and JWTs.
    package static func encode(_ bytes: some Sequence<UInt8>) -> String {
        WebAuthnRelyingParty.base64URLEncoded(Array(bytes))
    }

    /// Decodes a string's UTF-8.
    package static func decode(_ text: String) -> [UInt8]? {
        Self.decode(text.utf8)
    }
}

/// The `aes128gcm` message encryption of Web Push (RFC 8291, over RFC 8188): ECDH on P-256
/// between a fresh key pair and the subscriber's `p256dh` key, the subscription's `auth` secret,
/// HKDF-SHA256, and one AES-128-GCM record.
package enum WebPushEncryption {
    /// The record size written in the header: one record holds the whole message.
    static let recordSize: UInt32 = 4096
    /// Header (salt 16, rs 4, idlen 1, key 65) and the GCM tag: what encryption adds to a plaintext.
    static let overhead = 16 + 4 + 1 + 65 + 16 + 1
    /// The longest plaintext: one record of ``recordSize`` less the tag and the delimiter.
    static let maxPlaintextBytes = Int(recordSize) - 16 - 1

    package enum Failure: Error, Equatable {
        case badSubscriberKey
        case tooLong
    }

    /// Encrypts `plaintext` for a subscriber. `ephemeral` and `salt` are fresh unless given (the
    /// RFC's example gives both); `padding` zero bytes are added after the delimiter.
    package static func encrypt(
        _ plaintext: [UInt8],
        subscriberKey: [UInt8],
        authSecret: [UInt8],
        ephemeral: P256.KeyAgreement.PrivateKey = P256.KeyAgreement.PrivateKey(),
        salt: [UInt8]? = nil,
        padding: Int = 0
    ) throws(Failure) -> [UInt8] {
        guard plaintext.count + padding <= Self.maxPlaintextBytes else { throw .tooLong }
        guard subscriberKey.count == 65, subscriberKey.first == 4,
            let receiver = try? P256.KeyAgreement.PublicKey(x963Representation: subscriberKey),
            let shared = try? ephemeral.sharedSecretFromKeyAgreement(with: receiver)
        else { throw .badSubscriberKey }
        let salt = salt ?? (0..<16).map { _ in UInt8.random(in: 0...255) }
        let senderKey = Array(ephemeral.publicKey.x963Representation)
        let ecdh = shared.withUnsafeBytes { Array($0) }

        // RFC 8291 §3.4: IKM from the ECDH secret and the auth secret, keyed by both public keys.
        let keyInfo = Array("WebPush: info".utf8) + [0] + subscriberKey + senderKey
        let prkKey = HKDF<SHA256>.extract(inputKeyMaterial: SymmetricKey(data: ecdh), salt: authSecret)
        let ikm = HKDF<SHA256>.expand(pseudoRandomKey: prkKey, info: keyInfo, outputByteCount: 32)
        // RFC 8188 §2.2/2.3: the content encryption key and the nonce.
        let prk = ikm.withUnsafeBytes { HKDF<SHA256>.extract(inputKeyMaterial: SymmetricKey(data: Array($0)), salt: salt) }
        let cek = HKDF<SHA256>.expand(pseudoRandomKey: prk, info: Array("Content-Encoding: aes128gcm".utf8) + [0], outputByteCount: 16)
        let nonce = HKDF<SHA256>.expand(pseudoRandomKey: prk, info: Array("Content-Encoding: nonce".utf8) + [0], outputByteCount: 12)

        // The last (and only) record: the plaintext, the delimiter 2, then zeros.
        let record = plaintext + [2] + [UInt8](repeating: 0, count: padding)
        let sealed: AES.GCM.SealedBox
        do {
            sealed = try AES.GCM.seal(record, using: cek, nonce: AES.GCM.Nonce(data: nonce.withUnsafeBytes { Array($0) }))
        } catch {
            // Only a nonce of the wrong length throws, and HKDF made it 12 bytes.
            throw .badSubscriberKey
        }
        var header = salt
        withUnsafeBytes(of: Self.recordSize.bigEndian) { header += $0 }
        header.append(UInt8(senderKey.count))
        header += senderKey
        return header + Array(sealed.ciphertext) + Array(sealed.tag)
    }
}

/// The VAPID `Authorization` headers in use, one per push service origin: an ES256 signature
/// costs more than the encryption's AES-GCM, and RFC 8292 lets one JWT serve every push to its
/// audience until it expires. A header is made valid for ``lifetime`` and replaced once it has
/// been used for ``renewAfter``, so that every header sent has at least 11 hours left. Pure (the
/// signing is passed in); the dispatcher keeps it behind a lock.
struct VAPIDHeaderCache: Sendable {
    /// Seconds a header is valid: within RFC 8292's 24 hours, with room for clocks that disagree.
    static let lifetime: Int64 = 12 * 3600
    /// Seconds after which a header is made anew.
    static let renewAfter: Int64 = 3600
    /// Origins kept at most; past it the cache starts again (push services are few: FCM,
    /// Mozilla, Apple, Microsoft; a test's endpoints may be many).
    static let capacity = 256

    private struct Key: Hashable {
        var audience: String
        var subject: String
    }
    private var headers: [Key: (value: String, madeAt: Int64)] = [:]

    /// The header for `audience` at `now` (seconds since 1970), made with `sign(expires)` when
    /// there is none young enough.
    mutating func header(audience: String, subject: String, now: Int64, sign: (_ expires: Int64) -> String) -> String {
        let key = Key(audience: audience, subject: subject)
        if let kept = self.headers[key], now >= kept.madeAt, now - kept.madeAt < Self.renewAfter {
            return kept.value
        }
        if self.headers.count >= Self.capacity { self.headers.removeAll(keepingCapacity: true) }
        let value = sign(now + Self.lifetime)
        self.headers[key] = (value, now)
        return value
    }
}

/// VAPID (RFC 8292): the application server's P-256 key signs a short JWT for each push
/// service origin; `Authorization: vapid t=<jwt>,k=<public key>`.
package struct VAPIDKey: Sendable {
    let privateKey: P256.Signing.PrivateKey

    package init(privateKey: P256.Signing.PrivateKey = P256.Signing.PrivateKey()) {
        self.privateKey = privateKey
    }

    /// From its raw 32-byte scalar in base64url (how the store keeps it).
    init?(stored: String) {
        guard let raw = Base64URL.decode(stored), raw.count == 32, let key = try? P256.Signing.PrivateKey(rawRepresentation: raw) else { return nil }
        self.privateKey = key
    }

    /// The raw private scalar, base64url: what the store keeps.
    var stored: String { Base64URL.encode(self.privateKey.rawRepresentation) }

    /// The uncompressed public key (65 bytes) in base64url: the page's `applicationServerKey`.
    var publicKey: String { Base64URL.encode(self.privateKey.publicKey.x963Representation) }

    /// The longest a JWT may be valid (RFC 8292 §2: no more than 24 hours).
    static let maxLifetime: Int64 = 24 * 3600

    /// The `Authorization` header value for a push to `audience` (the endpoint's origin),
    /// valid until `expires` (seconds since 1970), naming `subject` (mailto: or https:).
    package func authorization(audience: String, subject: String, expires: Int64) -> String {
        struct Header: Encodable {
            var typ = "JWT"
            var alg = "ES256"
        }
        struct Claims: Encodable {
            var aud: String
            var exp: Int64
            var sub: String
        }
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        let header = Base64URL.encode((try? encoder.encode(Header())) ?? Data())
        let claims = Base64URL.encode((try? encoder.encode(Claims(aud: audience, exp: expires, sub: subject))) ?? Data())
        let input = header + "." + claims
        let signature = (try? self.privateKey.signature(for: Data(input.utf8)).rawRepresentation) ?? Data()
        // No space after the comma (the auth-param list allows none): some parsers, py_vapid's
        // among them, split the scheme off at the last space.
        return "vapid t=\(input).\(Base64URL.encode(signature)),k=\(self.publicKey)"
    }
}
