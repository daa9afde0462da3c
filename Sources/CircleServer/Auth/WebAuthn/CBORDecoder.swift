/// A strictly bounded decoder for the subset of CBOR (RFC 8949) that WebAuthn uses:
/// attestation objects (§6.5 of WebAuthn L3), COSE keys and authenticator extensions.
///
/// Supported: integers (major types 0 and 1), byte and text strings (2 and 3), arrays (4),
/// maps (5), and the simple values false, true and null (7). Everything else is refused
/// with a ``CBORDecodingError``: floats, tags, `undefined`, indefinite lengths, reserved
/// additional information. Every size is checked against the bytes that remain before
/// anything is allocated, nesting is bounded, and no arithmetic on input values can trap.
///
/// Non-shortest integer and length encodings are accepted (authenticators must not send
/// them, but refusing them buys nothing for verification); duplicate map keys are refused.
///
/// ```swift
/// let (value, consumed) = try CBORDecoder.decodePrefix(authenticatorDataTail)
/// let whole = try CBORDecoder.decode(attestationObject)   // refuses trailing bytes
/// ```
struct CBORDecoder {
    /// Largest input accepted. A WebAuthn attestation object with an RSA-4096 key and a
    /// certificate chain stays well under 16 KiB; 64 KiB leaves room and bounds the work.
    static let maximumInputSize = 64 * 1024
    /// Deepest nesting of arrays and maps, counting the outermost container as 1. WebAuthn
    /// structures nest at most 4 deep (attestation object → attStmt → x5c → …).
    static let maximumDepth = 16
    /// Most items in one array or map (a map's count is its number of pairs), checked
    /// before any storage is reserved. COSE keys have under 10 members.
    static let maximumContainerCount = 256

    private let bytes: [UInt8]
    private var offset: Int

    private init(bytes: [UInt8], offset: Int) {
        self.bytes = bytes
        self.offset = offset
    }

    /// Decodes exactly one item that must span the whole input.
    ///
    /// - Parameter bytes: the encoded item.
    /// - Returns: the decoded item.
    /// - Throws: ``CBORDecodingError`` for any malformed, unsupported or oversized input,
    ///   and `.trailingBytes` when anything follows the item.
    static func decode(_ bytes: [UInt8]) throws(CBORDecodingError) -> CBORValue {
        let (value, consumed) = try decodePrefix(bytes)
        guard consumed == bytes.count else {
            throw CBORDecodingError(
                code: .trailingBytes, offset: consumed,
                message: "\(bytes.count - consumed) bytes follow the item")
        }
        return value
    }

    /// Decodes the one item that starts at `start` and reports where it ended, for inputs
    /// where CBOR is followed by more data (a COSE key followed by extensions inside
    /// authenticator data, WebAuthn L3 §6.1).
    ///
    /// - Parameters:
    ///   - bytes: the input; only `bytes[start...]` is read.
    ///   - start: the offset of the item's first byte.
    /// - Returns: the item and the number of bytes it occupied from `start`.
    /// - Throws: ``CBORDecodingError`` for malformed, unsupported or oversized input.
    static func decodePrefix(_ bytes: [UInt8], from start: Int = 0) throws(CBORDecodingError) -> (value: CBORValue, consumed: Int) {
        guard start >= 0, start <= bytes.count else {
            throw CBORDecodingError(code: .truncated, offset: 0, message: "start offset outside the input")
        }
        guard bytes.count - start <= maximumInputSize else {
            throw CBORDecodingError(
                code: .inputTooLarge, offset: start,
                message: "input of \(bytes.count - start) bytes exceeds the \(maximumInputSize)-byte limit")
        }
        var decoder = CBORDecoder(bytes: bytes, offset: start)
        let value = try decoder.decodeItem(depth: 0)
        return (value, decoder.offset - start)
    }

    // MARK: - Items

    /// The bytes not yet read.
    private var remaining: Int { bytes.count - offset }

    /// Decodes one item; `depth` is the number of containers enclosing it.
    private mutating func decodeItem(depth: Int) throws(CBORDecodingError) -> CBORValue {
        let itemOffset = offset
        let initial = try readByte()
        let major = initial >> 5
        let info = initial & 0x1f

        if major == 7 {
            return try decodeSimple(info: info, at: itemOffset)
        }
        if major == 6 {
            throw CBORDecodingError(code: .tag, offset: itemOffset, message: "tagged items are not supported")
        }
        let argument = try readArgument(info: info, major: major, at: itemOffset)

        switch major {
        case 0:
            return .unsigned(argument)
        case 1:
            return .negative(argument)
        case 2:
            return .bytes(try readBytes(count: argument, at: itemOffset))
        case 3:
            let raw = try readBytes(count: argument, at: itemOffset)
            // Decoding replaces invalid sequences with U+FFFD, so a round trip that does
            // not give back the same bytes means the input was not valid UTF-8.
            let text = String(decoding: raw, as: UTF8.self)
            guard text.utf8.elementsEqual(raw) else {
                throw CBORDecodingError(code: .invalidUTF8, offset: itemOffset, message: "text string is not valid UTF-8")
            }
            return .text(text)
        case 4:
            let count = try containerCount(argument, minimumBytesPerItem: 1, depth: depth, at: itemOffset)
            var items: [CBORValue] = []
            items.reserveCapacity(count)
            for _ in 0..<count {
                items.append(try decodeItem(depth: depth + 1))
            }
            return .array(items)
        case 5:
            let count = try containerCount(argument, minimumBytesPerItem: 2, depth: depth, at: itemOffset)
            var entries: [CBORValue.MapEntry] = []
            entries.reserveCapacity(count)
            var seen = Set<CBORValue>(minimumCapacity: count)
            for _ in 0..<count {
                let keyOffset = offset
                let key = try decodeItem(depth: depth + 1)
                guard seen.insert(key).inserted else {
                    throw CBORDecodingError(code: .duplicateMapKey, offset: keyOffset, message: "map repeats a key")
                }
                let value = try decodeItem(depth: depth + 1)
                entries.append(CBORValue.MapEntry(key: key, value: value))
            }
            return .map(entries)
        default:
            // major is three bits and 6 and 7 were handled above, so this cannot happen;
            // refuse rather than trap all the same.
            throw CBORDecodingError(code: .reservedAdditionalInformation, offset: itemOffset, message: "unknown major type")
        }
    }

