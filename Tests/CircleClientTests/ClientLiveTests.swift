@testable import CircleClient
import CircleServer
import CircleTestSupport
import Foundation
import Testing

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

private func makeClient(
    _ server: TestServer,
    user: String,
    stateFile: String? = nil,
    servers: [String]? = nil,
    tokenTTL: Duration = .seconds(3600),
    heartbeat: HeartbeatPolicy = .init(),
    tokenRenewal: TokenRenewalPolicy = .init(),
    failFast: Bool = false
) async throws -> CircleClient {
    try await CircleClient(
        configuration: .init(
            servers: servers ?? [server.wsURL],
            tokenProvider: { try await server.token(user, ttl: tokenTTL) },
            reconnect: .init(base: .milliseconds(100), cap: .seconds(1)),
            heartbeat: heartbeat,
            tokenRenewal: tokenRenewal,
            postTimeout: .seconds(60),
            failFast: failFast,
            stateFile: stateFile
        )
    )
}

private func waitFor(_ client: CircleClient, timeout: Duration = .seconds(10), _ predicate: (ConnectionState) -> Bool) async -> Bool {
    let deadline = ContinuousClock.now + timeout
    while ContinuousClock.now < deadline {
        if predicate(await client.state) { return true }
        try? await Task.sleep(for: .milliseconds(10))
    }
    return false
}

@Suite("CircleClient against a real server", .serialized)
struct ClientLiveTests {
    @Test("post resolves with its sequence number; another client receives it; history and typing work")
    func basics() async throws {
        let server = TestServer()
        defer { server.remove() }
        try await server.start()
        try await server.createCircle("general", owner: "alice")
        let alice = try await makeClient(server, user: "alice")
        let bob = try await makeClient(server, user: "bob")
        await alice.connect()
        await bob.connect()
        #expect(await waitFor(bob) { $0 == .connected })
        let bobEvents = await bob.messages(in: "general")
        let received = collect(bobEvents, count: 3)
        // Bob's join lands before the posts, so his live subscription starts at 0.
        try await bob.joined("general")
        var seqs: [Int64] = []
        for text in ["one", "two", "three"] {
            seqs.append(try await alice.post(text, to: "general").seq)
        }
        #expect(seqs == [1, 2, 3])
        #expect(await received.value.map(\.text) == ["one", "two", "three"])
        #expect(await bob.cursor(of: "general") == 3)
        let page = try await bob.history(of: "general", before: nil, limit: 2)
        #expect(page.posts.map(\.seq) == [2, 3])
        #expect(page.more)
        try await alice.typing(in: "general")
        do {
            _ = try await alice.post(String(repeating: "x", count: 9000), to: "general")
            Issue.record("an oversized post must be rejected")
        } catch let error as CircleClientError {
            #expect(error.code == .tooLarge)
        }
        #expect(await alice.outbox.isEmpty)
        await alice.shutdown()
        await bob.shutdown()
        await server.stop()
    }

    @Test("shutdown ends every stream the client handed out, and streams asked for afterwards")
    func shutdownEndsStreams() async throws {
        let server = TestServer()
        defer { server.remove() }
        try await server.start()
        try await server.createCircle("general", owner: "alice")
        let alice = try await makeClient(server, user: "alice")
        await alice.connect()
        #expect(await waitFor(alice) { $0 == .connected })
        let messages = await alice.messages(in: "general")
        let states = await alice.states()
        let outbox = await alice.outboxEvents()
        let transfers = alice.transferEvents()
        // Each reader runs its `for await` to the end and returns what it saw.
        let readMessages = Task { await within(.seconds(30)) { await messages.reduce(into: [String]()) { if case .post(let post) = $1 { $0.append(post.text ?? "") } } } }
        let readStates = Task { await countToEnd(states) }
        let readOutbox = Task { await countToEnd(outbox) }
        let readTransfers = Task { await countToEnd(transfers) }
        _ = try await alice.post("before shutdown", to: "general")
        // The post reached the reader before the shutdown, so the stream must end after it.
        #expect(await eventually { await alice.cursor(of: "general") == 1 })

        await alice.shutdown()

        #expect(await readMessages.value == ["before shutdown"])
        #expect(try #require(await readStates.value) >= 1)
        #expect(try #require(await readOutbox.value) >= 1)
        #expect(await readTransfers.value == 0)
        // Asked for after the shutdown: they end at once.
        #expect(await countToEnd(alice.messages(in: "general")) == 0)
        #expect(await countToEnd(alice.outboxEvents()) == 0)
        #expect(await countToEnd(alice.transferEvents()) == 0)
        #expect(await countToEnd(alice.states()) == 1, "the last state, then the end")
        await server.stop()
    }

