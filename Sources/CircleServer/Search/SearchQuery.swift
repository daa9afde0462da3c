import Foundation

/// What a person typed into a search box, parsed: a value with no I/O that both stores turn
/// into their own index queries (always with bound parameters, never by pasting the text in).
///
/// ## Syntax
/// - `word` — posts with the word (case and diacritics ignored by the stores' tokenizers).
/// - `"quoted phrase"` — the words next to each other, in that order.
/// - `dep*` — words that begin with `dep` (a `*` at the end of a word).
/// - `*ploy` or `*ploy*` — `ploy` anywhere in the text, inside words too (a `*` at the start):
///   the stores' trigram indexes find it from three characters on.
/// - `-word`, `-"a phrase"` — posts without it.
/// - `a OR b` — either; `OR` must be upper case and stand between two terms. Terms are joined by
///   AND, and `OR` binds tighter: `cat OR dog food` is `(cat OR dog) AND food`.
/// - `from:alice` (or `from:@alice`) — by that author; `in:general` (or `in:#general`, any case)
///   — in that circle. Several of one kind are alternatives: `from:alice from:bob` is either author.
/// - `before:2026-11-27`, `after:2026-11-27` — before the start of that UTC day, after its end;
///   or a full ISO-8601 time (`2026-11-27T10:15:00Z`, `…+01:00`), exclusive both ways.
///
/// Everything else is plain text. The full-text syntax of SQLite FTS5 and PostgreSQL (`NEAR`,
/// `*` inside a word, `^`, column filters such as `text:`, parentheses, `AND`/`NOT`, a stray `"`)
/// means nothing here: an unbalanced `"` is ignored, the others become parts of words, which the
/// stores search for as quoted text. A term without a letter or digit (`*`, `--`, `^^`) cannot
/// match a word and is dropped; so is an `OR` without a term on both sides.
///
/// The text is NFC-normalised first; limits are in ``SearchQuery/Limits``.
///
/// ```swift
/// let query = try SearchQuery.parse(#"deploy OR release -"dry run" from:alice after:2026-11-01"#)
/// ```
public struct SearchQuery: Sendable, Hashable {
    /// A word or a quoted phrase, as typed (NFC-normalised, trimmed).
    public struct Term: Sendable, Hashable, CustomStringConvertible {
        /// How a term's text is matched.
        public enum Match: Sendable, Hashable {
            /// As whole words (a phrase's words next to each other).
            case words
            /// Its last word as the beginning of a word (`dep*`).
            case prefix
            /// Anywhere in the text, inside words too (`*ploy`).
            case substring
        }

        /// The text to look for, without the `*`s that chose ``match``.
        public var text: String
        /// Typed in quotes.
        public var isPhrase: Bool
        public var match: Match

        public init(_ text: String, isPhrase: Bool = false, match: Match = .words) {
            self.text = text
            self.isPhrase = isPhrase
            self.match = match
        }

        /// A term as typed outside quotes: a `*` at the start makes it a substring, one at the
        /// end (only) a prefix; the `*`s at both ends are not part of its text.
        init(typed text: String) {
            let trimmed = text.drop { $0 == "*" }
            let match: Match = trimmed.count < text.count ? .substring : (text.hasSuffix("*") ? .prefix : .words)
            var end = trimmed.endIndex
            while end > trimmed.startIndex, trimmed[trimmed.index(before: end)] == "*" { end = trimmed.index(before: end) }
            self.init(String(trimmed[..<end]), match: match)
        }

        /// Whether the stores match it as a substring: asked for with `*`, or written in a
        /// script without spaces (see ``isSpaceless``).
        public var isSubstring: Bool { self.match == .substring || self.isSpaceless }

        /// Whether the term is written in a script without spaces between words (Chinese,
        /// Japanese, Thai, …): word indexes cannot split it, so the stores match it as a
        /// substring (trigram indexes) instead.
        public var isSpaceless: Bool {
            self.text.unicodeScalars.contains(where: Self.isSpacelessScalar)
        }

        /// Its length in Unicode scalars: a trigram index needs at least 3.
        var scalarCount: Int { self.text.unicodeScalars.count }

        static func isSpacelessScalar(_ scalar: Unicode.Scalar) -> Bool {
            switch scalar.value {
            case 0x0E00...0x0EFF,  // Thai, Lao
                0x1000...0x109F,  // Myanmar
                0x1780...0x17FF,  // Khmer
                0x3040...0x30FF,  // Hiragana, Katakana
                0x31F0...0x31FF,  // Katakana extensions
                0x3400...0x4DBF,  // CJK extension A
                0x4E00...0x9FFF,  // CJK unified ideographs
                0xF900...0xFAFF,  // CJK compatibility ideographs
                0xFF66...0xFF9F,  // half-width Katakana
                0x20000...0x3134F:  // CJK extensions B–G
                return true
            default:
                return false
            }
        }

