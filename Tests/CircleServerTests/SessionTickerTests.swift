@testable import CircleServer
import NIOCore
import NIOPosix
import Testing

/// Counts its ticks into a stream.
private final class CountingSession: SessionTicker.Session, Sendable {
    let ticks: AsyncStream<Void>.Continuation

    init(_ ticks: AsyncStream<Void>.Continuation) {
        self.ticks = ticks
    }

    func tick(nextTick: NIODeadline) {
        self.ticks.yield()
    }
}

@Suite("SessionTicker")
struct SessionTickerTests {
    @Test("sessions on one loop share one ticker that ticks each of them; the last to leave retires it")
    func sharedAndRetired() async throws {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let loop = group.next()
        let interval = TimeAmount.milliseconds(5)
        let (firstTicks, firstContinuation) = AsyncStream<Void>.makeStream()
        let (secondTicks, secondContinuation) = AsyncStream<Void>.makeStream()
        let first = CountingSession(firstContinuation)
        let second = CountingSession(secondContinuation)
        let same = try await loop.submit {
            SessionTicker.add(first, on: loop, interval: interval) === SessionTicker.add(second, on: loop, interval: interval)
        }.get()
        #expect(same)
        // Both are ticked, repeatedly (each stream ends after two ticks here).
        var firstCount = 0
        for await _ in firstTicks {
            firstCount += 1
            if firstCount == 2 { break }
        }
        var secondCount = 0
        for await _ in secondTicks {
            secondCount += 1
            if secondCount == 2 { break }
        }
        #expect(firstCount == 2 && secondCount == 2)
        let retired = try await loop.submit {
            let ticker = SessionTicker.add(first, on: loop, interval: interval)  // already there: the same ticker
            ticker.remove(first)
            let stillShared = SessionTicker.add(first, on: loop, interval: interval) === ticker
            ticker.remove(first)
            ticker.remove(second)
            let replacement = SessionTicker.add(first, on: loop, interval: interval)
            // Another interval on the same loop is another ticker.
            let other = SessionTicker.add(second, on: loop, interval: .milliseconds(6))
            defer {
                replacement.remove(first)
                other.remove(second)
            }
            return stillShared && replacement !== ticker && other !== replacement
        }.get()
        #expect(retired)
        try await group.shutdownGracefully()
    }
}
