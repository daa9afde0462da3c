import CircleWire
import CircleTestSupport
import Testing

/// The chat session parses a frame's bytes without checking their UTF-8 first, relying on this:
/// a text the parser accepts is UTF-8 (strings are validated; everything outside them must be
/// ASCII JSON syntax).
@Suite struct JSONParserUTF8Tests {
    @Test("an accepted text is UTF-8: 20,000 seeded mutations of requests, with bytes of every kind")
    func acceptedIsUTF8() {
        let seeds = [
            #"{"action":"post","id":"p1","circle":"café","text":"hi 😀 \u00e9 \n"}"#,
            #"{"action":"join","id":"j","circle":"x","since":12}"#,
            #"[1, -2.5e3, true, false, null, "a\"b", {"k": []}]"#,
        ].map { Array($0.utf8) }
        var random = SplitMix(seed: 0x5EED)
        var accepted = 0
        for round in 0..<20_000 {
            var bytes = seeds[round % seeds.count]
            for _ in 0...(random.next() % 3) {
                let position = Int(random.next() % UInt64(bytes.count + 1))
                let byte = UInt8(truncatingIfNeeded: random.next())
                switch random.next() % 3 {
                case 0 where position < bytes.count: bytes[position] = byte
                case 1: bytes.insert(byte, at: position)
                default: if position < bytes.count { bytes.remove(at: position) }
                }
            }
            if case .success = JSONParser.parse(bytes) {
                accepted += 1
                #expect(String(validating: bytes, as: UTF8.self) != nil, "accepted but not UTF-8: \(bytes)")
            }
        }
        // The mutations leave some texts valid, so the property was checked on accepted texts.
        #expect(accepted > 100)
    }
}
