import CircleWire
import NIOCore
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
            CirclePost(circle: "room", seq: 7, author: text, text: text, attachment: nil, time: 9, id: "e", change: .edit, target: 3),
            CirclePost(circle: "room", seq: 8, author: "bo", text: nil, attachment: nil, time: 9, id: text, change: .react, target: 3, emoji: text),
            CirclePost(circle: "room", seq: 9, author: "bo", text: nil, attachment: nil, time: 9, id: "d", change: .delete, target: 1),
            CirclePost(circle: text, seq: 3, author: "ana", text: text, attachment: nil, time: 1, id: "r", replyTo: 2, edited: 5),
            CirclePost(circle: "room", seq: 4, author: "ana", text: nil, attachment: nil, time: 1, id: "t", deleted: true, reactions: []),
            CirclePost(
                circle: "room", seq: 5, author: "ana", text: "hi", attachment: nil, time: 1, id: "x",
                reactions: [CircleReaction(emoji: "\u{1F44D}", users: [text, "bo"], me: true), CircleReaction(emoji: text, users: [], me: false)]
            ),
            CirclePost(circle: "room", seq: 6, author: "ana", text: text, attachment: nil, time: 1, id: "m", mentions: [text, "bo"]),
            CirclePost(circle: "room", seq: 7, author: "ana", text: "@here", attachment: nil, time: 1, id: "h", mentions: [], mentionsEveryone: true),
            CirclePost(circle: "room", seq: 8, author: "ana", text: nil, attachment: nil, time: 1, id: text, event: .added, member: text),
            CirclePost(circle: text, seq: 9, author: text, text: nil, attachment: nil, time: 1, id: "s", event: .left, member: "bo"),
        ]
    }

    static func messages(_ text: String) -> [CircleServerMessage] {
        var messages: [CircleServerMessage] = [
            .ack(id: text, seq: nil, time: nil, duplicate: false),
            .ack(id: "r1", seq: 42, time: 1_764_000_000_000, duplicate: true),
            .ack(id: "r1", seq: 0, time: nil, duplicate: false),
            .error(id: nil, code: .badRequest, message: text),
            .error(id: text, code: .internalError, message: ""),
            .history(id: text, circle: "room", posts: [], more: false, lastSeq: nil),
            .history(id: "h", circle: text, posts: Self.posts(text), more: true, lastSeq: 42),
            .joined(circle: text, user: "u"),
            .left(circle: "c", user: text),
            .typing(circle: text, user: text),
            .gap(circle: text, from: 1, to: Int64.max),
            .read(circle: text, seq: 12),
            .notify(circle: text, level: .none),
            .circles(id: text, circles: []),
            .circles(id: "c", circles: [
                CircleSummary(name: text, owner: "ana", private: true, createdAt: 1, lastSeq: 9, readSeq: 4, unread: 3, mentions: 2),
                CircleSummary(name: "b", owner: text, private: false, createdAt: 0, lastSeq: 0, systemEntries: false),
                CircleSummary(name: "dm.1", owner: "ana", private: true, createdAt: 0, lastSeq: 0, direct: ["ana", text], notify: .mentions),
            ]),
        ]
        messages += [
            .search(id: text, results: HTTPAPI.SearchResults(hits: [])),
            .search(
                id: "s",
                results: HTTPAPI.SearchResults(
                    hits: [
                        HTTPAPI.SearchHit(circle: text, seq: 3, author: text, time: 9, snippet: "…a \u{E000}\(text)\u{E001} b…"),
                        HTTPAPI.SearchHit(circle: "room", seq: Int64.max, author: "ana", time: -1, snippet: ""),
                    ],
                    next: text
                )
            ),
        ]
        messages += [
            .added(CircleSummary(name: "dm.\(text.utf8.count)", owner: text, private: true, createdAt: 3, lastSeq: 0, direct: ["ana", text])),
            .added(CircleSummary(name: text, owner: "ana", private: false, createdAt: 1, lastSeq: 7, readSeq: 0, unread: 7, mentions: 1)),
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

    @Test("writeJSON(into:) appends the same bytes as encodedJSON(), after what the buffer holds")
    func intoBuffer() {
        for text in Self.strings.prefix(40) {
            for message in Self.messages(text) {
                var buffer = ByteBuffer(string: "prefix")
                message.writeJSON(into: &buffer)
                #expect(String(buffer: buffer) == "prefix" + message.encodedJSON(), "\(message)")
            }
        }
    }

    @Test func decodesBack() throws {
        for text in Self.strings {
            for message in Self.messages(text) {
                #expect(try CircleServerMessage.decode(message.encodedJSON()) == message)
            }
        }
    }

    /// Repeated keys are found in small objects (compared) and large ones (hashed), whatever the
    /// position; strings with and without escapes read the same.
    @Test(arguments: [1, 15, 16, 17, 40])
    func repeatedKeysAndStrings(members: Int) throws {
        let keys = (0..<members).map { "k\($0)" }
        let unique = "{" + keys.map { "\"\($0)\":\"v\"" }.joined(separator: ",") + "}"
        guard case .object(let parsed) = try JSONParser.parse(Array(unique.utf8)).get() else {
            Issue.record("not an object")
            return
        }
        #expect(parsed.map(\.key) == keys)
        for repeated in [keys.first!, keys.last!] {
            let text = "{" + (keys + [repeated]).map { "\"\($0)\":1" }.joined(separator: ",") + "}"
            guard case .failure(let error) = JSONParser.parse(Array(text.utf8)) else {
                Issue.record("a repeated \(repeated) in \(members) members was accepted")
                continue
            }
            #expect(error.duplicateKey == repeated)
        }
        // The same key spelled with an escape is the same key.
        let escaped = #"{"k0":1,"\u006b0":2}"#
        #expect((try? JSONParser.parse(Array(escaped.utf8)).get()) == nil)
        #expect(try JSONParser.parse(Array(#""plain caf\u00e9 \"q\" é""#.utf8)).get() == .string("plain café \"q\" é"))
        #expect(try JSONParser.parse(Array(#""é""#.utf8)).get() == .string("é"))
        #expect((try? JSONParser.parse([0x22, 0x61, 0x0A, 0x22]).get()) == nil)  // a raw newline
        #expect((try? JSONParser.parse([0x22, 0x61, 0xFF, 0x22]).get()) == nil)  // not UTF-8
        #expect((try? JSONParser.parse([0x22, 0x61]).get()) == nil)  // unterminated
    }

    @Test("search requests carry their fields in a search object, type-checked")
    func searchRequestsDecode() throws {
        let decoded = try CircleRequest.decode(Array(#"{"action":"search","id":"s1","search":{"q":"deploy","order":"newest","limit":5,"circle":"ops"}}"#.utf8)).get()
        #expect(decoded == .search(HTTPAPI.SearchRequest(q: "deploy", circle: "ops", order: "newest", limit: 5), id: "s1"))
        for frame in [
            #"{"action":"search","id":"s2"}"#, #"{"action":"search","id":"s3","search":"deploy"}"#, #"{"action":"search","id":"s4","search":{}}"#,
            #"{"action":"search","id":"s5","search":{"q":5}}"#, #"{"action":"search","id":"s6","search":{"q":"x","limit":"5"}}"#,
        ] {
            guard case .failure(let failure) = CircleRequest.decode(Array(frame.utf8)) else {
                Issue.record("\(frame) was accepted")
                continue
            }
            #expect(failure.code == .badRequest && failure.id != nil, "\(frame): \(failure)")
        }
    }

    @Test func changeRequestsDecode() throws {
        func decode(_ json: String) -> Result<CircleRequest, CircleRequest.DecodingFailure> {
            CircleRequest.decode(Array(json.utf8))
        }
        #expect(try decode(#"{"action":"edit","id":"1","circle":"c","target":3,"text":"new"}"#).get() == .edit(3, in: "c", text: "new", id: "1"))
        #expect(try decode(#"{"action":"delete","id":"1","circle":"c","target":3}"#).get() == .delete(3, in: "c", id: "1"))
        #expect(try decode(#"{"action":"react","id":"1","circle":"c","target":3,"emoji":"👍🏽"}"#).get() == .react("👍🏽", to: 3, in: "c", id: "1"))
        #expect(try decode(#"{"action":"unreact","id":"1","circle":"c","target":3,"emoji":"❤️"}"#).get() == .unreact("❤️", from: 3, in: "c", id: "1"))
        #expect(try decode(#"{"action":"post","id":"1","circle":"c","text":"a","replyTo":2}"#).get() == .post("a", to: "c", id: "1", replyTo: 2))
        #expect(try decode(#"{"action":"read","id":"1","circle":"c","seq":9}"#).get() == .read("c", upTo: 9, id: "1"))
        #expect(try decode(#"{"action":"circles","id":"1"}"#).get() == .circles(id: "1"))
        let refused: [(String, CircleErrorCode)] = [
            (#"{"action":"edit","id":"1","circle":"c","text":"new"}"#, .badRequest),
            (#"{"action":"edit","id":"1","circle":"c","target":3}"#, .badRequest),
            (#"{"action":"edit","id":"1","circle":"c","target":0,"text":"x"}"#, .badRequest),
            (#"{"action":"delete","id":"1","circle":"c","target":"3"}"#, .badRequest),
            (#"{"action":"react","id":"1","circle":"c","target":3}"#, .badRequest),
            (#"{"action":"react","id":"1","circle":"c","target":3,"emoji":"ok"}"#, .invalidEmoji),
            (#"{"action":"react","id":"1","circle":"c","target":3,"emoji":"👍👍"}"#, .invalidEmoji),
            (##"{"action":"unreact","id":"1","circle":"c","target":3,"emoji":"#"}"##, .invalidEmoji),
            // The code names the first problem: a bad target, whatever the emoji.
            (#"{"action":"react","id":"1","circle":"c","target":0,"emoji":"ok"}"#, .badRequest),
            (#"{"action":"react","id":"1","circle":"c","emoji":"ok"}"#, .badRequest),
            // An emoji field on an action without one is not looked at.
            (#"{"action":"delete","id":"1","circle":"c","target":0,"emoji":"ok"}"#, .badRequest),
            (#"{"action":"read","id":"1","circle":"c"}"#, .badRequest),
            (#"{"action":"read","id":"1","circle":"c","seq":-1}"#, .badRequest),
            (#"{"action":"post","id":"1","circle":"c","text":"a","replyTo":0}"#, .badRequest),
        ]
        for (json, code) in refused {
            guard case .failure(let failure) = decode(json) else {
                Issue.record("accepted: \(json)")
                continue
            }
            #expect(failure.code == code, "\(json): \(failure.message)")
            #expect(failure.id == "1")
        }
    }

    @Test func emojiAreOneEmoji() {
        let emoji = ["👍", "👍🏽", "❤️", "🇫🇷", "1️⃣", "👨‍👩‍👧‍👦", "🎉", "😀", "☺️", "🏳️‍🌈"]
        for text in emoji { #expect(CircleRequest.isEmoji(text), "\(text)") }
        let notEmoji = ["", "a", "1", "#", "*", "™", "☺", "👍👍", "👍 ", " 👍", "ok", String(repeating: "👍", count: 20)]
        for text in notEmoji { #expect(!CircleRequest.isEmoji(text), "\(text)") }
    }
}
