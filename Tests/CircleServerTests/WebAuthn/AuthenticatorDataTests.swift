import Crypto
import Testing
@testable import CircleServer

/// Authenticator data layout and flag consistency (WebAuthn L3 §6.1, §6.5.2).
@Suite struct AuthenticatorDataTests {
    private let rpIDHash = Array(SHA256.hash(data: Array("chat.example.com".utf8)))

    private func code(_ bytes: [UInt8]) -> WebAuthnError.Code? {
        do {
            _ = try AuthenticatorData(bytes: bytes)
            return nil
        } catch {
            return error.code
        }
    }

    private func header(_ flags: UInt8, counter: [UInt8] = [0, 0, 0, 1]) -> [UInt8] {
        rpIDHash + [flags] + counter
    }

    private func credential(idLength: Int, key: [UInt8]? = nil) -> [UInt8] {
        let cose = key ?? (try? COSEKey(bytes: WebAuthnTestBytes.base64URL(WebAuthnFixtures.shared.registrations[0].publicKey ?? "")))?.bytes ?? []
        return [UInt8](repeating: 0xaa, count: 16) + [UInt8(idLength >> 8), UInt8(idLength & 0xff)]
            + [UInt8](repeating: 0x42, count: idLength) + cose
    }

    @Test func minimalAssertionData() throws {
        let data = try AuthenticatorData(bytes: header(0x05, counter: [0x01, 0x02, 0x03, 0x04]))
        #expect(data.rpIDHash == rpIDHash)
        #expect(data.flags == [.userPresent, .userVerified])
        #expect(data.signCount == 0x0102_0304)
        #expect(data.attestedCredentialData == nil)
        #expect(data.extensions == nil)
    }

    @Test func attestedCredentialDataAndExtensions() throws {
        let extensions = WebAuthnTestCBOREncoder.encode(.map([.init(key: .text("credProtect"), value: .unsigned(2))]))
        let bytes = header(0x45 | 0x80 | 0x18) + credential(idLength: 32) + extensions
        let data = try AuthenticatorData(bytes: bytes)
        let attested = try #require(data.attestedCredentialData)
        #expect(attested.aaguid == [UInt8](repeating: 0xaa, count: 16))
        #expect(attested.credentialID == [UInt8](repeating: 0x42, count: 32))
        #expect(try COSEKey(bytes: attested.credentialPublicKey).algorithm == .es256)
        #expect(data.extensions?[name: "credProtect"] == .unsigned(2))
        #expect(data.flags.contains([.backupEligible, .backedUp]))
    }

    @Test func refusals() {
        let extensions = WebAuthnTestCBOREncoder.encode(.map([]))
        let cases: [(String, [UInt8], WebAuthnError.Code)] = [
            ("empty", [], .malformedAuthenticatorData),
            ("36 bytes", Array(header(0x05).dropLast()), .malformedAuthenticatorData),
            ("AT without data", header(0x45), .malformedAuthenticatorData),
            ("AT with short header", header(0x45) + [UInt8](repeating: 0, count: 17), .malformedAuthenticatorData),
            ("credential ID of 15 bytes", header(0x45) + credential(idLength: 15), .malformedAuthenticatorData),
            ("credential ID of 1024 bytes", header(0x45) + credential(idLength: 1024), .malformedAuthenticatorData),
            ("credential ID past the end", Array((header(0x45) + credential(idLength: 64)).prefix(37 + 18 + 40)), .malformedAuthenticatorData),
            ("no key after credential ID", header(0x45) + credential(idLength: 16, key: []), .malformedCBOR),
            ("key is not a map", header(0x45) + credential(idLength: 16, key: [0x80]), .malformedCOSEKey),
            ("truncated key", Array((header(0x45) + credential(idLength: 16)).dropLast()), .malformedCBOR),
            ("trailing bytes after key without ED", header(0x45) + credential(idLength: 16) + extensions, .malformedAuthenticatorData),
            ("trailing bytes without AT or ED", header(0x05) + [0x00], .malformedAuthenticatorData),
            ("ED without extensions", header(0x85), .malformedAuthenticatorData),
            ("ED with non-map extensions", header(0x85) + [0x01], .malformedAuthenticatorData),
            ("ED with bytes after extensions", header(0x85) + extensions + [0x00], .malformedAuthenticatorData),
            ("ED with indefinite map", header(0x85) + [0xbf, 0xff], .malformedCBOR),
            ("larger than 16 KiB", header(0x85) + [0x5a, 0x00, 0x00, 0x40, 0x00] + [UInt8](repeating: 0, count: 0x4000), .malformedAuthenticatorData),
        ]
        for (name, bytes, expected) in cases {
            #expect(code(bytes) == expected, "\(name)")
        }
    }

    @Test func credentialIDBounds() throws {
        #expect(try AuthenticatorData(bytes: header(0x45) + credential(idLength: 16)).attestedCredentialData?.credentialID.count == 16)
        #expect(try AuthenticatorData(bytes: header(0x45) + credential(idLength: 1023)).attestedCredentialData?.credentialID.count == 1023)
    }
}
