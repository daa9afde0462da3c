@testable import CircleClient
import CircleTestSupport
import Foundation
import NIOConcurrencyHelpers
import Testing

private func post(_ seq: Int64, _ text: String) -> CirclePost {
    CirclePost(circle: "c", seq: seq, author: "ann", text: text, attachment: nil, time: 1000 + seq, id: "id\(seq)")
}

/// A server whose join ack says the circle's newest seq is 10, and whose history pages carry the
/// given `lastSeq`s in turn (the last one repeated).
private func server(joinSeq: Int64 = 10, pageSeqs: [Int64]) async throws -> FakeCircleServer {
    let answered = NIOLockedValueBox(0)
    return try await FakeCircleServer.start { request in
        switch request.action {
        case .join:
            return [.ack(id: request.id, seq: joinSeq, time: nil, duplicate: false)]
        case .history:
            let index = answered.withLockedValue { count in
                defer { count += 1 }
                return min(count, pageSeqs.count - 1)
            }
            let page = [post(3, "three"), post(4, "four")]
            return [.history(id: request.id, circle: request.circle, posts: page, more: true, lastSeq: pageSeqs[index])]
        default:
            return []
        }
    }
}

@Suite("CircleClient history pages and the offline cache", .serialized)
struct HistoryPageTests {
    @Test("a page older than the cache (read before the join's ack) is asked for again, at most three times, and not cached")
    func stalePagesAskedAgain() async throws {
        for (pageSeqs, requests, cached) in [([Int64(5), 5, 5, 5], 3, false), ([5, 12], 2, true)] {
            let fake = try await server(pageSeqs: pageSeqs)
            let path = temporaryStateFile("circle-history")
            defer { removeStateFile(path) }
            let client = try await CircleClient(
                configuration: .init(servers: [fake.url], tokenProvider: { unsignedToken(for: "ann") }, stateFile: path)
            )
            let events = await client.messages(in: "c")
            _ = events
            await client.connect()
            // The join's ack: the stream is followed from 10.
            #expect(await eventually { await client.cursor(of: "c") == 10 })
            let page = try await client.history(of: "c", limit: 2)
            #expect(page.posts.map(\.seq) == [3, 4])
            let seen = await collect(fake.requests) { $0.filter { $0.action == .history }.count == requests }
            #expect(seen.filter { $0.action == .history }.count == requests)
            #expect(await client.cachedPosts(in: "c").map(\.seq) == (cached ? [3, 4] : []))
            await client.shutdown()
            await fake.shutdown()
        }
    }
}
