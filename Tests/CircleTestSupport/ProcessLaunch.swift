import Foundation

private let processLaunchLock = NSLock()

/// Starts `process`, one launch at a time in this test process; every test that starts a
/// process goes through here. Foundation's `Process.run()` (Swift 6.3.1) crashed twice in full
/// test runs with signal 11 in a memcpy inside it. The likely cause is not concurrency but an
/// over-read of `dirent.d_name` in its `findMaximumOpenFromProcSelfFD()`
/// (swiftlang/swift-corelibs-foundation#5472), which this lock does not prevent. The CLI tests,
/// which start the most processes, use `SpawnedProcess` (posix_spawn, no such scan) instead;
/// the launches left here are the next to move.
public func launch(_ process: Process) throws {
    processLaunchLock.lock()
    defer { processLaunchLock.unlock() }
    try process.run()
}
