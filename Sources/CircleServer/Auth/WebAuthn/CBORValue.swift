import Foundation

/// One decoded CBOR data item (RFC 8949 §3), restricted to the kinds WebAuthn uses.
///
/// Produced only by ``CBORDecoder``, which refuses floats, tags, indefinite lengths and
/// the `undefined`/other simple values, so those have no case here.
enum CBORValue: Hashable, Sendable {
    /// Major type 0: an unsigned integer.
    case unsigned(UInt64)
    /// Major type 1: the negative integer `-1 - n`, stored as `n` so the whole range fits.
    case negative(UInt64)
    /// Major type 2: a byte string.
    case bytes([UInt8])
    /// Major type 3: a text string, already checked to be valid UTF-8.
    case text(String)
    /// Major type 4: an array.
    case array([CBORValue])
    /// Major type 5: a map, with its entries in encoded order and no duplicate keys.
    case map([MapEntry])
    /// Major type 7, simple values 20 and 21.
    case bool(Bool)
    /// Major type 7, simple value 22.
    case null

    /// One key/value pair of a CBOR map.
    struct MapEntry: Hashable, Sendable {
        /// The entry's key.
        var key: CBORValue
        /// The entry's value.
        var value: CBORValue
    }

    /// The value as a signed 64-bit integer, or `nil` when it is not an integer or does
    /// not fit (RFC 8949 integers span -2^64 ... 2^64-1).
    var int64Value: Int64? {
        switch self {
        case .unsigned(let n):
            return n <= UInt64(Int64.max) ? Int64(n) : nil
        case .negative(let n):
            // -1 - n fits when n <= Int64.max.
            return n <= UInt64(Int64.max) ? -1 - Int64(n) : nil
        default:
            return nil
        }
    }

    /// The bytes of a byte string, or `nil` for any other kind.
    var bytesValue: [UInt8]? {
        if case .bytes(let bytes) = self { return bytes }
        return nil
    }

    /// The text of a text string, or `nil` for any other kind.
    var textValue: String? {
        if case .text(let text) = self { return text }
        return nil
    }

    /// The entries of a map, or `nil` for any other kind.
    var mapEntries: [MapEntry]? {
        if case .map(let entries) = self { return entries }
        return nil
    }

    /// Looks a key up in a map; `nil` when this is not a map or the key is absent.
    ///
    /// - Parameter key: the key to find, compared by value.
    subscript(key: CBORValue) -> CBORValue? {
        guard case .map(let entries) = self else { return nil }
        return entries.first(where: { $0.key == key })?.value
    }

    /// Looks up an integer key (COSE labels) in a map.
    ///
    /// - Parameter label: the integer key.
    subscript(label label: Int64) -> CBORValue? {
        self[label >= 0 ? .unsigned(UInt64(label)) : .negative(UInt64(-1 - label))]
    }

    /// Looks up a text key (attestation object members) in a map.
    ///
    /// - Parameter name: the text key.
    subscript(name name: String) -> CBORValue? {
        self[.text(name)]
    }
}
