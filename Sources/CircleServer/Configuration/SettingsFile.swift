#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A `circle serve --config FILE` file (docs/OPERATIONS.md, "Configuration file"): one JSON
/// object whose members are settings, each kept with the line it starts on so that every
/// complaint can say `FILE:LINE: message`.
///
/// Our own parser rather than swift-configuration's `JSONProvider` (1.4.0): that one decodes
/// with `JSONSerialization`, which keeps no line numbers, and its `ReloadingFileProvider`
/// notices a change only by polling, where the server reloads on SIGHUP. What the file means
/// (which keys exist, their types and ranges) is not decided here but by `circle serve`'s own
/// options (`ServeSettings` in the CLI), so there is one list of settings.
///
/// Bounded: at most ``maxBytes`` bytes, values nested at most ``maxDepth`` deep, UTF-8 only.
public struct SettingsFile: Sendable, Equatable {
    /// A JSON value as the file wrote it; numbers keep their text (`1e3`, `0.5`) so the option
    /// that takes them parses them as it parses a command line.
    public indirect enum Value: Sendable, Equatable {
        case string(String)
        case number(String)
        case bool(Bool)
        case null
        case array([Value])
        case object([Entry])

        /// The JSON type's name, for messages.
        public var typeName: String {
            switch self {
            case .string: "a string"
            case .number: "a number"
            case .bool: "a boolean"
            case .null: "null"
            case .array: "an array"
            case .object: "an object"
            }
        }
    }

    /// One member: its key, its value and the line the key is on (from 1).
    public struct Entry: Sendable, Equatable {
        public var key: String
        public var value: Value
        public var line: Int
    }

    /// A reason the file cannot be used at all, with the line it was found on (0: the file as a
    /// whole, e.g. it cannot be opened).
    public struct Problem: Error, Sendable, Equatable, CustomStringConvertible {
        public var line: Int
        public var message: String
        public init(line: Int, message: String) {
            self.line = line
            self.message = message
        }
        public var description: String { self.message }
    }

    /// The largest file read: 1 MiB (a configuration is a few kilobytes).
    public static let maxBytes = 1 << 20
    /// The deepest nesting of arrays and objects: 16 (settings are flat; a list is one level).
    public static let maxDepth = 16

    /// The top-level members, in the file's order.
    public var entries: [Entry]

