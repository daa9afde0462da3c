import CircleServer
import Foundation
import Testing

/// `circle serve --config` files an attacker (or a bad editor) wrote (``SettingsFile``): each is
/// refused with a documented message and its line, within the bounds (1 MiB, 16 deep), and a good
/// file (the canary) still parses after them.
@Suite("Adversarial: configuration files")
struct AdversarialSettingsFileTests {
    private static func problem(_ text: [UInt8]) -> SettingsFile.Problem? {
        do {
            _ = try SettingsFile.parse(text[...])
            return nil
        } catch {
            return error
        }
    }

    private static let canary = Array("{\n  \"port\": 9000,\n  \"jwt-issuer\": [\"a\", \"b\"],\n  \"dev\": true\n}\n".utf8)

    @Test("members keep their lines and values")
    func lines() throws {
        let file = try SettingsFile.parse(Self.canary[...])
        #expect(file.entries.map(\.key) == ["port", "jwt-issuer", "dev"])
        #expect(file.entries.map(\.line) == [2, 3, 4])
        #expect(file.entries[0].value == .number("9000"))
        #expect(file.entries[1].value == .array([.string("a"), .string("b")]))
        #expect(file.entries[2].value == .bool(true))
        let escaped = try SettingsFile.parse(Array(#"{"k": "caf\u00e9 \ud83d\ude00 \"q\" \n"}"#.utf8)[...])
        #expect(escaped.entries.first?.value == .string("café 😀 \"q\" \n"))
    }

    @Test("hostile files: each refused with its line, bounded")
    func hostile() {
        let cases: [(bytes: [UInt8], line: Int, message: String)] = [
            (Array(("{\"a\": " + String(repeating: "[", count: 200_000)).utf8), 1, "nested more than 16 deep"),
            (Array(("{\"a\": " + String(repeating: "{\"b\": ", count: 17) + "1" + String(repeating: "}", count: 18)).utf8), 1, "nested more than 16 deep"),
            ([UInt8](repeating: 0x20, count: SettingsFile.maxBytes + 1), 0, "more than the limit"),
            (Array("{\n\n\"a\": \"".utf8) + [0xC0, 0x80] + Array("\"}".utf8), 3, "is not UTF-8"),
            (Array("{\"a\": \"".utf8) + [0xED, 0xA0, 0x80] + Array("\"}".utf8), 1, "is not UTF-8"),
            (Array("{\"a\": \"".utf8) + [0xF4, 0x90, 0x80, 0x80] + Array("\"}".utf8), 1, "is not UTF-8"),
            (Array("{\"a\": \"".utf8) + [0xE2, 0x82], 1, "is not UTF-8"),
            (Array(#"{"a": "\ud800"}"#.utf8), 1, "lone surrogate"),
            (Array(#"{"a": "\udc00"}"#.utf8), 1, "lone surrogate"),
            (Array("{\"a\": \"x\u{0}y\"}".utf8), 1, "control character"),
            (Array("{\"a\": \"x\ny\"}".utf8), 1, "control character"),
            (Array("{\"a\": 01}".utf8), 1, "malformed JSON"),
            (Array("{\"a\": 1.}".utf8), 1, "malformed JSON"),
            (Array("{\"a\": -}".utf8), 1, "malformed JSON"),
            (Array("{\"a\": tru}".utf8), 1, "malformed JSON"),
            (Array("{\"a\": 1} x".utf8), 1, "after the closing }"),
            (Array("{\"a\": 1,}".utf8), 1, "malformed JSON"),
            (Array("{'a': 1}".utf8), 1, "malformed JSON"),
            ([0xEF, 0xBB, 0xBF] + Array("{}".utf8), 1, "byte-order mark"),
            (Array("\n\n".utf8), 3, "is empty"),
            (Array("{\"a\": 1,\n\"a\": 2}".utf8), 2, "set twice (first on line 1)"),
        ]
        for item in cases {
            let problem = Self.problem(item.bytes)
            #expect(problem?.line == item.line, "\(item.message): \(String(describing: problem))")
            #expect(problem?.message.contains(item.message) == true, "\(item.message): \(String(describing: problem))")
        }
        #expect(Self.problem(Self.canary) == nil, "the canary file is refused")
    }

    @Test("read: a directory, a missing file, a file over 1 MiB")
    func read() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("settings-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        #expect(throws: SettingsFile.Problem(line: 0, message: "is a directory, not a configuration file")) { try SettingsFile.read(path: directory) }
        #expect(throws: SettingsFile.Problem(line: 0, message: "cannot open it: No such file or directory")) { try SettingsFile.read(path: directory + "/none") }
        let big = directory + "/big.json"
        try Data(repeating: 0x20, count: SettingsFile.maxBytes + 1).write(to: URL(fileURLWithPath: big))
        #expect(throws: SettingsFile.Problem(line: 0, message: "is 1048577 bytes, more than the limit of 1048576 (1 MiB)")) { try SettingsFile.read(path: big) }
        let good = directory + "/good.json"
        try Data(Self.canary).write(to: URL(fileURLWithPath: good))
        #expect(try SettingsFile.read(path: good).entries.count == 3)
    }
}
