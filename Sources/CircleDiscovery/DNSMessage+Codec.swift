extension DNSMessage {
    /// The largest message this decoder reads (RFC 6762 §17: 9000 bytes including headers).
    public static let maximumSize = 9000

    /// Decodes a message; any malformed input throws ``DNSMessageError``.
    ///
    /// Bounds: names at most 255 bytes with labels of 1–63 bytes; a compression pointer must point
    /// backwards, before the name that uses it, so pointers cannot loop; at most 128 pointers per
    /// name; section counts may not exceed what the remaining bytes can hold.
    public static func decode(_ bytes: [UInt8]) throws -> DNSMessage {
        guard bytes.count <= Self.maximumSize else { throw DNSMessageError("message longer than \(Self.maximumSize) bytes") }
        var reader = DNSReader(bytes: bytes)
        let id = try reader.u16()
        let flags = try reader.u16()
        let counts = [try reader.u16(), try reader.u16(), try reader.u16(), try reader.u16()]
        // A question is at least 5 bytes, a record at least 11: counts beyond that are lies.
        guard Int(counts[0]) * 5 + (Int(counts[1]) + Int(counts[2]) + Int(counts[3])) * 11 <= bytes.count - 12 else {
            throw DNSMessageError("section counts exceed the message length")
        }
        var message = DNSMessage(
            id: id,
            isResponse: flags & 0x8000 != 0,
            isAuthoritative: flags & 0x0400 != 0,
            isTruncated: flags & 0x0200 != 0
        )
        guard (flags >> 11) & 0xF == 0 else { throw DNSMessageError("opcode other than QUERY") }
        for _ in 0..<counts[0] {
            let name = try reader.name()
            let type = try reader.u16()
            let qclass = try reader.u16()
            message.questions.append(DNSQuestion(name: name, type: DNSRecordType(rawValue: type), unicastResponse: qclass & 0x8000 != 0))
        }
        for _ in 0..<counts[1] { message.answers.append(try reader.record()) }
        for _ in 0..<counts[2] { message.authorities.append(try reader.record()) }
        for _ in 0..<counts[3] { message.additionals.append(try reader.record()) }
        return message
    }

    /// The message on the wire, names compressed. Throws when it would exceed
    /// ``maximumSize`` or a TXT string is longer than 255 bytes.
    public func encode() throws -> [UInt8] {
        var writer = DNSWriter()
        writer.u16(self.id)
        var flags: UInt16 = 0
        if self.isResponse { flags |= 0x8000 }
        if self.isAuthoritative { flags |= 0x0400 }
        if self.isTruncated { flags |= 0x0200 }
        writer.u16(flags)
        for count in [self.questions.count, self.answers.count, self.authorities.count, self.additionals.count] {
            guard count <= 0xFFFF else { throw DNSMessageError("too many entries in a section") }
            writer.u16(UInt16(count))
        }
        for question in self.questions {
            writer.name(question.name)
            writer.u16(question.type.rawValue)
            writer.u16(1 | (question.unicastResponse ? 0x8000 : 0))
        }
        for record in self.answers + self.authorities + self.additionals { try writer.record(record) }
        guard writer.bytes.count <= Self.maximumSize else { throw DNSMessageError("message longer than \(Self.maximumSize) bytes") }
        return writer.bytes
    }
}

/// Reads big-endian fields and names from a message, every access bounds-checked.
struct DNSReader {
    let bytes: [UInt8]
    var offset = 0

    mutating func u8() throws -> UInt8 {
        guard self.offset < self.bytes.count else { throw DNSMessageError("message ends early") }
        defer { self.offset += 1 }
        return self.bytes[self.offset]
    }

    mutating func u16() throws -> UInt16 {
        UInt16(try self.u8()) << 8 | UInt16(try self.u8())
    }

    mutating func u32() throws -> UInt32 {
        UInt32(try self.u16()) << 16 | UInt32(try self.u16())
    }

