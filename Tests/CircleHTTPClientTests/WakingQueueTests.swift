import CircleHTTPClient
import NIOConcurrencyHelpers
import CircleTestSupport
import Testing

/// ``WakingQueue``: every item reaches the consumer once and in order, and the consumer is woken
/// exactly once per park, never lost, never while it is busy.
@Suite struct WakingQueueTests {
    /// A consumer parked with a token: the token says which park a wake ends.
    @Test("seeded interleavings of appends, takes and parks: one wake per park, every item once, in order", arguments: 0..<20)
    func interleavings(seed: UInt64) {
        var random = SplitMix(seed: seed)
        var queue = WakingQueue<Int, Int>()
        var parkedWith: Int?  // the model: the token the consumer parked with, if parked
        var parks = 0
        var next = 0
        var received: [Int] = []
        for _ in 0..<2_000 {
            switch random.next() % 4 {
            case 0, 1:
                let wake = queue.append(next)
                next += 1
                // A wake comes back exactly when the consumer was parked, with its token.
                #expect(wake == parkedWith)
                parkedWith = nil
            case 2 where parkedWith == nil:
                received += queue.take(upTo: Int(random.next() % 4) + 1)
            case 3 where parkedWith == nil:
                parks += 1
                let hadItems = !queue.isEmpty
                let parked = queue.parkIfEmpty(parks)
                // It parks only when nothing waits; items waiting mean it goes on.
                #expect(parked == !hadItems)
                if parked { parkedWith = parks }
            default:
                break
            }
        }
        received += queue.take()
        #expect(received == Array(0..<next))
    }

    @Test("an event loop's drain: the first item after a takeAll asks for one drain, later ones none")
    func drainStyle() {
        var queue = WakingQueue<String, Void>(parked: ())
        #expect(queue.append("a") != nil)
        #expect(queue.append("b") == nil)
        #expect(queue.takeAll(parking: ()) == ["a", "b"])
        #expect(queue.takeAll(parking: ()) == [])
        #expect(queue.append("c") != nil)
        #expect(queue.append("d") == nil)
        #expect(queue.dropOldest(keeping: 1) == 1)
        #expect(queue.removeAll() == 1)
        #expect(queue.append("e") == nil, "still one drain asked for")
    }

    @Test("four threads append 20,000 items to a task that parks a continuation: each arrives once, each thread's in order")
    func threads() async {
        let queue = NIOLockedValueBox(WakingQueue<Int, CheckedContinuation<Void, Never>>())
        let producers = 4
        let perProducer = 5_000
        await withTaskGroup(of: Void.self) { group in
            for producer in 0..<producers {
                group.addTask {
                    for index in 0..<perProducer {
                        queue.withLockedValue { $0.append(producer * perProducer + index) }?.resume()
                    }
                }
            }
            var received: [Int] = []
            while received.count < producers * perProducer {
                await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                    if !queue.withLockedValue({ $0.parkIfEmpty(continuation) }) { continuation.resume() }
                }
                received += queue.withLockedValue { $0.take() }
            }
            await group.waitForAll()
            #expect(received.count == producers * perProducer)
            #expect(Set(received).count == producers * perProducer)
            for producer in 0..<producers {
                let theirs = received.filter { $0 / perProducer == producer }
                #expect(theirs == theirs.sorted(), "producer \(producer)'s items out of order")
            }
        }
    }
}
