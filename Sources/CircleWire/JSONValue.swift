/// A parsed JSON value, as the server reads client requests.
///
/// Circle parses each request exactly once, with this strict parser, instead of Foundation's
/// `JSONSerialization` and `JSONDecoder`: neither reports duplicate object keys (and they
/// disagree on which of two duplicates wins, so a check made with one and a use made with the
/// other can see different values), neither bounds nesting depth, and parsing twice cost twice.
/// The parser is written for untrusted input: it never traps, recurses at most
/// ``JSONParser/maxDepth`` levels, validates UTF-8 and escapes, and refuses duplicate keys.
public enum JSONValue: Sendable, Hashable {
    case null
    case bool(Bool)
    /// A number, kept as its JSON text so that integers beyond `Double`'s precision, and numbers
    /// out of any range (`1e400`), are judged by whoever reads them.
    case number(String)
    case string(String)
    case array([JSONValue])
    /// Members in their order in the text; keys are unique.
    case object([(key: String, value: JSONValue)])

    public static func == (lhs: JSONValue, rhs: JSONValue) -> Bool {
        switch (lhs, rhs) {
        case (.null, .null): return true
        case (.bool(let a), .bool(let b)): return a == b
        case (.number(let a), .number(let b)): return a == b
        case (.string(let a), .string(let b)): return a == b
        case (.array(let a), .array(let b)): return a == b
        case (.object(let a), .object(let b)):
            return a.count == b.count && zip(a, b).allSatisfy { $0.key == $1.key && $0.value == $1.value }
        default: return false
        }
    }

    public func hash(into hasher: inout Hasher) {
        switch self {
        case .null: hasher.combine(0)
        case .bool(let value): hasher.combine(value)
        case .number(let value): hasher.combine(value)
        case .string(let value): hasher.combine(value)
        case .array(let values): hasher.combine(values)
        case .object(let members):
            for member in members {
                hasher.combine(member.key)
                hasher.combine(member.value)
            }
        }
    }

    /// The member named `key` of an object.
    public subscript(key: String) -> JSONValue? {
        guard case .object(let members) = self else { return nil }
        return members.first { $0.key == key }?.value
    }

    /// What kind of value this is, for error messages ("a string", "a number", …).
    public var kind: String {
        switch self {
        case .null: return "null"
        case .bool: return "a boolean"
        case .number: return "a number"
        case .string: return "a string"
        case .array: return "an array"
        case .object: return "an object"
        }
    }

    /// The value as an `Int64` when it is an integer in range (no fraction, no exponent that
    /// leaves the range); `nil` otherwise.
    public var int64: Int64? {
        guard case .number(let text) = self else { return nil }
        if let value = Int64(text) { return value }
        // 1e3 and 2.0 are integers too; anything else (1.5, 1e400) is not.
        guard let double = Double(text), double.isFinite, double.rounded() == double,
            double >= -9_223_372_036_854_775_808.0, double < 9_223_372_036_854_775_808.0
        else { return nil }
        return Int64(double)
    }
}

/// Why a text is not JSON, with the byte offset where parsing stopped.
public struct JSONParseError: Error, Sendable, Hashable, CustomStringConvertible {
    public var offset: Int
    public var reason: String
    /// Set when the problem is a repeated object key.
    public var duplicateKey: String?

    public var description: String { "\(self.reason) at byte \(self.offset)" }
}

/// A strict RFC 8259 JSON parser over UTF-8 bytes (see ``JSONValue``).
public struct JSONParser {
    /// Deepest nesting of arrays and objects accepted.
    public static let maxDepth = 32
    /// Members of an object checked for a repeated key by comparison before a set takes over.
    static let linearKeySearchLimit = 16

    private let bytes: [UInt8]
    private var index = 0

    private init(_ bytes: [UInt8]) {
        self.bytes = bytes
    }

    /// Parses one JSON text (surrounding white space allowed, nothing else after it).
    public static func parse(_ bytes: some Collection<UInt8>) -> Result<JSONValue, JSONParseError> {
        var parser = JSONParser(Array(bytes))
        do throws(JSONParseError) {
            parser.skipWhitespace()
            let value = try parser.parseValue(depth: 0)
            parser.skipWhitespace()
            guard parser.index == parser.bytes.count else { throw parser.error("unexpected text after the JSON value") }
            return .success(value)
        } catch {
            return .failure(error)
        }
    }

    private func error(_ reason: String, duplicateKey: String? = nil) -> JSONParseError {
        JSONParseError(offset: self.index, reason: reason, duplicateKey: duplicateKey)
    }

    private var current: UInt8? { self.index < self.bytes.count ? self.bytes[self.index] : nil }

