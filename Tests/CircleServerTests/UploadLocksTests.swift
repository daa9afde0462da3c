import Testing

@testable import CircleServer

@Suite("Upload locks wait on events, time out on the injected clock")
struct UploadLocksTests {
    @Test("a waiter gets the lock when its holder releases it")
    func handover() async {
        let locks = UploadLocks()
        #expect(await locks.acquire("u1"))
        #expect(await locks.acquire("u1", timeout: .zero) == false)
        #expect(await locks.acquire("u2", timeout: .zero))
        async let waiter = locks.acquire("u1", timeout: .seconds(60))
        locks.release("u1")
        #expect(await waiter)
        locks.release("u1")
        #expect(await locks.acquire("u1", timeout: .zero))
    }

    @Test("a held lock is given up on when the clock says the timeout has passed")
    func timeout() async {
        let locks = UploadLocks(clock: ElapsedClock())
        #expect(await locks.acquire("u1"))
        // The clock reports every sleep as over at once: no real time passes.
        #expect(await locks.acquire("u1", timeout: .seconds(3600)) == false)
        locks.release("u1")
        #expect(await locks.acquire("u1", timeout: .zero))
    }
}

/// A clock whose sleeps end at once.
private struct ElapsedClock: Clock {
    typealias Duration = Swift.Duration
    typealias Instant = ContinuousClock.Instant
    var now: Instant { ContinuousClock.now }
    var minimumResolution: Duration { .zero }
    func sleep(until deadline: Instant, tolerance: Duration?) async throws {
        await Task.yield()
    }
}
