import Testing

@testable import CircleDiscovery

@Suite struct DNSMessageTests {
    static func sample() throws -> DNSMessage {
        let type = try DNSName(dotted: "_circle._tcp.local")
        let instance = try type.prepending("Alice's Circle. Room 1")
        let host = try DNSName(dotted: "alice-circle.local")
        return DNSMessage(
            isResponse: true,
            isAuthoritative: true,
            questions: [DNSQuestion(name: type, type: .ptr, unicastResponse: true)],
            answers: [
                DNSRecord(name: type, data: .ptr(instance), ttl: 4500),
                DNSRecord(name: instance, data: .srv(priority: 0, weight: 0, port: 8080, target: host), ttl: 120, cacheFlush: true),
                DNSRecord(name: instance, data: .txt([Array("path=/v1/ws".utf8), Array("tls=0".utf8)]), ttl: 4500, cacheFlush: true),
            ],
            authorities: [DNSRecord(name: host, data: .other(type: DNSRecordType(rawValue: 99), bytes: [1, 2, 3]), ttl: 5)],
            additionals: [
                DNSRecord(name: host, data: .a([169, 254, 1, 1]), ttl: 120, cacheFlush: true),
                DNSRecord(name: host, data: .aaaa([0xFE, 0x80] + Array(repeating: 0, count: 13) + [1]), ttl: 120, cacheFlush: true),
                DNSRecord(name: host, data: .nsec(next: host, types: [.a, .aaaa, DNSRecordType(rawValue: 300)]), ttl: 120, cacheFlush: true),
            ]
        )
    }

    @Test func roundTripKeepsEveryField() throws {
        let message = try Self.sample()
        let bytes = try message.encode()
        let decoded = try DNSMessage.decode(bytes)
        #expect(decoded == message)
        #expect(decoded.answers[0].data == .ptr(try DNSName(dotted: "_circle._tcp.local").prepending("Alice's Circle. Room 1")))
        #expect(decoded.questions[0].unicastResponse)
        #expect(decoded.answers[1].cacheFlush)
        #expect(!decoded.answers[0].cacheFlush)
    }

    @Test func namesAreCompressed() throws {
        let message = try Self.sample()
        let bytes = try message.encode()
        // "_circle" appears once: every later name points back to it.
        let needle = Array("_circle".utf8)
        let count = (0...(bytes.count - needle.count)).filter { Array(bytes[$0..<$0 + needle.count]) == needle }.count
        #expect(count == 1)
        #expect(bytes.contains(0xC0))
    }

    @Test func namesCompareWithoutCase() throws {
        #expect(try DNSName(dotted: "Alice.LOCAL") == DNSName(dotted: "alice.local"))
        #expect(try DNSName(dotted: "Alice.LOCAL").hashValue == DNSName(dotted: "alice.local").hashValue)
        #expect(try DNSName(dotted: "alice.local") != DNSName(dotted: "alicf.local"))
        #expect(try DNSName(["a.b", "local"]).description == "a\\.b.local.")
    }

    @Test func badNamesAreRefused() {
        #expect(throws: DNSMessageError.self) { try DNSName(labels: [Array(repeating: 65, count: 64)]) }
        #expect(throws: DNSMessageError.self) { try DNSName(labels: Array(repeating: Array(repeating: 65, count: 63), count: 5)) }
    }

    static let header: [UInt8] = [0, 0, 0x84, 0, 0, 1, 0, 0, 0, 0, 0, 0]

    @Test func compressionPointerLoopIsRejected() {
        // A question whose name is a pointer to itself (offset 12).
        let selfLoop = Self.header + [0xC0, 12, 0, 1, 0, 1]
        #expect(throws: DNSMessageError.self) { try DNSMessage.decode(selfLoop) }
        // A label, then a pointer back to that label: a loop through one label.
        let twoStep = Self.header + [1, 65, 0xC0, 12, 0, 1, 0, 1]
        #expect(throws: DNSMessageError.self) { try DNSMessage.decode(twoStep) }
        // A pointer forward.
        let forward = Self.header + [0xC0, 20, 0, 1, 0, 1, 0, 0, 1, 65, 0]
        #expect(throws: DNSMessageError.self) { try DNSMessage.decode(forward) }
    }

    @Test func truncatedAndLyingPacketsAreRejected() throws {
        let bytes = try Self.sample().encode()
        for length in [0, 5, 11, 12, 20, bytes.count - 1] {
            #expect(throws: DNSMessageError.self) { try DNSMessage.decode(Array(bytes.prefix(length))) }
        }
        var lying = bytes
        lying[7] = 200  // answer count far beyond the bytes
        #expect(throws: DNSMessageError.self) { try DNSMessage.decode(lying) }
        let longLabelType = Self.header + [0x40, 0, 0, 1, 0, 1]
        #expect(throws: DNSMessageError.self) { try DNSMessage.decode(longLabelType) }
        #expect(throws: DNSMessageError.self) { try DNSMessage.decode(Array(repeating: 0, count: 9001)) }
    }

    @Test func recordWithWrongLengthIsRejected() throws {
        var message = DNSMessage(isResponse: true, answers: [DNSRecord(name: try DNSName(dotted: "a.local"), data: .a([1, 2, 3, 4]), ttl: 1)])
        var bytes = try message.encode()
        // RDLENGTH of the A record (the last 6 bytes are length + address) claims 3.
        bytes[bytes.count - 5] = 3
        #expect(throws: DNSMessageError.self) { try DNSMessage.decode(Array(bytes.dropLast())) }
        message.answers[0].data = .a([1, 2, 3])
        #expect(throws: DNSMessageError.self) { try message.encode() }
    }

    /// Mutated and random packets: every one decodes or throws, none traps, and whatever decodes
    /// survives encode → decode unchanged.
    @Test func fuzzedPacketsNeverTrap() throws {
        var random = SplitMix64(seed: 42)
        let seeds = [try Self.sample().encode(), try DNSMessage(questions: [DNSQuestion(name: try DNSName(dotted: "_circle._tcp.local"), type: .ptr)]).encode()]
        var decoded = 0
        var rejected = 0
        for round in 0..<30_000 {
            var bytes = seeds[round % seeds.count]
            switch round % 4 {
            case 0:
                for _ in 0..<Int.random(in: 1...8, using: &random) {
                    bytes[Int.random(in: 0..<bytes.count, using: &random)] = UInt8.random(in: 0...255, using: &random)
                }
            case 1:
                bytes = Array(bytes.prefix(Int.random(in: 0...bytes.count, using: &random)))
            case 2:
                bytes = (0..<Int.random(in: 0...300, using: &random)).map { _ in UInt8.random(in: 0...255, using: &random) }
                if bytes.count > 12 { bytes[4] = 0; bytes[6] = 0; bytes[8] = 0; bytes[10] = 0 }
            default:
                let at = Int.random(in: 12..<bytes.count, using: &random)
                bytes[at] = 0xC0 | UInt8.random(in: 0...0x3F, using: &random)
            }
            do {
                let message = try DNSMessage.decode(bytes)
                decoded += 1
                let again = try DNSMessage.decode(try message.encode())
                let third = try DNSMessage.decode(try again.encode())
                #expect(again == third)
            } catch is DNSMessageError {
                rejected += 1
            }
        }
        #expect(decoded > 100)
        #expect(rejected > 100)
    }
}
