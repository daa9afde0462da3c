@testable import CircleClient
import Foundation
import NIOConcurrencyHelpers
import Testing

@Suite("StreamFanOut")
struct StreamFanOutTests {
    /// Everything `stream` yields until it ends (every stream here is finished by the test).
    private func all(_ stream: AsyncStream<Int>) async -> [Int] {
        await stream.reduce(into: []) { $0.append($1) }
    }

    @Test("each stream gets its first elements, then every element yielded until it is finished")
    func yieldsToEveryStream() async {
        var fanOut = StreamFanOut<Int>()
        let one = fanOut.makeStream(bufferingPolicy: .unbounded, first: [0]) { _ in }
        fanOut.yield(1)
        let two = fanOut.makeStream(bufferingPolicy: .unbounded) { _ in }
        fanOut.yield(2)
        #expect(!fanOut.isEmpty)
        fanOut.finish(forever: false)
        #expect(fanOut.isEmpty)
        #expect(await self.all(one) == [0, 1, 2])
        #expect(await self.all(two) == [2])

        // Not forever: a later stream is fed as before.
        let three = fanOut.makeStream(bufferingPolicy: .unbounded) { _ in }
        fanOut.yield(3)
        fanOut.finish(forever: true)
        #expect(await self.all(three) == [3])

        // Forever: a later stream gets its first elements and ends.
        let late = fanOut.makeStream(bufferingPolicy: .unbounded, first: [4]) { _ in }
        fanOut.yield(5)
        #expect(fanOut.isEmpty)
        #expect(await self.all(late) == [4])
    }

    @Test("a stream whose reader stops is reported by its id, and once forgotten gets nothing more")
    func stoppedStreamsAreForgotten() async {
        var fanOut = StreamFanOut<Int>()
        let stopped = NIOLockedValueBox<[UUID]>([])
        let kept = fanOut.makeStream(bufferingPolicy: .unbounded) { _ in }
        var dropped: AsyncStream<Int>? = fanOut.makeStream(bufferingPolicy: .unbounded) { id in
            stopped.withLockedValue { $0.append(id) }
        }
        #expect(dropped != nil)
        dropped = nil  // the reader lets go: the stream terminates
        let ids = stopped.withLockedValue { $0 }
        #expect(ids.count == 1)
        for id in ids { fanOut.forget(id) }
        #expect(!fanOut.isEmpty, "the kept stream is still read")
        var alone = StreamFanOut<Int>()
        var only: AsyncStream<Int>? = alone.makeStream(bufferingPolicy: .unbounded) { id in stopped.withLockedValue { $0.append(id) } }
        #expect(only != nil)
        only = nil
        for id in stopped.withLockedValue({ $0.dropFirst() }) { alone.forget(id) }
        #expect(alone.isEmpty, "forgotten: no stream left")
        fanOut.yield(7)
        fanOut.finish(forever: true)
        #expect(await self.all(kept) == [7])
        #expect(fanOut.isEmpty)
    }
}
