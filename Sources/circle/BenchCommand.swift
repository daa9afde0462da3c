import ArgumentParser
import CircleClient
import CircleServer
import CircleSocket
import Foundation
import NIOConcurrencyHelpers
import NIOCore

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// `circle bench …`: load generators that measure Circle's own client side. The servers, the
/// peers and the tables are driven by the scripts in `benchmarks/` (see docs/BENCHMARKS.md).
struct BenchCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "bench",
        abstract: "Benchmarks of the Circle client side (driven by benchmarks/run.sh).",
        discussion: """
            They print figures and assert nothing; docs/BENCHMARKS.md has the results.

            Exit status: 0 measured; 1 the run did not complete (no round trips, a phase timed \
            out); 2 the server could not be reached; 64 usage.

            Examples:
              taskset -c 1 circle bench client --url ws://127.0.0.1:9000/ --size 64
              circle bench recovery --url ws://127.0.0.1:8080/v1/ws \\
                --token "$SUB" --publisher-token "$PUB"
            """,
        subcommands: [BenchClientCommand.self, BenchPostsCommand.self, BenchRecoveryCommand.self, BenchPushCryptoCommand.self]
    )
}


/// This process's CPU time (user + system, all threads) in seconds.
func processCPUSeconds() -> Double {
    let usage = processResourceUsage()
    func seconds(_ t: timeval) -> Double { Double(t.tv_sec) + Double(t.tv_usec) / 1e6 }
    return seconds(usage.ru_utime) + seconds(usage.ru_stime)
}

/// Context switches of this process so far (voluntary + involuntary, all threads).
func processContextSwitches() -> Int {
    let usage = processResourceUsage()
    return Int(usage.ru_nvcsw + usage.ru_nivcsw)
}

/// Seconds since 1970, for lines a driver in another process compares with its own clock.
func wallClock() -> Double { Date().timeIntervalSince1970 }

func printJSONLine(_ object: [String: Any]) {
    if let data = try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys]),
       let line = String(data: data, encoding: .utf8) {
        print(line)
        fflush(nil)  // a driver reads these lines as they come
    }
}

// MARK: - circle bench client

