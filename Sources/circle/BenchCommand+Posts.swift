import ArgumentParser
import CircleClient
import Foundation
import NIOConcurrencyHelpers

// MARK: - circle bench posts

/// Posts through the SDK (`CircleClient.post`, each awaiting its ack) and reports acks per
/// second and this process's CPU time per post: the cost of the SDK's outbox, requests and
/// timer on top of the socket, compared build against build by benchmarks/sdk.py.
struct BenchPostsCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "posts",
        abstract: "Posts through CircleClient: acks/s and client CPU µs per post (driven by benchmarks/sdk.py).",
        discussion: """
            Starts --clients CircleClient instances on --url, each keeping --in-flight posts to \
            --circle waiting for their ack (every ack is followed by the next post), warms up \
            for --warmup seconds and then measures for --duration seconds: posts acknowledged \
            and this process's CPU time (getrusage, all threads). Prints one JSON object.

            Exit status: 0 measured; 1 no post was acknowledged, or one failed; 2 the server \
            could not be reached; 64 usage.

            Example:
              taskset -c 1 circle bench posts --url ws://127.0.0.1:8080/v1/ws --token "$TOKEN" --circle bench
            """
    )

    @Option(help: "The server's ws://…/v1/ws URL.") var url: String
    @Option(help: "Access token of the posting user.") var token: String
    @Option(help: "The circle (it must exist, and the user must be able to post in it).") var circle: String = "general"
    @Option(help: "CircleClient instances.") var clients: Int = 1
    @Option(help: "Posts waiting for their ack per client.") var inFlight: Int = 16
    @Option(help: "Seconds of warm-up before measuring.") var warmup: Double = 1
    @Option(help: "Seconds measured.") var duration: Double = 5

    func validate() throws {
        try OptionRanges.checkURLPort("--url", self.url)
        try OptionRanges.check("--clients", self.clients, 1...1_000)
        try OptionRanges.check("--in-flight", self.inFlight, 1...10_000)
        try OptionRanges.checkPositive("--duration", self.duration, atMost: 600, unit: "seconds")
        try OptionRanges.check("--warmup", self.warmup, 0...60, unit: "seconds")
    }

    func run() async throws {
        try await reportingFailures("bench posts", verbose: false, context: FailureContext(server: self.url)) {
            try await self.measure()
        }
    }

    private func measure() async throws {
        let token = self.token
        let circle = self.circle
        var made: [CircleClient] = []
        for _ in 0..<self.clients {
            let client = try await CircleClient(configuration: .init(servers: [self.url], tokenProvider: { token }))
            await client.connect()
            made.append(client)
        }
        let clients = made
        let acked = NIOLockedValueBox(0)
        let failure = NIOLockedValueBox<String?>(nil)
        let stop = NIOLockedValueBox(false)
        let posters = Task {
            await withTaskGroup(of: Void.self) { group in
                for client in clients {
                    for _ in 0..<self.inFlight {
                        group.addTask {
                            while !stop.withLockedValue({ $0 }) {
                                do {
                                    _ = try await client.post("bench", to: circle)
                                    acked.withLockedValue { $0 += 1 }
                                } catch {
                                    failure.withLockedValue { $0 = $0 ?? "\(error)" }
                                    return
                                }
                            }
                        }
                    }
                }
            }
        }
        try await Task.sleep(for: .seconds(self.warmup))
        let startCount = acked.withLockedValue { $0 }
        let startCPU = processCPUSeconds()
        let started = ContinuousClock.now
        try await Task.sleep(for: .seconds(self.duration))
        let count = acked.withLockedValue { $0 } - startCount
        let cpu = processCPUSeconds() - startCPU
        let elapsed = started.duration(to: .now)
        stop.withLockedValue { $0 = true }
        await posters.value
        for client in clients { await client.shutdown() }
        if let failure = failure.withLockedValue({ $0 }) { throw CLIFailure(.refused, "a post failed: \(failure)") }
        guard count > 0 else { throw CLIFailure(.refused, "no post was acknowledged by \(self.url)") }
        let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
        printJSONLine([
            "posts": count, "seconds": seconds, "posts_per_s": Double(count) / seconds,
            "cpu_us_per_post": cpu * 1e6 / Double(count), "clients": self.clients, "in_flight": self.inFlight,
        ])
    }
}
