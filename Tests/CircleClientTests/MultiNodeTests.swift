import CircleClient
import CircleTestSupport
import CircleWire
import Foundation
import Testing

/// Several `circle serve --postgres` nodes on one PostgreSQL (issue 12): real processes of the
/// built `circle` binary, a fresh database per test, the real SDK for writers and readers, and
/// bare `circle.v1` connections (``TestClient``) where a test must see exactly what a node sends.
///
/// Every storm ends with a sentinel post ("end"), so that a reader knows it has everything and
/// a duplicate sent before the sentinel would show in its list.
@Suite("Several nodes on one PostgreSQL", .serialized)
struct MultiNodeTests {
    static let sentinel = "end"
    /// A delivery is complete with the sentinel post.
    static let sawSentinel: @Sendable (Delivery) -> Bool = { $0.posts.last?.text == sentinel }

    @Test("a reader on node C joined with since gets every post through A and B once, in order", .timeLimit(.minutes(3)))
    func crossNodeReader() async throws {
        let cluster = try await NodeCluster(database: try await PostgresTestServer.shared.freshDatabase())
        defer { cluster.stop() }
        try await cluster.start()
        try await cluster.createCircle("relay", owner: "wa", via: 0)

        let perWriter = 100
        let writers = [
            try await writerClient(cluster, user: "wa", servers: [cluster.wsURL(0)]),
            try await writerClient(cluster, user: "wb", servers: [cluster.wsURL(1)]),
        ]
        // The writers' own streams are subscribers too: A's sees B's posts and the other way round.
        var writerStreams: [Task<Delivery, Never>] = []
        for writer in writers {
            writerStreams.append(collectDelivery(await writer.messages(in: "relay"), timeout: .seconds(120), until: MultiNodeTests.sawSentinel))
            await writer.connect()
        }
        for writer in writers { try await requireJoined(writer, "relay") }

        // The reader on C joins with since = 0 once some posts are stored, while the writers go
        // on: it gets the stored ones replayed, then the live ones, across the seam.
        let progress = Progress()
        let readerJoined = Gate()
        let results = Task {
            try await withThrowingTaskGroup(of: [AckedPost].self) { group in
                for (index, writer) in writers.enumerated() {
                    group.addTask {
                        var receipts: [AckedPost] = []
                        for number in 0..<perWriter {
                            if number == perWriter / 4 { try await readerJoined.wait(timeout: .seconds(60)) }
                            let receipt = try await writer.post("\(index):\(number)", to: "relay")
                            receipts.append(AckedPost(author: ["wa", "wb"][index], receipt: receipt))
                            await progress.resolved()
                        }
                        return receipts
                    }
                }
                var all: [AckedPost] = []
                for try await receipts in group { all += receipts }
                return all
            }
        }
        #expect(await eventually(timeout: .seconds(60)) { await progress.count >= perWriter / 4 })
        let reader = try await TestClient(url: cluster.wsURL(2), token: try await cluster.token("reader"))
        let joinedAt = try await reader.join("relay", since: 0)
        await readerJoined.open()
        let reading = Task { await reader.posts(in: "relay", timeout: .seconds(120)) { $0.text == Self.sentinel } }
        let receipts = try await results.value
        let end = try await writers[0].post(Self.sentinel, to: "relay")
        let total = 2 * perWriter + 1

        #expect(receipts.count == 2 * perWriter)
        #expect(Set(receipts.map(\.receipt.seq)) == Set(1...Int64(2 * perWriter)))
        #expect(end.seq == Int64(total))
        #expect((joinedAt ?? 0) >= Int64(perWriter / 4), "the reader joined after \(joinedAt ?? 0) posts")

        let read = await reading.value
        #expect(read.ended == nil, "\(read.ended ?? "")\n\(cluster.logTails())")
        #expect(read.gaps.isEmpty)
        #expect(read.posts.map(\.seq) == Array(1...Int64(total)))
        // Each seq is the post that was acked with it: same author and request id.
        let acked = Dictionary((receipts + [AckedPost(author: "wa", receipt: end)]).map { ($0.receipt.seq, $0.key) }, uniquingKeysWith: { first, _ in first })
        #expect(read.posts.map { "\($0.author)/\($0.id)" } == (1...Int64(total)).map { acked[$0] ?? "?" })
        for writer in writerStreams {
            let delivery = await writer.value
            #expect(delivery.gaps.isEmpty)
            #expect(delivery.posts.map(\.seq) == Array(1...Int64(total)))
        }
        let stored = try await cluster.storedPosts(in: "relay")
        #expect(stored == StoredPosts(count: total, distinctKeys: total, distinctTexts: total, firstSeq: 1, lastSeq: Int64(total)))
        await reader.close()
        for writer in writers { await writer.shutdown() }
    }

