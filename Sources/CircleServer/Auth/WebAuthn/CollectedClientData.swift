import Foundation

/// The members of `clientDataJSON` (WebAuthn L3 §5.8.1) that verification reads.
///
/// Parsing (§7.1 steps 5–6, §7.2 steps 9–10): at most ``maximumSize`` bytes, UTF-8 JSON
/// whose top level is an object with string members `type`, `challenge` and `origin`,
/// an optional boolean `crossOrigin` and an optional string `topOrigin`. Other members
/// (such as `tokenBinding` or future additions) are ignored, as the spec requires.
struct CollectedClientData: Sendable {
    /// Largest `clientDataJSON` accepted. Browsers send about 150–300 bytes; 16 KiB bounds
    /// the JSON parser's work while leaving room for long origins and future members.
    static let maximumSize = 16 * 1024

    /// `webauthn.create` or `webauthn.get`.
    let type: String
    /// The challenge, base64url without padding, as the client encoded it.
    let challenge: String
    /// The origin of the page that called WebAuthn.
    let origin: String
    /// Whether the call came from a cross-origin iframe (`nil` when absent).
    let crossOrigin: Bool?
    /// The top-level origin when the call came from an iframe (`nil` when absent).
    let topOrigin: String?

    private struct Members: Decodable {
        var type: String
        var challenge: String
        var origin: String
        var crossOrigin: Bool?
        var topOrigin: String?
    }

    /// Parses `clientDataJSON`.
    ///
    /// - Parameter bytes: the raw `clientDataJSON`.
    /// - Throws: `.malformedClientData` when it is too large, not a JSON object, or a
    ///   member is missing or has the wrong type.
    init(bytes: [UInt8]) throws(WebAuthnError) {
        guard bytes.count <= Self.maximumSize else {
            throw WebAuthnError(
                .malformedClientData,
                "clientDataJSON is \(bytes.count) bytes; at most \(Self.maximumSize) are accepted")
        }
        // JSONDecoder would accept a top-level JSON string such as "\"…\"" only for
        // single-value types; a keyed struct requires an object, which is what we need.
        let members: Members
        do {
            members = try JSONDecoder().decode(Members.self, from: Data(bytes))
        } catch {
            throw WebAuthnError(
                .malformedClientData,
                "clientDataJSON is not a JSON object with string type, challenge and origin members")
        }
        self.type = members.type
        self.challenge = members.challenge
        self.origin = members.origin
        self.crossOrigin = members.crossOrigin
        self.topOrigin = members.topOrigin
    }
}
