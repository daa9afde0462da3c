import CCircleHeap
import CoreMetrics
import Logging

/// When to hand the C allocator's free pages back to the kernel: a value told, at each sample,
/// the process's resident memory and the bytes the allocator holds free, that answers whether to
/// trim now.
///
/// glibc's malloc keeps memory freed in the middle of its arenas for reuse and gives back on its
/// own only what lies at the top. After a burst (a thousand handshakes, a presence storm, a
/// fan-out backlog) what it keeps can rival the live heap of every idle connection together:
/// with `benchmarks/idle.py --memprobe`, 1,000 idle joined connections held 4.5 KB each of live
/// heap, and glibc 3 MB free besides. A trim (`malloc_trim(0)`) returns the whole free pages
/// among them.
///
/// The rule: trim when the resident memory has settled (moved less than 1/8 of the threshold
/// since the sample before), has grown by the threshold since the last trim (or since the lowest
/// reading after it), and the allocator holds at least that much free. The threshold is
/// `minimumThreshold` or 1/32 of that resident floor, whichever is larger, so a large server
/// trims after proportionally large bursts. Waiting for the burst to settle keeps a trim from
/// returning pages the burst is about to fault in again. Free space that cannot be returned
/// (pages shared with live objects) does not cause another trim: the next one waits for the
/// resident memory to grow again. A steady server trims never.
struct HeapTrimState: Sendable, Equatable {
    enum Action: Equatable {
        case none
        case trim
    }

    let minimumThreshold: Int
    /// Resident bytes after the last trim, or fewer if a later reading was lower. Nil before the
    /// first reading.
    private(set) var residentFloor: Int?
    /// The resident bytes at the sample before.
    private var lastResident = 0

    init(minimumThreshold: Int) {
        self.minimumThreshold = minimumThreshold
    }

    var threshold: Int { max(self.minimumThreshold, (self.residentFloor ?? 0) / 32) }

    mutating func sampled(residentBytes: Int, freeBytes: Int) -> Action {
        defer { self.lastResident = residentBytes }
        guard let floor = self.residentFloor, residentBytes >= floor else {
            self.residentFloor = residentBytes
            return .none
        }
        let threshold = self.threshold
        let settled = abs(residentBytes - self.lastResident) < threshold / 8
        return settled && residentBytes - floor >= threshold && freeBytes >= threshold ? .trim : .none
    }

    mutating func trimmed(residentBytesAfter: Int) {
        self.residentFloor = residentBytesAfter
        self.lastResident = residentBytesAfter
    }
}

/// Samples the process once per `interval` and trims the allocator when ``HeapTrimState`` says
/// so, until cancelled. A sample reads `/proc/self/statm` and walks the allocator's free lists
/// (tens of microseconds for a heap of thousands of free chunks); a trim walks them again and
/// returns pages with `madvise`, holding each arena's lock meanwhile, so an allocation on
/// another thread may wait that long, once. Where the allocator cannot report its free bytes
/// (not glibc on Linux) it only waits for cancellation.
struct HeapTrimmer: Sendable {
    struct Reading: Sendable {
        var residentBytes: Int
        var freeBytes: Int
    }

    let interval: Duration
    let minimumThreshold: Int
    let trims: CoreMetrics.Counter
    let logger: Logger
    /// This process's resident size and the allocator's free bytes; nil where either is unknown.
    var read: @Sendable () -> Reading? = HeapTrimmer.readProcess
    /// Returns the allocator's free pages to the kernel.
    var trim: @Sendable () -> Void = { circle_heap_trim() }

    static func readProcess() -> Reading? {
        let heap = circle_heap_read()
        guard heap.supported != 0, let resident = ProcessMetrics.memorySizes()?.resident else { return nil }
        return Reading(residentBytes: resident, freeBytes: Int(heap.freeBytes))
    }

    func run() async {
        guard self.read() != nil else {
            while (try? await Task.sleep(for: .seconds(3600))) != nil {}
            return
        }
        var state = HeapTrimState(minimumThreshold: self.minimumThreshold)
        while (try? await Task.sleep(for: self.interval)) != nil {
            guard let before = self.read(),
                state.sampled(residentBytes: before.residentBytes, freeBytes: before.freeBytes) == .trim
            else { continue }
            self.trim()
            let after = self.read()?.residentBytes ?? before.residentBytes
            state.trimmed(residentBytesAfter: after)
            self.trims.increment()
            self.logger.debug(
                "heap trimmed",
                metadata: ["resident_before": "\(before.residentBytes)", "resident_after": "\(after)", "free_before": "\(before.freeBytes)"]
            )
        }
    }
}