    @Test("5 writers × 200 posts while a node is SIGKILLed and restarted, twice: acked once, stored once, gapless", .timeLimit(.minutes(3)))
    func nodeKilledTwice() async throws {
        let cluster = try await NodeCluster(database: try await PostgresTestServer.shared.freshDatabase())
        defer { cluster.stop() }
        try await cluster.start()
        // Node A (0) dies first; its clients move to their next server. Then node B (1), which
        // by then also holds the clients that fled A. Node C (2) stays up: a bare reader there
        // sees the server's own stream, uninterrupted.
        let report = try await Storm(cluster: cluster, circle: "storm", wireReaders: [2]).run { round, release in
            let node = round
            let connected = try await cluster.connections(node)
            #expect(connected > 0, "node \(node) had no connections to lose")
            cluster.kill(node)
            await release.open()
            try await cluster.restart(node)
        }
        // At least the three clients that started on A (w0, w3, r0) lost their node in the first
        // round, and at least three were on B in the second (w1, w4, r1 and those that fled A).
        #expect(report.reconnects >= 6, "\(report.reconnects) reconnects")
    }

    @Test("5 writers × 200 posts while PostgreSQL is restarted (immediate), twice: acked once, stored once, gapless", .timeLimit(.minutes(3)))
    func postgresRestarted() async throws {
        let postgres = try await PostgresTestServer.startPrivate()
        let cluster = try await NodeCluster(database: postgres.url + "?sslmode=disable")
        defer { cluster.stop() }
        try await cluster.start()
        // No node dies: a bare reader on each node sees what that node sends.
        try await Storm(cluster: cluster, circle: "storm", wireReaders: [0, 1, 2]).run { _, release in
            await release.open()
            try await postgres.restart()
        }
        cluster.stop()
        try await postgres.stop()
    }
}

// MARK: - Helpers

/// Five SDK writers post 200 posts each to one circle, each with all nodes in its `servers`
/// (starting at a different node, so they spread) and its outbox in a state file. Three SDK
/// readers (one starting on each node) and bare ``TestClient``s on the given nodes follow the
/// circle. Twice during the storm (once 150, then 450 post calls have resolved) `fault` runs;
/// writers wait before their 61st and 131st posts until the fault of that round has begun
/// (`release`), so that each fault happens while posts are still to come. Then: every post
/// acked once; the database holds each once; every subscriber got 1…N and the sentinel, in
/// order, with no gap; the bare readers exactly that, with the acks' authors and ids.
struct Storm {
    let cluster: NodeCluster
    let circle: String
    let wireReaders: [Int]
    let writers = 5
    let perWriter = 200

