import NIOCore

/// A `TaskExecutor` that runs each job on one NIO event loop, so that a task preferring it
/// resumes on that loop's thread: a task reading a connection runs where its I/O is done (see
/// ``WebSocket/taskExecutor``), and the server's commit loop where its SQLite writer runs.
public final class EventLoopTaskExecutor: TaskExecutor {
    public let eventLoop: any EventLoop

    public init(eventLoop: any EventLoop) {
        self.eventLoop = eventLoop
    }

    public func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        self.eventLoop.execute {
            job.runSynchronously(on: self.asUnownedTaskExecutor())
        }
    }
}