    private mutating func skipWhitespace() {
        while let byte = self.current, byte == 0x20 || byte == 0x0A || byte == 0x0D || byte == 0x09 {
            self.index += 1
        }
    }

    private mutating func expect(_ literal: StaticString, _ value: JSONValue) throws(JSONParseError) -> JSONValue {
        let count = literal.utf8CodeUnitCount
        guard self.index + count <= self.bytes.count else { throw self.error("unexpected end of text") }
        let matches = literal.withUTF8Buffer { expected in
            expected.indices.allSatisfy { expected[$0] == self.bytes[self.index + $0] }
        }
        guard matches else { throw self.error("unexpected character") }
        self.index += count
        return value
    }

    private mutating func parseValue(depth: Int) throws(JSONParseError) -> JSONValue {
        guard let byte = self.current else { throw self.error("unexpected end of text") }
        switch byte {
        case UInt8(ascii: "{"):
            return try self.parseObject(depth: depth + 1)
        case UInt8(ascii: "["):
            return try self.parseArray(depth: depth + 1)
        case UInt8(ascii: "\""):
            return .string(try self.parseString())
        case UInt8(ascii: "t"):
            return try self.expect("true", .bool(true))
        case UInt8(ascii: "f"):
            return try self.expect("false", .bool(false))
        case UInt8(ascii: "n"):
            return try self.expect("null", .null)
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"):
            return .number(try self.parseNumber())
        default:
            throw self.error("unexpected character")
        }
    }

    private mutating func parseObject(depth: Int) throws(JSONParseError) -> JSONValue {
        guard depth <= Self.maxDepth else { throw self.error("nested deeper than \(Self.maxDepth) levels") }
        self.index += 1  // {
        var members: [(key: String, value: JSONValue)] = []
        /// The keys, once there are too many members for a linear search.
        var keys: Set<String>?
        self.skipWhitespace()
        if self.current == UInt8(ascii: "}") {
            self.index += 1
            return .object(members)
        }
        while true {
            self.skipWhitespace()
            guard self.current == UInt8(ascii: "\"") else { throw self.error("expected a string key") }
            let keyStart = self.index
            let key = try self.parseString()
            // A request has a handful of keys: comparing them beats hashing; a large object
            // switches to a set, so a frame full of keys stays linear.
            if keys == nil, members.count >= Self.linearKeySearchLimit {
                keys = Set(members.map(\.key))
            }
            let repeated: Bool
            if let inserted = keys?.insert(key).inserted {
                repeated = !inserted
            } else {
                repeated = members.contains { $0.key == key }
            }
            guard !repeated else {
                throw JSONParseError(offset: keyStart, reason: "the key \"\(key)\" appears twice", duplicateKey: key)
            }
            self.skipWhitespace()
            guard self.current == UInt8(ascii: ":") else { throw self.error("expected ':'") }
            self.index += 1
            self.skipWhitespace()
            members.append((key, try self.parseValue(depth: depth)))
            self.skipWhitespace()
            switch self.current {
            case UInt8(ascii: ","):
                self.index += 1
            case UInt8(ascii: "}"):
                self.index += 1
                return .object(members)
            default:
                throw self.error("expected ',' or '}'")
            }
        }
    }

    private mutating func parseArray(depth: Int) throws(JSONParseError) -> JSONValue {
        guard depth <= Self.maxDepth else { throw self.error("nested deeper than \(Self.maxDepth) levels") }
        self.index += 1  // [
        var values: [JSONValue] = []
        self.skipWhitespace()
        if self.current == UInt8(ascii: "]") {
            self.index += 1
            return .array(values)
        }
        while true {
            self.skipWhitespace()
            values.append(try self.parseValue(depth: depth))
            self.skipWhitespace()
            switch self.current {
            case UInt8(ascii: ","):
                self.index += 1
            case UInt8(ascii: "]"):
                self.index += 1
                return .array(values)
            default:
                throw self.error("expected ',' or ']'")
            }
        }
    }

    private mutating func parseNumber() throws(JSONParseError) -> String {
        let start = self.index
        if self.current == UInt8(ascii: "-") { self.index += 1 }
        guard let first = self.current, Self.isDigit(first) else { throw self.error("expected a digit") }
        if first == UInt8(ascii: "0") {
            self.index += 1
        } else {
            self.skipDigits()
        }
        if self.current == UInt8(ascii: ".") {
            self.index += 1
            guard let next = self.current, Self.isDigit(next) else { throw self.error("expected a digit after '.'") }
            self.skipDigits()
        }
        if self.current == UInt8(ascii: "e") || self.current == UInt8(ascii: "E") {
            self.index += 1
            if self.current == UInt8(ascii: "+") || self.current == UInt8(ascii: "-") { self.index += 1 }
            guard let next = self.current, Self.isDigit(next) else { throw self.error("expected a digit in the exponent") }
            self.skipDigits()
        }
        return String(decoding: self.bytes[start..<self.index], as: UTF8.self)
    }

