import CircleServer
import CircleTestSupport
import CircleWire
import Foundation
import InMemoryTracing
import Testing
import Tracing

/// The post path's spans (docs/OPERATIONS.md, "Tracing") with a tracer that keeps them in
/// memory: each post's `circle.post` with its circle and seq, and the events of its commit and
/// fan-out in order. scripts/tracing-test checks the same over OTLP with
/// opentelemetry-proto, HTTP spans and log lines included.
@Suite("Tracing: the post path's spans", .serialized, .timeLimit(.minutes(2)))
struct TracingTests {
    @Test("a post is traced from its arrival through its commit to its fan-out")
    func postSpans() async throws {
        let tracer = InMemoryTracer()
        let server = TestServer()
        defer { server.remove() }
        server.configuration.tracer = tracer
        try await server.start()
        try await server.createCircle("lobby", owner: "alice")
        let alice = try await server.token("alice")
        let posted = try await server.http("POST", HTTPAPI.Path.messages("lobby"), token: alice, json: #"{"text":"traced","id":"t-1"}"#)
        #expect(posted.status == 201 || posted.status == 200, "\(posted.body)")
        let again = try await server.http("POST", HTTPAPI.Path.messages("lobby"), token: alice, json: #"{"text":"traced","id":"t-1"}"#)
        #expect(again.status == 200 || again.status == 201)
        await server.stop()

        let spans = tracer.finishedSpans
        let posts = spans.filter { $0.operationName == "circle.post" }
        #expect(posts.count == 2, "\(spans.map(\.operationName))")
        for post in posts {
            #expect(post.attributes["circle.circle"]?.toSpanAttribute() == "lobby")
            #expect(post.attributes["circle.seq"]?.toSpanAttribute() == 1)
            #expect(post.kind == .server)
            #expect(post.events.map(\.name) == ["circle.commit.begin", "circle.commit.end", "circle.fanout.end"], "\(post.events.map(\.name))")
            let times = post.events.map(\.nanosecondsSinceEpoch)
            #expect(times == times.sorted(), "events out of order: \(times)")
            #expect(post.events[1].attributes["circle.batch"]?.toSpanAttribute() == 1)
            #expect(post.startInstant.nanosecondsSinceEpoch <= times[0] && times[2] <= post.endInstant.nanosecondsSinceEpoch)
        }
        #expect(posts.filter { $0.attributes["circle.duplicate"]?.toSpanAttribute() == true }.count == 1)
        #expect(tracer.activeSpans.isEmpty, "spans left open: \(tracer.activeSpans.map(\.operationName))")
    }
}
