import CircleServer
import CircleTestSupport
import CircleWire
import Foundation
import Testing

/// System entries and their switch (docs/API.md, "System entries") against a live server whose
/// canary member must keep being served: bad switch bodies get a documented 400, strangers 403,
/// unknown circles 404, a flood of membership changes writes one entry per real change.
@Suite("Adversarial inputs: system entries", .serialized, .timeLimit(.minutes(3)))
struct AdversarialSystemEntryTests {
    private func errorCode(_ text: String) -> String? {
        let json = (try? JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any]) ?? [:]
        return (json["error"] as? [String: Any])?["code"] as? String
    }

    @Test("the switch refuses bad bodies, strangers and unknown circles; repeated changes write one entry each")
    func switchAndFlood() async throws {
        try await withCanaryServer { server, canary in
            try await server.createCircle("den", owner: "alice", isPrivate: true)
            let alice = try await server.token("alice")
            let mallory = try await server.token("mallory")
            let path = "/v1/circles/den/system-entries"
            for body in [#"{"enabled":"no"}"#, #"{"enabled":null}"#, #"{}"#, #"[]"#, #"not json"#, #"{"enabled":true,"enabled":false}"#,
                #"{"enabled":"\#(String(repeating: "a", count: 10_000))"}"#]
            {
                let answer = try await server.http("PUT", path, token: alice, json: body)
                #expect(answer.status == 400 && self.errorCode(answer.body) == "bad_request", "\(body.prefix(40)): \(answer.body)")
            }
            #expect(try await server.http("PUT", path, token: mallory, json: #"{"enabled":false}"#).status == 403)
            #expect(try await server.http("PUT", "/v1/circles/nowhere/system-entries", token: alice, json: #"{"enabled":false}"#).status == 404)
            try await canary.check("after bad switches")

            // The same addition and removal, many times over, concurrently: one entry per change.
            try await withThrowingTaskGroup(of: Void.self) { group in
                for _ in 0..<20 {
                    group.addTask {
                        let answer = try await server.http("POST", "/v1/circles/den/members", token: alice, json: #"{"user":"bob"}"#)
                        #expect(answer.status == 200, "\(answer.body)")
                    }
                }
                try await group.waitForAll()
            }
            #expect(try await server.http("DELETE", "/v1/circles/den/members/bob", token: alice).status == 200)
            #expect(try await server.http("DELETE", "/v1/circles/den/members/bob", token: alice).status == 200)
            let page = try await server.http("GET", "/v1/circles/den/messages", token: alice)
            #expect(page.body.components(separatedBy: #""event":"added""#).count == 2, "one added entry: \(page.body)")
            #expect(page.body.components(separatedBy: #""event":"removed""#).count == 2, "one removed entry: \(page.body)")
            // A member name that is not one: the route's documented 400, no entry.
            let invalid = try await server.http("POST", "/v1/circles/den/members", token: alice, json: #"{"user":"x y"}"#)
            #expect(invalid.status == 400 && self.errorCode(invalid.body) == "bad_request")
            try await canary.check("after the membership flood")
        }
    }
}
