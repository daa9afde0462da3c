import CircleHTTPClient
import NIOConcurrencyHelpers
import Testing

/// `withDeadline`: the first of the body, the deadline and the caller's cancellation answers,
/// once, and the caller never waits for a body that does not end.
@Suite struct DeadlineRaceTests {
    /// A body that never ends on its own, not even when cancelled, until `release` is called.
    final class Stuck: Sendable {
        private let waiting = NIOLockedValueBox<CheckedContinuation<Void, Never>?>(nil)
        private let released = NIOLockedValueBox(false)

        func wait() async {
            await withCheckedContinuation { continuation in
                let now = self.released.withLockedValue { released in
                    if !released { self.waiting.withLockedValue { $0 = continuation } }
                    return released
                }
                if now { continuation.resume() }
            }
        }

        func release() {
            let continuation = self.released.withLockedValue { released in
                released = true
                return self.waiting.withLockedValue { $0.take() }
            }
            continuation?.resume()
        }
    }

    @Test func theBodysAnswerWinsBeforeTheDeadline() async {
        let answer = await withDeadline(.seconds(60), timedOut: { "timed out" }, cancelled: { "cancelled" }) { "done" }
        #expect(answer == "done")
    }

    @Test func theDeadlineAnswersWhileTheBodyIsStuckAndTheLateAnswerGoesToLate() async throws {
        let stuck = Stuck()
        let late = AsyncStream<String>.makeStream()
        let answer = await withDeadline(
            .milliseconds(50),
            timedOut: { "timed out" },
            cancelled: { "cancelled" },
            late: { value in late.continuation.yield(value) },
            {
                await stuck.wait()
                return "finished late"
            }
        )
        #expect(answer == "timed out")
        stuck.release()
        var lateAnswers = late.stream.makeAsyncIterator()
        #expect(await lateAnswers.next() == "finished late")
    }

    @Test func theCallersCancellationAnswersAtOnce() async throws {
        let stuck = Stuck()
        let started = AsyncStream<Void>.makeStream()
        let caller = Task {
            await withDeadline(.seconds(600), timedOut: { "timed out" }, cancelled: { "cancelled" }) {
                started.continuation.yield()
                await stuck.wait()
                return "finished"
            }
        }
        var starts = started.stream.makeAsyncIterator()
        await starts.next()
        caller.cancel()
        #expect(await caller.value == "cancelled")
        stuck.release()
    }

    @Test func aCallerCancelledBeforeItStartsIsAnsweredWithoutRunningLong() async {
        let caller = Task {
            withUnsafeCurrentTask { $0?.cancel() }
            return await withDeadline(.seconds(600), timedOut: { "timed out" }, cancelled: { "cancelled" }) {
                try? await Task.sleep(for: .seconds(600))
                return "finished"
            }
        }
        #expect(await caller.value == "cancelled")
    }
}