    @discardableResult
    func run(fault: @escaping @Sendable (_ round: Int, _ release: Gate) async throws -> Void) async throws -> StormReport {
        let cluster = self.cluster
        let circle = self.circle
        let perWriter = self.perWriter
        try await cluster.createCircle(circle, owner: "w0")
        let stateDirectory = FileManager.default.temporaryDirectory.appendingPathComponent("circle-storm-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: stateDirectory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: stateDirectory) }

        var writers: [CircleClient] = []
        var readers: [CircleClient] = []
        var deliveries: [(String, Task<Delivery, Never>)] = []
        for index in 0..<self.writers {
            let client = try await writerClient(
                cluster, user: "w\(index)", servers: cluster.servers(startingAt: index % cluster.nodes.count),
                stateFile: stateDirectory + "/w\(index).sqlite"
            )
            deliveries.append(("writer w\(index)", collectDelivery(await client.messages(in: circle), timeout: .seconds(150), until: MultiNodeTests.sawSentinel)))
            writers.append(client)
        }
        for index in 0..<cluster.nodes.count {
            let client = try await writerClient(cluster, user: "r\(index)", servers: cluster.servers(startingAt: index))
            deliveries.append(("reader r\(index)", collectDelivery(await client.messages(in: circle), timeout: .seconds(150), until: MultiNodeTests.sawSentinel)))
            readers.append(client)
        }
        let everyone = writers + readers
        for client in everyone { await client.connect() }
        for client in everyone { try await requireJoined(client, circle) }
        // Connections made from now on, per client (the first state seen is the current one).
        var connections: [Task<Int, Never>] = []
        for client in everyone {
            let states = await client.states()
            connections.append(Task { await states.reduce(0) { $0 + ($1 == .connected ? 1 : 0) } })
        }
        var wire: [(Int, TestClient)] = []
        for node in self.wireReaders {
            let reader = try await TestClient(url: cluster.wsURL(node), token: try await cluster.token("wire\(node)"))
            try await reader.join(circle, since: 0)
            wire.append((node, reader))
        }
        let wireReading = wire.map { node, reader in
            (node, Task { await reader.posts(in: circle, timeout: .seconds(150)) { $0.text == MultiNodeTests.sentinel } })
        }

        let progress = Progress()
        let gates = [Gate(), Gate()]
        let thresholds = [150, 450]
        let holds = [60, 130]
        let faults = Task {
            for round in 0..<2 {
                guard await eventually(timeout: .seconds(90), { await progress.count >= thresholds[round] }) else {
                    throw StormError("only \(await progress.count) acks before fault \(round + 1)")
                }
                let began = ContinuousClock.now
                try await fault(round, gates[round])
                let faultDone = ContinuousClock.now
                await gates[round].open()
                let before = await progress.count
                _ = await eventually(timeout: .seconds(60)) { await progress.count >= min(before + 5, self.writers * perWriter) }
                print("storm \(circle): fault \(round + 1) after \(before) posts resolved; it took \(faultDone - began), posts resolved again \(ContinuousClock.now - began) after it began")
                // Every client is connected again before the next fault, so that no client
                // lives through two faults as one.
                for client in everyone {
                    guard await eventually(timeout: .seconds(60), { await client.state == .connected }) else {
                        throw StormError("a client did not reconnect after fault \(round + 1)")
                    }
                }
            }
        }
        let outcomes = try await withThrowingTaskGroup(of: [Result<AckedPost, CircleClientError>].self) { group in
            for (index, writer) in writers.enumerated() {
                group.addTask {
                    var outcomes: [Result<AckedPost, CircleClientError>] = []
                    for number in 0..<perWriter {
                        if let round = holds.firstIndex(of: number) { try await gates[round].wait(timeout: .seconds(120)) }
                        do {
                            let receipt = try await writer.post("w\(index):\(number)", to: circle)
                            outcomes.append(.success(AckedPost(author: "w\(index)", receipt: receipt)))
                        } catch let error as CircleClientError {
                            outcomes.append(.failure(error))
                        }
                        await progress.resolved()
                    }
                    return outcomes
                }
            }
            var all: [Result<AckedPost, CircleClientError>] = []
            for try await partial in group { all += partial }
            return all
        }
        try await faults.value
        let total = self.writers * perWriter
        let end = try await writers[0].post(MultiNodeTests.sentinel, to: circle)

        // Every post call resolved with an ack; the acks' seqs are 1…N, each once.
        let acked = outcomes.compactMap { try? $0.get() }
        let failures = outcomes.compactMap { if case .failure(let error) = $0 { error } else { nil } }
        #expect(acked.count == total, "\(failures.count) posts failed: \(failures.prefix(5))\n\(cluster.logTails())")
        #expect(Set(acked.map(\.receipt.seq)) == Set(1...Int64(total)))
        #expect(Set(acked.map(\.key)).count == acked.count)
        #expect(end.seq == Int64(total + 1))
        for writer in writers { #expect(await writer.outbox.isEmpty) }

        // Stored once: one row per post, per (author, id) and per text.
        let stored = try await cluster.storedPosts(in: circle)
        let expectedRows = total + 1
        #expect(stored == StoredPosts(count: expectedRows, distinctKeys: expectedRows, distinctTexts: expectedRows, firstSeq: 1, lastSeq: Int64(expectedRows)))

        // Every subscriber: 1…N+1 in order, no gap; the bare readers also no duplicate.
        let bySeq = Dictionary((acked + [AckedPost(author: "w0", receipt: end)]).map { ($0.receipt.seq, $0.key) }, uniquingKeysWith: { first, _ in first })
        let expectedKeys = (1...Int64(expectedRows)).map { bySeq[$0] ?? "?" }
        for (name, task) in deliveries {
            let delivery = await task.value
            #expect(delivery.finished, "\(name) got \(delivery.posts.count) posts, no sentinel")
            #expect(delivery.gaps.isEmpty, "\(name): gaps \(delivery.gaps)")
            #expect(delivery.posts.map(\.seq) == Array(1...Int64(expectedRows)), "\(name): \(delivery.posts.count) posts")
        }
        for (node, task) in wireReading {
            let read = await task.value
            #expect(read.ended == nil, "bare reader on node \(node): \(read.ended ?? "")")
            #expect(read.gaps.isEmpty, "bare reader on node \(node): gaps \(read.gaps)")
            #expect(read.posts.map(\.seq) == Array(1...Int64(expectedRows)), "bare reader on node \(node): \(read.posts.count) posts")
            #expect(read.posts.map { "\($0.author)/\($0.id)" } == expectedKeys, "bare reader on node \(node): posts differ from the acks")
        }
        for (_, reader) in wire { await reader.close() }
        var reconnects = 0
        for task in connections {
            task.cancel()
            reconnects += max(0, await task.value - 1)
        }
        for client in everyone { await client.shutdown() }
        let duplicates = acked.filter(\.receipt.duplicate).count
        print("storm \(circle): \(acked.count) acks (\(duplicates) answered as duplicates of a first attempt), \(reconnects) reconnects of \(everyone.count) SDK clients")
        return StormReport(reconnects: reconnects, duplicateAcks: duplicates)
    }
}

/// What a storm went through.
struct StormReport {
    /// Connections the SDK clients made again after a fault.
    var reconnects: Int
    /// Acks that said `duplicate`: a post sent again after its first answer was lost.
    var duplicateAcks: Int
}

struct StormError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}

/// A writer on the SDK: its outbox persisted in `stateFile` when given, quick reconnects, and a
/// post budget far above any test's length (a post must resolve with an ack, not time out).
func writerClient(_ cluster: NodeCluster, user: String, servers: [String], stateFile: String? = nil) async throws -> CircleClient {
    try await CircleClient(
        configuration: .init(
            servers: servers,
            tokenProvider: { try await cluster.token(user) },
            reconnect: .init(base: .milliseconds(100), cap: .seconds(1)),
            postTimeout: .seconds(150),
            stateFile: stateFile
        )
    )
}

/// A post's ack and who posted it.
struct AckedPost: Sendable {
    var author: String
    var receipt: PostReceipt
    /// `author/id`: the idempotency key.
    var key: String { "\(self.author)/\(self.receipt.id)" }
}

/// Waits (bounded) until `client` has joined `circle`: its cursor is set by the join's ack.
func requireJoined(_ client: CircleClient, _ circle: String, timeout: Duration = .seconds(30)) async throws {
    let joined = await eventually(timeout: timeout) { await client.cursor(of: circle) != nil }
    try #require(joined, "no join of \(circle) within \(timeout)")
}

/// Post calls resolved so far (acked or failed), across writers.
actor Progress {
    private(set) var count = 0
    func resolved() { self.count += 1 }
}

/// Opened once; `wait` returns when it is open, or throws after `timeout`.
actor Gate {
    private var isOpen = false
    func open() { self.isOpen = true }
    func wait(timeout: Duration) async throws {
        let deadline = ContinuousClock.now + timeout
        while !self.isOpen {
            guard ContinuousClock.now < deadline else { throw GateError() }
            try await Task.sleep(for: .milliseconds(5))
        }
    }
    struct GateError: Error, CustomStringConvertible {
        var description: String { "a gate stayed closed" }
    }
}
