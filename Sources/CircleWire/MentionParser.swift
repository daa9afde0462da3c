/// The one rule for finding mentions in a post's text; the server resolves what it finds when the
/// entry is committed (PROTOCOL.md §4, "Mentions"), clients use it to complete and highlight.
///
/// A mention is `@` at the start of the text or after a character that cannot be part of a user
/// name (so `bob@example.org` mentions no one), followed by a user name: letters, digits and
/// `. _ - @`. Punctuation that ends a sentence is not part of the name unless a user is called
/// that, so `@alice.` yields the candidates `alice.` and `alice` (the whole name, and the name
/// without its trailing punctuation: two at most) and the server takes the first that resolves. `@here` and `@everyone` are ``Mention/everyone``.
///
/// ```swift
/// MentionParser.mentions(in: "thanks @alice, and @everyone!")
/// // [.user(["alice"]), .everyone]
/// ```
public enum MentionParser {
    /// What one `@…` in a text names.
    public enum Mention: Sendable, Hashable {
        /// A user: the candidate names, longest first (each at most ``maxNameBytes`` UTF-8 bytes).
        case user([String])
        /// `@here` or `@everyone`: every member of the circle (allowed to circle owners and admins).
        case everyone
    }

    /// At most this many distinct mentions are read from one text; later ones are ignored.
    public static let maxMentions = 50
    /// A user name's longest form (the server's user-name limit).
    public static let maxNameBytes = 64

    /// Whether `scalar` may be part of a user name after `@`.
    public static func isNameScalar(_ scalar: Unicode.Scalar) -> Bool {
        switch scalar.properties.generalCategory {
        case .uppercaseLetter, .lowercaseLetter, .titlecaseLetter, .modifierLetter, .otherLetter,
            .nonspacingMark, .spacingMark, .enclosingMark, .decimalNumber, .letterNumber, .otherNumber:
            return true
        default:
            return scalar == "." || scalar == "_" || scalar == "-" || scalar == "@"
        }
    }

    /// Characters a name does not end with unless a user is called so: sentence punctuation.
    static func isTrailingPunctuation(_ scalar: Unicode.Scalar) -> Bool {
        scalar == "." || scalar == "-" || scalar == "_" || scalar == "@"
    }

    /// The distinct mentions of `text`, in order of first appearance, at most ``maxMentions``.
    public static func mentions(in text: String) -> [Mention] {
        var found: [Mention] = []
        var seen = Set<Mention>()
        let scalars = Array(text.unicodeScalars)
        var index = 0
        while index < scalars.count, found.count < Self.maxMentions {
            defer { index += 1 }
            guard scalars[index] == "@", index == 0 || !Self.isNameScalar(scalars[index - 1]) else { continue }
            var end = index + 1
            while end < scalars.count, Self.isNameScalar(scalars[end]) { end += 1 }
            guard end > index + 1 else { continue }
            let name = String(String.UnicodeScalarView(scalars[(index + 1)..<end]))
            index = end - 1
            let mention: Mention
            if name == "here" || name == "everyone" {
                mention = .everyone
            } else {
                // At most two candidates: the whole run, and the run without its trailing punctuation.
                var candidates: [String] = []
                if name.utf8.count <= Self.maxNameBytes { candidates.append(name) }
                var trimmed = name.unicodeScalars[...]
                while let last = trimmed.last, Self.isTrailingPunctuation(last) { trimmed = trimmed.dropLast() }
                let bare = String(String.UnicodeScalarView(trimmed))
                if !bare.isEmpty, bare != name, bare.utf8.count <= Self.maxNameBytes { candidates.append(bare) }
                guard !candidates.isEmpty else { continue }
                if candidates.count > 1, candidates.last == "here" || candidates.last == "everyone" {
                    mention = .everyone
                } else {
                    mention = .user(candidates)
                }
            }
            if seen.insert(mention).inserted { found.append(mention) }
        }
        return found
    }

    /// The `@`-word being typed at the end of `text` (what a completion replaces), without the
    /// `@`; `nil` when the text does not end in one.
    public static func partialMention(atEndOf text: String) -> String? {
        let scalars = Array(text.unicodeScalars)
        var start = scalars.count
        while start > 0, scalars[start - 1] != "@", Self.isNameScalar(scalars[start - 1]) { start -= 1 }
        guard start > 0, scalars[start - 1] == "@" else { return nil }
        let at = start - 1
        guard at == 0 || !Self.isNameScalar(scalars[at - 1]) else { return nil }
        return String(String.UnicodeScalarView(scalars[start...]))
    }
}
