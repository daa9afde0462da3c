import CircleServer
import CircleTestSupport
import CircleWire
import Foundation
import Testing

/// HTTP JSON bodies meet the rules of WebSocket requests on a running server: a key twice in one
/// object is refused, whichever route reads the body, and nothing is created.
@Suite struct HTTPBodyRulesLiveTests {
    @Test func duplicateKeysInBodiesAreRefused() async throws {
        let server = TestServer()
        defer { server.remove() }
        try await server.start()
        let alice = try await server.token("alice")

        let circle = try await server.http("POST", "/v1/circles", token: alice, json: #"{"name":"a","name":"b"}"#)
        #expect(circle.status == 400)
        let refusal = HTTPAPI.decode(HTTPAPI.ErrorBody.self, from: Array(circle.body.utf8))?.error
        #expect(refusal?.code == .badRequest, "\(circle.body)")
        #expect(refusal?.message == #"the key "name" appears twice; send {"name": "…", "private": false}"#, "\(circle.body)")
        let hidden = try await server.http("POST", "/v1/circles", token: alice, json: #"{"name":"a","private":false,"private":true}"#)
        #expect(hidden.status == 400)
        let listed = try await server.http("GET", "/v1/circles", token: alice)
        #expect(listed.status == 200)
        #expect(HTTPAPI.decode(HTTPAPI.CircleList.self, from: Array(listed.body.utf8))?.circles.isEmpty == true, "\(listed.body)")

        // The same bodies without the repeated key are fine.
        try await server.createCircle("a", owner: "alice", isPrivate: true)
        let member = try await server.http("POST", HTTPAPI.Path.members("a"), token: alice, json: #"{"user":"bob","user":"carol"}"#)
        #expect(member.status == 400)
        let members = try await server.http("GET", HTTPAPI.Path.members("a"), token: alice)
        #expect(HTTPAPI.decode(HTTPAPI.MemberList.self, from: Array(members.body.utf8))?.members == ["alice"], "\(members.body)")
        let added = try await server.http("POST", HTTPAPI.Path.members("a"), token: alice, json: #"{"user":"bob"}"#)
        #expect(added.status == 200 || added.status == 201, "\(added.body)")

        let upload = try await server.http("POST", HTTPAPI.Path.uploads, token: alice, json: #"{"length":10,"contentType":"image/png","length":20}"#)
        #expect(upload.status == 400, "\(upload.body)")
        await server.stop()
    }
}
