import CircleWire
import Tracing

/// The span of one post's way through the server (docs/OPERATIONS.md, "Tracing"): `circle.post`
/// from its arrival (the frame read, or the HTTP route's call) to the end of its fan-out, with
/// three timestamped events: `circle.commit.begin` (its batch's transaction began),
/// `circle.commit.end` (it ended; the batch's size) and `circle.fanout.end` (the hub has handed
/// the batch to every subscriber's connection; how many). Events rather than child spans: a span
/// costs several times an event, and the batch's stretches are the same for each of its posts.
/// Made only when the server has a tracer (``CircleServerConfiguration/tracer``); a post arriving
/// in an HTTP request is a child of that request's span.
struct PostTrace: Sendable {
    let span: any Span

    /// Starts a post's span at its arrival, under the task's current span if there is one.
    init(_ post: NewPost, tracer: any Tracer) {
        let span = tracer.startSpan(
            "circle.post", context: InstrumentationContext.current ?? .topLevel, ofKind: .server, at: DefaultTracerClock.now,
            function: #function, file: #fileID, line: #line
        )
        span.updateAttributes { attributes in
            attributes["circle.circle"] = post.circle
            attributes["circle.change"] = post.event?.rawValue ?? post.change?.rawValue ?? "post"
        }
        self.span = span
    }

    /// The batch's stretches, the same for each of its posts.
    struct Batch {
        var size: Int
        var commitBegan: DefaultTracerClock.Instant
        var committed: DefaultTracerClock.Instant
        var fannedOut: DefaultTracerClock.Instant
        var deliveries: Int
    }

    /// Records the batch's commit and fan-out on each post's span, what became of the post, and
    /// ends the span.
    static func finish(_ traces: [PostTrace?], outcomes: [PostOutcome], batch: Batch) {
        for (trace, outcome) in zip(traces, outcomes) {
            guard let span = trace?.span else { continue }
            span.addEvent(SpanEvent(name: "circle.commit.begin", at: batch.commitBegan))
            span.addEvent(SpanEvent(name: "circle.commit.end", at: batch.committed, attributes: ["circle.batch": .int64(Int64(batch.size))]))
            span.addEvent(SpanEvent(name: "circle.fanout.end", at: batch.fannedOut, attributes: ["circle.deliveries": .int64(Int64(batch.deliveries))]))
            span.updateAttributes { attributes in
                switch outcome {
                case .stored(let post):
                    attributes["circle.seq"] = Int(post.seq)
                case .duplicate(let post):
                    attributes["circle.seq"] = Int(post.seq)
                    attributes["circle.duplicate"] = true
                case .rejected(let code, _):
                    attributes["circle.rejected"] = code.rawValue
                case .noSuchCircle:
                    attributes["circle.rejected"] = "no_such_circle"
                case .applied:
                    break
                }
            }
            span.end(at: batch.fannedOut)
        }
    }

    /// A batch that failed: each post's span records the error.
    static func fail(_ traces: [PostTrace?], error: any Error) {
        for trace in traces {
            guard let trace else { continue }
            trace.span.recordError(error)
            trace.span.setStatus(SpanStatus(code: .error, message: "the commit failed"))
            trace.span.end()
        }
    }
}