/// Drives a WebSocket echo server with `CircleSocket` (C connections, F messages in flight on
/// each, every echo answered with the next message) and reports round trips per second and this
/// process's CPU time per round trip.
struct BenchClientCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "client",
        abstract: "Echo load with the CircleSocket client: round trips/s and client CPU µs per message.",
        discussion: """
            Opens --connections WebSockets to an echo server at --url, keeps --in-flight binary \
            messages of --size bytes in flight on each (every echoed message is answered with the \
            next), warms up for --warmup seconds and then measures for --duration seconds: round \
            trips completed and this process's CPU time (getrusage, all threads). Pin it to one \
            core with taskset to compare it with other clients. Prints a table line, or one JSON \
            object with --json.

            Each connection is driven by one task that reads with `for try await` and answers \
            with `send`. By default that task prefers the socket's event loop as its executor \
            (`WebSocket.taskExecutor`), as the CircleSocket docs recommend; --default-executor \
            runs it on Swift's default executor instead (a thread hop per wake-up).

            Exit status: 0 measured; 1 no round trips completed; 2 the server could not be \
            reached; 64 usage.

            Example: taskset -c 1 circle bench client --url ws://127.0.0.1:9000/ --size 64
            """
    )

    @Option(help: "The echo server's ws:// URL.") var url: String
    @Option(help: "Message size in bytes.") var size: Int = 64
    @Option(help: "Connections.") var connections: Int = 8
    @Option(help: "Messages in flight per connection.") var inFlight: Int = 16
    @Option(help: "Seconds of warm-up before measuring.") var warmup: Double = 2
    @Option(help: "Seconds measured.") var duration: Double = 10
    @Flag(help: "Send text messages instead of binary.") var text = false
    @Flag(help: "Print one JSON object instead of a table line.") var json = false
    @Flag(help: "Run the connection tasks on Swift's default executor, not the socket's event loop.") var defaultExecutor = false

    func validate() throws {
        try OptionRanges.checkURLPort("--url", self.url)
        try OptionRanges.check("--size", self.size, 1...100_000_000, unit: "bytes")
        try OptionRanges.check("--connections", self.connections, 1...10_000)
        try OptionRanges.check("--in-flight", self.inFlight, 1...10_000)
        try OptionRanges.checkPositive("--duration", self.duration, atMost: 600, unit: "seconds")
        try OptionRanges.check("--warmup", self.warmup, 0...60, unit: "seconds")
    }

    func run() async throws {
        try await reportingFailures("bench client", verbose: false, context: FailureContext(server: self.url)) {
            try await self.measure()
        }
    }

    private func measure() async throws {
        var configuration = WebSocketConfiguration()
        configuration.maxMessageSize = max(configuration.maxMessageSize, 2 * self.size)
        let payload: WebSocketMessage
        if self.text {
            payload = .text(String(repeating: "abcdefghijklmnopqrstuvwxyz", count: self.size / 26 + 1).prefix(self.size).description)
        } else {
            var generator = SystemRandomNumberGenerator()
            payload = .binary((0..<self.size).map { _ in UInt8.random(in: 0...255, using: &generator) })
        }
        let size = self.size
        let inFlight = self.inFlight
        let counters = NIOLockedValueBox(EchoCounters())
        var opened: [WebSocket] = []
        for _ in 0..<self.connections {
            opened.append(try await WebSocket.connect(to: self.url, configuration: configuration))
        }
        let sockets = opened
        let measured: (seconds: Double, trips: Int, cpu: Double, switches: Int) = try await withThrowingTaskGroup(of: Void.self) { group in
            for socket in sockets {
                group.addTask(executorPreference: self.defaultExecutor ? nil : socket.taskExecutor) {
                    for _ in 0..<inFlight { try await socket.send(payload) }
                    var outstanding = inFlight
                    for try await message in socket.messages {
                        let running = counters.withLockedValue { counters in
                            counters.received += 1
                            if message.byteCount != size { counters.wrongSize += 1 }
                            return counters.running
                        }
                        if running {
                            try await socket.send(message)
                        } else {
                            outstanding -= 1
                            if outstanding == 0 { break }
                        }
                    }
                }
            }
            try await Task.sleep(for: .seconds(self.warmup))
            let clock = ContinuousClock()
            let (start, cpu0, n0, cs0) = (clock.now, processCPUSeconds(), counters.withLockedValue { $0.received }, processContextSwitches())
            try await Task.sleep(for: .seconds(self.duration))
            let (end, cpu1, n1, cs1) = (clock.now, processCPUSeconds(), counters.withLockedValue { $0.received }, processContextSwitches())
            counters.withLockedValue { $0.running = false }
            // Give the last echoes a moment to come back, then close whatever is still open.
            let drained = Task {
                try? await Task.sleep(for: .seconds(5))
                for socket in sockets { socket.abort() }
            }
            do {
                try await group.waitForAll()
            } catch {
                // A connection aborted after the drain timeout; the figures were taken already.
            }
            drained.cancel()
            let elapsed = end - start
            let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
            return (seconds, n1 - n0, cpu1 - cpu0, cs1 - cs0)
        }
        for socket in sockets where socket.isActive { _ = await socket.close() }
        guard measured.trips > 0 else { throw CLIFailure(.refused, "no round trips completed against \(self.url): is it an echo server?") }
        let wrongSize = counters.withLockedValue { $0.wrongSize }
        let rate = Double(measured.trips) / measured.seconds
        let usPerMessage = 1e6 * measured.cpu / Double(measured.trips)
        if self.json {
            printJSONLine([
                "client": "circlesocket", "size": self.size, "connections": self.connections,
                "executor": self.defaultExecutor ? "default" : "event loop",
                "inflight": self.inFlight, "seconds": measured.seconds, "messages": measured.trips,
                "msgs_per_s": rate, "client_cpu_s": measured.cpu,
                "client_cpu_pct": 100 * measured.cpu / measured.seconds,
                "client_us_per_msg": usPerMessage, "wrong_size": wrongSize,
                "context_switches_per_msg": Double(measured.switches) / Double(measured.trips),
            ])
        } else {
            print(String(format: "circlesocket  %6d B  %10.0f round trips/s  %5.0f%% CPU  %7.2f µs CPU/msg  %.2f context switches/msg%@",
                         self.size, rate, 100 * measured.cpu / measured.seconds, usPerMessage,
                         Double(measured.switches) / Double(measured.trips),
                         wrongSize > 0 ? "  (\(wrongSize) replies of the wrong size)" : ""))
        }
    }
}

