import Foundation

private let processLaunchLock = NSLock()

/// Starts `process`, one launch at a time in this test process. Foundation's `Process.run()`
/// crashed (signal 11 in a memcpy inside it) while the tests launched processes from several
/// threads at once; every test that starts a process goes through here.
public func launch(_ process: Process) throws {
    processLaunchLock.lock()
    defer { processLaunchLock.unlock() }
    try process.run()
}
