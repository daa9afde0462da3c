import CircleWire
import Testing

/// The hand-written encoder of server messages against `JSONEncoder`, byte for byte.
@Suite struct WireEncodingTests {
    /// Every ASCII byte alone, with text around it, quotes, backslashes, slashes and non-ASCII text.
    static let strings: [String] = {
        var strings = ["", "plain", "a/b", "\"quoted\"", "back\\slash", "caf\u{E9}", "cafe\u{301}", "\u{1F600} grin",
                       "line\u{2028}sep", "\u{7F}del", "nul\u{0}inside", "\u{0}", "tab\tnew\nret\r\u{8}\u{C}", "</script>"]
        for byte in 0..<0x80 {
            strings.append(String(UnicodeScalar(UInt8(byte))))
            strings.append("x\(String(UnicodeScalar(UInt8(byte))))y")
        }
        return strings
    }()

    static func posts(_ text: String) -> [CirclePost] {
        [
            CirclePost(circle: text, seq: 1, author: text, text: text, attachment: nil, time: 1_764_000_000_000, id: text),
            CirclePost(circle: "room", seq: .max, author: "ana", text: nil, attachment: text, time: 0, id: "p1"),
            CirclePost(circle: "room", seq: 0, author: "ana", text: text, attachment: "m1", time: -5, id: "p2"),
        ]
    }

    static func messages(_ text: String) -> [CircleServerMessage] {
        var messages: [CircleServerMessage] = [
            .ack(id: text, seq: nil, time: nil, duplicate: false),
            .ack(id: "r1", seq: 42, time: 1_764_000_000_000, duplicate: true),
            .ack(id: "r1", seq: 0, time: nil, duplicate: false),
            .error(id: nil, code: .badRequest, message: text),
            .error(id: text, code: .internalError, message: ""),
            .history(id: text, circle: "room", posts: [], more: false),
            .history(id: "h", circle: text, posts: Self.posts(text), more: true),
            .joined(circle: text, user: "u"),
            .left(circle: "c", user: text),
            .typing(circle: text, user: text),
            .gap(circle: text, from: 1, to: Int64.max),
        ]
        messages += Self.posts(text).map { .post($0) }
        return messages
    }

    @Test func sameBytesAsJSONEncoder() {
        var compared = 0
        for text in Self.strings {
            for message in Self.messages(text) {
                let fast = message.encodedJSON()
                let reference = message.encodedJSONWithEncoder()
                #expect(Array(fast.utf8) == Array(reference.utf8), "\(message)")
                compared += 1
            }
        }
        #expect(compared > 3_000)
    }

    @Test func decodesBack() throws {
        for text in Self.strings {
            for message in Self.messages(text) {
                #expect(try CircleServerMessage.decode(message.encodedJSON()) == message)
            }
        }
    }
}