    @Test("posts made while the server restarts all resolve, are stored once, and reach the reader in order")
    func serverRestart() async throws {
        let server = TestServer(limits: .init(postsPerSecond: 10_000, postBurst: 10_000))
        defer { server.remove() }
        try await server.start()
        try await server.createCircle("ops", owner: "w")
        let reader = try await makeClient(server, user: "reader")
        await reader.connect()
        let events = await reader.messages(in: "ops")
        #expect(await waitFor(reader) { $0 == .connected })
        try await reader.joined("ops")
        let writers = 3
        let perWriter = 60
        let received = collect(events, count: writers * perWriter, timeout: .seconds(90))
        let results = try await withThrowingTaskGroup(of: [Result<PostReceipt, CircleClientError>].self) { group in
            for writer in 0..<writers {
                group.addTask {
                    let client = try await makeClient(server, user: "w\(writer)")
                    await client.connect()
                    var results: [Result<PostReceipt, CircleClientError>] = []
                    for index in 0..<perWriter {
                        do {
                            results.append(.success(try await client.post("\(writer)-\(index)", to: "ops")))
                        } catch let error as CircleClientError {
                            results.append(.failure(error))
                        }
                        try await Task.sleep(for: .milliseconds(10))
                    }
                    await client.shutdown()
                    return results
                }
            }
            group.addTask {
                try await Task.sleep(for: .milliseconds(400))
                await server.stop()
                try await Task.sleep(for: .milliseconds(300))
                try await server.start()
                return []
            }
            var all: [Result<PostReceipt, CircleClientError>] = []
            for try await partial in group { all += partial }
            return all
        }
        #expect(results.count == writers * perWriter)
        let receipts = results.compactMap { try? $0.get() }
        #expect(receipts.count == writers * perWriter, "failures: \(results.filter { (try? $0.get()) == nil })")
        #expect(Set(receipts.map(\.seq)).count == receipts.count)
        let delivered = await received.value
        #expect(delivered.map(\.seq) == Array(1...Int64(writers * perWriter)))
        // The store holds each post once.
        let stored = try await server.http("GET", "/v1/circles/ops/messages?after=0&limit=200", token: try await server.token("w"))
        #expect(stored.body.components(separatedBy: "\"seq\":").count - 1 == writers * perWriter, "\(stored.status) \(stored.body.prefix(300))")
        await reader.shutdown()
        await server.stop()
    }

    @Test("a persisted outbox survives a client restart and is delivered in order")
    func persistedOutbox() async throws {
        let server = TestServer()
        defer { server.remove() }
        try await server.start()
        try await server.createCircle("notes", owner: "nina")
        let port = server.port
        await server.stop()  // offline
        let stateFile = server.dataDirectory + "-client.sqlite"
        defer { try? FileManager.default.removeItem(atPath: stateFile) }

        let first = try await makeClient(server, user: "nina", stateFile: stateFile, servers: ["ws://127.0.0.1:\(port)/v1/ws"])
        await first.connect()
        let pending = Task {
            await withTaskGroup(of: Void.self) { group in
                for index in 0..<5 {
                    group.addTask { _ = try? await first.post("note \(index)", to: "notes") }
                    try? await Task.sleep(for: .milliseconds(30))
                }
            }
        }
        // Wait until all five are queued, then "kill" the app.
        let deadline = ContinuousClock.now + .seconds(10)
        while await first.outbox.count < 5, ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(20)) }
        #expect(await first.outbox.map(\.text) == (0..<5).map { "note \($0)" })
        await first.shutdown()
        await pending.value

        try await server.start()
        let second = try await makeClient(server, user: "nina", stateFile: stateFile)
        #expect(await second.outbox.count == 5)
        let events = await second.outboxEvents()
        await second.connect()
        var sent: [Int64] = []
        for await event in events {
            if case .sent(_, let receipt) = event { sent.append(receipt.seq) }
            if sent.count == 5 { break }
        }
        #expect(sent == [1, 2, 3, 4, 5])
        let page = try await second.history(of: "notes", before: nil, limit: 10)
        #expect(page.posts.map(\.text) == (0..<5).map { "note \($0)" })
        #expect(await second.outbox.isEmpty)
        await second.shutdown()
        await server.stop()
    }

    @Test("a token that expires on an open connection is refreshed without losing posts")
    func tokenExpiry() async throws {
        let server = TestServer(limits: .init(postsPerSecond: 10_000, postBurst: 10_000))
        defer { server.remove() }
        try await server.start()
        try await server.createCircle("t", owner: "tom")
        // Renewal off: this is the path of a client whose token was not renewed (4001, reconnect);
        // TokenRenewalTests has the renewal on an open connection.
        let client = try await makeClient(server, user: "tom", tokenTTL: .seconds(1), tokenRenewal: .init(enabled: false))
        let states = await client.states()
        let sawReconnect = Task {
            var connectedCount = 0
            for await state in states {
                if state == .connected { connectedCount += 1 }
                if connectedCount >= 2 { return true }
            }
            return false
        }
        await client.connect()
        var seqs: [Int64] = []
        let end = ContinuousClock.now + .seconds(3)
        while ContinuousClock.now < end {
            seqs.append(try await client.post("tick", to: "t").seq)
            try await Task.sleep(for: .milliseconds(50))
        }
        #expect(seqs == Array(1...Int64(seqs.count)))
        #expect(await sawReconnect.value)
        await client.shutdown()
        await server.stop()
    }

    @Test("failFast throws notConnected; otherwise a post waits in the outbox")
    func failFast() async throws {
        let server = TestServer()
        defer { server.remove() }
        try await server.start()
        let port = server.port
        await server.stop()
        let client = try await makeClient(server, user: "fay", servers: ["ws://127.0.0.1:\(port)/v1/ws"], failFast: true)
        await client.connect()
        do {
            _ = try await client.post("now or never", to: "x")
            Issue.record("failFast must throw while disconnected")
        } catch let error as CircleClientError {
            #expect(error.code == .notConnected)
        }
        #expect(await client.outbox.isEmpty)
        #expect(await waitFor(client) { if case .waitingToReconnect = $0 { true } else { false } })
        await client.disconnect()
        #expect(await client.state == .closed(.requested))
        await client.shutdown()
    }
}