    /// Major type 7: only false, true and null are accepted.
    private func decodeSimple(info: UInt8, at itemOffset: Int) throws(CBORDecodingError) -> CBORValue {
        switch info {
        case 20: return .bool(false)
        case 21: return .bool(true)
        case 22: return .null
        case 25, 26, 27:
            throw CBORDecodingError(code: .float, offset: itemOffset, message: "floating-point numbers are not supported")
        case 28, 29, 30:
            throw CBORDecodingError(
                code: .reservedAdditionalInformation, offset: itemOffset,
                message: "reserved additional information \(info)")
        case 31:
            throw CBORDecodingError(code: .indefiniteLength, offset: itemOffset, message: "unexpected break code")
        default:
            throw CBORDecodingError(
                code: .unsupportedSimpleValue, offset: itemOffset, message: "simple value \(info) is not supported")
        }
    }

    /// Checks a container's declared count against the limits and the remaining input,
    /// and its depth, before anything is reserved for it.
    private func containerCount(
        _ declared: UInt64, minimumBytesPerItem: UInt64, depth: Int, at itemOffset: Int
    ) throws(CBORDecodingError) -> Int {
        guard depth < Self.maximumDepth else {
            throw CBORDecodingError(
                code: .tooDeep, offset: itemOffset,
                message: "containers nested deeper than \(Self.maximumDepth)")
        }
        guard declared <= UInt64(Self.maximumContainerCount) else {
            throw CBORDecodingError(
                code: .tooManyItems, offset: itemOffset,
                message: "container declares \(declared) items; at most \(Self.maximumContainerCount) are allowed")
        }
        // declared <= 256 here, so the product cannot overflow.
        guard declared * minimumBytesPerItem <= UInt64(remaining) else {
            throw CBORDecodingError(
                code: .lengthExceedsInput, offset: itemOffset,
                message: "container declares \(declared) items but only \(remaining) bytes remain")
        }
        return Int(declared)
    }

    // MARK: - Bytes

    private mutating func readByte() throws(CBORDecodingError) -> UInt8 {
        guard offset < bytes.count else {
            throw CBORDecodingError(code: .truncated, offset: offset, message: "input ends inside an item")
        }
        let byte = bytes[offset]
        offset += 1
        return byte
    }

    /// Reads the argument that follows an initial byte (RFC 8949 §3): the value itself
    /// for additional information below 24, else 1, 2, 4 or 8 big-endian bytes.
    private mutating func readArgument(info: UInt8, major: UInt8, at itemOffset: Int) throws(CBORDecodingError) -> UInt64 {
        let width: Int
        switch info {
        case 0...23: return UInt64(info)
        case 24: width = 1
        case 25: width = 2
        case 26: width = 4
        case 27: width = 8
        case 31:
            throw CBORDecodingError(
                code: .indefiniteLength, offset: itemOffset,
                message: "indefinite lengths are not supported (major type \(major))")
        default:
            throw CBORDecodingError(
                code: .reservedAdditionalInformation, offset: itemOffset,
                message: "reserved additional information \(info)")
        }
        guard remaining >= width else {
            throw CBORDecodingError(code: .truncated, offset: itemOffset, message: "input ends inside an item's header")
        }
        var value: UInt64 = 0
        for _ in 0..<width {
            // At most 8 shifts of 8 bits: no bits are lost and nothing can overflow.
            value = (value << 8) | UInt64(bytes[offset])
            offset += 1
        }
        return value
    }

    /// Reads a string's bytes after checking the declared length against what remains.
    private mutating func readBytes(count declared: UInt64, at itemOffset: Int) throws(CBORDecodingError) -> [UInt8] {
        guard declared <= UInt64(remaining) else {
            throw CBORDecodingError(
                code: .lengthExceedsInput, offset: itemOffset,
                message: "string declares \(declared) bytes but only \(remaining) remain")
        }
        let count = Int(declared)
        let slice = bytes[offset..<(offset + count)]
        offset += count
        return Array(slice)
    }
}
