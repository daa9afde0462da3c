import Foundation
@testable import CircleServer

/// The fixtures made by scripts/webauthn_fixtures.py with soft-webauthn, python-fido2 and
/// cryptography, each checked there by python-fido2's Fido2Server.
struct WebAuthnFixtures: Decodable, Sendable {
    struct RelyingParty: Decodable, Sendable {
        var id: String
        var origins: [String]
    }

    struct Assertion: Decodable, Sendable {
        var name: String
        var challenge: String
        var clientDataJSON: String
        var authenticatorData: String
        var signature: String
        var signCount: UInt32?
        var credential: String?
        var storedSignCount: UInt32?
        var expect: String?
    }

    struct Registration: Decodable, Sendable {
        var name: String
        var challenge: String
        var clientDataJSON: String
        var attestationObject: String
        var alg: Int64?
        var credentialId: String?
        var publicKey: String?
        var signCount: UInt32?
        var aaguid: String?
        var backupEligible: Bool?
        var backedUp: Bool?
        var assertions: [Assertion]?
        var expect: String?
    }

    var rp: RelyingParty
    var registrations: [Registration]
    var negativeRegistrations: [Registration]
    var negativeAssertions: [Assertion]

    /// The relying party the fixtures were made for.
    var relyingParty: WebAuthnRelyingParty { WebAuthnRelyingParty(id: rp.id, origins: rp.origins) }

    /// The registration with this name.
    func registration(named name: String) -> Registration? {
        registrations.first { $0.name == name }
    }

    /// The fixture file beside this source file.
    static let fileURL = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent()
        .appendingPathComponent("Fixtures/webauthn.json")

    /// Loads the fixtures; traps when the file is missing, as every test needs it.
    static let shared: WebAuthnFixtures = {
        let data = try! Data(contentsOf: fileURL)
        return try! JSONDecoder().decode(WebAuthnFixtures.self, from: data)
    }()
}
