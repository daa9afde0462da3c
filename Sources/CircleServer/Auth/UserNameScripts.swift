/// Which writing systems a user name's letters come from, so that names mixing look-alike
/// scripts (Cyrillic "а" in "аlice") can be refused: "аlice" and "alice" would otherwise be two
/// users who look the same on every screen.
///
/// This follows the spirit of Unicode's "highly restrictive" identifier profile (UTS #39 §5.2):
/// a name's letters come from one script, or from Latin combined with the scripts written beside
/// it in East Asia (Han with Hiragana and Katakana, Han with Hangul, Han with Bopomofo). Digits
/// and `. _ - @` belong to no script. Names written wholly in one script that look like another
/// (all-Cyrillic "ѕсоре") are not detected.
enum UserNameScripts {
    enum Script: Hashable {
        case latin, greek, cyrillic, armenian, hebrew, arabic, han, hiragana, katakana, hangul, bopomofo
        /// Any other script, told apart by its 128-code-point block.
        case other(UInt32)
    }

    private static let ranges: [(ClosedRange<UInt32>, Script)] = [
        (0x0041...0x005A, .latin), (0x0061...0x007A, .latin), (0x00C0...0x024F, .latin),
        (0x1E00...0x1EFF, .latin), (0x2C60...0x2C7F, .latin), (0xA720...0xA7FF, .latin), (0xFF21...0xFF5A, .latin),
        (0x0370...0x03FF, .greek), (0x1F00...0x1FFF, .greek),
        (0x0400...0x052F, .cyrillic), (0x1C80...0x1C8F, .cyrillic), (0x2DE0...0x2DFF, .cyrillic), (0xA640...0xA69F, .cyrillic),
        (0x0530...0x058F, .armenian),
        (0x0590...0x05FF, .hebrew),
        (0x0600...0x06FF, .arabic), (0x0750...0x077F, .arabic), (0x08A0...0x08FF, .arabic),
        (0x3400...0x4DBF, .han), (0x4E00...0x9FFF, .han), (0xF900...0xFAFF, .han), (0x20000...0x3FFFF, .han),
        (0x3040...0x309F, .hiragana),
        (0x30A0...0x30FF, .katakana), (0x31F0...0x31FF, .katakana), (0xFF66...0xFF9F, .katakana),
        (0x1100...0x11FF, .hangul), (0x3130...0x318F, .hangul), (0xAC00...0xD7AF, .hangul),
        (0x3100...0x312F, .bopomofo), (0x31A0...0x31BF, .bopomofo),
    ]

    /// Script sets that may be mixed in one name.
    private static let allowedMixes: [Set<Script>] = [
        [.latin, .han, .hiragana, .katakana],
        [.latin, .han, .hangul],
        [.latin, .han, .bopomofo],
    ]

    static func script(of scalar: Unicode.Scalar) -> Script? {
        let value = scalar.value
        // ASCII digits and punctuation belong to no script.
        if value < 0x80 && !((0x41...0x5A).contains(value) || (0x61...0x7A).contains(value)) { return nil }
        if let match = self.ranges.first(where: { $0.0.contains(value) }) { return match.1 }
        return .other(value >> 7)
    }

    /// Whether the name's letters come from one script or from an allowed mix.
    static func isSingleScript(_ name: String) -> Bool {
        let scripts = Set(name.unicodeScalars.compactMap(self.script(of:)))
        if scripts.count <= 1 { return true }
        return self.allowedMixes.contains { scripts.isSubset(of: $0) }
    }
}
