import CircleWire
import Foundation
import JWTKit

/// A JSON Web Key Set (RFC 7517 section 5) read with this server's limits: the signature keys
/// it may verify tokens with, each with the algorithms its type allows.
///
/// Only public signature keys of these kinds are kept: RSA (2048–8192 bits; RS256, PS256), EC
/// P-256 (ES256) and OKP Ed25519 (EdDSA). Keys marked `"use": "enc"`, of other types or curves,
/// without a `kid`, or whose `alg` is not one of those are skipped with a note; a document
/// that is not JSON, has no `keys` array, is larger than ``maxBytes`` or lists more than
/// ``maxKeys`` keys is refused as a whole (the issuer keeps its previous keys).
package struct JWKSDocument: Sendable {
    /// The largest JWKS document read, in bytes.
    package static let maxBytes = 64 * 1024
    /// The most keys one document may list.
    package static let maxKeys = 100
    /// The longest `kid`, in bytes.
    package static let maxKeyIDBytes = 256

    /// The token algorithms keys from a JWKS may verify.
    package static let supportedAlgorithms: Set<String> = ["RS256", "PS256", "ES256", "EdDSA"]

    /// One usable key.
    package struct Key: Sendable {
        package var id: String
        /// The algorithms a token signed with this key may name in its header: the JWK's `alg`
        /// when it has one, otherwise every supported algorithm of its key type.
        package var algorithms: Set<String>
        /// The public key, without `alg` (the verifier sets the one the token names).
        package var jwk: JWK
    }

    /// Why a document was refused.
    package struct Failure: Error, Sendable, CustomStringConvertible {
        package var message: String
        package var description: String { self.message }
    }

    package var keys: [Key]
    /// Sentences about skipped keys, for the log.
    package var notes: [String]

    /// Reads a JWKS document.
    package static func parse(_ bytes: some Collection<UInt8>) -> Result<JWKSDocument, Failure> {
        guard bytes.count <= Self.maxBytes else {
            return .failure(Failure(message: "the JWKS has \(bytes.count) bytes, more than the limit of \(Self.maxBytes)"))
        }
        let root: JSONValue
        switch JSONParser.parse(bytes) {
        case .success(let value): root = value
        case .failure: return .failure(Failure(message: "the JWKS is not valid JSON"))
        }
        guard case .array(let entries)? = root["keys"] else {
            return .failure(Failure(message: "the JWKS has no \"keys\" array"))
        }
        guard entries.count <= Self.maxKeys else {
            return .failure(Failure(message: "the JWKS lists \(entries.count) keys, more than the limit of \(Self.maxKeys)"))
        }
        var document = JWKSDocument(keys: [], notes: [])
        var seen: Set<String> = []
        for (index, entry) in entries.enumerated() {
            switch Self.key(entry) {
            case .success(let key):
                if seen.insert(key.id).inserted {
                    document.keys.append(key)
                } else {
                    document.notes.append("key \(index) (kid \"\(key.id)\") repeats a kid; the first one is used")
                }
            case .failure(let failure):
                document.notes.append("key \(index) skipped: \(failure.message)")
            }
        }
        return .success(document)
    }

    private static func string(_ value: JSONValue?, _ name: String) -> Result<String?, Failure> {
        switch value {
        case nil: return .success(nil)
        case .string(let text)?: return .success(text)
        default: return .failure(Failure(message: "\"\(name)\" is not a string"))
        }
    }

    private static func key(_ entry: JSONValue) -> Result<Key, Failure> {
        guard case .object = entry else { return .failure(Failure(message: "not a JSON object")) }
        var fields: [String: String] = [:]
        for name in ["kty", "kid", "alg", "use", "n", "e", "crv", "x", "y"] {
            switch Self.string(entry[name], name) {
            case .success(let value): fields[name] = value
            case .failure(let failure): return .failure(failure)
            }
        }
        guard let kid = fields["kid"], !kid.isEmpty else { return .failure(Failure(message: "no \"kid\"")) }
        guard kid.utf8.count <= Self.maxKeyIDBytes else { return .failure(Failure(message: "a \"kid\" longer than \(Self.maxKeyIDBytes) bytes")) }
        if let use = fields["use"], use != "sig" { return .failure(Failure(message: "\"use\" is \"\(use)\", not \"sig\"")) }
        if entry["d"] != nil { return .failure(Failure(message: "a private key (\"d\") does not belong in a JWKS")) }
        let typeAlgorithms: Set<String>
        var jwkFields: [String: String] = ["kid": kid]
        switch fields["kty"] {
        case "RSA":
            guard let n = fields["n"], let e = fields["e"], let modulus = Base64URL.decode(n.utf8), let exponent = Base64URL.decode(e.utf8) else {
                return .failure(Failure(message: "an RSA key needs base64url \"n\" and \"e\""))
            }
            let bits = Self.bitLength(modulus)
            guard (2048...8192).contains(bits) else { return .failure(Failure(message: "an RSA modulus of \(bits) bits (2048–8192 accepted)")) }
            guard !exponent.isEmpty, exponent.count <= 8 else { return .failure(Failure(message: "an RSA exponent of \(exponent.count) bytes")) }
            typeAlgorithms = ["RS256", "PS256"]
            jwkFields["kty"] = "RSA"
            jwkFields["n"] = n
            jwkFields["e"] = e
        case "EC":
            guard fields["crv"] == "P-256" else { return .failure(Failure(message: "EC curve \"\(fields["crv"] ?? "")\" (only P-256)")) }
            guard let x = fields["x"], let y = fields["y"], Base64URL.decode(x.utf8)?.count == 32, Base64URL.decode(y.utf8)?.count == 32 else {
                return .failure(Failure(message: "a P-256 key needs 32-byte \"x\" and \"y\""))
            }
            typeAlgorithms = ["ES256"]
            jwkFields["kty"] = "EC"
            jwkFields["crv"] = "P-256"
            jwkFields["x"] = x
            jwkFields["y"] = y
        case "OKP":
            guard fields["crv"] == "Ed25519" else { return .failure(Failure(message: "OKP curve \"\(fields["crv"] ?? "")\" (only Ed25519)")) }
            guard let x = fields["x"], Base64URL.decode(x.utf8)?.count == 32 else {
                return .failure(Failure(message: "an Ed25519 key needs a 32-byte \"x\""))
            }
            typeAlgorithms = ["EdDSA"]
            jwkFields["kty"] = "OKP"
            jwkFields["crv"] = "Ed25519"
            jwkFields["x"] = x
        case let other:
            return .failure(Failure(message: "key type \"\(other ?? "")\" (RSA, EC and OKP are used)"))
        }
        var algorithms = typeAlgorithms
        if let alg = fields["alg"] {
            // alg confusion: a key's declared algorithm must be one its type can do.
            guard typeAlgorithms.contains(alg) else {
                return .failure(Failure(message: "\"alg\" \"\(alg)\" does not fit a \(fields["kty"] ?? "") key (accepted: \(typeAlgorithms.sorted().joined(separator: ", ")))"))
            }
            algorithms = [alg]
        }
        do {
            let data = try JSONEncoder().encode(jwkFields)
            let jwk = try JSONDecoder().decode(JWK.self, from: data)
            return .success(Key(id: kid, algorithms: algorithms, jwk: jwk))
        } catch {
            return .failure(Failure(message: "not a JWK jwt-kit reads (\(error))"))
        }
    }

    private static func bitLength(_ bytes: [UInt8]) -> Int {
        guard let index = bytes.firstIndex(where: { $0 != 0 }) else { return 0 }
        return (bytes.count - index - 1) * 8 + (8 - bytes[index].leadingZeroBitCount)
    }
}
