import Testing
@testable import CircleServer

/// RFC 8949 decoding: Appendix A vectors that WebAuthn's subset covers, and every refusal.
@Suite struct CBORDecoderTests {
    private func decode(_ hex: String) throws(CBORDecodingError) -> CBORValue {
        try CBORDecoder.decode(WebAuthnTestBytes.hex(hex))
    }

    private func refusal(_ hex: String) -> CBORDecodingError.Code? {
        refusal(WebAuthnTestBytes.hex(hex))
    }

    private func refusal(_ bytes: [UInt8]) -> CBORDecodingError.Code? {
        do {
            _ = try CBORDecoder.decode(bytes)
            return nil
        } catch {
            return error.code
        }
    }

    static let integerVectors: [(String, CBORValue)] = [
        ("00", .unsigned(0)), ("01", .unsigned(1)), ("0a", .unsigned(10)), ("17", .unsigned(23)),
        ("1818", .unsigned(24)), ("1819", .unsigned(25)), ("1864", .unsigned(100)),
        ("1903e8", .unsigned(1000)), ("1a000f4240", .unsigned(1_000_000)),
        ("1b000000e8d4a51000", .unsigned(1_000_000_000_000)),
        ("1bffffffffffffffff", .unsigned(UInt64.max)),
        ("3bffffffffffffffff", .negative(UInt64.max)),  // -18446744073709551616
        ("20", .negative(0)), ("29", .negative(9)), ("3863", .negative(99)), ("3903e7", .negative(999)),
    ]

    @Test("RFC 8949 Appendix A integers", arguments: integerVectors)
    func integers(hex: String, expected: CBORValue) throws {
        #expect(try decode(hex) == expected)
    }

    @Test func integerConversions() throws {
        #expect(try decode("3903e7").int64Value == -1000)
        #expect(try decode("1903e8").int64Value == 1000)
        #expect(try decode("1bffffffffffffffff").int64Value == nil)
        #expect(try decode("3bffffffffffffffff").int64Value == nil)
        #expect(try decode("3b7fffffffffffffff").int64Value == Int64.min)
        #expect(try decode("1b7fffffffffffffff").int64Value == Int64.max)
    }

    @Test func simpleValues() throws {
        #expect(try decode("f4") == .bool(false))
        #expect(try decode("f5") == .bool(true))
        #expect(try decode("f6") == .null)
    }

    static let stringVectors: [(String, CBORValue)] = [
        ("40", .bytes([])), ("4401020304", .bytes([1, 2, 3, 4])),
        ("60", .text("")), ("6161", .text("a")), ("6449455446", .text("IETF")),
        ("62225c", .text("\"\\")), ("62c3bc", .text("\u{00fc}")), ("63e6b0b4", .text("\u{6c34}")),
        ("64f0908591", .text("\u{10151}")),
    ]

    @Test("RFC 8949 Appendix A strings", arguments: stringVectors)
    func strings(hex: String, expected: CBORValue) throws {
        #expect(try decode(hex) == expected)
    }

