/// What a reaction emoji is, and the one form it is compared and stored in.
///
/// Two texts that show as the same emoji are the same reaction: `👍`, `👍` with U+FE0F and `👍`
/// with U+FE0E are one, so look-alikes cannot fill a post's reaction slots. The rule, used by
/// the request decoder and by the stores:
///
/// - The text is one grapheme cluster of at most ``maxBytes`` UTF-8 bytes, and one emoji
///   sequence: emoji elements joined by U+200D (ZWJ), where an element is
///   - a flag: two regional indicators (🇫🇷);
///   - a keycap: `0`–`9`, `#` or `*`, an optional U+FE0F, then U+20E3 (1️⃣);
///   - a tag flag: U+1F3F4, tag characters, then U+E007F (🏴󠁧󠁢󠁳󠁣󠁴󠁿);
///   - an emoji, then at most one variation selector (U+FE0E or U+FE0F), then at most one
///     skin-tone modifier (👍🏽).
///
///   Nothing else is allowed: no second selector, no other variation selector, no combining
///   mark, no invisible format character.
/// - A lone emoji that shows as text by default (☺, ™) needs U+FE0F or a skin tone, as before;
///   a lone keycap base (`1`, `#`) is not an emoji.
/// - The stored form is the fully qualified one: selectors are dropped, then U+FE0F is put
///   back after each element that shows as text by default and has no skin tone, and a keycap
///   is always `base U+FE0F U+20E3`. Normalising a normalised emoji changes nothing.
public enum CircleEmoji {
    /// Largest accepted emoji, in UTF-8 bytes, before and after normalising (family and flag
    /// sequences included).
    public static let maxBytes = 64

    /// The normalised form of `text` when it is exactly one emoji (see ``CircleEmoji``), or
    /// `nil` when it is not one.
    ///
    /// - Parameter text: What a client sent as `emoji`.
    /// - Returns: The form to compare and store; `nil` for anything that is not one emoji.
    public static func normalized(_ text: String) -> String? {
        guard !text.isEmpty, text.utf8.count <= Self.maxBytes, text.count == 1 else { return nil }
        let scalars = Array(text.unicodeScalars)
        var out = String.UnicodeScalarView()
        var index = 0
        var elements = 0
        /// Whether the first element is a text-default emoji with neither U+FE0F nor a skin
        /// tone, which shows as an emoji only inside a ZWJ sequence.
        var firstShowsAsText = false
        while true {
            guard index < scalars.count else { return nil }  // empty, or a trailing ZWJ
            let scalar = scalars[index]
            elements += 1
            if Self.isRegionalIndicator(scalar) {
                guard index + 1 < scalars.count, Self.isRegionalIndicator(scalars[index + 1]) else { return nil }
                out.append(scalar)
                out.append(scalars[index + 1])
                index += 2
            } else if Self.isKeycapBase(scalar) {
                index += 1
                if index < scalars.count, scalars[index] == Self.emojiSelector { index += 1 }
                guard index < scalars.count, scalars[index] == Self.keycap else { return nil }
                index += 1
                out.append(scalar)
                out.append(Self.emojiSelector)
                out.append(Self.keycap)
            } else if scalar == Self.blackFlag, index + 1 < scalars.count, Self.isTag(scalars[index + 1]) {
                out.append(scalar)
                index += 1
                while index < scalars.count, Self.isTag(scalars[index]) {
                    out.append(scalars[index])
                    index += 1
                }
                guard index < scalars.count, scalars[index] == Self.cancelTag else { return nil }
                out.append(Self.cancelTag)
                index += 1
            } else if scalar.properties.isEmoji, !Self.isJoinerOrSelector(scalar) {
                index += 1
                var selector: Unicode.Scalar?
                if index < scalars.count, scalars[index] == Self.emojiSelector || scalars[index] == Self.textSelector {
                    selector = scalars[index]
                    index += 1
                }
                var modifier: Unicode.Scalar?
                if !scalar.properties.isEmojiModifier, index < scalars.count, scalars[index].properties.isEmojiModifier {
                    modifier = scalars[index]
                    index += 1
                }
                out.append(scalar)
                if let modifier {
                    out.append(modifier)
                } else if !scalar.properties.isEmojiPresentation {
                    out.append(Self.emojiSelector)
                    if elements == 1, selector != Self.emojiSelector { firstShowsAsText = true }
                }
            } else {
                return nil
            }
            if index == scalars.count { break }
            guard scalars[index] == Self.zeroWidthJoiner else { return nil }
            out.append(Self.zeroWidthJoiner)
            index += 1
        }
        guard !firstShowsAsText || elements > 1 else { return nil }
        let normalized = String(out)
        guard normalized.utf8.count <= Self.maxBytes, normalized.count == 1 else { return nil }
        return normalized
    }

    private static let emojiSelector: Unicode.Scalar = "\u{FE0F}"
    private static let textSelector: Unicode.Scalar = "\u{FE0E}"
    private static let keycap: Unicode.Scalar = "\u{20E3}"
    private static let zeroWidthJoiner: Unicode.Scalar = "\u{200D}"
    private static let blackFlag: Unicode.Scalar = "\u{1F3F4}"
    private static let cancelTag: Unicode.Scalar = "\u{E007F}"

    private static func isRegionalIndicator(_ scalar: Unicode.Scalar) -> Bool {
        (0x1F1E6...0x1F1FF).contains(scalar.value)
    }

    private static func isKeycapBase(_ scalar: Unicode.Scalar) -> Bool {
        ("0"..."9").contains(scalar) || scalar == "#" || scalar == "*"
    }

    private static func isTag(_ scalar: Unicode.Scalar) -> Bool {
        (0xE0020...0xE007E).contains(scalar.value)
    }

    private static func isJoinerOrSelector(_ scalar: Unicode.Scalar) -> Bool {
        scalar == Self.zeroWidthJoiner || scalar == Self.keycap || (0xFE00...0xFE0F).contains(scalar.value)
    }
}
