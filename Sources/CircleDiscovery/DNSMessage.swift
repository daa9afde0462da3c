/// A DNS message as multicast DNS uses it (RFC 1035 §4, RFC 6762 §18): a pure value with an
/// encoder (name compression) and a decoder that rejects malformed input with an error and never
/// traps.
public struct DNSMessage: Sendable, Hashable {
    /// The message id; 0 in multicast DNS, echoed in replies to legacy unicast queries.
    public var id: UInt16
    /// The QR bit: a response rather than a query.
    public var isResponse: Bool
    /// The AA bit; set on every multicast DNS response.
    public var isAuthoritative: Bool
    /// The TC bit: more known answers follow in another packet.
    public var isTruncated: Bool
    public var questions: [DNSQuestion]
    public var answers: [DNSRecord]
    /// In a probe, the records the prober proposes to own (RFC 6762 §8.2).
    public var authorities: [DNSRecord]
    public var additionals: [DNSRecord]

    public init(
        id: UInt16 = 0,
        isResponse: Bool = false,
        isAuthoritative: Bool = false,
        isTruncated: Bool = false,
        questions: [DNSQuestion] = [],
        answers: [DNSRecord] = [],
        authorities: [DNSRecord] = [],
        additionals: [DNSRecord] = []
    ) {
        self.id = id
        self.isResponse = isResponse
        self.isAuthoritative = isAuthoritative
        self.isTruncated = isTruncated
        self.questions = questions
        self.answers = answers
        self.authorities = authorities
        self.additionals = additionals
    }

    /// Every record of the answer, authority and additional sections.
    public var allRecords: [DNSRecord] { self.answers + self.authorities + self.additionals }
}

/// One question: a name and a record type (``DNSRecordType/any`` for all).
public struct DNSQuestion: Sendable, Hashable {
    public var name: DNSName
    public var type: DNSRecordType
    /// The QU bit: the querier asks for a unicast reply (RFC 6762 §5.4).
    public var unicastResponse: Bool

    public init(name: DNSName, type: DNSRecordType, unicastResponse: Bool = false) {
        self.name = name
        self.type = type
        self.unicastResponse = unicastResponse
    }
}

/// A record type code, with the ones this module understands as constants.
public struct DNSRecordType: Sendable, Hashable, RawRepresentable, CustomStringConvertible {
    public var rawValue: UInt16
    public init(rawValue: UInt16) { self.rawValue = rawValue }

    public static let a = DNSRecordType(rawValue: 1)
    public static let ptr = DNSRecordType(rawValue: 12)
    public static let txt = DNSRecordType(rawValue: 16)
    public static let aaaa = DNSRecordType(rawValue: 28)
    public static let srv = DNSRecordType(rawValue: 33)
    public static let nsec = DNSRecordType(rawValue: 47)
    public static let any = DNSRecordType(rawValue: 255)

    public var description: String {
        switch self {
        case .a: "A"
        case .ptr: "PTR"
        case .txt: "TXT"
        case .aaaa: "AAAA"
        case .srv: "SRV"
        case .nsec: "NSEC"
        case .any: "ANY"
        default: "TYPE\(self.rawValue)"
        }
    }
}

/// A resource record of class IN.
public struct DNSRecord: Sendable, Hashable {
    public var name: DNSName
    public var data: DNSRecordData
    /// Seconds the record may be cached; 0 in a goodbye.
    public var ttl: UInt32
    /// The cache-flush bit of unique records (RFC 6762 §10.2).
    public var cacheFlush: Bool

    public init(name: DNSName, data: DNSRecordData, ttl: UInt32, cacheFlush: Bool = false) {
        self.name = name
        self.data = data
        self.ttl = ttl
        self.cacheFlush = cacheFlush
    }

    public var type: DNSRecordType { self.data.type }

    /// The same record with another TTL.
    public func with(ttl: UInt32) -> DNSRecord {
        var copy = self
        copy.ttl = ttl
        return copy
    }

    /// Whether both records name the same data (TTL and cache-flush bit aside).
    public func sameData(as other: DNSRecord) -> Bool {
        self.name == other.name && self.data == other.data
    }
}

/// The data of a record; types this module does not interpret keep their bytes.
public enum DNSRecordData: Sendable, Hashable {
    /// An IPv4 address (4 bytes).
    case a([UInt8])
    /// An IPv6 address (16 bytes).
    case aaaa([UInt8])
    case ptr(DNSName)
    case srv(priority: UInt16, weight: UInt16, port: UInt16, target: DNSName)
    /// Character strings, each at most 255 bytes (RFC 6763 §6).
    case txt([[UInt8]])
    /// The types that exist for the name (RFC 4034 §4, restricted form of RFC 6762 §6.1).
    case nsec(next: DNSName, types: [DNSRecordType])
    case other(type: DNSRecordType, bytes: [UInt8])

    public var type: DNSRecordType {
        switch self {
        case .a: .a
        case .aaaa: .aaaa
        case .ptr: .ptr
        case .srv: .srv
        case .txt: .txt
        case .nsec: .nsec
        case .other(let type, _): type
        }
    }
}

/// A DNS message that could not be decoded or encoded; the packet is dropped.
public struct DNSMessageError: Error, Sendable, Hashable, CustomStringConvertible {
    public var description: String
    public init(_ description: String) { self.description = description }
}
