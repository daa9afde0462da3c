import CircleClient
import CircleServer
import CircleTestSupport
import Foundation
import Observation
import Synchronization
import Testing

private func chatClient(
    _ server: TestServer,
    user: String,
    port: Int? = nil,
    stateFile: String? = nil,
    cacheLimit: Int = 500
) async throws -> CircleClient {
    try await CircleClient(
        configuration: .init(
            servers: ["ws://127.0.0.1:\(port ?? server.port)/v1/ws"],
            tokenProvider: { try await server.token(user, ttl: .seconds(3600)) },
            reconnect: .init(base: .milliseconds(100), cap: .seconds(1)),
            postTimeout: .seconds(60),
            stateFile: stateFile,
            cacheLimit: cacheLimit
        )
    )
}

/// A state file path that is removed when the test's directory is.
private func stateFile(_ server: TestServer, _ name: String) -> String {
    server.dataDirectory + "-\(name).sqlite"
}

private func removeStateFiles(_ server: TestServer, _ names: String...) {
    for name in names {
        removeStateFile(stateFile(server, name))
    }
}


/// A value one task sets and another reads.
private actor Box {
    private(set) var value: Int64 = 0
    func set(_ value: Int64) { self.value = value }
}

/// The first value of a stream, or `nil` when none came within `timeout`.
private func firstValue<T: Sendable>(_ stream: AsyncStream<T>, timeout: Duration = .seconds(30)) async -> T? {
    let first = await within(timeout) { () async -> T? in
        for await value in stream { return value }
        return nil
    }
    return first ?? nil
}