    /// Reads and parses the file at `path`: a directory, a file that cannot be opened, one larger
    /// than ``maxBytes``, one that is not UTF-8 or not a JSON object is a ``Problem``.
    public static func read(path: String) throws(Problem) -> SettingsFile {
        let descriptor = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK)
        guard descriptor >= 0 else {
            throw Problem(line: 0, message: "cannot open it: \(String(cString: strerror(errno)))")
        }
        defer { close(descriptor) }
        var status = stat()
        guard fstat(descriptor, &status) == 0 else {
            throw Problem(line: 0, message: "cannot read it: \(String(cString: strerror(errno)))")
        }
        let type = status.st_mode & S_IFMT
        if type == S_IFDIR { throw Problem(line: 0, message: "is a directory, not a configuration file") }
        guard type == S_IFREG else { throw Problem(line: 0, message: "is not a regular file") }
        guard status.st_size <= Self.maxBytes else {
            throw Problem(line: 0, message: "is \(status.st_size) bytes, more than the limit of \(Self.maxBytes) (1 MiB)")
        }
        var bytes = [UInt8](repeating: 0, count: Self.maxBytes + 1)
        var count = 0
        while count < bytes.count {
            let read = bytes.withUnsafeMutableBytes { buffer in
                #if canImport(Glibc)
                Glibc.read(descriptor, buffer.baseAddress! + count, buffer.count - count)
                #else
                Darwin.read(descriptor, buffer.baseAddress! + count, buffer.count - count)
                #endif
            }
            if read < 0 {
                if errno == EINTR { continue }
                throw Problem(line: 0, message: "cannot read it: \(String(cString: strerror(errno)))")
            }
            if read == 0 { break }
            count += read
        }
        guard count <= Self.maxBytes else {
            throw Problem(line: 0, message: "is more than the limit of \(Self.maxBytes) bytes (1 MiB)")
        }
        return try Self.parse(bytes[0..<count])
    }

    /// Parses a file's bytes: UTF-8 JSON text whose top level is an object.
    public static func parse(_ bytes: ArraySlice<UInt8>) throws(Problem) -> SettingsFile {
        guard bytes.count <= Self.maxBytes else {
            throw Problem(line: 0, message: "is more than the limit of \(Self.maxBytes) bytes (1 MiB)")
        }
        var parser = Parser(bytes: Array(bytes))
        try parser.checkUTF8()
        parser.skipSpace()
        if parser.index < parser.bytes.count, parser.bytes[parser.index] == 0xEF {
            throw Problem(line: 1, message: "starts with a byte-order mark; save it as UTF-8 without one")
        }
        guard parser.peek() == UInt8(ascii: "{") else {
            throw Problem(line: parser.line, message: parser.atEnd ? "is empty; a configuration file is a JSON object, e.g. {\"port\": 8080}" : "must be a JSON object, e.g. {\"port\": 8080}")
        }
        guard case .object(let entries) = try parser.value(depth: 1) else { fatalError("unreachable") }
        parser.skipSpace()
        guard parser.atEnd else {
            throw Problem(line: parser.line, message: "unexpected text after the closing }")
        }
        return SettingsFile(entries: entries)
    }

    private struct Parser {
        let bytes: [UInt8]
        var index = 0
        var line = 1

        var atEnd: Bool { self.index >= self.bytes.count }

        func peek() -> UInt8? { self.atEnd ? nil : self.bytes[self.index] }

        /// The whole file must be UTF-8; the line of the first bad byte is named.
        func checkUTF8() throws(Problem) {
            var line = 1
            var index = 0
            let bytes = self.bytes
            while index < bytes.count {
                let byte = bytes[index]
                if byte == 0x0A { line += 1 }
                if byte < 0x80 {
                    index += 1
                    continue
                }
                let length: Int
                let minimum: UInt32
                switch byte {
                case 0xC2...0xDF: (length, minimum) = (2, 0x80)
                case 0xE0...0xEF: (length, minimum) = (3, 0x800)
                case 0xF0...0xF4: (length, minimum) = (4, 0x10000)
                default: throw Problem(line: line, message: "is not UTF-8 text (byte 0x\(String(byte, radix: 16)))")
                }
                guard index + length <= bytes.count else {
                    throw Problem(line: line, message: "is not UTF-8 text (it ends inside a character)")
                }
                var scalar = UInt32(byte) & (length == 2 ? 0x1F : length == 3 ? 0x0F : 0x07)
                for offset in 1..<length {
                    let next = bytes[index + offset]
                    guard next & 0xC0 == 0x80 else {
                        throw Problem(line: line, message: "is not UTF-8 text (byte 0x\(String(next, radix: 16)))")
                    }
                    scalar = scalar << 6 | UInt32(next & 0x3F)
                }
                guard scalar >= minimum, scalar <= 0x10FFFF, !(0xD800...0xDFFF).contains(scalar) else {
                    throw Problem(line: line, message: "is not UTF-8 text (an invalid sequence)")
                }
                index += length
            }
        }

        mutating func skipSpace() {
            while let byte = self.peek() {
                switch byte {
                case 0x0A:
                    self.line += 1
                case 0x20, 0x09, 0x0D:
                    break
                default:
                    return
                }
                self.index += 1
            }
        }

        func problem(_ message: String) -> Problem { Problem(line: self.line, message: message) }

        mutating func expect(_ byte: UInt8, _ what: String) throws(Problem) {
            self.skipSpace()
            guard self.peek() == byte else { throw self.unexpected(expected: what) }
            self.index += 1
        }

        func unexpected(expected what: String) -> Problem {
            guard let byte = self.peek() else { return self.problem("malformed JSON: the file ends where \(what) should be") }
            let shown = byte >= 0x20 && byte < 0x7F ? "'\(Character(Unicode.Scalar(byte)))'" : "byte 0x\(String(byte, radix: 16))"
            return self.problem("malformed JSON: \(shown) where \(what) should be")
        }

        mutating func value(depth: Int) throws(Problem) -> Value {
            self.skipSpace()
            guard let byte = self.peek() else { throw self.unexpected(expected: "a value") }
            switch byte {
            case UInt8(ascii: "{"):
                guard depth <= SettingsFile.maxDepth else { throw self.problem("nested more than \(SettingsFile.maxDepth) deep") }
                self.index += 1
                var entries: [Entry] = []
                var seen: [String: Int] = [:]
                self.skipSpace()
                if self.peek() == UInt8(ascii: "}") {
                    self.index += 1
                    return .object(entries)
                }
                while true {
                    self.skipSpace()
                    guard self.peek() == UInt8(ascii: "\"") else { throw self.unexpected(expected: "a key in double quotes") }
                    let line = self.line
                    let key = try self.string()
                    if let first = seen[key] {
                        throw Problem(line: line, message: "\"\(key)\" is set twice (first on line \(first))")
                    }
                    seen[key] = line
                    try self.expect(UInt8(ascii: ":"), "':' after the key")
                    let value = try self.value(depth: depth + 1)
                    entries.append(Entry(key: key, value: value, line: line))
                    self.skipSpace()
                    if self.peek() == UInt8(ascii: ",") {
                        self.index += 1
                        continue
                    }
                    try self.expect(UInt8(ascii: "}"), "',' or '}'")
                    return .object(entries)
                }
            case UInt8(ascii: "["):
                guard depth <= SettingsFile.maxDepth else { throw self.problem("nested more than \(SettingsFile.maxDepth) deep") }
                self.index += 1
                var values: [Value] = []
                self.skipSpace()
                if self.peek() == UInt8(ascii: "]") {
                    self.index += 1
                    return .array(values)
                }
                while true {
                    values.append(try self.value(depth: depth + 1))
                    self.skipSpace()
                    if self.peek() == UInt8(ascii: ",") {
                        self.index += 1
                        continue
                    }
                    try self.expect(UInt8(ascii: "]"), "',' or ']'")
                    return .array(values)
                }
            case UInt8(ascii: "\""):
                return .string(try self.string())
            case UInt8(ascii: "t"):
                try self.literal("true")
                return .bool(true)
            case UInt8(ascii: "f"):
                try self.literal("false")
                return .bool(false)
            case UInt8(ascii: "n"):
                try self.literal("null")
                return .null
            case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"):
                return .number(try self.number())
            default:
                throw self.unexpected(expected: "a value")
            }
        }

        mutating func literal(_ word: String) throws(Problem) {
            for expected in word.utf8 {
                guard self.peek() == expected else { throw self.unexpected(expected: "\"\(word)\"") }
                self.index += 1
            }
        }

        /// A JSON number (RFC 8259's grammar), as its text.
        mutating func number() throws(Problem) -> String {
            let start = self.index
            func digits(_ parser: inout Parser) -> Int {
                var count = 0
                while let byte = parser.peek(), (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) {
                    parser.index += 1
                    count += 1
                }
                return count
            }
            if self.peek() == UInt8(ascii: "-") { self.index += 1 }
            if self.peek() == UInt8(ascii: "0") {
                self.index += 1
            } else if digits(&self) == 0 {
                throw self.unexpected(expected: "a digit")
            }
            if self.peek() == UInt8(ascii: ".") {
                self.index += 1
                guard digits(&self) > 0 else { throw self.unexpected(expected: "a digit") }
            }
            if self.peek() == UInt8(ascii: "e") || self.peek() == UInt8(ascii: "E") {
                self.index += 1
                if self.peek() == UInt8(ascii: "+") || self.peek() == UInt8(ascii: "-") { self.index += 1 }
                guard digits(&self) > 0 else { throw self.unexpected(expected: "a digit") }
            }
            return String(decoding: self.bytes[start..<self.index], as: UTF8.self)
        }

        /// A string in double quotes with JSON's escapes; no raw control characters.
        mutating func string() throws(Problem) -> String {
            self.index += 1
            var scalars = String.UnicodeScalarView()
            var run = self.index
            func flush(_ parser: Parser, _ scalars: inout String.UnicodeScalarView, upTo end: Int) {
                scalars.append(contentsOf: String(decoding: parser.bytes[run..<end], as: UTF8.self).unicodeScalars)
            }
            while true {
                guard let byte = self.peek() else { throw self.problem("malformed JSON: a string is not closed") }
                switch byte {
                case UInt8(ascii: "\""):
                    flush(self, &scalars, upTo: self.index)
                    self.index += 1
                    return String(scalars)
                case UInt8(ascii: "\\"):
                    flush(self, &scalars, upTo: self.index)
                    self.index += 1
                    guard let escaped = self.peek() else { throw self.problem("malformed JSON: a string is not closed") }
                    self.index += 1
                    switch escaped {
                    case UInt8(ascii: "\""): scalars.append("\"")
                    case UInt8(ascii: "\\"): scalars.append("\\")
                    case UInt8(ascii: "/"): scalars.append("/")
                    case UInt8(ascii: "b"): scalars.append("\u{08}")
                    case UInt8(ascii: "f"): scalars.append("\u{0C}")
                    case UInt8(ascii: "n"): scalars.append("\n")
                    case UInt8(ascii: "r"): scalars.append("\r")
                    case UInt8(ascii: "t"): scalars.append("\t")
                    case UInt8(ascii: "u"):
                        var unit = try self.hex4()
                        if (0xD800...0xDBFF).contains(unit) {
                            guard self.peek() == UInt8(ascii: "\\") else { throw self.problem("malformed JSON: a lone surrogate in \\u escapes") }
                            self.index += 1
                            guard self.peek() == UInt8(ascii: "u") else { throw self.problem("malformed JSON: a lone surrogate in \\u escapes") }
                            self.index += 1
                            let low = try self.hex4()
                            guard (0xDC00...0xDFFF).contains(low) else { throw self.problem("malformed JSON: a lone surrogate in \\u escapes") }
                            unit = 0x10000 + ((unit - 0xD800) << 10) + (low - 0xDC00)
                        }
                        guard let scalar = Unicode.Scalar(unit) else { throw self.problem("malformed JSON: a lone surrogate in \\u escapes") }
                        scalars.append(scalar)
                    default:
                        throw self.problem("malformed JSON: an unknown escape in a string")
                    }
                    run = self.index
                case 0x00..<0x20:
                    throw self.problem("malformed JSON: a control character (or a line break) inside a string")
                default:
                    self.index += 1
                }
            }
        }

        mutating func hex4() throws(Problem) -> UInt32 {
            var value: UInt32 = 0
            for _ in 0..<4 {
                guard let byte = self.peek(), let digit = Int(String(Unicode.Scalar(byte)), radix: 16) else {
                    throw self.problem("malformed JSON: \\u needs four hex digits")
                }
                value = value << 4 | UInt32(digit)
                self.index += 1
            }
            return value
        }
    }
}
