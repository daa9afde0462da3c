/// Lowercase hexadecimal, the one encoder of the package (digests, APNs device tokens, `circle ws --hex`).
public enum Hex {
    /// `bytes` as two lowercase hex digits each.
    public static func encode(_ bytes: some Sequence<UInt8>) -> String {
        let digits: StaticString = "0123456789abcdef"
        var characters: [UInt8] = []
        characters.reserveCapacity(bytes.underestimatedCount * 2)
        digits.withUTF8Buffer { digits in
            for byte in bytes {
                characters.append(digits[Int(byte >> 4)])
                characters.append(digits[Int(byte & 0x0f)])
            }
        }
        return String(decoding: characters, as: UTF8.self)
    }
}