@Suite("CircleClient heartbeat", .serialized)
struct ClientHeartbeatTests {
    // The exact rule (dead at interval + timeout after the last pong) is HeartbeatStateMachineTests';
    // this test shows the live client applies it: the proxy keeps both TCP connections open and
    // forwards nothing, so only the client's own heartbeat can end the connection. How long that
    // took is printed, not asserted: a loaded machine delays timers.
    @Test("a connection that silently stops forwarding is declared dead by the heartbeat, then recovered")
    func silentStall() async throws {
        let server = TestServer()
        defer { server.remove() }
        try await server.start()
        try await server.createCircle("hb", owner: "hank")
        let proxy = try await StallingProxy(targetPort: server.port)
        let interval = Duration.milliseconds(400)
        let timeout = Duration.milliseconds(400)
        let client = try await makeClient(
            server,
            user: "hank",
            servers: ["ws://127.0.0.1:\(proxy.port)/v1/ws"],
            heartbeat: .init(interval: interval, timeout: timeout)
        )
        await client.connect()
        #expect(await waitFor(client) { $0 == .connected })
        _ = try await client.post("before", to: "hb")

        let states = await client.states()
        proxy.stall()
        let stalledAt = ContinuousClock.now
        // Every state change is in the stream, so a short-lived one is not missed.
        let declaredDead = await within(.seconds(30)) {
            for await state in states {
                switch state {
                case .waitingToReconnect, .connecting: return true
                default: continue
                }
            }
            return false
        } ?? false
        #expect(declaredDead, "a stalled connection must be declared dead by the heartbeat")
        print("heartbeat: stalled connection declared dead \(ContinuousClock.now - stalledAt) after the stall (interval \(interval), timeout \(timeout))")
        #expect(await waitFor(client) { $0 == .connected })
        let after = try await client.post("after", to: "hb")
        #expect(after.seq == 2)
        await client.shutdown()
        await proxy.shutdown()
        await server.stop()
    }
}

