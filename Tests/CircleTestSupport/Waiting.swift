import NIOConcurrencyHelpers

// Bounded waits on events for every test target: each returns what it has when its time is up,
// so a test fails on its assertions instead of hanging.

/// Polls `condition` every few milliseconds until it holds or `timeout` passed; whether it held.
public func eventually(timeout: Duration = .seconds(30), _ condition: () async throws -> Bool) async rethrows -> Bool {
    let deadline = ContinuousClock.now + timeout
    while ContinuousClock.now < deadline {
        if try await condition() { return true }
        try? await Task.sleep(for: .milliseconds(5))
    }
    return try await condition()
}

/// What `body` returns, or `nil` when it has not returned within `timeout` (it is then cancelled).
public func within<T: Sendable>(_ timeout: Duration, _ body: @escaping @Sendable () async -> T) async -> T? {
    await withTaskGroup(of: T?.self) { group in
        group.addTask { await body() }
        group.addTask {
            try? await Task.sleep(for: timeout)
            return nil
        }
        let first = await group.next() ?? nil
        group.cancelAll()
        return first
    }
}

/// How many elements `stream` yields before it ends, or `nil` when it has not ended within 30 s.
public func countToEnd<T: Sendable>(_ stream: AsyncStream<T>) async -> Int? {
    await within(.seconds(30)) { await stream.reduce(0) { count, _ in count + 1 } }
}

/// Folds the values of `stream` into `initial` until `add` says the result is complete; the
/// result so far when `timeout` passed first or the stream ended. The one collector the tests'
/// conveniences below are made of.
public func collect<T: Sendable, Result: Sendable>(
    _ stream: AsyncStream<T>,
    into initial: Result,
    timeout: Duration,
    _ add: @escaping @Sendable (inout Result, T) -> Bool
) async -> Result {
    let result = NIOLockedValueBox(initial)
    _ = await within(timeout) {
        for await value in stream {
            if result.withLockedValue({ add(&$0, value) }) { return }
        }
    }
    return result.withLockedValue { $0 }
}

/// Collects the values of `stream` until `done` holds for all collected so far, or `timeout` passed.
public func collect<T: Sendable>(
    _ stream: AsyncStream<T>,
    timeout: Duration = .seconds(30),
    until done: @escaping @Sendable ([T]) -> Bool
) async -> [T] {
    await collect(stream, into: [], timeout: timeout) { values, value in
        values.append(value)
        return done(values)
    }
}