        public var description: String {
            if self.isPhrase { return "\"\(self.text)\"" }
            switch self.match {
            case .words: return self.text
            case .prefix: return self.text + "*"
            case .substring: return "*" + self.text + "*"
            }
        }
    }

    /// Every group must match; a group matches when any of its terms does. Never empty.
    public var groups: [[Term]]
    /// No result may contain any of these.
    public var excluded: [Term]
    /// Authors (`from:`); empty: any.
    public var authors: [String]
    /// Circles (`in:`); empty: every circle the reader may read.
    public var circles: [String]
    /// Results are older than this (milliseconds since 1970, exclusive).
    public var before: Int64?
    /// Results are newer than this (milliseconds since 1970, exclusive).
    public var after: Int64?

    public init(groups: [[Term]], excluded: [Term] = [], authors: [String] = [], circles: [String] = [], before: Int64? = nil, after: Int64? = nil) {
        self.groups = groups
        self.excluded = excluded
        self.authors = authors
        self.circles = circles
        self.before = before
        self.after = after
    }

    /// The limits of a query, in one place.
    public enum Limits {
        /// The longest query, in UTF-8 bytes (before and after NFC normalisation).
        public static let maxBytes = 512
        /// The most terms, exclusions and filters (`from:` and the like) together.
        public static let maxTerms = 16
    }

    /// Every term a result must or may contain (not the exclusions).
    public var terms: [Term] { self.groups.flatMap { $0 } }
}

/// Why a query cannot be searched for; each with a message a person can act on.
public struct SearchQueryError: Error, Sendable, Hashable, CustomStringConvertible {
    public enum Code: String, Sendable, Hashable {
        /// Longer than ``SearchQuery/Limits/maxBytes``.
        case tooLong = "query_too_long"
        /// More than ``SearchQuery/Limits/maxTerms`` terms and filters.
        case tooManyTerms = "too_many_terms"
        /// No word or phrase to look for (empty, only exclusions, filters or symbols).
        case nothingToFind = "nothing_to_find"
        /// A `before:` or `after:` that is not a date or an ISO-8601 time.
        case badDate = "bad_date"
    }

    public var code: Code
    public var message: String

    public init(_ code: Code, _ message: String) {
        self.code = code
        self.message = message
    }

    public var description: String { self.message }
}

extension SearchQuery {
    /// Parses what a person typed. Never traps, whatever the input (a fuzz target can call it
    /// directly); throws ``SearchQueryError`` for what cannot be searched.
    public static func parse(_ text: String) throws(SearchQueryError) -> SearchQuery {
        guard text.utf8.count <= Limits.maxBytes else {
            throw SearchQueryError(.tooLong, "a search is at most \(Limits.maxBytes) bytes long")
        }
        // Control characters (NUL included) separate words, as white space does: neither index
        // nor PostgreSQL's `text` takes them inside a term.
        let scalars = text.precomposedStringWithCanonicalMapping.unicodeScalars.map { scalar -> Unicode.Scalar in
            scalar.properties.generalCategory == .control ? " " : scalar
        }
        var normalized = ""
        normalized.unicodeScalars.append(contentsOf: scalars)
        guard normalized.utf8.count <= Limits.maxBytes else {
            throw SearchQueryError(.tooLong, "a search is at most \(Limits.maxBytes) bytes long")
        }

        var parser = Parser()
        for token in Self.tokens(normalized) {
            try parser.take(token)
        }
        return try parser.finish()
    }

    /// One piece of the text: a bare run of non-space characters or a quoted phrase, and
    /// whether a `-` came right before it.
    struct Token: Equatable {
        var text: String
        var quoted: Bool
        var negated: Bool
    }

