import CircleWire
import Testing

/// The one rule that finds mentions in a text.
@Suite struct MentionParserTests {
    @Test(arguments: [
        ("@bob", [MentionParser.Mention.user(["bob"])]),
        ("hi @bob, @carol.", [.user(["bob"]), .user(["carol.", "carol"])]),
        ("@bob @bob", [.user(["bob"])]),
        ("mail bob@example.org", []),
        ("@ alone and @", []),
        ("(@dora) [@émile]", [.user(["dora"]), .user(["émile"])]),
        ("@here and @everyone!", [.everyone]),
        ("@everyone.", [.everyone]),
        ("@a.b-c_d", [.user(["a.b-c_d"])]),
        ("@x@y", [.user(["x@y"])]),
        ("@李小龙 好", [.user(["李小龙"])]),
    ])
    func mentions(_ text: String, _ expected: [MentionParser.Mention]) {
        #expect(MentionParser.mentions(in: text) == expected)
    }

    @Test func boundedInCountAndLength() {
        let many = (0..<200).map { "@user\($0)" }.joined(separator: " ")
        #expect(MentionParser.mentions(in: many).count == MentionParser.maxMentions)
        let long = "@" + String(repeating: "a", count: 65)
        #expect(MentionParser.mentions(in: long) == [])
        let sixtyFour = String(repeating: "a", count: 64)
        #expect(MentionParser.mentions(in: "@\(sixtyFour).") == [.user([sixtyFour])])
    }

    @Test(arguments: [
        ("hello @bo", "bo"),
        ("@", ""),
        ("x @carol.d", "carol.d"),
        ("hello bo", nil),
        ("a@b", nil),
        ("@bo done", nil),
    ] as [(String, String?)])
    func partialMention(_ text: String, _ expected: String?) {
        #expect(MentionParser.partialMention(atEndOf: text) == expected)
    }
}