struct EchoCounters: Sendable {
    var received = 0
    var wrongSize = 0
    var running = true
}

// MARK: - circle bench recovery

/// Subscribers and a publisher on the real SDK (`CircleClient`), for a driver that kills and
/// restarts the server in between (benchmarks/recovery.py).
struct BenchRecoveryCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "recovery",
        abstract: "CircleClient subscribers and a publisher that ride out a server restart (driven by benchmarks/recovery.py).",
        discussion: """
            Starts --subscribers CircleClient instances that follow --circle and one publisher \
            that posts --rate posts per second to it. Prints JSON lines on stdout, with \
            wall-clock times ("t", seconds since 1970): "ready" once every subscriber has \
            received a post; "down" when the first subscriber lost its connection; \
            "reconnected" when all are connected again; "resumed" when every subscriber has \
            received a post newer than anything delivered before the outage. --after seconds \
            later the publisher stops, every post resolves, and the last line, "result", counts \
            per subscriber the acknowledged posts it never got (lost) and the posts it got more \
            than once (duplicates). Another process is expected to kill and restart the server \
            after "ready"; without an outage the run ends --timeout seconds after "ready".

            Exit status: 0 the run completed; 1 a phase did not complete in time; 2 the server \
            could not be reached; 64 usage.

            Example:
              circle bench recovery --url ws://127.0.0.1:8080/v1/ws \\
                --token "$SUB" --publisher-token "$PUB" --subscribers 100 --rate 20
            """
    )

    @Option(help: "The server's ws://…/v1/ws URL.") var url: String
    @Option(help: "Another node's ws://…/v1/ws URL, after --url in every client's servers list (repeatable).") var failover: [String] = []
    @Option(help: "Access token of the subscribers (one user; raise the server's --max-connections-per-user).") var token: String
    @Option(help: "Access token of the publisher.") var publisherToken: String
    @Option(help: "The circle (it must exist).") var circle: String = "general"
    @Option(help: "Subscribers.") var subscribers: Int = 1000
    @Option(help: "Posts per second by the publisher (raise the server's --posts-per-second above it).") var rate: Double = 20
    @Option(help: "Seconds to go on posting after every subscriber resumed.") var after: Double = 3
    @Option(help: "Seconds to wait for each phase before giving up.") var timeout: Double = 60

    func validate() throws {
        try OptionRanges.checkURLPort("--url", self.url)
        for url in self.failover { try OptionRanges.checkURLPort("--failover", url) }
        try OptionRanges.check("--subscribers", self.subscribers, 1...20_000)
        try OptionRanges.checkPositive("--rate", self.rate, atMost: 10_000, unit: "posts per second")
        try OptionRanges.checkPositive("--timeout", self.timeout, atMost: 600, unit: "seconds")
        try OptionRanges.check("--after", self.after, 0...600, unit: "seconds")
    }

    func run() async throws {
        try await reportingFailures("bench recovery", verbose: false, context: FailureContext(server: self.url)) {
            try await self.measure()
        }
    }

    private func measure() async throws {
        let circle = self.circle
        let rate = self.rate
        let tracker = RecoveryTracker(subscribers: self.subscribers)
        func makeClient(_ token: String) async throws -> CircleClient {
            try await CircleClient(configuration: .init(servers: [self.url] + self.failover, tokenProvider: { token }))
        }
        var made: [CircleClient] = []
        for _ in 0..<self.subscribers { made.append(try await makeClient(self.token)) }
        let clients = made
        let publisher = try await makeClient(self.publisherToken)

        let started = wallClock()
        let deliveries = Task { () -> [[Int64: Int]] in
            await withTaskGroup(of: (Int, [Int64: Int]).self) { group in
                for (index, client) in clients.enumerated() {
                    let stream = await client.messages(in: circle)
                    group.addTask {
                        var seen: [Int64: Int] = [:]  // seq -> times delivered
                        for await event in stream {
                            if case .post(let post) = event {
                                seen[post.seq, default: 0] += 1
                                tracker.delivered(index, seq: post.seq)
                            }
                        }
                        return (index, seen)
                    }
                }
                var result = [[Int64: Int]](repeating: [:], count: clients.count)
                for await (index, seen) in group { result[index] = seen }
                return result
            }
        }
        // Each client's connection state, followed through its state stream: counting connected
        // clients is then a read of the tracker, not 1,000 actor calls every few milliseconds
        // on the same core as the clients (which delayed "down" and "reconnected" by seconds).
        let stateWatchers = Task {
            await withTaskGroup(of: Void.self) { group in
                for (index, client) in clients.enumerated() {
                    let states = await client.states()
                    group.addTask {
                        for await state in states { tracker.connection(index, isConnected: state == .connected) }
                    }
                }
            }
        }
        for client in clients { await client.connect() }
        let publisherStream = await publisher.messages(in: circle)  // the publisher must join to post
        let drainPublisher = Task { for await _ in publisherStream {} }
        await publisher.connect()

        // The publisher: one post every 1/rate seconds, each resolving on its own (during the
        // outage they wait in the outbox and go out after the reconnect).
        let posting = Task { () -> (acked: [Int64], failed: Int, duplicates: Int) in
            await withTaskGroup(of: PostReceipt?.self) { group in
                let interval = Duration.seconds(1 / rate)
                var next = ContinuousClock.now
                var number = 0
                while !tracker.stopPosting {
                    number += 1
                    let text = "recovery post \(number)"
                    group.addTask { try? await publisher.post(text, to: circle) }
                    next += interval
                    try? await Task.sleep(until: next, clock: .continuous)
                }
                var acked: [Int64] = []
                var failed = 0
                var duplicates = 0
                for await receipt in group {
                    if let receipt {
                        acked.append(receipt.seq)
                        if receipt.duplicate { duplicates += 1 }
                    } else {
                        failed += 1
                    }
                }
                return (acked, failed, duplicates)
            }
        }

        func waitFor(_ what: String, _ condition: () async -> Bool) async throws -> Bool {
            let deadline = ContinuousClock.now + .seconds(self.timeout)
            while ContinuousClock.now < deadline {
                if await condition() { return true }
                try await Task.sleep(for: .milliseconds(5))
            }
            printJSONLine(["event": "timeout", "waiting_for": what, "t": wallClock()])
            return false
        }
        func connectedCount() -> Int { tracker.connectedCount }

        var phases: [String: Any] = ["started": started]
        if try await waitFor("ready", { tracker.everyoneHasAPost() }) {
            let now = wallClock()
            phases["ready"] = now
            printJSONLine(["event": "ready", "t": now, "subscribers": self.subscribers])
            // Wait for the outage (a subscriber disconnected), then for the way back.
            if try await waitFor("down", { connectedCount() < self.subscribers }) {
                let down = wallClock()
                let highWater = tracker.highWater()
                phases["down"] = down
                printJSONLine(["event": "down", "t": down, "high_water_seq": highWater])
                if try await waitFor("reconnected", { connectedCount() == self.subscribers }) {
                    phases["reconnected"] = wallClock()
                    printJSONLine(["event": "reconnected", "t": phases["reconnected"]!])
                }
                if try await waitFor("resumed", { tracker.everyoneBeyond(highWater) }) {
                    phases["resumed"] = wallClock()
                    printJSONLine(["event": "resumed", "t": phases["resumed"]!])
                }
            }
            try await Task.sleep(for: .seconds(self.after))
        }
        tracker.stopPosting = true
        printJSONLine(["event": "stopping", "t": wallClock()])
        let posts = await posting.value
        printJSONLine(["event": "posts_resolved", "t": wallClock(), "acked": posts.acked.count, "failed": posts.failed])
        let last = posts.acked.max() ?? 0
        let first = tracker.firstSeqs()
        _ = try await waitFor("final deliveries", { tracker.everyoneReached(last) })
        phases["finished"] = wallClock()
        printJSONLine(["event": "delivered", "t": wallClock()])
        for client in clients { await client.shutdown() }
        await publisher.shutdown()
        printJSONLine(["event": "shut_down", "t": wallClock()])
        // shutdown() ended every stream, so the readers' loops have returned.
        await drainPublisher.value
        await stateWatchers.value
        let seen = await deliveries.value

        // Per subscriber: every acknowledged seq from its first delivery on must arrive once.
        let ackedSet = Set(posts.acked)
        var lost = 0
        var duplicated = 0
        var subscribersWithLoss = 0
        for (index, deliveries) in seen.enumerated() {
            let from = first[index] ?? Int64.max
            var missing = 0
            for seq in ackedSet where seq >= from && deliveries[seq] == nil { missing += 1 }
            lost += missing
            if missing > 0 { subscribersWithLoss += 1 }
            duplicated += deliveries.values.reduce(0) { $0 + max(0, $1 - 1) }
        }
        var result: [String: Any] = [
            "event": "result", "t": wallClock(), "subscribers": self.subscribers, "rate": self.rate,
            "posts_acked": posts.acked.count, "posts_failed": posts.failed,
            "acks_marked_duplicate": posts.duplicates, "distinct_seqs_acked": ackedSet.count,
            "last_seq": last, "lost": lost, "subscribers_with_loss": subscribersWithLoss,
            "duplicates": duplicated,
            "deliveries": seen.reduce(0) { $0 + $1.values.reduce(0, +) },
        ]
        for (key, value) in phases { result["t_" + key] = value }
        printJSONLine(result)
    }
}