@Suite("CircleClient chat features against a real server", .serialized)
struct ChatClientLiveTests {
    @Test("edits, deletes, reactions and replies: a reader that was away (and a server restart) ends with the state of one that stayed")
    func awayReaderCatchesUp() async throws {
        let server = TestServer(limits: .init(postsPerSecond: 10_000, postBurst: 10_000))
        defer { server.remove(); removeStateFiles(server, "stay", "away") }
        try await server.start()
        try await server.createCircle("general", owner: "alice")
        let alice = try await chatClient(server, user: "alice")
        let dave = try await chatClient(server, user: "dave")
        let stay = try await chatClient(server, user: "bob", stateFile: stateFile(server, "stay"))
        var away = try await chatClient(server, user: "carl", stateFile: stateFile(server, "away"))
        for client in [alice, dave, stay, away] { await client.connect() }
        let stayEvents = await stay.messages(in: "general")
        let awayEvents = await away.messages(in: "general")
        _ = stayEvents
        _ = awayEvents
        #expect(await eventually {
            let stayed = await stay.cursor(of: "general")
            let left = await away.cursor(of: "general")
            return stayed != nil && left != nil
        })

        let first = try await alice.post("helo", to: "general")
        let second = try await dave.post("second", to: "general")
        try await alice.react("👍", to: first.seq, in: "general")
        #expect(await eventually {
            let left = await away.cursor(of: "general")
            return left == first.seq + 2
        })
        #expect(await away.cachedPosts(in: "general").count == 2)

        // carl goes away; every kind of change happens, with a server restart in between.
        await away.shutdown()
        try await alice.edit(first.seq, in: "general", text: "hello")
        try await dave.react("👍", to: first.seq, in: "general")
        try await dave.react("🎉", to: first.seq, in: "general")
        let reply = try await dave.post("a reply", to: "general", replyTo: first.seq)
        await server.stop()
        try await server.start()
        #expect(await eventually {
            let one = await alice.state
            let other = await dave.state
            return one == .connected && other == .connected
        })
        try await alice.unreact("👍", from: first.seq, in: "general")
        try await dave.delete(second.seq, in: "general")
        let last = try await dave.edit(reply.seq, in: "general", text: "a better reply")

        away = try await chatClient(server, user: "carl", stateFile: stateFile(server, "away"))
        // Offline, carl reads the two posts he had.
        #expect(await away.cachedPosts(in: "general").map(\.seq) == [first.seq, second.seq])
        let resumed = await away.messages(in: "general")
        await away.connect()
        #expect(await eventually { await stay.cursor(of: "general") == last.seq })
        #expect(await eventually { await away.cursor(of: "general") == last.seq })
        // The cache first (two posts in their state when carl left), then every entry after them.
        let replayed = await collect(resumed, count: 2 + Int(last.seq - first.seq - 2), timeout: .seconds(30)).value
        #expect(replayed.map(\.seq) == [first.seq, second.seq] + Array((first.seq + 3)...last.seq))

        let expected = await stay.cachedPosts(in: "general")
        #expect(await away.cachedPosts(in: "general") == expected)
        #expect(expected.map(\.seq) == [first.seq, second.seq, reply.seq])
        #expect(expected[0].text == "hello")
        #expect(expected[0].edited != nil)
        #expect(expected[0].reactions == [
            CircleReaction(emoji: "👍", users: ["dave"], me: false), CircleReaction(emoji: "🎉", users: ["dave"], me: false),
        ])
        #expect(expected[1].deleted && expected[1].text == nil)
        #expect(expected[2].replyTo == first.seq && expected[2].text == "a better reply")
        for client in [alice, dave, stay, away] { await client.shutdown() }
        await server.stop()
    }

    @Test("edits, reactions, deletes and replies made offline are sent on reconnect and each resolves once")
    func offlineChanges() async throws {
        let server = TestServer(limits: .init(postsPerSecond: 10_000, postBurst: 10_000))
        defer { server.remove(); removeStateFiles(server, "offline") }
        try await server.start()
        try await server.createCircle("notes", owner: "nina")
        let nina = try await chatClient(server, user: "nina", stateFile: stateFile(server, "offline"))
        await nina.connect()
        let one = try await nina.post("one", to: "notes")
        let two = try await nina.post("two", to: "notes")
        let port = server.port
        await server.stop()
        #expect(await eventually { await nina.state != .connected })

        let events = await nina.outboxEvents()
        let edit = Task { try await nina.edit(one.seq, in: "notes", text: "ONE") }
        #expect(await eventually { await nina.outbox.count == 1 })
        let react = Task { try await nina.react("👍", to: one.seq, in: "notes") }
        #expect(await eventually { await nina.outbox.count == 2 })
        let delete = Task { try await nina.delete(two.seq, in: "notes") }
        #expect(await eventually { await nina.outbox.count == 3 })
        let reply = Task { try await nina.post("re", to: "notes", replyTo: one.seq) }
        #expect(await eventually { await nina.outbox.count == 4 })
        #expect(await nina.outbox.map(\.action) == [.edit, .react, .delete, .post])

        server.configuration.port = port
        try await server.start()
        let receipts = [try await edit.value, try await react.value, try await delete.value, try await reply.value]
        #expect(receipts.map(\.seq) == [3, 4, 5, 6])
        #expect(receipts.allSatisfy { !$0.duplicate })
        var sent = 0
        for await event in events {
            if case .sent = event { sent += 1 }
            if case .failed(let entry, let error) = event { Issue.record("\(entry.id) failed: \(error)") }
            if sent == 4 { break }
        }
        #expect(await nina.outbox.isEmpty)
        let summary = try await nina.circleSummaries().first { $0.name == "notes" }
        #expect(summary?.lastSeq == 6)  // each change stored once
        let page = try await nina.history(of: "notes", limit: 10)
        #expect(page.posts.map(\.seq) == [1, 2, 6])
        #expect(page.posts[0].text == "ONE")
        #expect(page.posts[0].reactions?.first?.users == ["nina"])
        #expect(page.posts[0].reactions?.first?.me == true)
        #expect(page.posts[1].deleted)
        #expect(page.posts[2].replyTo == 1)
        await nina.shutdown()
        await server.stop()
    }

    @Test("unsent outbox entries are cancelled or get new text, and that survives a client restart")
    func cancelAndReplaceAcrossRestart() async throws {
        let server = TestServer()
        defer { server.remove(); removeStateFiles(server, "outbox") }
        try await server.start()
        try await server.createCircle("notes", owner: "nina")
        let port = server.port
        await server.stop()  // offline from the start

        let first = try await chatClient(server, user: "nina", port: port, stateFile: stateFile(server, "outbox"))
        await first.connect()
        let calls = Task {
            await withTaskGroup(of: Void.self) { group in
                for index in 0..<3 {
                    group.addTask { _ = try? await first.post("note \(index)", to: "notes") }
                    try? await Task.sleep(for: .milliseconds(30))
                }
            }
        }
        #expect(await eventually { await first.outbox.count == 3 })
        let ids = await first.outbox.map(\.id)
        #expect(await first.cancelOutboxEntry(ids[1]))
        #expect(await first.replaceOutboxText(ids[2], with: "note 2, corrected"))
        #expect(await first.cancelOutboxEntry("no-such-id") == false)
        await first.shutdown()
        await calls.value

        let second = try await chatClient(server, user: "nina", port: port, stateFile: stateFile(server, "outbox"))
        #expect(await second.outbox.map(\.id) == [ids[0], ids[2]])
        #expect(await second.outbox.map(\.text) == ["note 0", "note 2, corrected"])
        let events = await second.outboxEvents()
        server.configuration.port = port
        try await server.start()
        await second.connect()
        var sent: [String] = []
        for await event in events {
            if case .sent(let entry, _) = event { sent.append(entry.id) }
            if sent.count == 2 { break }
        }
        #expect(sent == [ids[0], ids[2]])
        // Sent on this connection: too late to cancel.
        #expect(await second.cancelOutboxEntry(ids[0]) == false)
        let page = try await second.history(of: "notes", limit: 10)
        #expect(page.posts.map(\.text) == ["note 0", "note 2, corrected"])
        await second.shutdown()
        await server.stop()
    }

    @Test("the cache keeps the newest posts up to its limit, is read offline, and messages(in:) continues from it without a gap")
    func cacheLimitAndOfflineReading() async throws {
        let server = TestServer(limits: .init(postsPerSecond: 10_000, postBurst: 10_000))
        defer { server.remove(); removeStateFiles(server, "cache") }
        try await server.start()
        try await server.createCircle("feed", owner: "alice")
        let alice = try await chatClient(server, user: "alice")
        await alice.connect()
        var reader = try await chatClient(server, user: "rita", stateFile: stateFile(server, "cache"), cacheLimit: 5)
        let events = await reader.messages(in: "feed")
        _ = events
        await reader.connect()
        #expect(await eventually { await reader.cursor(of: "feed") != nil })
        var last: Int64 = 0
        for index in 1...12 { last = try await alice.post("post \(index)", to: "feed").seq }
        #expect(await eventually { await reader.cursor(of: "feed") == last })
        #expect(await reader.cachedPosts(in: "feed").map(\.text) == (8...12).map { "post \($0)" })
        await reader.shutdown()

        // Restarted while the server is down: the cache is there, history answers from it.
        let port = server.port
        await server.stop()
        reader = try await chatClient(server, user: "rita", port: port, stateFile: stateFile(server, "cache"), cacheLimit: 5)
        #expect(await reader.cachedPosts(in: "feed").map(\.seq) == Array((last - 4)...last))
        let page = try await reader.history(of: "feed", before: last, limit: 2)
        #expect(page.posts.map(\.seq) == [last - 2, last - 1])
        #expect(page.more)
        let resumed = await reader.messages(in: "feed")
        server.configuration.port = port
        try await server.start()
        try await alice.post("post 13", to: "feed")
        await reader.connect()
        let posts = await collect(resumed, count: 6, timeout: .seconds(30)).value
        #expect(posts.map(\.seq) == Array((last - 4)...(last + 1)))
        #expect(posts.last?.text == "post 13")
        await reader.shutdown()
        await alice.shutdown()
        await server.stop()
    }

    @Test("a circle opened for the first time: the newest history page goes into the cache and is read offline, edits and reactions applied, also after a restart")
    func historyPageCachedForOfflineReading() async throws {
        let server = TestServer(limits: .init(postsPerSecond: 10_000, postBurst: 10_000))
        defer { server.remove(); removeStateFiles(server, "pages") }
        try await server.start()
        try await server.createCircle("archive", owner: "alice")
        let alice = try await chatClient(server, user: "alice")
        let bob = try await chatClient(server, user: "bob")
        await alice.connect()
        await bob.connect()
        var receipts: [PostReceipt] = []
        for text in ["one", "two", "three", "four"] { receipts.append(try await alice.post(text, to: "archive")) }
        try await alice.edit(receipts[1].seq, in: "archive", text: "TWO")
        try await bob.react("👍", to: receipts[2].seq, in: "archive")

        var reader = try await chatClient(server, user: "rita", stateFile: stateFile(server, "pages"))
        let events = await reader.messages(in: "archive")
        _ = events
        await reader.connect()
        // Joined live: no post arrives, the cache is empty.
        #expect(await eventually { await reader.cursor(of: "archive") != nil })
        #expect(await reader.cachedPosts(in: "archive").isEmpty)
        let page = try await reader.history(of: "archive", limit: 3)
        #expect(page.posts.map(\.text) == ["TWO", "three", "four"])
        #expect(page.posts[0].edited != nil)
        #expect(page.posts[1].reactions == [CircleReaction(emoji: "👍", users: ["bob"], me: false)])
        #expect(await reader.cachedPosts(in: "archive") == page.posts)

        let port = server.port
        await server.stop()
        #expect(await eventually { await reader.state != .connected })
        #expect(await reader.cachedPosts(in: "archive") == page.posts)
        let offline = try await reader.history(of: "archive", limit: 3)
        #expect(offline.posts == page.posts)
        #expect(!offline.more)
        await reader.shutdown()

        reader = try await chatClient(server, user: "rita", port: port, stateFile: stateFile(server, "pages"))
        #expect(await reader.cachedPosts(in: "archive") == page.posts)
        #expect(try await reader.history(of: "archive", before: receipts[2].seq, limit: 3).posts == [page.posts[0]])
        await reader.shutdown()
        await alice.shutdown()
        await bob.shutdown()
    }

    @Test("mentions on entries and in the circle list, a direct message started twice, a notification level reaching the user's other connection")
    func mentionsDirectMessagesAndLevels() async throws {
        let server = TestServer()
        defer { server.remove() }
        try await server.start()
        let alice = try await chatClient(server, user: "alice")
        let phone = try await chatClient(server, user: "bob")
        let laptop = try await chatClient(server, user: "bob")
        for client in [alice, phone, laptop] { await client.connect() }
        // Requests (history, the circle list) need an open connection; connect() only starts one.
        #expect(await eventually {
            for client in [alice, phone, laptop] {
                if await client.state != .connected { return false }
            }
            return true
        })

        let dm = try await alice.startDirectMessage(with: ["bob"])
        #expect(dm.direct == ["alice", "bob"] && dm.notify == .all && dm.private)
        #expect(try await phone.startDirectMessage(with: ["alice"]).name == dm.name)
        let refused = await #expect(throws: CircleClientError.self) { try await alice.startDirectMessage(with: []) }
        #expect(refused?.httpStatus == 400)

        let laptopEvents = await laptop.messages(in: dm.name)
        #expect(await eventually { await laptop.cursor(of: dm.name) != nil })
        let receipt = try await alice.post("ping @bob", to: dm.name)
        let history = try await phone.history(of: dm.name).posts
        #expect(history.first { $0.seq == receipt.seq }?.mentions == ["bob"])
        #expect(history.first { $0.seq == receipt.seq }?.mentions("bob") == true)
        let listed = try await phone.circleSummaries().first { $0.name == dm.name }
        #expect(listed?.mentions == 1 && listed?.unread == 1)

        let set = try await phone.setNotificationLevel(NotificationLevel.none, in: dm.name)
        #expect(set.notify == NotificationLevel.none)
        let level = await withTaskGroup(of: NotificationLevel?.self) { group in
            group.addTask {
                for await event in laptopEvents { if case .notify(let level) = event { return level } }
                return nil
            }
            group.addTask {
                try? await Task.sleep(for: .seconds(30))
                return nil
            }
            let first = await group.next() ?? nil
            group.cancelAll()
            return first
        }
        #expect(level == NotificationLevel.none)
        #expect(try await phone.setNotificationLevel(nil, in: dm.name).notify == .all)
        for client in [alice, phone, laptop] { await client.shutdown() }
        await server.stop()
    }

    @Test("a direct message someone starts with you and a circle someone adds you to reach your list at once")
    func addedToTheList() async throws {
        let server = TestServer()
        defer { server.remove() }
        try await server.start()
        let alice = try await chatClient(server, user: "alice")
        let bob = try await chatClient(server, user: "bob")
        for client in [alice, bob] { await client.connect() }
        #expect(await eventually {
            for client in [alice, bob] where await client.state != .connected { return false }
            return true
        })
        let heard = Mutex<[CircleSummary]>([])
        let events = await bob.circleListEvents()
        let listening = Task {
            for await case .added(let circle) in events { heard.withLock { $0.append(circle) } }
        }

        let dm = try await alice.startDirectMessage(with: ["bob"])
        #expect(await eventually { heard.withLock { $0.count } == 1 })
        let told = try #require(heard.withLock { $0.first })
        #expect(told.name == dm.name && told.direct == ["alice", "bob"] && told.private)
        // Started again (by either of them): the same DM, nothing new to tell.
        #expect(try await bob.startDirectMessage(with: ["alice"]).name == dm.name)

        _ = try await alice.createCircle("plans", private: true)
        #expect(try await alice.addMember("bob", to: "plans").contains("bob"))
        #expect(await eventually { heard.withLock { $0.count } == 2 })
        let plans = try #require(heard.withLock { $0.last })
        #expect(plans.name == "plans" && plans.owner == "alice" && plans.private && plans.direct == nil)
        #expect(heard.withLock { $0.map(\.name) } == [dm.name, "plans"], "the DM started again was told of again")

        listening.cancel()
        for client in [alice, bob] { await client.shutdown() }
        await server.stop()
    }

    @Test("read markers move forward, reach the user's other connections, and the circle list counts unread posts")
    func readMarkers() async throws {
        let server = TestServer(limits: .init(postsPerSecond: 10_000, postBurst: 10_000))
        defer { server.remove() }
        try await server.start()
        try await server.createCircle("general", owner: "alice")
        let alice = try await chatClient(server, user: "alice")
        let phone = try await chatClient(server, user: "bob")
        let laptop = try await chatClient(server, user: "bob")
        for client in [alice, phone, laptop] { await client.connect() }
        // Requests (history, the circle list) need an open connection; connect() only starts one.
        #expect(await eventually {
            for client in [alice, phone, laptop] {
                if await client.state != .connected { return false }
            }
            return true
        })
        let laptopEvents = await laptop.messages(in: "general")
        #expect(await eventually { await laptop.cursor(of: "general") != nil })
        for index in 1...3 { try await alice.post("p\(index)", to: "general") }
        let before = try await phone.circleSummaries().first { $0.name == "general" }
        #expect(before?.unread == 3)
        #expect(before?.lastSeq == 3)
        #expect(try await phone.markRead("general", upTo: 2) == 2)
        #expect(try await phone.markRead("general", upTo: 1) == 2)  // never backwards
        let read = await withTaskGroup(of: Int64?.self) { group in
            group.addTask {
                for await event in laptopEvents { if case .read(let seq) = event { return seq } }
                return nil
            }
            group.addTask {
                try? await Task.sleep(for: .seconds(30))
                return nil
            }
            let first = await group.next() ?? nil
            group.cancelAll()
            return first
        }
        #expect(read == 2)
        let after = try await laptop.circleSummaries().first { $0.name == "general" }
        #expect(after?.readSeq == 2)
        #expect(after?.unread == 1)
        #expect(await laptop.user == "bob")
        for client in [alice, phone, laptop] { await client.shutdown() }
        await server.stop()
    }

    @Test("CircleModel shows posts with their delivery state, changes, unread count, typing users and the connection")
    func model() async throws {
        let server = TestServer(limits: .init(postsPerSecond: 10_000, postBurst: 10_000))
        defer { server.remove() }
        try await server.start()
        try await server.createCircle("general", owner: "alice")
        let alice = try await chatClient(server, user: "alice")
        let bob = try await chatClient(server, user: "bob")
        await alice.connect()
        await bob.connect()
        // alice reads the circle too, so it is joined again after the restart (typing needs it).
        let aliceEvents = await alice.messages(in: "general")
        _ = aliceEvents
        let model = await CircleModel(client: bob, circle: "general", typingTimeout: .milliseconds(500))
        await model.start()
        #expect(await eventually { await model.connectionState == .connected })
        #expect(await eventually { await bob.cursor(of: "general") != nil })

        let hello = try await alice.post("helo", to: "general")
        #expect(await eventually { await model.posts.map(\.post.text) == ["helo"] })
        #expect(await model.unread == 1)
        try await alice.edit(hello.seq, in: "general", text: "hello")
        try await alice.react("👍", to: hello.seq, in: "general")
        #expect(await eventually {
            let first = await model.posts.first?.post
            return first?.text == "hello" && first?.reactions?.count == 1
        })

        // Observation tells a view when posts change.
        let changed = AsyncStream<Void>.makeStream()
        await MainActor.run {
            withObservationTracking { _ = model.posts } onChange: { changed.continuation.yield() }
        }
        let mine = try await model.post("hi alice", replyTo: hello.seq)
        #expect(await firstValue(changed.stream) != nil)
        #expect(await eventually { await model.posts.last?.post.seq == mine.seq })
        let item = await model.posts.last
        #expect(item?.delivery == .sent)
        #expect(item?.post.author == "bob")
        #expect(item?.post.replyTo == hello.seq)
        #expect(await model.unread == 1)  // own posts are not unread

        // A refused post stays, failed, until dismissed.
        let refused = try? await model.post(String(repeating: "x", count: 9000))
        #expect(refused == nil)
        #expect(await eventually {
            guard case .failed(let error) = await model.posts.last?.delivery else { return false }
            return error.code == .tooLarge
        })
        if let failed = await model.posts.last { await model.dismiss(failed.id) }
        #expect(await model.posts.last?.post.seq == mine.seq)

        // A post made while disconnected shows as sending until it is stored.
        let port = server.port
        await server.stop()
        #expect(await eventually { await model.connectionState != .connected })
        let pending = Task { try await model.post("offline") }
        #expect(await eventually {
            let last = await model.posts.last
            return last?.delivery == .sending && last?.post.text == "offline"
        })
        server.configuration.port = port
        try await server.start()
        let offline = try await pending.value
        #expect(await eventually {
            let last = await model.posts.last
            return last?.post.seq == offline.seq && last?.delivery == .sent
        })
        #expect(await eventually { await model.connectionState == .connected })
        #expect(await eventually { await alice.state == .connected })
        #expect(await eventually { (try? await alice.typing(in: "general")) != nil })
        #expect(await eventually { await model.typingUsers == ["alice"] })
        #expect(await eventually(timeout: .seconds(10)) { await model.typingUsers.isEmpty })

        try await alice.delete(hello.seq, in: "general")
        #expect(await eventually { await model.posts.first?.post.deleted == true })
        #expect(await model.unread == 0)  // deleted posts do not count
        let other = try await alice.post("news", to: "general")
        #expect(await eventually { await model.unread == 1 })
        try await model.markRead()
        #expect(await model.readSeq == other.seq)
        #expect(await model.unread == 0)
        await model.stop()
        await alice.shutdown()
        await bob.shutdown()
        await server.stop()
    }

    @Test("CircleModel on a state file: cached posts at once while offline, restored outbox posts as sending, then sent")
    func modelOffline() async throws {
        let server = TestServer()
        defer { server.remove(); removeStateFiles(server, "model") }
        try await server.start()
        try await server.createCircle("general", owner: "alice")
        let alice = try await chatClient(server, user: "alice")
        await alice.connect()
        let first = try await chatClient(server, user: "bob", stateFile: stateFile(server, "model"))
        let events = await first.messages(in: "general")
        _ = events
        await first.connect()
        #expect(await eventually { await first.cursor(of: "general") != nil })
        let hello = try await alice.post("hello", to: "general")
        try await alice.react("👍", to: hello.seq, in: "general")
        #expect(await eventually { await first.cursor(of: "general") == hello.seq + 1 })
        let port = server.port
        await server.stop()
        // Queued offline, then the app quits.
        let queued = Task { try? await first.post("from the train", to: "general") }
        #expect(await eventually { await first.outbox.count == 1 })
        await first.shutdown()
        _ = await queued.value

        let second = try await chatClient(server, user: "bob", port: port, stateFile: stateFile(server, "model"))
        let model = await CircleModel(client: second, circle: "general")
        await model.start()
        #expect(await eventually {
            let posts = await model.posts
            return posts.count == 2 && posts[0].post.reactions?.first?.users == ["alice"] && posts[1].delivery == .sending
                && posts[1].post.text == "from the train"
        })
        server.configuration.port = port
        try await server.start()
        await second.connect()
        #expect(await eventually {
            let posts = await model.posts
            return posts.count == 2 && posts[1].delivery == .sent && posts[1].post.seq == hello.seq + 2
        })
        await model.stop()
        await second.shutdown()
        await alice.shutdown()
        await server.stop()
    }

    @Test("CircleModel.loadOlder pages back from the oldest post held, edits and reactions included, keeps them beyond its limit, and ends with hasOlder false")
    func modelLoadOlder() async throws {
        let server = TestServer(limits: .init(postsPerSecond: 10_000, postBurst: 10_000))
        defer { server.remove() }
        try await server.start()
        try await server.createCircle("general", owner: "alice")
        let alice = try await chatClient(server, user: "alice")
        let bob = try await chatClient(server, user: "bob")
        await alice.connect()
        await bob.connect()
        var seqs: [Int64] = []
        for index in 1...7 { seqs.append(try await alice.post("p\(index)", to: "general").seq) }
        try await alice.edit(seqs[1], in: "general", text: "p2, edited")
        try await bob.react("👍", to: seqs[0], in: "general")

        let model = await CircleModel(client: bob, circle: "general", limit: 4, historyPage: 3)
        await model.start()
        #expect(await eventually { await model.posts.map(\.post.text) == ["p5", "p6", "p7"] })
        #expect(await model.hasOlder)
        try await model.loadOlder(limit: 3)
        #expect(await model.posts.map(\.post.text) == ["p2, edited", "p3", "p4", "p5", "p6", "p7"])
        #expect(await model.hasOlder)
        try await model.loadOlder(limit: 3)
        let all = await model.posts.map(\.post)
        #expect(all.map(\.seq) == seqs)
        #expect(all[0].reactions == [CircleReaction(emoji: "👍", users: ["bob"], me: true)])
        #expect(!(await model.hasOlder))
        // Live changes apply to the older posts too; a new post drops the oldest (7 are held now).
        try await alice.edit(seqs[0], in: "general", text: "p1, edited")
        #expect(await eventually { await model.posts.first?.post.text == "p1, edited" })
        let newest = try await alice.post("p8", to: "general")
        #expect(await eventually { await model.posts.last?.post.seq == newest.seq })
        #expect(await model.posts.map(\.post.seq) == Array(seqs.dropFirst()) + [newest.seq])
        #expect(await model.hasOlder)
        await model.stop()
        await alice.shutdown()
        await bob.shutdown()
        await server.stop()
    }

    @Test("CircleModel.retry sends a failed post again with the same id: sending, then sent, stored once; refused again, failed again")
    func modelRetry() async throws {
        let server = TestServer()
        defer { server.remove() }
        try await server.start()
        try await server.createCircle("general", owner: "alice")
        let port = server.port
        let bob = try await chatClient(server, user: "bob")
        let model = await CircleModel(client: bob, circle: "general")
        await model.start()
        await bob.connect()
        #expect(await eventually { await bob.cursor(of: "general") != nil })
        await server.stop()
        #expect(await eventually { await model.connectionState != .connected })

        // Queued offline, then cancelled: failed.
        let first = Task { try await model.post("second try") }
        #expect(await eventually { await bob.outbox.count == 1 })
        let id = try #require(await bob.outbox.first?.id)
        #expect(await bob.cancelOutboxEntry(id))
        await #expect(throws: CircleClientError.self) { try await first.value }
        #expect(await eventually {
            guard case .failed(let error) = await model.posts.last?.delivery else { return false }
            return error.code == .cancelled
        })
        await #expect(throws: CircleClientError.self) { try await model.retry("no-such-id") }

        // Sent again with the same id: sending while offline, sent once the server is back.
        let again = Task { try await model.retry(id) }
        #expect(await eventually { await bob.outbox.map(\.id) == [id] })
        #expect(await model.posts.last?.delivery == .sending)
        #expect(await model.posts.last?.id == id)
        server.configuration.port = port
        try await server.start()
        let receipt = try await again.value
        #expect(!receipt.duplicate)
        #expect(await eventually {
            let last = await model.posts.last
            return last?.id == id && last?.post.seq == receipt.seq && last?.delivery == .sent
        })
        let page = try await bob.history(of: "general", limit: 10)
        #expect(page.posts.map(\.id) == [id])
        #expect(await model.posts.count == 1)

        // Refused by the server (too large): failed, and failed again when retried.
        let large = String(repeating: "x", count: 9000)
        _ = try? await model.post(large)
        #expect(await eventually {
            guard case .failed(let error) = await model.posts.last?.delivery else { return false }
            return error.code == .tooLarge
        })
        let refused = try #require(await model.posts.last?.id)
        await #expect(throws: CircleClientError.self) { try await model.retry(refused) }
        #expect(await eventually {
            guard case .failed(let error) = await model.posts.last?.delivery else { return false }
            return error.code == .tooLarge
        })
        #expect(await model.posts.last?.id == refused)
        await model.stop()
        await bob.shutdown()
        await server.stop()
    }

    @Test("reactions cached before the user was known show me once it is: in the client's cache and in a CircleModel")
    func meOnceTheUserIsKnown() async throws {
        let server = TestServer()
        defer { server.remove(); removeStateFiles(server, "shared") }
        try await server.start()
        try await server.createCircle("general", owner: "alice")
        let alice = try await chatClient(server, user: "alice")
        let ann = try await chatClient(server, user: "ann")
        await alice.connect()
        await ann.connect()
        // bob reads the circle on a device's state file: ann's reaction is cached, not his.
        let bob = try await chatClient(server, user: "bob", stateFile: stateFile(server, "shared"))
        let events = await bob.messages(in: "general")
        _ = events
        await bob.connect()
        #expect(await eventually { await bob.cursor(of: "general") != nil })
        let hello = try await alice.post("hello", to: "general")
        let reaction = try await ann.react("👍", to: hello.seq, in: "general")
        #expect(await eventually { await bob.cursor(of: "general") == reaction.seq })
        #expect(await bob.cachedPosts(in: "general").first?.reactions == [CircleReaction(emoji: "👍", users: ["ann"], me: false)])
        await bob.shutdown()

        // ann signs in on that device: until her token is fetched nobody is the viewer.
        let device = try await chatClient(server, user: "ann", stateFile: stateFile(server, "shared"))
        let mine = [CircleReaction(emoji: "👍", users: ["ann"], me: true)]
        #expect(await device.cachedPosts(in: "general").first?.reactions?.first?.me == false)
        let model = await CircleModel(client: device, circle: "general")
        await model.start()
        #expect(await eventually { await model.posts.first?.post.reactions?.first?.me == false })
        await device.connect()
        #expect(await eventually { await device.cachedPosts(in: "general").first?.reactions == mine })
        #expect(await eventually { await model.posts.first?.post.reactions == mine })
        await model.stop()
        await device.shutdown()
        await alice.shutdown()
        await ann.shutdown()
        await server.stop()
    }

    @Test("edits and reactions made while the server restarts all resolve, are stored once, and the reader's cache equals the server's history")
    func changesAcrossServerRestart() async throws {
        let server = TestServer(limits: .init(postsPerSecond: 10_000, postBurst: 10_000))
        defer { server.remove(); removeStateFiles(server, "restart") }
        try await server.start()
        try await server.createCircle("ops", owner: "alice")
        let alice = try await chatClient(server, user: "alice")
        await alice.connect()
        let reader = try await chatClient(server, user: "reader", stateFile: stateFile(server, "restart"))
        let events = await reader.messages(in: "ops")
        _ = events
        await reader.connect()
        // The first join is live-only: the reader joins before the first post.
        #expect(await eventually { await reader.cursor(of: "ops") != nil })
        let target = try await alice.post("react to me", to: "ops")
        let writers = 3
        let perWriter = 30
        let stoppedAt = Box()
        let results = try await withThrowingTaskGroup(of: [Result<PostReceipt, CircleClientError>].self) { group in
            for writer in 0..<writers {
                group.addTask {
                    let client = try await chatClient(server, user: "w\(writer)")
                    await client.connect()
                    var results: [Result<PostReceipt, CircleClientError>] = []
                    func record(_ call: () async throws -> PostReceipt) async {
                        do {
                            results.append(.success(try await call()))
                        } catch let error as CircleClientError {
                            results.append(.failure(error))
                        } catch {
                            results.append(.failure(CircleClientError(.badRequest, "\(error)")))
                        }
                    }
                    await record { try await client.post("w\(writer)", to: "ops") }
                    guard case .success(let own) = results[0] else { return results }
                    for index in 0..<perWriter {
                        switch index % 3 {
                        case 0: await record { try await client.react("👍", to: target.seq, in: "ops") }
                        case 1: await record { try await client.edit(own.seq, in: "ops", text: "w\(writer) v\(index)") }
                        default: await record { try await client.unreact("👍", from: target.seq, in: "ops") }
                        }
                        try await Task.sleep(for: .milliseconds(10))
                    }
                    // Ends with a reaction: every writer's 👍 stays.
                    await record { try await client.react("👍", to: target.seq, in: "ops") }
                    await client.shutdown()
                    return results
                }
            }
            group.addTask {
                // Restart once a fifth of the entries are in: the rest are in flight or queued.
                _ = await eventually { (await reader.cursor(of: "ops") ?? 0) >= Int64(writers * (perWriter + 2) / 5) }
                await stoppedAt.set(await reader.cursor(of: "ops") ?? 0)
                await server.stop()
                try await Task.sleep(for: .milliseconds(300))
                try await server.start()
                return []
            }
            var all: [Result<PostReceipt, CircleClientError>] = []
            for try await partial in group { all += partial }
            return all
        }
        let expectedCount = writers * (perWriter + 2)
        let receipts = results.compactMap { try? $0.get() }
        #expect(receipts.count == expectedCount, "failures: \(results.filter { (try? $0.get()) == nil })")
        #expect(Set(receipts.map(\.seq)).count == receipts.count)
        // Each entry stored once: the stream holds exactly the target post and the writers' entries.
        let last = Int64(1 + expectedCount)
        #expect(try await alice.circleSummaries().first { $0.name == "ops" }?.lastSeq == last)
        #expect(await eventually { await reader.cursor(of: "ops") == last })
        // The restart came while the writers were busy.
        #expect(await stoppedAt.value < last)

        func shape(_ posts: [CirclePost]) -> [String] {
            posts.map { post in
                let reactions = (post.reactions ?? []).map { "\($0.emoji):\($0.users.sorted())" }
                return "\(post.seq) \(post.author) \(post.text ?? "-") \(post.edited.map { "e\($0)" } ?? "") \(reactions)"
            }
        }
        let cached = await reader.cachedPosts(in: "ops")
        let history = try await reader.history(of: "ops", limit: 100)
        #expect(shape(cached) == shape(history.posts))
        #expect(cached.first?.reactions?.first?.users.sorted() == (0..<writers).map { "w\($0)" })
        #expect(Set(cached.dropFirst().map { $0.text ?? "" }) == Set((0..<writers).map { "w\($0) v28" }))
        await reader.shutdown()
        await alice.shutdown()
        await server.stop()
    }

    @Test("CircleModel without a cache loads the newest page of history once connected, reactions included")
    func modelHistoryPage() async throws {
        let server = TestServer(limits: .init(postsPerSecond: 10_000, postBurst: 10_000))
        defer { server.remove() }
        try await server.start()
        try await server.createCircle("general", owner: "alice")
        let alice = try await chatClient(server, user: "alice")
        await alice.connect()
        var last: PostReceipt?
        for index in 1...4 { last = try await alice.post("old \(index)", to: "general") }
        guard let last else { return }
        try await alice.react("🎉", to: last.seq, in: "general")
        let bob = try await chatClient(server, user: "bob")
        await bob.connect()
        let model = await CircleModel(client: bob, circle: "general", historyPage: 3)
        await model.start()
        #expect(await eventually { await model.posts.map(\.post.text) == ["old 2", "old 3", "old 4"] })
        #expect(await model.posts.last?.post.reactions == [CircleReaction(emoji: "🎉", users: ["alice"], me: false)])
        #expect(await model.unread == 3)
        // Live entries apply on top of the page.
        try await alice.unreact("🎉", from: last.seq, in: "general")
        #expect(await eventually { await model.posts.last?.post.reactions?.isEmpty ?? true })
        await model.stop()
        await bob.shutdown()
        await alice.shutdown()
        await server.stop()
    }
}
