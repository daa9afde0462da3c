import Testing
@testable import CircleServer

/// §7.1 and §7.2 against ceremonies made by soft-webauthn, python-fido2 and cryptography
/// (see scripts/webauthn_fixtures.py), positive and negative.
@Suite struct WebAuthnRelyingPartyTests {
    let fixtures = WebAuthnFixtures.shared
    var rp: WebAuthnRelyingParty { fixtures.relyingParty }

    private func register(_ r: WebAuthnFixtures.Registration, rp: WebAuthnRelyingParty? = nil) throws(WebAuthnError) -> WebAuthnCredential {
        try (rp ?? self.rp).verifyRegistration(
            clientDataJSON: WebAuthnTestBytes.base64URL(r.clientDataJSON),
            attestationObject: WebAuthnTestBytes.base64URL(r.attestationObject),
            expectedChallenge: WebAuthnTestBytes.base64URL(r.challenge))
    }

    private func assert(
        _ a: WebAuthnFixtures.Assertion, credential: WebAuthnStoredCredential, rp: WebAuthnRelyingParty? = nil
    ) throws(WebAuthnError) -> UInt32 {
        try (rp ?? self.rp).verifyAssertion(
            credential: credential,
            clientDataJSON: WebAuthnTestBytes.base64URL(a.clientDataJSON),
            authenticatorData: WebAuthnTestBytes.base64URL(a.authenticatorData),
            signature: WebAuthnTestBytes.base64URL(a.signature),
            expectedChallenge: WebAuthnTestBytes.base64URL(a.challenge))
    }

    private func code(_ body: () throws(WebAuthnError) -> Void) -> WebAuthnError.Code? {
        do {
            try body()
            return nil
        } catch {
            return error.code
        }
    }

    @Test func fixturesCoverBothAlgorithmsAndManyCases() {
        let algorithms = Set(fixtures.registrations.compactMap(\.alg))
        #expect(algorithms == [-7, -257])
        #expect(fixtures.registrations.count >= 6)
        #expect(fixtures.negativeRegistrations.count >= 15)
        #expect(fixtures.negativeAssertions.count >= 12)
    }

    @Test func registrationsVerify() throws {
        for r in fixtures.registrations {
            let credential = try register(r)
            #expect(credential.id == WebAuthnTestBytes.base64URL(r.credentialId ?? ""), "\(r.name)")
            #expect(credential.publicKey == WebAuthnTestBytes.base64URL(r.publicKey ?? ""), "\(r.name)")
            #expect(credential.algorithm.rawValue == r.alg, "\(r.name)")
            #expect(credential.signCount == r.signCount, "\(r.name)")
            #expect(credential.aaguid == WebAuthnTestBytes.base64URL(r.aaguid ?? ""), "\(r.name)")
            #expect(credential.backupEligible == r.backupEligible, "\(r.name)")
            #expect(credential.backedUp == r.backedUp, "\(r.name)")
            #expect(credential.attestationFormat == (r.name.contains("packed") ? "packed" : "none"), "\(r.name)")
            // The stored key parses again on its own.
            #expect(try COSEKey(bytes: credential.publicKey).algorithm == credential.algorithm)
        }
    }

    @Test func assertionsVerifyWithIncreasingCounters() throws {
        var checked = 0
        for r in fixtures.registrations {
            let credential = try register(r)
            var stored = credential.stored
            for a in r.assertions ?? [] {
                let counter = try assert(a, credential: stored)
                #expect(counter == a.signCount, "\(a.name)")
                stored.signCount = counter
                checked += 1
            }
            // Replaying the last assertion is refused unless the authenticator keeps no counter.
            if let last = r.assertions?.last {
                let replay = code { () throws(WebAuthnError) in _ = try assert(last, credential: stored) }
                #expect(replay == (stored.signCount == 0 ? nil : .signCountNotIncreased), "\(last.name)")
            }
        }
        #expect(checked >= 9)
    }

    @Test func rsaAssertionsSkipCounterValues() throws {
        let r = try #require(fixtures.registration(named: "rs256-2048"))
        var stored = try register(r).stored
        #expect(stored.signCount == 5)
        for a in r.assertions ?? [] {
            stored.signCount = try assert(a, credential: stored)
        }
        #expect(stored.signCount == 9)
    }

    @Test("negative registrations", arguments: WebAuthnFixtures.shared.negativeRegistrations.map(\.name))
    func negativeRegistration(name: String) throws {
        let r = try #require(fixtures.negativeRegistrations.first { $0.name == name })
        let expected = try #require(r.expect.flatMap(WebAuthnError.Code.init(rawValue:)))
        #expect(code { () throws(WebAuthnError) in _ = try register(r) } == expected)
    }

