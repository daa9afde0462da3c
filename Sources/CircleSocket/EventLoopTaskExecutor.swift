import NIOCore

/// A `TaskExecutor` that runs each job on one NIO event loop, so that a task preferring it
/// resumes on the thread that does its connection's I/O (see ``WebSocket/taskExecutor``).
final class EventLoopTaskExecutor: TaskExecutor {
    let eventLoop: any EventLoop

    init(eventLoop: any EventLoop) {
        self.eventLoop = eventLoop
    }

    func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        self.eventLoop.execute {
            job.runSynchronously(on: self.asUnownedTaskExecutor())
        }
    }
}