/// What the subscribers have seen so far, shared with the phase checks.
final class RecoveryTracker: Sendable {
    private struct State {
        var first: [Int64?]
        var latest: [Int64]
        var connected: [Bool]
        var connectedCount = 0
        var stopPosting = false
    }
    private let state: NIOLockedValueBox<State>

    init(subscribers: Int) {
        self.state = NIOLockedValueBox(State(first: Array(repeating: nil, count: subscribers),
                                             latest: Array(repeating: 0, count: subscribers),
                                             connected: Array(repeating: false, count: subscribers)))
    }

    func connection(_ index: Int, isConnected: Bool) {
        self.state.withLockedValue { state in
            guard state.connected[index] != isConnected else { return }
            state.connected[index] = isConnected
            state.connectedCount += isConnected ? 1 : -1
        }
    }

    var connectedCount: Int { self.state.withLockedValue { $0.connectedCount } }

    func delivered(_ index: Int, seq: Int64) {
        self.state.withLockedValue { state in
            if state.first[index] == nil { state.first[index] = seq }
            state.latest[index] = max(state.latest[index], seq)
        }
    }

    var stopPosting: Bool {
        get { self.state.withLockedValue { $0.stopPosting } }
        set { self.state.withLockedValue { $0.stopPosting = newValue } }
    }

    func everyoneHasAPost() -> Bool { self.state.withLockedValue { $0.first.allSatisfy { $0 != nil } } }
    func highWater() -> Int64 { self.state.withLockedValue { $0.latest.max() ?? 0 } }
    func everyoneBeyond(_ seq: Int64) -> Bool { self.state.withLockedValue { $0.latest.allSatisfy { $0 > seq } } }
    func everyoneReached(_ seq: Int64) -> Bool { self.state.withLockedValue { $0.latest.allSatisfy { $0 >= seq } } }
    func firstSeqs() -> [Int64?] { self.state.withLockedValue { $0.first } }
}
