import CircleServer
import CircleTestSupport
import CircleWire
import Foundation
import Testing

/// Retention against a live server (docs/OPERATIONS.md, "Retention"): the route, the sweep in the
/// background, and a reader resuming from entries that are gone.
@Suite("Retention, live", .serialized, .timeLimit(.minutes(3)))
struct RetentionLiveTests {
    @Test("a circle keeps its newest entries: the owner sets it; a reader resuming before them gets a gap, then every kept entry and the live ones")
    func keepNewest() async throws {
        try await withCanaryServer(configure: { $0.retentionInterval = .milliseconds(200) }) { server, canary in
            try await server.createCircle("news", owner: "alice")
            let alice = try await server.token("alice")
            let writer = try await TestClient.connect(server, user: "alice")
            #expect(try await writer.request { .join("news", id: $0) }.ackSeq == 0)
            for index in 1...8 {
                let ack = try await writer.request { .post("post \(index)", to: "news", id: $0) }
                #expect(ack.ackSeq == Int64(index), "\(ack)")
            }

            // Bad input and who may set it.
            let path = HTTPAPI.Path.retention("news")
            #expect(try await server.http("GET", path, token: alice).body == #"{"days":null,"keep":null}"#)
            #expect(try await server.http("PUT", path, token: try await server.token("bo"), json: #"{"keep":3}"#).status == 403)
            #expect(try await server.http("PUT", HTTPAPI.Path.retention("nowhere"), token: alice, json: #"{"keep":3}"#).status == 404)
            for bad in [#"{"keep":0}"#, #"{"days":36501}"#, #"{"keep":"three"}"#, #"{"days":-1}"#, "[]"] {
                let answer = try await server.http("PUT", path, token: alice, json: bad)
                #expect(answer.status == 400 && answer.body.contains("bad_request"), "\(bad): \(answer)")
            }
            try await canary.check("after refused retention settings")
            #expect(try await server.http("GET", path, token: alice).body == #"{"days":null,"keep":null}"#, "a refused setting changed nothing")

            let set = try await server.http("PUT", path, token: alice, json: #"{"keep":3}"#)
            #expect(set.status == 200 && set.body == #"{"days":null,"keep":3}"#, "\(set)")
            // The sweep runs in the background: wait (bounded) until 1…5 are gone.
            let deadline = ContinuousClock.now + .seconds(30)
            var kept: [Int64] = []
            while ContinuousClock.now < deadline {
                let page = try await server.http("GET", HTTPAPI.Path.messages("news") + "?after=0&limit=50", token: alice)
                kept = ((try JSONSerialization.jsonObject(with: Data(page.body.utf8)) as? [String: Any])?["posts"] as? [[String: Any]] ?? [])
                    .compactMap { ($0["seq"] as? NSNumber)?.int64Value }
                if kept == [6, 7, 8] { break }
                try await Task.sleep(for: .milliseconds(100))
            }
            #expect(kept == [6, 7, 8])

            // A reader that saw 1 and 2 resumes: a gap for 3…5, then 6, 7, 8, then live 9.
            let reader = try await TestClient.connect(server, user: "bo")
            let joinID = reader.nextID()
            try await reader.send(.join("news", id: joinID, since: 2))
            var received: [String] = []
            while received.count < 4, let message = try await reader.next() {
                switch message {
                case .gap(let circle, let from, let to): received.append("gap \(circle) \(from)...\(to)")
                case .post(let post) where post.circle == "news": received.append("post \(post.seq)")
                default: continue
                }
            }
            #expect(received == ["gap news 3...5", "post 6", "post 7", "post 8"])
            #expect(try await writer.request { .post("post 9", to: "news", id: $0) }.ackSeq == 9)
            var live: CirclePost?
            while live == nil, let message = try await reader.next() { live = message.post }
            #expect(live?.seq == 9)

            // Off again: nothing more goes.
            let off = try await server.http("PUT", path, token: alice, json: #"{"days":null,"keep":null}"#)
            #expect(off.status == 200 && off.body == #"{"days":null,"keep":null}"#)
            await reader.close()
            await writer.close()
        }
    }
}