@Suite("CircleClient across server crashes", .serialized)
struct ClientCrashTests {
    @Test("5 clients × 200 posts while the server is killed (SIGKILL) and restarted twice", .timeLimit(.minutes(3)))
    func killAndRestart() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("circle-kill-\(UUID().uuidString)").path
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let port = try ServerProcess.freePort()
        let server = ServerProcess(port: port, dataDirectory: directory)
        try await server.start()
        defer { server.stop() }
        let url = "ws://127.0.0.1:\(port)/v1/ws"
        let authority = try await TokenAuthority(.hs256(secret: testSecret))
        let ownerToken = try await authority.mint(user: "c0", ttl: .seconds(600))
        var create = URLRequest(url: URL(string: "http://127.0.0.1:\(port)/v1/circles")!)
        create.httpMethod = "POST"
        create.setValue("Bearer \(ownerToken)", forHTTPHeaderField: "Authorization")
        create.httpBody = Data(#"{"name":"crash"}"#.utf8)
        _ = try await URLSession.shared.data(for: create)

        let clientsCount = 5
        let perClient = 200
        var clients: [CircleClient] = []
        var streams: [AsyncStream<CircleEvent>] = []
        for index in 0..<clientsCount {
            let user = "c\(index)"
            let client = try await CircleClient(
                configuration: .init(
                    servers: [url],
                    tokenProvider: { try await authority.mint(user: user, ttl: .seconds(600)) },
                    reconnect: .init(base: .milliseconds(100), cap: .seconds(1)),
                    postTimeout: .seconds(90)
                )
            )
            streams.append(await client.messages(in: "crash"))
            await client.connect()
            clients.append(client)
        }
        for client in clients { #expect(await waitFor(client) { $0 == .connected }) }
        let firstStates = await clients[0].states()
        let reconnects = Task {
            var connected = 0
            for await state in firstStates {
                if state == .connected { connected += 1 }
                if connected >= 3 { break }
            }
            return connected - 1
        }
        for client in clients { try await client.joined("crash") }
        let total = clientsCount * perClient
        let collectors = streams.map { collect($0, count: total, timeout: .seconds(120)) }
        let everyone = clients

        let outcomes = try await withThrowingTaskGroup(of: [Result<PostReceipt, CircleClientError>].self) { group in
            for (index, client) in clients.enumerated() {
                group.addTask {
                    var results: [Result<PostReceipt, CircleClientError>] = []
                    for post in 0..<perClient {
                        do {
                            results.append(.success(try await client.post("\(index):\(post)", to: "crash")))
                        } catch let error as CircleClientError {
                            results.append(.failure(error))
                        }
                    }
                    return results
                }
            }
            group.addTask {
                for _ in 0..<2 {
                    try await Task.sleep(for: .milliseconds(700))
                    server.kill()
                    try await Task.sleep(for: .milliseconds(300))
                    try await server.start()
                    // The next crash comes only once every client is back: on a loaded machine a
                    // client still in backoff would otherwise live through two crashes as one.
                    for client in everyone {
                        #expect(await waitFor(client, timeout: .seconds(30)) { $0 == .connected })
                    }
                }
                return []
            }
            var all: [Result<PostReceipt, CircleClientError>] = []
            for try await partial in group { all += partial }
            return all
        }
        // The crashes happened while the clients were connected and posting: both were survived.
        #expect(await reconnects.value == 2)
        // Every post call resolved; with a 90 s budget all of them were acknowledged.
        #expect(outcomes.count == total)
        let receipts = outcomes.compactMap { try? $0.get() }
        #expect(receipts.count == total, "errors: \(outcomes.compactMap { if case .failure(let e) = $0 { e } else { nil } }.prefix(5))")
        // Each acked post is stored exactly once: distinct sequence numbers 1...total.
        #expect(Set(receipts.map(\.seq)) == Set(1...Int64(total)))
        // Every subscriber received every post once, in order.
        for collector in collectors {
            let posts = await collector.value
            #expect(posts.map(\.seq) == Array(1...Int64(total)))
        }
        var page = URLRequest(url: URL(string: "http://127.0.0.1:\(port)/v1/circles/crash/messages?before=\(total + 1)&limit=1")!)
        page.setValue("Bearer \(ownerToken)", forHTTPHeaderField: "Authorization")
        let (data, _) = try await URLSession.shared.data(for: page)
        #expect(String(decoding: data, as: UTF8.self).contains("\"seq\":\(total)"))
        for client in clients { await client.shutdown() }
    }

    @Test("a reader that shows a history page and then follows from its lastSeq misses nothing posted in between, and gets nothing twice")
    func followOnFromAPage() async throws {
        let server = TestServer()
        defer { server.remove() }
        try await server.start()
        try await server.createCircle("general", owner: "alice")
        let alice = try await makeClient(server, user: "alice")
        let bob = try await makeClient(server, user: "bob")
        await alice.connect()
        await bob.connect()
        #expect(await waitFor(bob) { $0 == .connected })
        _ = try await alice.post("before the page", to: "general")
        _ = try await alice.react("👍", to: 1, in: "general")

        let page = try await bob.historyPage(of: "general")
        #expect(page.posts.map(\.text) == ["before the page"])
        #expect(page.posts.first?.reactions?.map(\.emoji) == ["👍"])
        #expect(page.lastSeq == 2, "the page reflects the reaction, entry 2")
        // Committed after the page and before bob follows: the race `circle chat` had.
        let between = try await alice.post("between the page and the join", to: "general")
        let events = await bob.messages(in: "general", after: page.lastSeq ?? 0)
        let received = collect(events, count: 2)
        let after = try await alice.post("after the join", to: "general")
        let posts = await received.value
        #expect(posts.map(\.seq) == [between.seq, after.seq], "entries 1 and 2 are in the page, not again in the stream")
        #expect(posts.map(\.text) == ["between the page and the join", "after the join"])
        await alice.shutdown()
        await bob.shutdown()
        await server.stop()
    }
}