    @Test func arraysAndMaps() throws {
        #expect(try decode("80") == .array([]))
        #expect(try decode("83010203") == .array([.unsigned(1), .unsigned(2), .unsigned(3)]))
        #expect(
            try decode("8301820203820405")
                == .array([.unsigned(1), .array([.unsigned(2), .unsigned(3)]), .array([.unsigned(4), .unsigned(5)])]))
        let long = try decode("98190102030405060708090a0b0c0d0e0f101112131415161718181819")
        #expect(long == .array((1...25).map { .unsigned(UInt64($0)) }))
        #expect(try decode("a0") == .map([]))
        let pairs = try decode("a201020304")
        #expect(pairs[label: 1] == .unsigned(2))
        #expect(pairs[label: 3] == .unsigned(4))
        let nested = try decode("a26161016162820203")
        #expect(nested[name: "a"] == .unsigned(1))
        #expect(nested[name: "b"] == .array([.unsigned(2), .unsigned(3)]))
        #expect(try decode("826161a161626163") == .array([.text("a"), .map([.init(key: .text("b"), value: .text("c"))])]))
        let five = try decode("a56161614161626142616361436164614461656145")
        #expect(five.mapEntries?.count == 5)
        #expect(five[name: "e"] == .text("E"))
        // Entries keep their encoded order.
        #expect(five.mapEntries?.map(\.key) == ["a", "b", "c", "d", "e"].map { CBORValue.text($0) })
    }

    @Test func prefixReportsConsumedBytes() throws {
        let bytes = WebAuthnTestBytes.hex("a201020304" + "a16178f5" + "ff")
        let (first, consumed) = try CBORDecoder.decodePrefix(bytes)
        #expect(first[label: 3] == .unsigned(4))
        #expect(consumed == 5)
        let (second, more) = try CBORDecoder.decodePrefix(bytes, from: 5)
        #expect(second[name: "x"] == .bool(true))
        #expect(more == 4)
        #expect(refusal(bytes) == .trailingBytes)
    }

    static let refusals: [(String, String, CBORDecodingError.Code)] = [
        ("empty input", "", .truncated),
        ("truncated argument", "19 01", .truncated),
        ("truncated byte string", "44 0102", .lengthExceedsInput),
        ("array shorter than its count", "83 0102", .lengthExceedsInput),
        ("map shorter than its count", "a2 0102 03", .lengthExceedsInput),
        ("truncated array item", "82 190100", .truncated),
        ("truncated map value header", "a1 01 1900", .truncated),
        ("byte string of 2^64-1 bytes", "5b ffffffffffffffff", .lengthExceedsInput),
        ("text string of 4 GiB", "7a ffffffff 61", .lengthExceedsInput),
        ("array of 200 items in 3 bytes", "98 c8 0102", .lengthExceedsInput),
        ("map of 10^6 items", "ba 000f4240 0102", .tooManyItems),
        ("array of 2^64-1 items", "9b ffffffffffffffff", .tooManyItems),
        ("duplicate integer key", "a2 0102 0103", .duplicateMapKey),
        ("duplicate text key", "a2 616101 616102", .duplicateMapKey),
        ("indefinite byte string", "5f 42 0102 43 030405 ff", .indefiniteLength),
        ("indefinite text string", "7f 657374726561 646d696e67 ff", .indefiniteLength),
        ("indefinite array", "9f ff", .indefiniteLength),
        ("indefinite nested array", "9f 01 82 0203 9f 0405 ff ff", .indefiniteLength),
        ("indefinite map", "bf 6161 01 6162 9f 0203 ff ff", .indefiniteLength),
        ("stray break", "ff", .indefiniteLength),
        ("tag 0 date string", "c0 74 323031332d30332d32315432303a30343a30305a", .tag),
        ("tag 1 epoch", "c1 1a 514b67b0", .tag),
        ("tag 2 bignum", "c2 49 010000000000000000", .tag),
        ("half float", "f9 0000", .float),
        ("single float", "fa 47c35000", .float),
        ("double float", "fb 3ff199999999999a", .float),
        ("undefined", "f7", .unsupportedSimpleValue),
        ("simple(16)", "f0", .unsupportedSimpleValue),
        ("simple(255)", "f8 ff", .unsupportedSimpleValue),
        ("reserved info 28", "1c", .reservedAdditionalInformation),
        ("reserved info 30 in a string", "5e", .reservedAdditionalInformation),
        ("invalid UTF-8 continuation", "62 c328", .invalidUTF8),
        ("UTF-8 surrogate", "63 eda080", .invalidUTF8),
        ("overlong UTF-8", "62 c0af", .invalidUTF8),
        ("trailing bytes", "01 02", .trailingBytes),
    ]

    @Test("refusals", arguments: refusals)
    func refuses(name: String, hex: String, expected: CBORDecodingError.Code) {
        #expect(refusal(hex.replacingOccurrences(of: " ", with: "")) == expected, "\(name)")
    }

    @Test func depthLimit() throws {
        func nested(_ depth: Int) -> [UInt8] {
            [UInt8](repeating: 0x81, count: depth - 1) + [0x80]
        }
        #expect(CBORDecoder.maximumDepth == 16)
        _ = try CBORDecoder.decode(nested(16))
        #expect(refusal(nested(17)) == .tooDeep)
        // Deep nesting of maps counts the same way.
        let maps = [UInt8](repeating: 0, count: 0) + Array(repeating: [0xa1, 0x01], count: 17).flatMap { $0 } + [0x01]
        #expect(refusal(maps) == .tooDeep)
        // A long run of array headers stops at the limit instead of recursing further.
        #expect(refusal([UInt8](repeating: 0x81, count: 60_000)) == .tooDeep)
    }

    @Test func containerCountLimit() throws {
        let twoHundredFiftySix = [0x99, 0x01, 0x00] + [UInt8](repeating: 0x00, count: 256)
        #expect(try CBORDecoder.decode(twoHundredFiftySix).textValue == nil)
        let tooMany = [0x99, 0x01, 0x01] + [UInt8](repeating: 0x00, count: 257)
        #expect(refusal(tooMany) == .tooManyItems)
    }

    @Test func inputSizeLimit() throws {
        let header: [UInt8] = [0x5a, 0x00, 0x01, 0x00, 0x00]  // byte string of 65536 bytes
        let big = header + [UInt8](repeating: 0xab, count: 65_536)
        #expect(refusal(big) == .inputTooLarge)
        let fits = [0x59, 0xff, 0xf0] + [UInt8](repeating: 0xab, count: 0xfff0)
        #expect(try CBORDecoder.decode(fits).bytesValue?.count == 0xfff0)
    }

    @Test func errorsDoNotEchoInput() {
        do {
            _ = try CBORDecoder.decode([0x78, 0x05] + Array("secret".utf8))
            Issue.record("expected a refusal")
        } catch {
            #expect(error.code == .trailingBytes)
            #expect(!error.description.contains("secret"))
        }
    }
}
