import CircleWire
import Foundation
import Testing

/// The rules every request and JSON body meets (PROTOCOL.md §2), the one form of a reaction emoji
/// (§3, changes to posts), and HTTP bodies read by the same strict parser as requests.
@Suite struct RequestRulesTests {
    // MARK: Known fields are type-checked for every action

    /// A known field with a value of the wrong type, and the error text PROTOCOL.md §2 gives.
    struct WrongField: Sendable, CustomTestStringConvertible {
        var field: String
        var json: String
        var message: String
        var testDescription: String { "\(self.field): \(self.json)" }
    }

    static let wrongFields: [WrongField] = [
        WrongField(field: "circle", json: "5", message: #""circle" must be a string, not a number"#),
        WrongField(field: "since", json: #""x""#, message: #""since" must be an integer, not a string"#),
        WrongField(field: "since", json: "1.5", message: #""since" must be a whole number within 64 bits"#),
        WrongField(field: "text", json: "5", message: #""text" must be a string, not a number"#),
        WrongField(field: "attachment", json: "true", message: #""attachment" must be a string, not a boolean"#),
        WrongField(field: "before", json: #""1""#, message: #""before" must be an integer, not a string"#),
        WrongField(field: "after", json: "[]", message: #""after" must be an integer, not an array"#),
        WrongField(field: "limit", json: "{}", message: #""limit" must be an integer, not an object"#),
        WrongField(field: "limit", json: "1e400", message: #""limit" must be a whole number within 64 bits"#),
        WrongField(field: "quiet", json: #""yes""#, message: #""quiet" must be true or false, not a string"#),
        WrongField(field: "target", json: #""3""#, message: #""target" must be an integer, not a string"#),
        WrongField(field: "emoji", json: "1", message: #""emoji" must be a string, not a number"#),
        WrongField(field: "replyTo", json: "false", message: #""replyTo" must be an integer, not a boolean"#),
        WrongField(field: "seq", json: #""2""#, message: #""seq" must be an integer, not a string"#),
    ]

    @Test(arguments: CircleAction.allCases, Self.wrongFields)
    func everyActionTypeChecksEveryKnownField(action: CircleAction, wrong: WrongField) {
        var members = [#""action":"\#(action.rawValue)""#, #""id":"t1""#]
        if wrong.field != "circle" { members.append(#""circle":"c""#) }
        members.append(#""\#(wrong.field)":\#(wrong.json)"#)
        let frame = "{" + members.joined(separator: ",") + "}"
        guard case .failure(let failure) = CircleRequest.decode(Array(frame.utf8)) else {
            Issue.record("accepted: \(frame)")
            return
        }
        #expect(failure.code == .badRequest)
        #expect(failure.id == "t1")
        #expect(failure.message == wrong.message, "\(frame)")
    }

    @Test func pingAndCirclesNeedNoCircle() throws {
        for frame in [#"{"action":"ping","id":"p1"}"#, #"{"action":"circles","id":"p1","circle":null}"#, #"{"action":"ping","id":"p1","since":null,"x":[1]}"#] {
            let request = try CircleRequest.decode(Array(frame.utf8)).get()
            #expect(request.id == "p1")
            #expect(request.circle == "")
        }
    }

    // MARK: Emoji

    /// What a client may send, and the one form it is compared and stored in.
    static let normalizedEmoji: [(input: String, stored: String)] = [
        ("👍", "👍"),
        ("👍\u{FE0F}", "👍"),
        ("👍\u{FE0E}", "👍"),
        ("❤\u{FE0F}", "❤\u{FE0F}"),
        ("☺\u{FE0F}", "☺\u{FE0F}"),
        ("1\u{20E3}", "1\u{FE0F}\u{20E3}"),
        ("1\u{FE0F}\u{20E3}", "1\u{FE0F}\u{20E3}"),
        ("#\u{20E3}", "#\u{FE0F}\u{20E3}"),
        ("👍🏽", "👍🏽"),
        ("☝\u{1F3FD}", "☝\u{1F3FD}"),
        ("☝\u{FE0F}\u{1F3FD}", "☝\u{1F3FD}"),
        ("🇫🇷", "🇫🇷"),
        ("🏳\u{200D}🌈", "🏳\u{FE0F}\u{200D}🌈"),
        ("🏳\u{FE0F}\u{200D}🌈", "🏳\u{FE0F}\u{200D}🌈"),
        ("❤\u{200D}🔥", "❤\u{FE0F}\u{200D}🔥"),
        ("👨\u{200D}👩\u{200D}👧\u{200D}👦", "👨\u{200D}👩\u{200D}👧\u{200D}👦"),
        ("👩🏽\u{200D}⚕\u{FE0F}", "👩🏽\u{200D}⚕\u{FE0F}"),
        ("🏴\u{E0067}\u{E0062}\u{E0065}\u{E006E}\u{E0067}\u{E007F}", "🏴\u{E0067}\u{E0062}\u{E0065}\u{E006E}\u{E0067}\u{E007F}"),
    ]

    @Test func emojiHaveOneForm() {
        for (input, stored) in Self.normalizedEmoji {
            let normalized = CircleEmoji.normalized(input)
            // Scalars, not String ==: the forms differ only in variation selectors.
            #expect(normalized.map { Array($0.unicodeScalars) } == Array(stored.unicodeScalars), "\(input.unicodeScalars.map { String($0.value, radix: 16) })")
            #expect(CircleEmoji.normalized(stored).map { Array($0.unicodeScalars) } == Array(stored.unicodeScalars), "normalising again changes nothing")
            #expect(CircleRequest.isEmoji(input))
        }
    }

    @Test func lookAlikesAndStrayScalarsAreNotEmoji() {
        let refused = [
            "👍" + String(repeating: "\u{FE0F}", count: 20),  // the 64-byte look-alike
            "👍\u{FE0F}\u{FE0F}",
            "👍\u{FE0E}\u{FE0F}",
            "👍\u{FE00}",  // a variation selector that is not an emoji one
            "👍\u{200C}",  // an invisible joiner
            "👍\u{0301}",  // a combining mark
            "👍\u{E0041}\u{E007F}",  // tags after anything but the black flag
            "👍🏽🏽",
            "🏽🏽",
            "🇫",
            "\u{200D}👍",
            "👍\u{200D}",
            "👍\u{200D}\u{200D}👍",
            "☺",
            "☺\u{FE0E}",
            "™",
            "#",
            "1\u{FE0F}",
            "a\u{20E3}",
            "",
            "ok",
            "👍👍",
            "🏴\u{E0067}\u{E0062}",  // a tag flag without its end
        ]
        for text in refused {
            #expect(CircleEmoji.normalized(text) == nil, "\(text.unicodeScalars.map { String($0.value, radix: 16) })")
        }
    }

    @Test func reactRequestsCarryTheStoredForm() throws {
        let react = try CircleRequest.decode(Array(#"{"action":"react","id":"r","circle":"c","target":1,"emoji":"\#("👍\u{FE0F}")"}"#.utf8)).get()
        #expect(react.emoji.map { Array($0.unicodeScalars) } == Array("👍".unicodeScalars))
        let unreact = try CircleRequest.decode(Array(#"{"action":"unreact","id":"r","circle":"c","target":1,"emoji":"1⃣"}"#.utf8)).get()
        #expect(unreact.emoji.map { Array($0.unicodeScalars) } == Array("1\u{FE0F}\u{20E3}".unicodeScalars))
        let lookAlike = "👍" + String(repeating: "\u{FE0F}", count: 20)
        let frame = #"{"action":"react","id":"r","circle":"c","target":1,"emoji":"\#(lookAlike)"}"#
        guard case .failure(let failure) = CircleRequest.decode(Array(frame.utf8)) else {
            Issue.record("a run of selectors was accepted")
            return
        }
        #expect(failure.code == .invalidEmoji)
        #expect(failure.message == #""emoji" must be one emoji"#)
    }

    // MARK: HTTP bodies

    func bodyError<Value: Decodable>(_ type: Value.Type, _ json: String) -> String? {
        do {
            _ = try HTTPAPI.decodeBody(type, from: Array(json.utf8))
            return nil
        } catch {
            #expect(HTTPAPI.decode(type, from: Array(json.utf8)) == nil)
            return error.message
        }
    }

    @Test func httpBodiesFollowTheRequestRules() throws {
        #expect(try HTTPAPI.decodeBody(HTTPAPI.CreateCircle.self, from: Array(#"{"name":"a","private":true}"#.utf8)) == HTTPAPI.CreateCircle(name: "a", private: true))
        #expect(try HTTPAPI.decodeBody(HTTPAPI.CreateCircle.self, from: Array(#"{"name":"a","private":null,"x":1}"#.utf8)) == HTTPAPI.CreateCircle(name: "a"))
        #expect(try HTTPAPI.decodeBody(HTTPAPI.CreateUpload.self, from: Array(#"{"length":2e3,"contentType":"image/png"}"#.utf8)).length == 2000)

        #expect(self.bodyError(HTTPAPI.CreateCircle.self, #"{"name":"a","name":"b"}"#) == #"the key "name" appears twice"#)
        #expect(self.bodyError(HTTPAPI.AddMember.self, #"{"user":"bob","x":{"k":1,"k":2}}"#) == #"the key "k" appears twice"#)
        #expect(self.bodyError(HTTPAPI.CreateCircle.self, #"{"name":5}"#) == #""name" must be a string, not a number"#)
        #expect(self.bodyError(HTTPAPI.CreateCircle.self, #"{"name":"a","private":"yes"}"#) == #""private" must be true or false, not a string"#)
        #expect(self.bodyError(HTTPAPI.CreateCircle.self, #"{"private":true}"#) == #""name" is missing"#)
        #expect(self.bodyError(HTTPAPI.CreateCircle.self, #"{"name":null}"#) == #""name" must not be null"#)
        #expect(self.bodyError(HTTPAPI.CreateCircle.self, #"["name"]"#) == "the body must be an object, not an array")
        #expect(self.bodyError(HTTPAPI.CreateUpload.self, #"{"length":1.5,"contentType":"image/png"}"#) == #""length" must be a whole number within 64 bits"#)
        #expect(self.bodyError(HTTPAPI.CreateUpload.self, #"{"length":1e400,"contentType":"image/png"}"#) == #""length" must be a whole number within 64 bits"#)
        let deep = #"{"name":"a","x":"# + String(repeating: "[", count: 40) + String(repeating: "]", count: 40) + "}"
        #expect(self.bodyError(HTTPAPI.CreateCircle.self, deep)?.hasPrefix("the body is not valid JSON: nested deeper than 32 levels") == true)
        var invalidUTF8 = Array(#"{"name":""#.utf8)
        invalidUTF8 += [0xC3, 0x28] + Array(#""}"#.utf8)
        #expect(throws: HTTPAPI.BodyError.self) { try HTTPAPI.decodeBody(HTTPAPI.CreateCircle.self, from: invalidUTF8) }
        #expect(self.bodyError(HTTPAPI.CreateCircle.self, #"{"name":"\udc00"}"#)?.hasPrefix("the body is not valid JSON") == true)
    }

    /// The SDK reads the server's answers through the same decoder: every answer body comes back
    /// as it was written.
    @Test func answersRoundTrip() throws {
        let page = HTTPAPI.MessagePage(
            posts: [
                CirclePost(
                    circle: "c", seq: 3, author: "ana", text: "hi \"there\"", attachment: "m1", time: 1_764_000_000_000, id: "x",
                    replyTo: 1, edited: 5, reactions: [CircleReaction(emoji: "🎉", users: ["bo", "ana"], me: true)]
                ),
                CirclePost(circle: "c", seq: 4, author: "bo", text: nil, attachment: nil, time: 1, id: "y", deleted: true, reactions: []),
            ],
            more: true,
            lastSeq: 9
        )
        #expect(try HTTPAPI.decodeBody(HTTPAPI.MessagePage.self, from: HTTPAPI.encode(page)) == page)
        let list = HTTPAPI.CircleList(circles: [CircleSummary(name: "c", owner: "ana", private: true, createdAt: 1, lastSeq: 9, readSeq: 4, unread: 5)])
        #expect(try HTTPAPI.decodeBody(HTTPAPI.CircleList.self, from: HTTPAPI.encode(list)) == list)
        let error = HTTPAPI.ErrorBody(code: .badRequest, message: "no")
        #expect(try HTTPAPI.decodeBody(HTTPAPI.ErrorBody.self, from: HTTPAPI.encode(error)) == error)
        let upload = HTTPAPI.Upload(upload: "u", offset: 0, length: 10, contentType: "image/png", media: nil)
        #expect(try HTTPAPI.decodeBody(HTTPAPI.Upload.self, from: HTTPAPI.encode(upload)) == upload)
    }
}
