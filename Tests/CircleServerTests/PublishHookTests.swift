import CircleWire
import Foundation
import Testing

@testable import CircleServer

/// The publish hook's pure parts: the reply parser (also a fuzz target), reasons, call ids and
/// the payload.
@Suite("Publish hooks")
struct PublishHookTests {
    private func parse(_ body: String, status: Int = 200, type: String? = "application/json", limit: Int = 64) -> Result<PublishHookReply, PublishHookReply.Problem> {
        PublishHookReply.parse(status: status, contentType: type, body: Array(body.utf8), maxTextBytes: limit)
    }

    @Test("verdicts: accept, refuse with or without a reason, replace")
    func verdicts() {
        #expect(self.parse(#"{"action":"accept"}"#) == .success(.accept))
        #expect(self.parse(#"{"action":"accept","extra":[1,2]}"#, type: "Application/JSON; charset=utf-8") == .success(.accept))
        #expect(self.parse(#"{"action":"refuse","reason":"spam"}"#) == .success(.refuse(reason: "spam")))
        #expect(self.parse(#"{"action":"refuse"}"#) == .success(.refuse(reason: "")))
        #expect(self.parse(#"{"action":"refuse","reason":null}"#) == .success(.refuse(reason: "")))
        #expect(self.parse(#"{"action":"replace","text":"tab\tand\nnewline"}"#) == .success(.replace(text: "tab\tand\nnewline")))
        #expect(self.parse(#"{"action":"accept"}"#, status: 204) == .success(.accept))
    }

    @Test("what is not a verdict, each with its problem")
    func problems() {
        #expect(self.parse(#"{"action":"accept"}"#, status: 500) == .failure(.status(500)))
        #expect(self.parse(#"{"action":"accept"}"#, status: 302) == .failure(.status(302)))
        #expect(self.parse(#"{"action":"accept"}"#, type: "text/plain") == .failure(.notJSONType("text/plain")))
        #expect(self.parse(#"{"action":"accept"}"#, type: nil) == .failure(.notJSONType(nil)))
        #expect(self.parse("", type: "application/json").isNotJSON)
        #expect(self.parse("{", type: "application/json").isNotJSON)
        #expect(self.parse(#"{"action":"accept","action":"refuse"}"#).isNotJSON, "duplicate keys are refused by the strict parser")
        #expect(self.parse(#"["accept"]"#) == .failure(.notAnObject))
        #expect(self.parse(#"{"verdict":"accept"}"#) == .failure(.noAction))
        #expect(self.parse(#"{"action":1}"#) == .failure(.noAction))
        #expect(self.parse(#"{"action":"Accept"}"#) == .failure(.unknownAction("Accept")))
        #expect(self.parse(#"{"action":"replace"}"#) == .failure(.noText))
        #expect(self.parse(#"{"action":"replace","text":" \n "}"#) == .failure(.emptyText))
        #expect(self.parse(#"{"action":"replace","text":"\#(String(repeating: "x", count: 65))"}"#) == .failure(.tooLong(limit: 64)))
        #expect(self.parse(#"{"action":"replace","text":"a\u0007b"}"#) == .failure(.controlCharacters))
        #expect(self.parse(#"{"action":"refuse","reason":42}"#) == .failure(.badReason))
    }

    @Test("a refusal's reason: control characters become spaces, cut at 500 bytes on a character boundary")
    func reasons() {
        #expect(PublishHookReply.cleanReason("line\u{0}one\r\ntwo") == "line one  two")
        let long = String(repeating: "é", count: 400)
        let cut = PublishHookReply.cleanReason(long)
        #expect(cut.utf8.count == PublishHook.maxReasonBytes && cut.allSatisfy { $0 == "é" })
    }

    @Test("a call's webhook-id is stable for an entry's idempotency key and differs between keys")
    func callIDs() {
        let id = PublishHook.callID(circle: "room", author: "bo", clientID: "p1", change: nil)
        #expect(id.hasPrefix("pub_") && id.count == 36)
        #expect(id == PublishHook.callID(circle: "room", author: "bo", clientID: "p1", change: nil))
        #expect(id != PublishHook.callID(circle: "room", author: "bo", clientID: "p2", change: nil))
        #expect(id != PublishHook.callID(circle: "room", author: "cy", clientID: "p1", change: nil))
        #expect(id != PublishHook.callID(circle: "room", author: "bo", clientID: "p1", change: .edit))
    }

    @Test("the payload: type publish, an RFC 3339 timestamp, the entry's fields")
    func payload() throws {
        let post = NewPost(circle: "room", author: "bo", clientID: "p1", text: "hi", attachment: nil, time: 0, replyTo: 3)
        let body = PublishHookPayload.body(post, at: 1_764_236_400_123)
        let json = try #require(try JSONSerialization.jsonObject(with: Data(body)) as? [String: Any])
        #expect(json["type"] as? String == "publish")
        #expect(json["timestamp"] as? String == "2025-11-27T09:40:00.123Z")
        let data = try #require(json["data"] as? [String: Any])
        #expect(data["circle"] as? String == "room" && data["author"] as? String == "bo" && data["id"] as? String == "p1")
        #expect(data["text"] as? String == "hi" && data["kind"] as? String == "post" && data["replyTo"] as? Int == 3)
    }
}

extension Result where Success == PublishHookReply, Failure == PublishHookReply.Problem {
    fileprivate var isNotJSON: Bool {
        if case .failure(.notJSON) = self { return true }
        return false
    }
}