    mutating func take(_ count: Int) throws -> [UInt8] {
        guard count >= 0, count <= self.bytes.count - self.offset else { throw DNSMessageError("message ends early") }
        defer { self.offset += count }
        return Array(self.bytes[self.offset..<self.offset + count])
    }

    /// A possibly compressed name starting at the current offset.
    mutating func name() throws -> DNSName {
        var labels: [[UInt8]] = []
        var wireLength = 1
        var position = self.offset
        var jumped = false
        var jumps = 0
        // Every pointer must go strictly below the lowest position read so far: no loops.
        var lowest = position
        while true {
            guard position < self.bytes.count else { throw DNSMessageError("name runs past the end") }
            let length = Int(self.bytes[position])
            switch length & 0xC0 {
            case 0x00:
                if length == 0 {
                    if !jumped { self.offset = position + 1 }
                    return DNSName(unchecked: labels)
                }
                guard position + 1 + length <= self.bytes.count else { throw DNSMessageError("label runs past the end") }
                wireLength += 1 + length
                guard wireLength <= 255 else { throw DNSMessageError("name longer than 255 bytes") }
                labels.append(Array(self.bytes[position + 1..<position + 1 + length]))
                position += 1 + length
            case 0xC0:
                guard position + 1 < self.bytes.count else { throw DNSMessageError("pointer runs past the end") }
                let target = (length & 0x3F) << 8 | Int(self.bytes[position + 1])
                guard target < lowest else { throw DNSMessageError("compression pointer does not point backwards") }
                jumps += 1
                guard jumps <= 128 else { throw DNSMessageError("too many compression pointers") }
                if !jumped { self.offset = position + 2 }
                jumped = true
                lowest = target
                position = target
            default:
                throw DNSMessageError("unknown label type")
            }
        }
    }

    mutating func record() throws -> DNSRecord {
        let name = try self.name()
        let type = DNSRecordType(rawValue: try self.u16())
        let rclass = try self.u16()
        let ttl = try self.u32()
        let length = Int(try self.u16())
        guard length <= self.bytes.count - self.offset else { throw DNSMessageError("record data runs past the end") }
        let end = self.offset + length
        let data: DNSRecordData
        switch type {
        case .a:
            guard length == 4 else { throw DNSMessageError("A record of \(length) bytes") }
            data = .a(try self.take(4))
        case .aaaa:
            guard length == 16 else { throw DNSMessageError("AAAA record of \(length) bytes") }
            data = .aaaa(try self.take(16))
        case .ptr:
            data = .ptr(try self.name())
        case .srv:
            let priority = try self.u16()
            let weight = try self.u16()
            let port = try self.u16()
            data = .srv(priority: priority, weight: weight, port: port, target: try self.name())
        case .txt:
            var strings: [[UInt8]] = []
            while self.offset < end {
                let count = Int(try self.u8())
                guard self.offset + count <= end else { throw DNSMessageError("TXT string runs past its record") }
                let string = try self.take(count)
                if count > 0 { strings.append(string) }
            }
            data = .txt(strings)
        case .nsec:
            let next = try self.name()
            var types: [DNSRecordType] = []
            while self.offset < end {
                let window = Int(try self.u8())
                let count = Int(try self.u8())
                guard count >= 1, count <= 32, self.offset + count <= end else { throw DNSMessageError("bad NSEC bitmap") }
                let bitmap = try self.take(count)
                for (index, byte) in bitmap.enumerated() {
                    for bit in 0..<8 where byte & (0x80 >> bit) != 0 {
                        types.append(DNSRecordType(rawValue: UInt16(window * 256 + index * 8 + bit)))
                    }
                }
            }
            data = .nsec(next: next, types: types)
        default:
            data = .other(type: type, bytes: try self.take(length))
        }
        guard self.offset == end else { throw DNSMessageError("\(type) record data of the wrong length") }
        return DNSRecord(name: name, data: data, ttl: ttl, cacheFlush: rclass & 0x8000 != 0)
    }
}

/// Writes a message, compressing each name against the names already written.
struct DNSWriter {
    var bytes: [UInt8] = []
    /// Offsets of name suffixes already written, keyed by their folded labels.
    private var suffixes: [[[UInt8]]: Int] = [:]
    /// Off for the canonical form used to compare records (RFC 6762 §8.2).
    var compression = true