    private static func isDigit(_ byte: UInt8) -> Bool { byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9") }

    private mutating func skipDigits() {
        while let byte = self.current, Self.isDigit(byte) { self.index += 1 }
    }

    private mutating func parseString() throws(JSONParseError) -> String {
        self.index += 1  // opening quote
        // Most strings have no escapes: one validating conversion of the bytes between the quotes.
        let start = self.index
        while let byte = self.current, byte != UInt8(ascii: "\\"), byte >= 0x20 {
            if byte == UInt8(ascii: "\"") {
                guard let string = String(validating: self.bytes[start..<self.index], as: UTF8.self) else {
                    throw JSONParseError(offset: start, reason: "invalid UTF-8 in a string", duplicateKey: nil)
                }
                self.index += 1
                return string
            }
            self.index += 1
        }
        self.index = start
        var scalars = String.UnicodeScalarView()
        var runStart = self.index
        func flushRun(_ parser: JSONParser, into scalars: inout String.UnicodeScalarView) throws(JSONParseError) {
            guard runStart < parser.index else { return }
            // Validates UTF-8: an invalid sequence is an error, not a replacement character.
            guard let run = String(validating: parser.bytes[runStart..<parser.index], as: UTF8.self) else {
                throw JSONParseError(offset: runStart, reason: "invalid UTF-8 in a string", duplicateKey: nil)
            }
            scalars.append(contentsOf: run.unicodeScalars)
        }
        while true {
            guard let byte = self.current else { throw self.error("unterminated string") }
            switch byte {
            case UInt8(ascii: "\""):
                try flushRun(self, into: &scalars)
                self.index += 1
                return String(scalars)
            case UInt8(ascii: "\\"):
                try flushRun(self, into: &scalars)
                self.index += 1
                scalars.append(try self.parseEscape())
                runStart = self.index
            case 0x00..<0x20:
                throw self.error("control character in a string")
            default:
                self.index += 1
            }
        }
    }

    private mutating func parseEscape() throws(JSONParseError) -> Unicode.Scalar {
        guard let byte = self.current else { throw self.error("unterminated escape") }
        self.index += 1
        switch byte {
        case UInt8(ascii: "\""): return "\""
        case UInt8(ascii: "\\"): return "\\"
        case UInt8(ascii: "/"): return "/"
        case UInt8(ascii: "b"): return "\u{08}"
        case UInt8(ascii: "f"): return "\u{0C}"
        case UInt8(ascii: "n"): return "\n"
        case UInt8(ascii: "r"): return "\r"
        case UInt8(ascii: "t"): return "\t"
        case UInt8(ascii: "u"):
            let high = try self.parseHex4()
            switch high {
            case 0xD800...0xDBFF:
                guard self.current == UInt8(ascii: "\\"), self.index + 1 < self.bytes.count,
                    self.bytes[self.index + 1] == UInt8(ascii: "u")
                else { throw self.error("a high surrogate must be followed by a low one") }
                self.index += 2
                let low = try self.parseHex4()
                guard (0xDC00...0xDFFF).contains(low) else { throw self.error("invalid low surrogate") }
                let value = 0x10000 + ((high - 0xD800) << 10) + (low - 0xDC00)
                guard let scalar = Unicode.Scalar(value) else { throw self.error("invalid escape") }
                return scalar
            case 0xDC00...0xDFFF:
                throw self.error("a lone low surrogate")
            default:
                guard let scalar = Unicode.Scalar(high) else { throw self.error("invalid escape") }
                return scalar
            }
        default:
            throw self.error("invalid escape")
        }
    }

    private mutating func parseHex4() throws(JSONParseError) -> UInt32 {
        guard self.index + 4 <= self.bytes.count else { throw self.error("unterminated escape") }
        var value: UInt32 = 0
        for _ in 0..<4 {
            let byte = self.bytes[self.index]
            let digit: UInt32
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = UInt32(byte - UInt8(ascii: "0"))
            case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = UInt32(byte - UInt8(ascii: "a") + 10)
            case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = UInt32(byte - UInt8(ascii: "A") + 10)
            default: throw self.error("invalid hex digit in an escape")
            }
            value = value << 4 | digit
            self.index += 1
        }
        return value
    }
}
