import Logging
import NIOConcurrencyHelpers
import Testing

@testable import CircleServer

private let mib = 1 << 20

@Suite("Heap trimming")
struct HeapTrimTests {
    @Test("no trim at the first reading, while resident memory still moves, or when too little is free")
    func waitsForASettledBurst() {
        var state = HeapTrimState(minimumThreshold: mib)
        #expect(state.sampled(residentBytes: 40 * mib, freeBytes: 8 * mib) == .none, "the first reading only sets the floor")
        #expect(state.residentFloor == 40 * mib)
        // A burst: resident memory climbs by megabytes per sample. Not settled, so no trim.
        #expect(state.sampled(residentBytes: 44 * mib, freeBytes: 3 * mib) == .none)
        #expect(state.sampled(residentBytes: 47 * mib, freeBytes: 3 * mib) == .none)
        // Settled, grown by 7 MiB, but the allocator holds under the threshold free: nothing to gain.
        #expect(state.sampled(residentBytes: 47 * mib, freeBytes: mib / 2) == .none)
        // Settled, grown, and enough free: trim.
        #expect(state.sampled(residentBytes: 47 * mib + 4096, freeBytes: 3 * mib) == .trim)
    }

    @Test("after a trim the next one waits for resident memory to grow by the threshold again")
    func floorAfterTrim() {
        var state = HeapTrimState(minimumThreshold: mib)
        _ = state.sampled(residentBytes: 40 * mib, freeBytes: 0)
        _ = state.sampled(residentBytes: 46 * mib, freeBytes: 3 * mib)
        #expect(state.sampled(residentBytes: 46 * mib, freeBytes: 3 * mib) == .trim)
        // Only 1 MiB came back; 2 MiB of free space is fragmented and stays counted as free.
        state.trimmed(residentBytesAfter: 45 * mib)
        #expect(state.residentFloor == 45 * mib)
        for _ in 0..<5 {
            #expect(state.sampled(residentBytes: 45 * mib, freeBytes: 2 * mib) == .none, "fragmented free space alone never trims again")
        }
        // A lower reading lowers the floor.
        #expect(state.sampled(residentBytes: 44 * mib, freeBytes: 2 * mib) == .none)
        #expect(state.residentFloor == 44 * mib)
        // The next burst: 2 MiB above the floor, settled, with free space: trim.
        #expect(state.sampled(residentBytes: 46 * mib, freeBytes: 3 * mib) == .none, "moved 2 MiB since the sample before")
        #expect(state.sampled(residentBytes: 46 * mib, freeBytes: 3 * mib) == .trim)
    }

    @Test("the threshold is 1/32 of the resident floor on a large server")
    func proportionalThreshold() {
        var state = HeapTrimState(minimumThreshold: mib)
        _ = state.sampled(residentBytes: 1024 * mib, freeBytes: 0)
        #expect(state.threshold == 32 * mib)
        // 20 MiB of growth with 20 MiB free is below 1/32 of a GiB: no trim.
        _ = state.sampled(residentBytes: 1044 * mib, freeBytes: 20 * mib)
        #expect(state.sampled(residentBytes: 1044 * mib, freeBytes: 20 * mib) == .none)
        _ = state.sampled(residentBytes: 1060 * mib, freeBytes: 40 * mib)
        #expect(state.sampled(residentBytes: 1060 * mib, freeBytes: 40 * mib) == .trim)
    }

    @Test("the trimmer samples on its interval, trims once per settled burst and counts it in /metrics")
    func trimmerLoop() async throws {
        // Scripted readings: a floor, a burst, settled (trim), the trim's result, then steady.
        let script = NIOLockedValueBox<[HeapTrimmer.Reading]>([
            .init(residentBytes: 40 * mib, freeBytes: 0),  // run()'s check that readings work
            .init(residentBytes: 40 * mib, freeBytes: 0),
            .init(residentBytes: 46 * mib, freeBytes: 3 * mib),
            .init(residentBytes: 46 * mib, freeBytes: 3 * mib),
            .init(residentBytes: 44 * mib, freeBytes: 2 * mib),  // read after the trim
        ])
        let trims = NIOLockedValueBox(0)
        let (events, continuation) = AsyncStream<Int>.makeStream()
        let metrics = ServerMetrics()
        var trimmer = HeapTrimmer(interval: .milliseconds(1), minimumThreshold: mib, trims: metrics.heapTrims, logger: Logger(label: "test"))
        trimmer.read = {
            script.withLockedValue { readings in
                // After the script: steady at the post-trim size, the end of the run.
                if readings.isEmpty {
                    continuation.yield(-1)
                    return .init(residentBytes: 44 * mib, freeBytes: 2 * mib)
                }
                return readings.removeFirst()
            }
        }
        trimmer.trim = { continuation.yield(trims.withLockedValue { $0 += 1; return $0 }) }
        let task = Task { await trimmer.run() }
        var steadyReadings = 0
        for await event in events {
            if event == -1 { steadyReadings += 1 }
            if steadyReadings == 20 { break }
        }
        task.cancel()
        await task.value
        #expect(trims.withLockedValue { $0 } == 1, "one burst, one trim")
        let text = String(decoding: metrics.render(), as: UTF8.self)
        #expect(text.contains("# HELP circle_heap_trims_total"), "\(text)")
        #expect(text.contains("circle_heap_trims_total 1"), "\(text)")
    }

    @Test("on glibc the allocator reports its free bytes and this process's size")
    func readsThisProcess() throws {
        #if os(Linux) && canImport(Glibc)
        let reading = try #require(HeapTrimmer.readProcess())
        #expect(reading.residentBytes > 1 * mib)
        #expect(reading.freeBytes >= 0)
        #else
        #expect(HeapTrimmer.readProcess() == nil, "elsewhere the trimmer only waits")
        #endif
    }
}
