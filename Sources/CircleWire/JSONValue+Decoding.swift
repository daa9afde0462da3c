/// Decodes `Decodable` values from a ``JSONValue``, so that a body read by ``JSONParser`` (no
/// duplicate keys, bounded depth, valid UTF-8) is never parsed again by a laxer parser.
///
/// The mapping is `JSONDecoder`'s default one: objects to keyed containers, arrays to unkeyed
/// ones, `null` to `nil` for optionals, numbers to any numeric type they fit exactly (integers
/// may be written `2.0` or `2e0`, as in a request). Every error is a `DecodingError` whose
/// `debugDescription` is a sentence naming the field ("\"name\" must be a string, not a number").
enum JSONValueDecoding {
    /// Decodes `type` from `value`.
    static func decode<Value: Decodable>(_ type: Value.Type, from value: JSONValue) throws -> Value {
        try Value(from: ValueDecoder(value: value, codingPath: []))
    }

    /// The dotted name of a field for messages: `posts[2].seq`; `the body` for the top level.
    static func name(_ path: [any CodingKey]) -> String {
        guard !path.isEmpty else { return "the body" }
        var name = ""
        for key in path {
            if let index = key.intValue {
                name += "[\(index)]"
            } else {
                name += name.isEmpty ? key.stringValue : ".\(key.stringValue)"
            }
        }
        return "\"\(name)\""
    }

    static func mismatch(_ expected: String, _ value: JSONValue, _ path: [any CodingKey]) -> DecodingError {
        DecodingError.typeMismatch(
            Any.self,
            .init(codingPath: path, debugDescription: "\(Self.name(path)) must be \(expected), not \(value.kind)")
        )
    }
}

/// An index in an array, or the `super` member, as a coding key.
private struct PlainKey: CodingKey {
    var stringValue: String
    var intValue: Int?
    init(_ index: Int) {
        self.stringValue = "\(index)"
        self.intValue = index
    }
    init(stringValue: String) { self.stringValue = stringValue }
    init(intValue: Int) { self.init(intValue) }
}

private struct ValueDecoder: Decoder, SingleValueDecodingContainer {
    let value: JSONValue
    let codingPath: [any CodingKey]
    var userInfo: [CodingUserInfoKey: Any] { [:] }

    func container<Key: CodingKey>(keyedBy type: Key.Type) throws -> KeyedDecodingContainer<Key> {
        guard case .object(let members) = self.value else {
            throw JSONValueDecoding.mismatch("an object", self.value, self.codingPath)
        }
        var byKey: [String: JSONValue] = [:]
        for member in members { byKey[member.key] = member.value }  // keys are unique: the parser saw to it
        return KeyedDecodingContainer(KeyedContainer<Key>(members: byKey, order: members.map(\.key), codingPath: self.codingPath))
    }

    func unkeyedContainer() throws -> any UnkeyedDecodingContainer {
        guard case .array(let values) = self.value else {
            throw JSONValueDecoding.mismatch("an array", self.value, self.codingPath)
        }
        return UnkeyedContainer(values: values, codingPath: self.codingPath)
    }

    func singleValueContainer() throws -> any SingleValueDecodingContainer { self }

    // MARK: Single value

    func decodeNil() -> Bool { self.value == .null }

    func decode(_ type: Bool.Type) throws -> Bool {
        guard case .bool(let value) = self.value else { throw JSONValueDecoding.mismatch("true or false", self.value, self.codingPath) }
        return value
    }

    func decode(_ type: String.Type) throws -> String {
        guard case .string(let value) = self.value else { throw JSONValueDecoding.mismatch("a string", self.value, self.codingPath) }
        return value
    }

    func decode(_ type: Double.Type) throws -> Double {
        guard case .number(let text) = self.value else { throw JSONValueDecoding.mismatch("a number", self.value, self.codingPath) }
        guard let value = Double(text), value.isFinite else { throw self.outOfRange("a finite number") }
        return value
    }

    func decode(_ type: Float.Type) throws -> Float {
        guard case .number(let text) = self.value else { throw JSONValueDecoding.mismatch("a number", self.value, self.codingPath) }
        guard let value = Float(text), value.isFinite else { throw self.outOfRange("a finite number") }
        return value
    }