    mutating func u16(_ value: UInt16) {
        self.bytes.append(UInt8(value >> 8))
        self.bytes.append(UInt8(value & 0xFF))
    }

    mutating func u32(_ value: UInt32) {
        self.u16(UInt16(value >> 16))
        self.u16(UInt16(value & 0xFFFF))
    }

    mutating func name(_ name: DNSName, compress: Bool = true) {
        let folded = name.folded
        for index in name.labels.indices {
            let suffix = Array(folded[index...])
            if compress, self.compression, let offset = self.suffixes[suffix] {
                self.u16(0xC000 | UInt16(offset))
                return
            }
            if compress, self.bytes.count < 0x3FFF { self.suffixes[suffix] = self.bytes.count }
            self.bytes.append(UInt8(name.labels[index].count))
            self.bytes.append(contentsOf: name.labels[index])
        }
        self.bytes.append(0)
    }

    mutating func record(_ record: DNSRecord) throws {
        self.name(record.name)
        self.u16(record.type.rawValue)
        self.u16(1 | (record.cacheFlush ? 0x8000 : 0))
        self.u32(record.ttl)
        let lengthOffset = self.bytes.count
        self.u16(0)
        switch record.data {
        case .a(let address):
            guard address.count == 4 else { throw DNSMessageError("an A record holds 4 bytes") }
            self.bytes.append(contentsOf: address)
        case .aaaa(let address):
            guard address.count == 16 else { throw DNSMessageError("an AAAA record holds 16 bytes") }
            self.bytes.append(contentsOf: address)
        case .ptr(let target):
            self.name(target)
        case .srv(let priority, let weight, let port, let target):
            self.u16(priority)
            self.u16(weight)
            self.u16(port)
            self.name(target)
        case .txt(let strings):
            // An empty TXT record is a single empty string (RFC 6763 §6.1).
            if strings.isEmpty { self.bytes.append(0) }
            for string in strings {
                guard string.count <= 255 else { throw DNSMessageError("a TXT string holds at most 255 bytes") }
                self.bytes.append(UInt8(string.count))
                self.bytes.append(contentsOf: string)
            }
        case .nsec(let next, let types):
            // RFC 6762 §18.14: names in NSEC are not compressed.
            self.name(next, compress: false)
            var windows: [UInt8: [UInt8]] = [:]
            for type in types {
                let window = UInt8(type.rawValue >> 8)
                let low = Int(type.rawValue & 0xFF)
                var bitmap = windows[window] ?? []
                if bitmap.count <= low / 8 { bitmap += Array(repeating: 0, count: low / 8 + 1 - bitmap.count) }
                bitmap[low / 8] |= 0x80 >> UInt8(low % 8)
                windows[window] = bitmap
            }
            for window in windows.keys.sorted() {
                let bitmap = windows[window] ?? []
                self.bytes.append(window)
                self.bytes.append(UInt8(bitmap.count))
                self.bytes.append(contentsOf: bitmap)
            }
        case .other(_, let data):
            self.bytes.append(contentsOf: data)
        }
        let length = self.bytes.count - lengthOffset - 2
        guard length <= 0xFFFF else { throw DNSMessageError("record data too long") }
        self.bytes[lengthOffset] = UInt8(length >> 8)
        self.bytes[lengthOffset + 1] = UInt8(length & 0xFF)
    }
}

extension DNSRecord {
    /// The record data uncompressed, for the lexicographic comparison of simultaneous probes.
    var canonicalData: [UInt8] {
        var writer = DNSWriter()
        writer.compression = false
        var bare = self
        bare.name = DNSName(unchecked: [])
        bare.cacheFlush = false
        bare.ttl = 0
        // Root name (1 byte), type, class, TTL (8 bytes), length (2 bytes) precede the data.
        guard (try? writer.record(bare)) != nil else { return [] }
        return Array(writer.bytes.dropFirst(11))
    }
}
