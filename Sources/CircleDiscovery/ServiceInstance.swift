/// A DNS-SD service instance to announce: `INSTANCE._circle._tcp.local` with a port and TXT data.
public struct ServiceInstance: Sendable, Hashable {
    /// The instance name people see (`Alice's Circle`); any UTF-8, at most 63 bytes.
    public var name: String
    /// The service type, `_circle._tcp` by default.
    public var type: String
    /// The TCP port the service listens on.
    public var port: UInt16
    /// TXT key/value pairs, in order (RFC 6763 §6); keys are 1–9 printable ASCII characters by convention.
    public var txt: [TXTEntry]

    public init(name: String, type: String = "_circle._tcp", port: UInt16, txt: [TXTEntry] = []) {
        self.name = name
        self.type = type
        self.port = port
        self.txt = txt
    }

    /// `_circle._tcp.local`.
    public func typeName() throws -> DNSName {
        try DNSName(dotted: self.type + ".local")
    }
}

/// One TXT entry: `key=value`, or a bare `key` (a boolean attribute, RFC 6763 §6.4).
public struct TXTEntry: Sendable, Hashable, CustomStringConvertible {
    public var key: String
    /// `nil` for a bare key.
    public var value: String?

    public init(_ key: String, _ value: String?) {
        self.key = key
        self.value = value
    }

    public var description: String { self.value.map { "\(self.key)=\($0)" } ?? self.key }

    /// The entry as one TXT character string.
    var bytes: [UInt8] { Array(self.description.utf8) }

    /// Parses one TXT string; `nil` for an empty one or one starting with "=" (ignored, RFC 6763 §6.4).
    init?(bytes: [UInt8]) {
        guard let first = bytes.first, first != UInt8(ascii: "=") else { return nil }
        if let equals = bytes.firstIndex(of: UInt8(ascii: "=")) {
            self.key = String(decoding: bytes[..<equals], as: UTF8.self)
            self.value = String(decoding: bytes[(equals + 1)...], as: UTF8.self)
        } else {
            self.key = String(decoding: bytes, as: UTF8.self)
            self.value = nil
        }
    }
}

extension [TXTEntry] {
    /// The value of the first entry whose key matches, case-insensitively (RFC 6763 §6.4).
    public subscript(key: String) -> String? {
        self.first { $0.key.lowercased() == key.lowercased() }?.value
    }
}