    func decode(_ type: Int.Type) throws -> Int { try self.integer(type) }
    func decode(_ type: Int8.Type) throws -> Int8 { try self.integer(type) }
    func decode(_ type: Int16.Type) throws -> Int16 { try self.integer(type) }
    func decode(_ type: Int32.Type) throws -> Int32 { try self.integer(type) }
    func decode(_ type: Int64.Type) throws -> Int64 { try self.integer(type) }
    func decode(_ type: UInt.Type) throws -> UInt { try self.integer(type) }
    func decode(_ type: UInt8.Type) throws -> UInt8 { try self.integer(type) }
    func decode(_ type: UInt16.Type) throws -> UInt16 { try self.integer(type) }
    func decode(_ type: UInt32.Type) throws -> UInt32 { try self.integer(type) }
    func decode(_ type: UInt64.Type) throws -> UInt64 { try self.integer(type) }

    func decode<T: Decodable>(_ type: T.Type) throws -> T {
        try T(from: self)
    }

    /// A whole number that fits `Integer` exactly: `12`, `12.0` and `1.2e1`, not `1.5` or `1e400`.
    private func integer<Integer: FixedWidthInteger>(_ type: Integer.Type) throws -> Integer {
        guard case .number(let text) = self.value else { throw JSONValueDecoding.mismatch("an integer", self.value, self.codingPath) }
        if let value = Integer(text) { return value }
        guard let double = Double(text), double.isFinite, double.rounded() == double, let value = Integer(exactly: double) else {
            throw self.outOfRange("a whole number within \(Integer.bitWidth) bits\(Integer.isSigned ? "" : ", not negative")")
        }
        return value
    }

    private func outOfRange(_ expected: String) -> DecodingError {
        .dataCorrupted(.init(codingPath: self.codingPath, debugDescription: "\(JSONValueDecoding.name(self.codingPath)) must be \(expected)"))
    }
}

private struct KeyedContainer<Key: CodingKey>: KeyedDecodingContainerProtocol {
    let members: [String: JSONValue]
    /// The keys in their order in the text, for `allKeys`.
    let order: [String]
    let codingPath: [any CodingKey]

    var allKeys: [Key] { self.order.compactMap { Key(stringValue: $0) } }

    func contains(_ key: Key) -> Bool { self.members[key.stringValue] != nil }

    private func decoder(for key: Key) throws -> ValueDecoder {
        guard let value = self.members[key.stringValue] else {
            let path = self.codingPath + [key]
            throw DecodingError.keyNotFound(key, .init(codingPath: path, debugDescription: "\(JSONValueDecoding.name(path)) is missing"))
        }
        return ValueDecoder(value: value, codingPath: self.codingPath + [key])
    }

    private func value<T: Decodable>(_ type: T.Type, _ key: Key) throws -> T {
        let decoder = try self.decoder(for: key)
        if decoder.value == .null, !(T.self is any ExpressibleByNilLiteral.Type) {
            let path = decoder.codingPath
            throw DecodingError.valueNotFound(type, .init(codingPath: path, debugDescription: "\(JSONValueDecoding.name(path)) must not be null"))
        }
        return try T(from: decoder)
    }

    func decodeNil(forKey key: Key) throws -> Bool { try self.decoder(for: key).value == .null }
    func decode(_ type: Bool.Type, forKey key: Key) throws -> Bool { try self.value(type, key) }
    func decode(_ type: String.Type, forKey key: Key) throws -> String { try self.value(type, key) }
    func decode(_ type: Double.Type, forKey key: Key) throws -> Double { try self.value(type, key) }
    func decode(_ type: Float.Type, forKey key: Key) throws -> Float { try self.value(type, key) }
    func decode(_ type: Int.Type, forKey key: Key) throws -> Int { try self.value(type, key) }
    func decode(_ type: Int8.Type, forKey key: Key) throws -> Int8 { try self.value(type, key) }
    func decode(_ type: Int16.Type, forKey key: Key) throws -> Int16 { try self.value(type, key) }
    func decode(_ type: Int32.Type, forKey key: Key) throws -> Int32 { try self.value(type, key) }
    func decode(_ type: Int64.Type, forKey key: Key) throws -> Int64 { try self.value(type, key) }
    func decode(_ type: UInt.Type, forKey key: Key) throws -> UInt { try self.value(type, key) }
    func decode(_ type: UInt8.Type, forKey key: Key) throws -> UInt8 { try self.value(type, key) }
    func decode(_ type: UInt16.Type, forKey key: Key) throws -> UInt16 { try self.value(type, key) }
    func decode(_ type: UInt32.Type, forKey key: Key) throws -> UInt32 { try self.value(type, key) }
    func decode(_ type: UInt64.Type, forKey key: Key) throws -> UInt64 { try self.value(type, key) }
    func decode<T: Decodable>(_ type: T.Type, forKey key: Key) throws -> T { try self.value(type, key) }

