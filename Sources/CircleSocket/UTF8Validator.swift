/// Incremental UTF-8 validation for text messages that arrive in fragments.
///
/// RFC 6455 asks an endpoint to fail the connection as soon as a text message
/// is known to be invalid, so fragments are checked as they arrive instead of
/// once the message is complete. The rules follow RFC 3629 (no overlong forms,
/// no surrogates, nothing above U+10FFFF).
struct UTF8Validator: Sendable {
    /// Continuation bytes still expected for the current code point.
    private var remaining: UInt8 = 0
    /// Bounds for the next continuation byte (narrower right after some lead bytes).
    private var lower: UInt8 = 0x80
    private var upper: UInt8 = 0xBF

    /// Whether the bytes seen so far end on a code point boundary.
    var isComplete: Bool { self.remaining == 0 }

    /// Checks more bytes; returns `false` as soon as they cannot be UTF-8.
    mutating func validate(_ bytes: UnsafeRawBufferPointer) -> Bool {
        var index = 0
        let count = bytes.count
        while index < count {
            if self.remaining == 0 {
                // Fast path: eight ASCII bytes at a time.
                while index + 8 <= count,
                    bytes.loadUnaligned(fromByteOffset: index, as: UInt64.self) & 0x8080_8080_8080_8080 == 0
                {
                    index += 8
                }
                if index == count { break }
            }
            let byte = bytes[index]
            index += 1
            if self.remaining > 0 {
                guard byte >= self.lower, byte <= self.upper else { return false }
                self.remaining -= 1
                self.lower = 0x80
                self.upper = 0xBF
                continue
            }
            switch byte {
            case 0x00...0x7F:
                continue
            case 0xC2...0xDF:
                self.remaining = 1
            case 0xE0:
                self.remaining = 2
                self.lower = 0xA0
            case 0xE1...0xEC, 0xEE...0xEF:
                self.remaining = 2
            case 0xED:
                self.remaining = 2
                self.upper = 0x9F
            case 0xF0:
                self.remaining = 3
                self.lower = 0x90
            case 0xF1...0xF3:
                self.remaining = 3
            case 0xF4:
                self.remaining = 3
                self.upper = 0x8F
            default:
                return false
            }
        }
        return true
    }
}
