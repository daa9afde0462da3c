@testable import CircleServer
@testable import CircleWire
import NIOCore
import Testing

@Suite("Strict JSON request parsing")
struct JSONParserTests {
    @Test("valid JSON texts parse to their values")
    func valid() throws {
        #expect(try JSONParser.parse(Array(#" {"a":[1,-2.5e3,true,false,null],"b":"x\u00e9\ud83d\ude00\n"} "#.utf8)).get()
            == .object([
                ("a", .array([.number("1"), .number("-2.5e3"), .bool(true), .bool(false), .null])),
                ("b", .string("xé😀\n")),
            ]))
        #expect(try JSONParser.parse(Array("42".utf8)).get() == .number("42"))
        #expect(try JSONParser.parse(Array(#""""#.utf8)).get() == .string(""))
        #expect(try JSONParser.parse(Array("{}".utf8)).get() == .object([]))
    }

    @Test("malformed texts are refused, never trapping", arguments: [
        "", " ", "{", "}", "[1,]", "{\"a\":1,}", "{\"a\" 1}", "01", "1.", "-", "1e", "+1", "NaN", "tru", "nul",
        "\"\\x\"", "\"\\u12\"", "\"\\ud800\"", "\"\\udc00\"", "\"\\ud800\\u0041\"", "\"a\nb\"", "{\"a\":1} x", "[1 2]",
        "{1:2}", "'a'", "\u{FEFF}{}",
    ])
    func malformed(_ text: String) {
        if case .success(let value) = JSONParser.parse(Array(text.utf8)) {
            Issue.record("\(text.debugDescription) parsed as \(value)")
        }
    }

    @Test("invalid UTF-8 in a string is refused")
    func invalidUTF8() {
        #expect((try? JSONParser.parse([0x22, 0xC3, 0x28, 0x22]).get()) == nil)
        #expect((try? JSONParser.parse([0x22, 0xED, 0xA0, 0x80, 0x22]).get()) == nil)
    }

    @Test("duplicate keys are named; nesting is bounded")
    func duplicatesAndDepth() {
        guard case .failure(let error) = JSONParser.parse(Array(#"{"id":"a","x":{"id":1},"id":"b"}"#.utf8)) else {
            Issue.record("duplicate accepted")
            return
        }
        #expect(error.duplicateKey == "id")
        // The same key in different objects is fine.
        #expect((try? JSONParser.parse(Array(#"{"id":"a","x":{"id":1}}"#.utf8)).get()) != nil)
        let deep = String(repeating: "[", count: JSONParser.maxDepth) + String(repeating: "]", count: JSONParser.maxDepth)
        #expect((try? JSONParser.parse(Array(deep.utf8)).get()) != nil)
        let tooDeep = String(repeating: "[", count: JSONParser.maxDepth + 1) + String(repeating: "]", count: JSONParser.maxDepth + 1)
        #expect((try? JSONParser.parse(Array(tooDeep.utf8)).get()) == nil)
        #expect((try? JSONParser.parse(Array(String(repeating: "{\"a\":", count: 100_000).utf8)).get()) == nil)
    }

    @Test("integers are read exactly; fractions and out-of-range numbers are not integers")
    func integers() {
        #expect(JSONValue.number("9223372036854775807").int64 == Int64.max)
        #expect(JSONValue.number("-9223372036854775808").int64 == Int64.min)
        #expect(JSONValue.number("1e3").int64 == 1000)
        #expect(JSONValue.number("2.0").int64 == 2)
        #expect(JSONValue.number("9223372036854775808").int64 == nil)
        #expect(JSONValue.number("1.5").int64 == nil)
        #expect(JSONValue.number("1e400").int64 == nil)
        #expect(JSONValue.number("-1e400").int64 == nil)
    }

    @Test("requests: the documented error for each malformed envelope")
    func requestErrors() throws {
        func failure(_ text: String) -> CircleRequest.DecodingFailure? {
            if case .failure(let failure) = CircleRequest.decode(Array(text.utf8)) { return failure }
            return nil
        }
        #expect(failure("{") == .init(id: nil, code: .badRequest, message: "the frame is not valid JSON"))
        #expect(failure("null") == .init(id: nil, code: .badRequest, message: "a request must be a JSON object"))
        #expect(failure(#"{"id":"a","id":"b","action":"join","circle":"c"}"#)?.message == #"the key "id" appears twice"#)
        #expect(failure(#"{"id":"a","action":"join"}"#) == .init(id: "a", code: .badRequest, message: #""circle" is missing"#))
        #expect(failure(#"{"id":"a","action":"join","circle":null}"#)?.message == #""circle" must not be null"#)
        #expect(failure(#"{"id":"a","action":"join","circle":"c","since":"1"}"#)?.message == #""since" must be an integer, not a string"#)
        #expect(failure(#"{"id":"a","action":"join","circle":"c","since":1.5}"#)?.message == #""since" must be a whole number within 64 bits"#)
        #expect(failure(#"{"id":"a","action":"join","circle":"c","text":5}"#)?.message == #""text" must be a string, not a number"#)
        #expect(failure(#"{"id":"a","action":"shout","circle":"c"}"#)?.code == .unknownAction)
        #expect(failure(#"{"id":"a","action":"history","circle":"c","limit":1e300}"#)?.message == #""limit" must be a whole number within 64 bits"#)
        let join = CircleRequest.decode(Array(#"{"id":"a","action":"join","circle":"c","since":null,"extra":{"x":[1]}}"#.utf8))
        #expect(try join.get() == .join("c", id: "a"))
    }
}

@Suite("HTTP timeout state")
struct HTTPTimeoutStateTests {
    let timeouts = HTTPTimeoutState.Timeouts(requestHead: .seconds(10), bodyIdle: .seconds(30), keepAlive: .seconds(60), writeStall: .seconds(20))
    let start = NIODeadline.uptimeNanoseconds(1_000_000_000)

    @Test("a connection waits for its first head, then its body, then nothing while answered, then keep-alive")
    func lifecycle() {
        var state = HTTPTimeoutState(timeouts: self.timeouts, now: self.start)
        #expect(state.deadline?.reason == .requestHead)
        #expect(state.deadline?.at == self.start + .seconds(10))
        state.requestHead(now: self.start + .seconds(1))
        #expect(state.deadline?.reason == .bodyIdle)
        state.requestBody(now: self.start + .seconds(5))
        #expect(state.deadline?.at == self.start + .seconds(35))
        state.requestEnd(now: self.start + .seconds(6))
        #expect(state.deadline == nil, "no deadline while the server answers")
        state.responseEnd(now: self.start + .seconds(7))
        #expect(state.deadline?.reason == .keepAlive)
        #expect(state.deadline?.at == self.start + .seconds(67))
    }

    @Test("an unread response gets the write-stall deadline; draining lifts it")
    func writeStall() {
        var state = HTTPTimeoutState(timeouts: self.timeouts, now: self.start)
        state.requestHead(now: self.start)
        state.requestEnd(now: self.start)
        state.writabilityChanged(false, now: self.start + .seconds(2))
        #expect(state.deadline?.reason == .writeStall)
        #expect(state.deadline?.at == self.start + .seconds(22))
        state.writabilityChanged(true, now: self.start + .seconds(3))
        #expect(state.deadline == nil)
        state.responseEnd(now: self.start + .seconds(4))
        #expect(state.deadline?.reason == .keepAlive)
    }

    @Test("a body that pauses while the socket is full is judged by the write stall, then the body")
    func pipelined() {
        var state = HTTPTimeoutState(timeouts: self.timeouts, now: self.start)
        state.requestHead(now: self.start)
        state.writabilityChanged(false, now: self.start + .seconds(1))
        state.requestBody(now: self.start + .seconds(2))
        #expect(state.deadline?.reason == .writeStall)
        state.writabilityChanged(true, now: self.start + .seconds(5))
        #expect(state.deadline?.reason == .bodyIdle)
        #expect(state.deadline?.at == self.start + .seconds(35))
    }

    @Test("expiry times beyond the horizon, negative or not finite never trap")
    func clampedSeconds() {
        #expect(TimeAmount(clampedSeconds: 1e300, horizon: .hours(1)) == nil)
        #expect(TimeAmount(clampedSeconds: .infinity, horizon: .hours(1)) == nil)
        #expect(TimeAmount(clampedSeconds: .nan, horizon: .hours(1)) == nil)
        #expect(TimeAmount(clampedSeconds: -1e300, horizon: .hours(1)) == .zero)
        #expect(TimeAmount(clampedSeconds: 1.5, horizon: .hours(1)) == .milliseconds(1500))
    }
}