    @Test("negative assertions", arguments: WebAuthnFixtures.shared.negativeAssertions.map(\.name))
    func negativeAssertion(name: String) throws {
        let a = try #require(fixtures.negativeAssertions.first { $0.name == name })
        let r = try #require(fixtures.registration(named: a.credential ?? ""))
        let expected = try #require(a.expect.flatMap(WebAuthnError.Code.init(rawValue:)))
        let stored = WebAuthnStoredCredential(
            publicKey: WebAuthnTestBytes.base64URL(r.publicKey ?? ""), signCount: a.storedSignCount ?? 0,
            backupEligible: r.backupEligible)
        #expect(code { () throws(WebAuthnError) in _ = try assert(a, credential: stored) } == expected)
    }

    @Test func otherRelyingPartyRefusesGoodCeremonies() throws {
        let r = try #require(fixtures.registration(named: "es256-soft"))
        let otherID = WebAuthnRelyingParty(id: "example.com", origins: fixtures.rp.origins)
        #expect(code { () throws(WebAuthnError) in _ = try register(r, rp: otherID) } == .rpIDMismatch)
        let otherOrigin = WebAuthnRelyingParty(id: fixtures.rp.id, origins: ["https://chat.example.org"])
        #expect(code { () throws(WebAuthnError) in _ = try register(r, rp: otherOrigin) } == .originNotAllowed)
        let a = try #require(r.assertions?.first)
        let stored = try register(r).stored
        #expect(code { () throws(WebAuthnError) in _ = try assert(a, credential: stored, rp: otherID) } == .rpIDMismatch)
        #expect(code { () throws(WebAuthnError) in _ = try assert(a, credential: stored, rp: otherOrigin) } == .originNotAllowed)
    }

    @Test func wrongStoredKeyIsABadSignature() throws {
        let es = try #require(fixtures.registration(named: "es256-soft"))
        let rs = try #require(fixtures.registration(named: "rs256-2048"))
        let rsStored = try register(rs).stored
        let esStored = try register(es).stored
        let esAssertion = try #require(es.assertions?.first)
        let rsAssertion = try #require(rs.assertions?.first)
        #expect(code { () throws(WebAuthnError) in _ = try assert(esAssertion, credential: rsStored) } == .badSignature)
        #expect(code { () throws(WebAuthnError) in _ = try assert(rsAssertion, credential: esStored) } == .badSignature)
    }

    @Test func tamperedAuthenticatorDataIsABadSignature() throws {
        let r = try #require(fixtures.registration(named: "es256-soft"))
        var a = try #require(r.assertions?.first)
        var bytes = WebAuthnTestBytes.base64URL(a.authenticatorData)
        bytes[36] ^= 0x80  // counter changed after signing
        a.authenticatorData = WebAuthnRelyingParty.base64URLEncoded(bytes)
        #expect(code { () throws(WebAuthnError) in _ = try assert(a, credential: try register(r).stored) } == .badSignature)
    }

    @Test func assertionAgainstRegistrationCeremonyIsWrongType() throws {
        // A registration's clientDataJSON used where an assertion's is expected.
        let r = try #require(fixtures.registration(named: "es256-soft"))
        let a = try #require(r.assertions?.first)
        let stored = try register(r).stored
        let result = code { () throws(WebAuthnError) in
            _ = try rp.verifyAssertion(
                credential: stored, clientDataJSON: WebAuthnTestBytes.base64URL(r.clientDataJSON),
                authenticatorData: WebAuthnTestBytes.base64URL(a.authenticatorData), signature: WebAuthnTestBytes.base64URL(a.signature),
                expectedChallenge: WebAuthnTestBytes.base64URL(r.challenge))
        }
        #expect(result == .wrongType)
    }

    @Test func backupEligibleMustNotChange() throws {
        let r = try #require(fixtures.registration(named: "es256-synced-zero-counter"))
        let a = try #require(r.assertions?.first)
        var stored = try register(r).stored
        #expect(stored.backupEligible == true)
        #expect(try assert(a, credential: stored) == 0)
        stored.backupEligible = false
        #expect(code { () throws(WebAuthnError) in _ = try assert(a, credential: stored) } == .inconsistentBackupFlags)
        stored.backupEligible = nil
        #expect(try assert(a, credential: stored) == 0)
    }

