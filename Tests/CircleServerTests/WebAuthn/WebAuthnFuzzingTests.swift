import Foundation
import Testing
@testable import CircleServer

/// The fuzz entry point must survive any input; its seeds must reach the deepest checks.
@Suite struct WebAuthnFuzzingTests {
    /// The seed directory: `fuzz-seeds/webauthn` (standalone package) or `tests/fuzz/webauthn`
    /// (Circle), found by walking up from this file.
    static let seedDirectory: URL? = {
        var directory = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        for _ in 0..<6 {
            for candidate in ["fuzz-seeds/webauthn", "tests/fuzz/webauthn"] {
                let url = directory.appendingPathComponent(candidate)
                if FileManager.default.fileExists(atPath: url.path) { return url }
            }
            directory.deleteLastPathComponent()
        }
        return nil
    }()

    static func seeds() throws -> [(name: String, bytes: [UInt8])] {
        let directory = try #require(seedDirectory)
        let names = try FileManager.default.contentsOfDirectory(atPath: directory.path).sorted()
        return try names.map { name in
            (name, [UInt8](try Data(contentsOf: directory.appendingPathComponent(name))))
        }
    }

    /// Splits a framed seed as WebAuthnFuzzing.run does.
    private func unframe(_ bytes: [UInt8]) -> (clientData: [UInt8], signature: [UInt8], rest: [UInt8]) {
        let n = Int(bytes[0]) << 8 | Int(bytes[1])
        let s = Int(bytes[2]) << 8 | Int(bytes[3])
        let body = Array(bytes.dropFirst(4))
        return (Array(body.prefix(n)), Array(body.dropFirst(n).prefix(s)), Array(body.dropFirst(n + s)))
    }

    @Test func seedsExistAndFramedOnesPassEveryCheck() throws {
        let seeds = try Self.seeds()
        #expect(seeds.count >= 10 && seeds.count <= 20)
        let rp = WebAuthnFuzzing.relyingParty
        for (name, bytes) in seeds where name.hasPrefix("framed-registration") {
            let (clientData, _, attestation) = unframe(bytes)
            _ = try rp.verifyRegistration(
                clientDataJSON: clientData, attestationObject: attestation, expectedChallenge: WebAuthnFuzzing.challenge)
        }
        for (name, bytes) in seeds where name == "framed-assertion-es256-counter-2" || name == "framed-assertion-es256-backup" {
            let (clientData, signature, authData) = unframe(bytes)
            _ = try rp.verifyAssertion(
                credential: WebAuthnFuzzing.storedCredential, clientDataJSON: clientData, authenticatorData: authData,
                signature: signature, expectedChallenge: WebAuthnFuzzing.challenge)
        }
    }

    @Test func runsOverFixturesAndSeeds() throws {
        var inputs: [[UInt8]] = try Self.seeds().map(\.bytes)
        let fixtures = WebAuthnFixtures.shared
        for r in fixtures.registrations + fixtures.negativeRegistrations {
            inputs.append(WebAuthnTestBytes.base64URL(r.attestationObject))
            inputs.append(WebAuthnTestBytes.base64URL(r.clientDataJSON))
            for a in r.assertions ?? [] {
                inputs.append(WebAuthnTestBytes.base64URL(a.authenticatorData))
            }
        }
        for a in fixtures.negativeAssertions {
            inputs.append(WebAuthnTestBytes.base64URL(a.authenticatorData))
        }
        for input in inputs {
            WebAuthnFuzzing.run(input)
        }
        #expect(inputs.count > 50)
    }

    @Test func survivesRandomAndMutatedInputs() throws {
        var random = WebAuthnTestRandom(seed: 0x5EED_CAFE)
        let seeds = try Self.seeds().map(\.bytes)
        var runs = 0
        // Random bytes, biased towards CBOR headers so containers and strings appear.
        for _ in 0..<1500 {
            let count = Int.random(in: 0...96, using: &random)
            let bytes = (0..<count).map { _ in
                Bool.random(using: &random)
                    ? UInt8.random(in: 0...255, using: &random)
                    : [0x18, 0x19, 0x1a, 0x1b, 0x5b, 0x7b, 0x9b, 0xbb, 0x81, 0xa1, 0x58, 0x78, 0x98, 0xb8, 0xff, 0xf6].randomElement(using: &random) ?? 0
            }
            WebAuthnFuzzing.run(bytes)
            runs += 1
        }
        // Mutations of the seeds: flipped bits, overwritten bytes, insertions, deletions, cuts.
        for _ in 0..<2500 {
            guard var bytes = seeds.randomElement(using: &random), !bytes.isEmpty else { continue }
            for _ in 0..<Int.random(in: 1...4, using: &random) {
                let index = Int.random(in: 0..<max(bytes.count, 1), using: &random)
                switch Int.random(in: 0..<6, using: &random) {
                case 0 where index < bytes.count:
                    bytes[index] ^= UInt8(1) << UInt8.random(in: 0...7, using: &random)
                case 1 where index < bytes.count:
                    bytes[index] = [0x00, 0xff, 0x7f, 0x80, 0x1b, 0xbf, 0x9f][Int.random(in: 0..<7, using: &random)]
                case 2:
                    bytes.insert(UInt8.random(in: 0...255, using: &random), at: min(index, bytes.count))
                case 3 where index < bytes.count:
                    bytes.remove(at: index)
                case 4:
                    bytes = Array(bytes.prefix(index))
                default:
                    if index < bytes.count { bytes[index] &+= 1 }
                }
            }
            WebAuthnFuzzing.run(bytes)
            runs += 1
        }
        #expect(runs == 4000)
    }

    @Test func survivesOversizedInputs() {
        WebAuthnFuzzing.run([UInt8](repeating: 0x81, count: 70_000))
        WebAuthnFuzzing.run([0xff, 0xff, 0xff, 0xff] + [UInt8](repeating: 0xbb, count: 70_000))
        WebAuthnFuzzing.run([0x00, 0x00, 0x00, 0x00] + [0x5b] + [UInt8](repeating: 0xff, count: 8))
        WebAuthnFuzzing.run([])
        // Deeply nested JSON as clientDataJSON (both within and past the 16 KiB bound).
        for depth in [2_000, 16_000, 40_000] {
            let json = [UInt8](repeating: UInt8(ascii: "["), count: depth)
            WebAuthnFuzzing.run([UInt8(depth >> 8 & 0xff), UInt8(depth & 0xff), 0, 0] + json)
            _ = try? CollectedClientData(bytes: json)
        }
    }
}
