import Crypto
import Testing
@testable import CircleServer

/// COSE_Key parsing (RFC 9052/9053, RFC 8230) and signature checks.
@Suite struct COSEKeyTests {
    private func code(_ body: () throws(WebAuthnError) -> Void) -> WebAuthnError.Code? {
        do {
            try body()
            return nil
        } catch {
            return error.code
        }
    }

    private func key(_ entries: [(Int64, CBORValue)]) -> [UInt8] {
        WebAuthnTestCBOREncoder.encode(.map(entries.map { label, value in
            CBORValue.MapEntry(key: label >= 0 ? .unsigned(UInt64(label)) : .negative(UInt64(-1 - label)), value: value)
        }))
    }

    private func int(_ n: Int64) -> CBORValue {
        n >= 0 ? .unsigned(UInt64(n)) : .negative(UInt64(-1 - n))
    }

    private func p256Entries(_ privateKey: P256.Signing.PrivateKey) -> [(Int64, CBORValue)] {
        let point = Array(privateKey.publicKey.x963Representation)
        return [(1, int(2)), (3, int(-7)), (-1, int(1)), (-2, .bytes(Array(point[1..<33]))), (-3, .bytes(Array(point[33...])))]
    }

    @Test func p256KeyVerifiesItsSignatures() throws {
        let privateKey = P256.Signing.PrivateKey()
        let bytes = key(p256Entries(privateKey))
        let cose = try COSEKey(bytes: bytes)
        #expect(cose.algorithm == .es256)
        #expect(cose.bytes == bytes)
        let data = Array("authenticatorData || clientDataHash".utf8)
        let signature = Array(try privateKey.signature(for: data).derRepresentation)
        #expect(cose.isValidSignature(signature, for: data))
        #expect(!cose.isValidSignature(signature, for: data + [0]))
        #expect(!cose.isValidSignature(Array(signature.dropLast()), for: data))
        #expect(!cose.isValidSignature([], for: data))
        // A raw r||s signature is not DER and is refused.
        let raw = Array(try privateKey.signature(for: data).rawRepresentation)
        #expect(!cose.isValidSignature(raw, for: data))
        let other = try COSEKey(bytes: key(p256Entries(P256.Signing.PrivateKey())))
        #expect(!other.isValidSignature(signature, for: data))
    }

    @Test func fixtureRSAKeysParse() throws {
        for r in WebAuthnFixtures.shared.registrations where r.alg == -257 {
            let cose = try COSEKey(bytes: WebAuthnTestBytes.base64URL(r.publicKey ?? ""))
            #expect(cose.algorithm == .rs256)
            for length in [0, 1, 255, 256, 257, 511, 512, 513, 1024] {
                #expect(!cose.isValidSignature([UInt8](repeating: 0xff, count: length), for: [1, 2, 3]))
                #expect(!cose.isValidSignature([UInt8](repeating: 0x01, count: length), for: [1, 2, 3]))
            }
        }
    }

    @Test func refusals() throws {
        let valid = p256Entries(P256.Signing.PrivateKey())
        func replacing(_ label: Int64, with value: CBORValue?) -> [UInt8] {
            var entries = valid.filter { $0.0 != label }
            if let value { entries.append((label, value)) }
            return key(entries)
        }
        let x = valid[3].1
        let cases: [(String, [UInt8], WebAuthnError.Code)] = [
            ("not a map", WebAuthnTestCBOREncoder.encode(.array([])), .malformedCOSEKey),
            ("not CBOR", [0xff], .malformedCBOR),
            ("trailing bytes", key(valid) + [0x00], .malformedCBOR),
            ("no alg", replacing(3, with: nil), .malformedCOSEKey),
            ("text alg", replacing(3, with: .text("ES256")), .malformedCOSEKey),
            ("EdDSA", key([(1, int(1)), (3, int(-8)), (-1, int(6)), (-2, x)]), .unsupportedAlgorithm),
            ("ES384", replacing(3, with: int(-35)), .unsupportedAlgorithm),
            ("PS256", replacing(3, with: int(-37)), .unsupportedAlgorithm),
            ("no kty", replacing(1, with: nil), .malformedCOSEKey),
            ("RSA kty with ES256", replacing(1, with: int(3)), .malformedCOSEKey),
            ("P-384 curve", replacing(-1, with: int(2)), .unsupportedAlgorithm),
            ("short x", replacing(-2, with: .bytes([UInt8](repeating: 1, count: 31))), .malformedCOSEKey),
            ("no y", replacing(-3, with: nil), .malformedCOSEKey),
            ("y as text", replacing(-3, with: .text("y")), .malformedCOSEKey),
            ("point not on the curve", replacing(-3, with: .bytes([UInt8](repeating: 0, count: 32))), .malformedCOSEKey),
            ("private key present", replacing(-4, with: .bytes([UInt8](repeating: 1, count: 32))), .malformedCOSEKey),
            ("RSA 1024", rsa(bits: 1024), .unsupportedAlgorithm),
            ("RSA 2047", rsa(bits: 2047), .unsupportedAlgorithm),
            ("RSA 4097", rsa(bits: 4097), .unsupportedAlgorithm),
            ("RSA even exponent", rsa(bits: 2048, e: [0x01, 0x00, 0x00]), .malformedCOSEKey),
            ("RSA exponent 1", rsa(bits: 2048, e: [0x01]), .malformedCOSEKey),
            ("RSA empty exponent", rsa(bits: 2048, e: []), .malformedCOSEKey),
            ("RSA 5-byte exponent", rsa(bits: 2048, e: [1, 0, 0, 0, 1]), .malformedCOSEKey),
            ("RSA without n", key([(1, int(3)), (3, int(-257)), (-2, .bytes([1, 0, 1]))]), .malformedCOSEKey),
            ("RSA with EC2 kty", key([(1, int(2)), (3, int(-257)), (-1, .bytes([1])), (-2, .bytes([1, 0, 1]))]), .malformedCOSEKey),
        ]
        for (name, bytes, expected) in cases {
            #expect(code { () throws(WebAuthnError) in _ = try COSEKey(bytes: bytes) } == expected, "\(name)")
        }
    }

    /// An RSA COSE key whose modulus has exactly `bits` bits (an odd number, not a real key).
    private func rsa(bits: Int, e: [UInt8] = [0x01, 0x00, 0x01]) -> [UInt8] {
        var n = [UInt8](repeating: 0xa5, count: (bits + 7) / 8)
        let topBits = bits % 8 == 0 ? 8 : bits % 8
        n[0] = UInt8(1 << (topBits - 1))
        n[n.count - 1] |= 1
        return key([(1, int(3)), (3, int(-257)), (-1, .bytes([0] + n)), (-2, .bytes(e))])
    }
}