    @Test func callerMistakesAreReported() throws {
        let r = try #require(fixtures.registration(named: "es256-soft"))
        let short = code { () throws(WebAuthnError) in
            _ = try rp.verifyRegistration(
                clientDataJSON: WebAuthnTestBytes.base64URL(r.clientDataJSON),
                attestationObject: WebAuthnTestBytes.base64URL(r.attestationObject), expectedChallenge: [1, 2, 3])
        }
        #expect(short == .invalidRelyingPartyInput)
        let emptyID = WebAuthnRelyingParty(id: "", origins: fixtures.rp.origins)
        #expect(code { () throws(WebAuthnError) in _ = try register(r, rp: emptyID) } == .invalidRelyingPartyInput)
        let stored = WebAuthnStoredCredential(publicKey: [0xa0], signCount: 0)
        let a = try #require(r.assertions?.first)
        #expect(code { () throws(WebAuthnError) in _ = try assert(a, credential: stored) } == .malformedCOSEKey)
    }

    @Test func malformedClientData() throws {
        let r = try #require(fixtures.registration(named: "es256-soft"))
        let att = WebAuthnTestBytes.base64URL(r.attestationObject)
        let challenge = WebAuthnTestBytes.base64URL(r.challenge)
        let encoded = WebAuthnRelyingParty.base64URLEncoded(challenge)
        let cases: [(String, WebAuthnError.Code)] = [
            ("", .malformedClientData),
            ("[]", .malformedClientData),
            ("\"webauthn.create\"", .malformedClientData),
            ("{\"type\":\"webauthn.create\",\"challenge\":\"\(encoded)\"}", .malformedClientData),
            ("{\"type\":1,\"challenge\":\"\(encoded)\",\"origin\":\"https://chat.example.com\"}", .malformedClientData),
            ("{\"type\":\"webauthn.create\",\"challenge\":\"\(encoded)\",\"origin\":\"https://chat.example.com\",\"crossOrigin\":\"no\"}", .malformedClientData),
            ("{\"type\":\"webauthn.create\",\"challenge\":\"\(encoded)=\",\"origin\":\"https://chat.example.com\"}", .challengeMismatch),
            ("{\"type\":\"webauthn.create\",\"challenge\":\"\(encoded)\",\"origin\":\"https://chat.example.com/\"}", .originNotAllowed),
            ("{\"type\":\"webauthn.create\",\"challenge\":\"\(encoded)\",\"origin\":\"https://chat.example.com\",\"crossOrigin\":false,\"future\":{\"x\":[1]}}", nil),
        ].map { ($0.0, $0.1 ?? .malformedClientData) }
        for (json, expected) in cases {
            let result = code { () throws(WebAuthnError) in
                _ = try rp.verifyRegistration(clientDataJSON: Array(json.utf8), attestationObject: att, expectedChallenge: challenge)
            }
            if json.contains("future") {
                #expect(result == nil, "\(json)")
            } else {
                #expect(result == expected, "\(json)")
            }
        }
        let huge = [UInt8](repeating: 0x20, count: CollectedClientData.maximumSize + 1)
        #expect(code { () throws(WebAuthnError) in
            _ = try rp.verifyRegistration(clientDataJSON: huge, attestationObject: att, expectedChallenge: challenge)
        } == .malformedClientData)
    }

    @Test func messagesDoNotEchoLargeInput() throws {
        let r = try #require(fixtures.registration(named: "es256-soft"))
        let challenge = WebAuthnTestBytes.base64URL(r.challenge)
        let long = String(repeating: "A", count: 5000)
        let json = "{\"type\":\"\(long)\",\"challenge\":\"\(long)\",\"origin\":\"\(long)\"}"
        do {
            _ = try rp.verifyRegistration(
                clientDataJSON: Array(json.utf8), attestationObject: WebAuthnTestBytes.base64URL(r.attestationObject),
                expectedChallenge: challenge)
            Issue.record("expected a refusal")
        } catch {
            #expect(error.code == .wrongType)
            #expect(error.description.count < 200)
        }
        // An unsupported attestation format with a long name is cut short in the message.
        var decoded = try CBORDecoder.decode(WebAuthnTestBytes.base64URL(r.attestationObject))
        guard case .map(var entries) = decoded else { Issue.record("not a map"); return }
        for index in entries.indices where entries[index].key == .text("fmt") {
            entries[index].value = .text(long)
        }
        decoded = .map(entries)
        let encoded = WebAuthnTestCBOREncoder.encode(decoded)
        do {
            _ = try rp.verifyRegistration(
                clientDataJSON: WebAuthnTestBytes.base64URL(r.clientDataJSON), attestationObject: encoded, expectedChallenge: challenge)
            Issue.record("expected a refusal")
        } catch {
            #expect(error.code == .unsupportedAttestation)
            #expect(error.description.count < 300)
        }
    }
}
