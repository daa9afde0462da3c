import Foundation
@testable import CircleServer

/// Hex and base64url helpers for the WebAuthn tests.
enum WebAuthnTestBytes {
    /// Decodes a hex string (no separators); traps on bad test data.
    static func hex(_ text: String) -> [UInt8] {
        var bytes: [UInt8] = []
        var iterator = text.makeIterator()
        while let high = iterator.next(), let low = iterator.next() {
            bytes.append(UInt8(String([high, low]), radix: 16)!)
        }
        return bytes
    }

    /// Decodes base64url without padding; traps on bad test data.
    static func base64URL(_ text: String) -> [UInt8] {
        var standard = text.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        while standard.count % 4 != 0 { standard += "=" }
        return [UInt8](Data(base64Encoded: standard)!)
    }
}

/// A deterministic pseudo-random generator (SplitMix64) so fuzz-style tests repeat exactly.
struct WebAuthnTestRandom: RandomNumberGenerator {
    private var state: UInt64

    /// Creates a generator from a seed.
    init(seed: UInt64) { state = seed }

    /// The next 64 pseudo-random bits.
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

/// A minimal CBOR encoder for building test inputs (definite lengths, shortest form).
enum WebAuthnTestCBOREncoder {
    /// Encodes a value.
    static func encode(_ value: CBORValue) -> [UInt8] {
        switch value {
        case .unsigned(let n): return header(0, n)
        case .negative(let n): return header(1, n)
        case .bytes(let b): return header(2, UInt64(b.count)) + b
        case .text(let t): return header(3, UInt64(t.utf8.count)) + Array(t.utf8)
        case .array(let items): return header(4, UInt64(items.count)) + items.flatMap(encode)
        case .map(let entries):
            return header(5, UInt64(entries.count)) + entries.flatMap { encode($0.key) + encode($0.value) }
        case .bool(let b): return [b ? 0xf5 : 0xf4]
        case .null: return [0xf6]
        }
    }

    private static func header(_ major: UInt8, _ n: UInt64) -> [UInt8] {
        let m = major << 5
        switch n {
        case 0..<24: return [m | UInt8(n)]
        case 24...0xff: return [m | 24, UInt8(n)]
        case 0x100...0xffff: return [m | 25] + withBytes(n, 2)
        case 0x10000...0xffff_ffff: return [m | 26] + withBytes(n, 4)
        default: return [m | 27] + withBytes(n, 8)
        }
    }

    private static func withBytes(_ n: UInt64, _ width: Int) -> [UInt8] {
        (0..<width).reversed().map { UInt8(truncatingIfNeeded: n >> (UInt64($0) * 8)) }
    }
}