    /// Splits the text at white space; `"…"` with a closing quote is one token, a `"` without
    /// one is dropped.
    static func tokens(_ text: String) -> [Token] {
        var tokens: [Token] = []
        let characters = Array(text)
        var index = 0
        while index < characters.count {
            if characters[index].isWhitespace {
                index += 1
                continue
            }
            var negated = false
            if characters[index] == "-", index + 1 < characters.count, !characters[index + 1].isWhitespace {
                negated = true
                index += 1
            }
            if characters[index] == "\"" {
                if let close = characters[(index + 1)...].firstIndex(of: "\"") {
                    tokens.append(Token(text: String(characters[(index + 1)..<close]), quoted: true, negated: negated))
                    index = close + 1
                } else {
                    index += 1  // an unbalanced quote: ignored, the rest read as words
                    if negated, index < characters.count, !characters[index].isWhitespace {
                        let end = characters[index...].firstIndex(where: \.isWhitespace) ?? characters.count
                        tokens.append(Token(text: String(characters[index..<end]), quoted: false, negated: true))
                        index = end
                    }
                }
                continue
            }
            let end = characters[index...].firstIndex(where: \.isWhitespace) ?? characters.count
            tokens.append(Token(text: String(characters[index..<end]), quoted: false, negated: negated))
            index = end
        }
        return tokens
    }

    /// Builds the query from the tokens, one at a time.
    private struct Parser {
        var groups: [[Term]] = []
        var excluded: [Term] = []
        var authors: [String] = []
        var circles: [String] = []
        var before: Int64?
        var after: Int64?
        var count = 0
        /// An `OR` came after the last group's term: the next term joins that group.
        var pendingOr = false
        /// The last thing taken was a positive term (an `OR` may follow it).
        var lastWasTerm = false

        mutating func counted() throws(SearchQueryError) {
            self.count += 1
            guard self.count <= Limits.maxTerms else {
                throw SearchQueryError(.tooManyTerms, "a search has at most \(Limits.maxTerms) terms and filters")
            }
        }

        mutating func take(_ token: Token) throws(SearchQueryError) {
            if !token.quoted, !token.negated, token.text == "OR" {
                // Only between two terms; a dangling one is dropped.
                self.pendingOr = self.lastWasTerm
                self.lastWasTerm = false
                return
            }
            if !token.quoted, !token.negated, let (name, value) = Self.filter(token.text) {
                try self.counted()
                self.pendingOr = false
                self.lastWasTerm = false
                switch name {
                case "from":
                    self.authors.append(value.hasPrefix("@") ? String(value.dropFirst()) : value)
                case "in":
                    // Circle names are lower case (`CircleRoutes.isValidCircleName`).
                    self.circles.append((value.hasPrefix("#") ? String(value.dropFirst()) : value).lowercased())
                case "before":
                    let time = try SearchDate.parse(value, end: false)
                    self.before = min(self.before ?? time, time)
                default:  // "after"
                    let time = try SearchDate.parse(value, end: true)
                    self.after = max(self.after ?? time, time)
                }
                return
            }
            let text = token.text.trimmingCharacters(in: .whitespacesAndNewlines)
            guard text.unicodeScalars.contains(where: { $0.properties.isAlphabetic || $0.properties.numericType != nil }) else {
                // Nothing a tokenizer would keep. An OR before it still waits for a real term.
                return
            }
            try self.counted()
            let term = token.quoted ? Term(text, isPhrase: true) : Term(typed: text)
            if token.negated {
                self.excluded.append(term)
                self.pendingOr = false
                self.lastWasTerm = false
                return
            }
            if self.pendingOr, !self.groups.isEmpty {
                self.groups[self.groups.count - 1].append(term)
            } else {
                self.groups.append([term])
            }
            self.pendingOr = false
            self.lastWasTerm = true
        }

        /// `name:value` for the four filters (the name in any case), with a non-empty value.
        static func filter(_ text: String) -> (String, String)? {
            guard let colon = text.firstIndex(of: ":") else { return nil }
            let name = text[..<colon].lowercased()
            let value = String(text[text.index(after: colon)...])
            guard ["from", "in", "before", "after"].contains(name), !value.isEmpty else { return nil }
            guard name == "before" || name == "after" || (value != "@" && value != "#") else { return nil }
            return (name, value)
        }

        func finish() throws(SearchQueryError) -> SearchQuery {
            guard !self.groups.isEmpty else {
                throw SearchQueryError(.nothingToFind, "give a word or a \"phrase\" to search for")
            }
            return SearchQuery(
                groups: self.groups,
                excluded: self.excluded,
                authors: self.authors,
                circles: self.circles,
                before: self.before,
                after: self.after
            )
        }
    }
}

/// The dates and times `before:` and `after:` take, parsed by hand: no formatter, no locale,
/// nothing that can trap on odd input.
enum SearchDate {
    /// Milliseconds since 1970. A bare date is a UTC day: for `before:` (`end == false`) its
    /// start, for `after:` its last millisecond, so both exclude the day itself.
    static func parse(_ text: String, end: Bool) throws(SearchQueryError) -> Int64 {
        guard let time = Self.time(Array(text.utf8), end: end) else {
            throw SearchQueryError(.badDate, "\"\(text.prefix(40))\" is not a date (2026-11-27) or an ISO-8601 time (2026-11-27T10:15:00Z)")
        }
        return time
    }

