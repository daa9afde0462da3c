import NIOConcurrencyHelpers

/// Runs `body` in a task of its own and answers with its result, or with `timedOut()` once `limit`
/// has passed, whichever comes first; with `cancelled()` at once when the caller is cancelled.
///
/// Why not a task group: a group waits for all of its children, and some work cannot be
/// cancelled — `getaddrinfo` on its thread, a query on a connection the peer dropped without
/// closing. Here the caller resumes at the deadline; `body` is cancelled and left to end on its
/// own. A result it produces after that goes to `late` (to close a connection nobody will use).
package func withDeadline<T: Sendable>(
    _ limit: Duration,
    timedOut: @escaping @Sendable () -> T,
    cancelled: @escaping @Sendable () -> T,
    late: @escaping @Sendable (T) -> Void = { _ in },
    _ body: @escaping @Sendable () async -> T
) async -> T {
    let race = DeadlineRace<T>()
    return await withTaskCancellationHandler {
        await withCheckedContinuation { (continuation: CheckedContinuation<T, Never>) in
            guard race.wait(continuation) else { return }
            let work = Task {
                let value = await body()
                if !race.finish(value) { late(value) }
            }
            let timer = Task {
                guard (try? await Task.sleep(for: limit)) != nil else { return }
                race.finish(timedOut())
            }
            race.started(work, timer)
        }
    } onCancel: {
        race.finish(cancelled())
    }
}

/// The state of one ``withDeadline(_:timedOut:cancelled:late:_:)``: the first answer wins.
private final class DeadlineRace<T: Sendable>: Sendable {
    private enum State {
        /// Not yet waited for; the caller's cancellation may come first (its answer is kept).
        case initial(answer: T?)
        case waiting(CheckedContinuation<T, Never>, tasks: [Task<Void, Never>])
        case finished
    }

    private let state = NIOLockedValueBox(State.initial(answer: nil))

    /// Keeps the caller's continuation; `false` when the caller was cancelled before (it has
    /// been resumed with that answer then).
    func wait(_ continuation: CheckedContinuation<T, Never>) -> Bool {
        let early: T? = self.state.withLockedValue { state in
            guard case .initial(let answer?) = state else {
                state = .waiting(continuation, tasks: [])
                return nil
            }
            state = .finished
            return answer
        }
        guard let early else { return true }
        continuation.resume(returning: early)
        return false
    }

    /// Records the tasks; cancels them when the race ended while they were being made.
    func started(_ work: Task<Void, Never>, _ timer: Task<Void, Never>) {
        let ended = self.state.withLockedValue { state -> Bool in
            switch state {
            case .waiting(let continuation, _):
                state = .waiting(continuation, tasks: [work, timer])
                return false
            case .initial, .finished:
                state = .finished
                return true
            }
        }
        if ended {
            work.cancel()
            timer.cancel()
        }
    }

    /// Answers the caller with `value` unless it was answered; `false` then.
    @discardableResult
    func finish(_ value: T) -> Bool {
        let outcome: (won: Bool, waiting: (CheckedContinuation<T, Never>, [Task<Void, Never>])?) = self.state.withLockedValue { state in
            switch state {
            case .initial(nil):
                state = .initial(answer: value)
                return (true, nil)
            case .waiting(let continuation, let tasks):
                state = .finished
                return (true, (continuation, tasks))
            case .initial, .finished:
                return (false, nil)
            }
        }
        if let (continuation, tasks) = outcome.waiting {
            for task in tasks { task.cancel() }
            continuation.resume(returning: value)
        }
        return outcome.won
    }
}