    func nestedContainer<NestedKey: CodingKey>(keyedBy type: NestedKey.Type, forKey key: Key) throws -> KeyedDecodingContainer<NestedKey> {
        try self.decoder(for: key).container(keyedBy: type)
    }

    func nestedUnkeyedContainer(forKey key: Key) throws -> any UnkeyedDecodingContainer {
        try self.decoder(for: key).unkeyedContainer()
    }

    func superDecoder() throws -> any Decoder {
        ValueDecoder(value: self.members["super"] ?? .null, codingPath: self.codingPath + [PlainKey(stringValue: "super")])
    }

    func superDecoder(forKey key: Key) throws -> any Decoder {
        try self.decoder(for: key)
    }
}

private struct UnkeyedContainer: UnkeyedDecodingContainer {
    let values: [JSONValue]
    let codingPath: [any CodingKey]
    private(set) var currentIndex = 0

    init(values: [JSONValue], codingPath: [any CodingKey]) {
        self.values = values
        self.codingPath = codingPath
    }

    var count: Int? { self.values.count }
    var isAtEnd: Bool { self.currentIndex >= self.values.count }

    private mutating func next() throws -> ValueDecoder {
        let path = self.codingPath + [PlainKey(self.currentIndex)]
        guard !self.isAtEnd else {
            throw DecodingError.valueNotFound(Any.self, .init(codingPath: path, debugDescription: "\(JSONValueDecoding.name(path)) is missing"))
        }
        defer { self.currentIndex += 1 }
        return ValueDecoder(value: self.values[self.currentIndex], codingPath: path)
    }

    private mutating func value<T: Decodable>(_ type: T.Type) throws -> T {
        let decoder = try self.next()
        if decoder.value == .null, !(T.self is any ExpressibleByNilLiteral.Type) {
            let path = decoder.codingPath
            throw DecodingError.valueNotFound(type, .init(codingPath: path, debugDescription: "\(JSONValueDecoding.name(path)) must not be null"))
        }
        return try T(from: decoder)
    }

    mutating func decodeNil() throws -> Bool {
        guard !self.isAtEnd, self.values[self.currentIndex] == .null else { return false }
        self.currentIndex += 1
        return true
    }

    mutating func decode(_ type: Bool.Type) throws -> Bool { try self.value(type) }
    mutating func decode(_ type: String.Type) throws -> String { try self.value(type) }
    mutating func decode(_ type: Double.Type) throws -> Double { try self.value(type) }
    mutating func decode(_ type: Float.Type) throws -> Float { try self.value(type) }
    mutating func decode(_ type: Int.Type) throws -> Int { try self.value(type) }
    mutating func decode(_ type: Int8.Type) throws -> Int8 { try self.value(type) }
    mutating func decode(_ type: Int16.Type) throws -> Int16 { try self.value(type) }
    mutating func decode(_ type: Int32.Type) throws -> Int32 { try self.value(type) }
    mutating func decode(_ type: Int64.Type) throws -> Int64 { try self.value(type) }
    mutating func decode(_ type: UInt.Type) throws -> UInt { try self.value(type) }
    mutating func decode(_ type: UInt8.Type) throws -> UInt8 { try self.value(type) }
    mutating func decode(_ type: UInt16.Type) throws -> UInt16 { try self.value(type) }
    mutating func decode(_ type: UInt32.Type) throws -> UInt32 { try self.value(type) }
    mutating func decode(_ type: UInt64.Type) throws -> UInt64 { try self.value(type) }
    mutating func decode<T: Decodable>(_ type: T.Type) throws -> T { try self.value(type) }

    mutating func nestedContainer<NestedKey: CodingKey>(keyedBy type: NestedKey.Type) throws -> KeyedDecodingContainer<NestedKey> {
        try self.next().container(keyedBy: type)
    }

    mutating func nestedUnkeyedContainer() throws -> any UnkeyedDecodingContainer {
        try self.next().unkeyedContainer()
    }

    mutating func superDecoder() throws -> any Decoder {
        try self.next()
    }
}