    private static func time(_ bytes: [UInt8], end: Bool) -> Int64? {
        var reader = Reader(bytes: bytes)
        guard let year = reader.digits(4), reader.skip(UInt8(ascii: "-")),
            let month = reader.digits(2), reader.skip(UInt8(ascii: "-")),
            let day = reader.digits(2),
            (1...12).contains(month), day >= 1, day <= Self.daysIn(month: month, year: year)
        else { return nil }
        let dayStart = Self.days(year: year, month: month, day: day) * 86_400_000
        if reader.atEnd {
            return end ? dayStart + 86_400_000 - 1 : dayStart
        }
        guard reader.skip(UInt8(ascii: "T")) || reader.skip(UInt8(ascii: "t")) || reader.skip(UInt8(ascii: " ")),
            let hour = reader.digits(2), hour < 24, reader.skip(UInt8(ascii: ":")),
            let minute = reader.digits(2), minute < 60
        else { return nil }
        var milliseconds: Int64 = 0
        if reader.skip(UInt8(ascii: ":")) {
            guard let second = reader.digits(2), second < 61 else { return nil }
            milliseconds = second * 1000
            if reader.skip(UInt8(ascii: ".")) || reader.skip(UInt8(ascii: ",")) {
                // Up to nanoseconds; the first three digits count.
                var digits = 0
                var fraction: Int64 = 0
                while let digit = reader.digit() {
                    digits += 1
                    guard digits <= 9 else { return nil }
                    if digits <= 3 { fraction = fraction * 10 + digit }
                }
                guard digits > 0 else { return nil }
                if digits < 3 {
                    for _ in digits..<3 { fraction *= 10 }
                }
                milliseconds += fraction
            }
        }
        var offset: Int64 = 0
        if reader.skip(UInt8(ascii: "Z")) || reader.skip(UInt8(ascii: "z")) {
            offset = 0
        } else if let sign = reader.sign() {
            guard let hours = reader.digits(2), hours < 24 else { return nil }
            _ = reader.skip(UInt8(ascii: ":"))
            guard let minutes = reader.digits(2), minutes < 60 else { return nil }
            offset = sign * (hours * 60 + minutes) * 60_000
        } else {
            return nil  // a time needs its zone: Z or an offset
        }
        guard reader.atEnd else { return nil }
        return dayStart + (hour * 60 + minute) * 60_000 + milliseconds - offset
    }

    /// Days from 1970-01-01 to a date of the proleptic Gregorian calendar.
    static func days(year: Int64, month: Int64, day: Int64) -> Int64 {
        let y = month <= 2 ? year - 1 : year
        let era = (y >= 0 ? y : y - 399) / 400
        let yearOfEra = y - era * 400
        let dayOfYear = (153 * (month + (month > 2 ? -3 : 9)) + 2) / 5 + day - 1
        let dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear
        return era * 146_097 + dayOfEra - 719_468
    }

    static func daysIn(month: Int64, year: Int64) -> Int64 {
        switch month {
        case 2: return (year % 4 == 0 && year % 100 != 0) || year % 400 == 0 ? 29 : 28
        case 4, 6, 9, 11: return 30
        default: return 31
        }
    }

    private struct Reader {
        var bytes: [UInt8]
        var index = 0

        var atEnd: Bool { self.index == self.bytes.count }

        mutating func skip(_ byte: UInt8) -> Bool {
            guard self.index < self.bytes.count, self.bytes[self.index] == byte else { return false }
            self.index += 1
            return true
        }

        mutating func digit() -> Int64? {
            guard self.index < self.bytes.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(self.bytes[self.index]) else { return nil }
            defer { self.index += 1 }
            return Int64(self.bytes[self.index] - UInt8(ascii: "0"))
        }

        /// Exactly `count` digits.
        mutating func digits(_ count: Int) -> Int64? {
            var value: Int64 = 0
            for _ in 0..<count {
                guard let digit = self.digit() else { return nil }
                value = value * 10 + digit
            }
            return value
        }

        mutating func sign() -> Int64? {
            if self.skip(UInt8(ascii: "+")) { return 1 }
            if self.skip(UInt8(ascii: "-")) { return -1 }
            return nil
        }
    }
}
