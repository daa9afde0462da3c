import Foundation

/// Polls `condition` every few milliseconds until it holds or `timeout` passed; whether it held.
func eventually(timeout: Duration = .seconds(30), _ condition: () async throws -> Bool) async rethrows -> Bool {
    let deadline = ContinuousClock.now + timeout
    while ContinuousClock.now < deadline {
        if try await condition() { return true }
        try? await Task.sleep(for: .milliseconds(5))
    }
    return try await condition()
}

/// A fresh state file path in the temporary directory, named after `prefix`.
func temporaryStateFile(_ prefix: String) -> String {
    FileManager.default.temporaryDirectory.appendingPathComponent("\(prefix)-\(UUID().uuidString).sqlite").path
}

/// Removes a state file and its WAL and shared-memory files.
func removeStateFile(_ path: String) {
    for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: path + suffix) }
}

/// What `body` returns, or `nil` when it has not returned within `timeout` (it is then cancelled).
func within<T: Sendable>(_ timeout: Duration, _ body: @escaping @Sendable () async -> T) async -> T? {
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
func countToEnd<T: Sendable>(_ stream: AsyncStream<T>) async -> Int? {
    await within(.seconds(30)) { await stream.reduce(0) { count, _ in count + 1 } }
}
