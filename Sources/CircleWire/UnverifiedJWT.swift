import Foundation

/// A compact JWT split and read without checking its signature: which issuer's keys to verify
/// it with (`iss`), which key (`kid`) and algorithm (`alg`) it names (the server), who it names
/// (`sub`, the SDK). Nothing read here is trusted until the signature is checked with the key
/// chosen from it; the SDK only shows whom its token claims to be.
package struct UnverifiedJWT: Sendable {
    /// The largest token read, in bytes (a header, claims and an RSA-4096 signature fit many times).
    package static let maxTokenBytes = 16 * 1024

    package var algorithm: String
    package var keyID: String?
    /// The payload's claims (a JSON object).
    package var claims: JSONValue

    /// The payload's `iss`, when it is a string.
    package var issuer: String? {
        if case .string(let value)? = self.claims["iss"] { return value }
        return nil
    }

    /// The payload's `sub`, when it is a string.
    package var subject: String? {
        if case .string(let value)? = self.claims["sub"] { return value }
        return nil
    }

    /// Splits and decodes `token`; `nil` when it is not a compact JWS with a JSON object header
    /// (with a string `alg`) and a JSON object payload. Duplicate keys are refused.
    package static func parse(_ token: some StringProtocol) -> UnverifiedJWT? {
        guard token.utf8.count <= Self.maxTokenBytes else { return nil }
        let parts = token.utf8.split(separator: UInt8(ascii: "."), omittingEmptySubsequences: false)
        guard parts.count == 3, !parts[2].isEmpty,
            let headerBytes = Base64URL.decode(parts[0]),
            let payloadBytes = Base64URL.decode(parts[1]),
            case .success(let header) = JSONParser.parse(headerBytes),
            case .success(let claims) = JSONParser.parse(payloadBytes),
            case .object = header, case .object = claims,
            case .string(let algorithm)? = header["alg"]
        else { return nil }
        var keyID: String?
        switch header["kid"] {
        case nil: break
        case .string(let value)?: keyID = value
        default: return nil
        }
        // A critical extension this server does not know must not be ignored (RFC 7515 4.1.11).
        if header["crit"] != nil { return nil }
        return UnverifiedJWT(algorithm: algorithm, keyID: keyID, claims: claims)
    }
}

/// Base64url without padding (RFC 7515 section 2), as JWTs and JWKs use it.
package enum Base64URL {
    /// Decodes base64url text (padding tolerated); `nil` for any other character.
    package static func decode(_ text: some Collection<UInt8>) -> [UInt8]? {
        var output: [UInt8] = []
        output.reserveCapacity(text.count * 3 / 4)
        var accumulator: UInt32 = 0
        var bits = 0
        var sawPadding = false
        for byte in text {
            let value: UInt8
            switch byte {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"): value = byte - UInt8(ascii: "A")
            case UInt8(ascii: "a")...UInt8(ascii: "z"): value = byte - UInt8(ascii: "a") + 26
            case UInt8(ascii: "0")...UInt8(ascii: "9"): value = byte - UInt8(ascii: "0") + 52
            case UInt8(ascii: "-"): value = 62
            case UInt8(ascii: "_"): value = 63
            case UInt8(ascii: "="):
                sawPadding = true
                continue
            default: return nil
            }
            if sawPadding { return nil }
            accumulator = (accumulator << 6) | UInt32(value)
            bits += 6
            if bits >= 8 {
                bits -= 8
                output.append(UInt8((accumulator >> UInt32(bits)) & 0xFF))
            }
        }
        // 6 bits left over cannot come from whole bytes.
        if bits >= 6 { return nil }
        return output
    }
}
