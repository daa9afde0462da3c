import CircleTestSupport
import CircleWire
import Foundation
import Logging
import PostgresNIO
import Testing

@testable import CircleServer

/// What only the PostgreSQL store has: its URL, several stores (nodes) on one database, migrations
/// racing at start, and a database that is not there.
@Suite struct PostgresStoreTests {
    static let logger = StoreContractTests.logger

    @Test func urlForms() throws {
        let full = try PostgresStore.Configuration(url: "postgres://al%40ice:p%2Fw@db.example:6543/chat?sslmode=verify-full&sslrootcert=/etc/ca.pem")
        #expect(full == .init(host: "db.example", port: 6543, user: "al@ice", password: "p/w", database: "chat", tlsMode: .verifyFull, rootCertificatePath: "/etc/ca.pem"))
        #expect(full.redacted == "postgres://al@ice:***@db.example:6543/chat?sslmode=verify-full")
        let short = try PostgresStore.Configuration(url: "postgresql://circle@localhost")
        #expect(short == .init(host: "localhost", port: 5432, user: "circle", password: nil, database: "circle", tlsMode: .prefer))

        let refusals: [(String, String)] = [
            ("mysql://a@b/c", "scheme is mysql"),
            ("postgres:///db", "names no host"),
            ("postgres://host/db", "names no user"),
            ("postgres://u@h/db?sslmode=maybe", "sslmode=maybe is not one of disable, prefer, require, verify-full"),
            ("postgres://u@h/db?pool=3", "parameter pool is not supported"),
            ("postgres://u:secret@h:99999/db", "port"),
        ]
        for (url, expected) in refusals {
            let error = #expect(throws: PostgresStore.ConfigurationError.self) { try PostgresStore.Configuration(url: url) }
            #expect(error?.message.contains(expected) == true, "\(url): \(error?.message ?? "no error")")
            #expect(error?.message.contains("secret") == false)
        }
    }

    /// Runs `body` with `count` stores on one fresh database, as `count` nodes would have them.
    func withNodes<T>(_ count: Int, url: String? = nil, migrate: Bool = true, _ body: ([PostgresStore]) async throws -> T) async throws -> T {
        let databaseURL: String
        if let url {
            databaseURL = url
        } else {
            databaseURL = try await PostgresTestServer.shared.freshDatabase()
        }
        let stores = try (0..<count).map { _ in try PostgresStore(url: databaseURL, logger: Self.logger) }
        let pools = stores.map { store in Task { await store.run() } }
        defer { pools.forEach { $0.cancel() } }
        if migrate {
            for store in stores { try await store.migrate() }
        }
        let result = try await body(stores)
        for pool in pools {
            pool.cancel()
            await pool.value
        }
        return result
    }

    @Test func nodesMigratingAtOnceApplyEachStepOnce() async throws {
        try await self.withNodes(4, migrate: false) { stores in
            try await withThrowingTaskGroup(of: Void.self) { group in
                for store in stores { group.addTask { try await store.migrate() } }
                try await group.waitForAll()
            }
            _ = try await stores[0].createCircle(name: "lobby", owner: "alice", isPrivate: false, createdAt: 1)
            #expect(try await stores[3].circle(named: "lobby")?.owner == "alice")
            try await stores[2].migrate()  // up to date: nothing to do, data kept
            #expect(try await stores[1].circles(visibleTo: "bob").map(\.name) == ["lobby"])
        }
    }

    /// Three nodes commit to one circle at once, with the same keys retried through other nodes:
    /// sequence numbers stay 1…N without gaps, every key is stored once, and every retry gets the original.
    @Test func nodesCommittingAtOnceStayGaplessAndExactlyOnce() async throws {
        try await self.withNodes(3) { stores in
            _ = try await stores[0].createCircle(name: "busy", owner: "alice", isPrivate: false, createdAt: 1)
            let writers = 6
            let postsPerWriter = 60
            let outcomes = try await withThrowingTaskGroup(of: [PostOutcome].self) { group in
                for writer in 0..<writers {
                    for node in 0..<stores.count {
                        // Every writer sends each of its posts through every node: one is stored, two are retries.
                        let store = stores[(writer + node) % stores.count]
                        group.addTask {
                            var outcomes: [PostOutcome] = []
                            for index in stride(from: 0, to: postsPerWriter, by: 3) {
                                let batch = (index..<(index + 3)).map {
                                    NewPost(circle: "busy", author: "w\(writer)", clientID: "\($0)", text: "post \($0)", attachment: nil, time: Int64($0))
                                }
                                outcomes += try await store.commit(batch)
                            }
                            return outcomes
                        }
                    }
                }
                return try await group.reduce(into: [PostOutcome]()) { $0 += $1 }
            }
            // Every answer, stored or duplicate, names the one stored entry of its key. (Under load
            // a commit attempt can pass its timeout after writing; the store's retry then answers
            // `.duplicate` of that write, as documented, so a key may have no `.stored` answer.)
            var entries: [String: CirclePost] = [:]
            var stored = 0
            for outcome in outcomes {
                let post: CirclePost
                switch outcome {
                case .stored(let value):
                    stored += 1
                    post = value
                case .duplicate(let value): post = value
                default:
                    Issue.record("an answer that is neither stored nor duplicate: \(outcome)")
                    continue
                }
                let key = "\(post.author)/\(post.id)"
                if let known = entries[key] { #expect(known == post, "two entries for \(key)") } else { entries[key] = post }
            }
            #expect(stored <= writers * postsPerWriter, "stored at most once each")
            #expect(entries.count == writers * postsPerWriter)
            #expect(entries.values.map(\.seq).sorted() == Array(1...Int64(writers * postsPerWriter)))
            let read = try await stores[2].posts(in: "busy", after: 0, limit: 1_000)
            #expect(read.map(\.seq) == Array(1...Int64(writers * postsPerWriter)))
            #expect(try await stores[1].circle(named: "busy")?.lastSeq == Int64(writers * postsPerWriter))
        }
    }

    /// Three nodes react to one post at once, 30 users with 30 different emoji, each reaction sent
    /// through every node: the circle's row lock serialises the changes, so exactly 20 distinct
    /// emoji get in (each stored once, its retries duplicates), the others are refused, and the
    /// sequence numbers stay gapless.
    @Test func nodesReactingAtOnceKeepTheReactionLimit() async throws {
        let emoji = (0..<30).compactMap { Unicode.Scalar(0x1F600 + $0).map { String(Character($0)) } }
        #expect(emoji.count == 30)
        try await self.withNodes(3) { stores in
            _ = try await stores[0].createCircle(name: "busy", owner: "alice", isPrivate: false, createdAt: 1)
            _ = try await stores[0].commit([NewPost(circle: "busy", author: "alice", clientID: "p", text: "react!", attachment: nil, time: 1)])
            let outcomes = try await withThrowingTaskGroup(of: [(String, PostOutcome)].self) { group in
                for node in 0..<stores.count {
                    group.addTask {
                        var outcomes: [(String, PostOutcome)] = []
                        for index in 0..<emoji.count {
                            let user = (index + node * 10) % emoji.count  // each node in another order
                            let react = NewPost(
                                circle: "busy", author: "u\(user)", clientID: "r", text: nil, attachment: nil, time: 2,
                                change: .react, target: 1, emoji: emoji[user])
                            outcomes += try await stores[node].commit([react]).map { ("u\(user)", $0) }
                        }
                        return outcomes
                    }
                }
                return try await group.reduce(into: [(String, PostOutcome)]()) { $0 += $1 }
            }
            var stored: [String: Int64] = [:]
            var refused = Set<String>()
            for (user, outcome) in outcomes {
                switch outcome {
                case .stored(let entry):
                    #expect(stored.updateValue(entry.seq, forKey: user) == nil, "\(user) stored twice")
                case .duplicate(let entry):
                    #expect(entry.change == .react)
                case .rejected(let code, _):
                    #expect(code == .tooManyReactions)
                    refused.insert(user)
                case .noSuchCircle, .applied:
                    Issue.record("no circle, or not a reaction: \(outcome)")
                }
            }
            #expect(stored.count == StoreLimits.maxReactionsPerPost)
            #expect(refused.count == emoji.count - StoreLimits.maxReactionsPerPost)
            #expect(refused.isDisjoint(with: stored.keys))
            #expect(stored.values.sorted() == Array(2...Int64(1 + StoreLimits.maxReactionsPerPost)))
            let post = try await stores[1].history(in: "busy", before: nil, after: nil, limit: 1, viewer: "u0").first
            #expect(post?.reactions?.count == StoreLimits.maxReactionsPerPost)
            #expect(Set(post?.reactions?.flatMap(\.users) ?? []) == Set(stored.keys))
            #expect(try await stores[2].circle(named: "busy")?.lastSeq == Int64(1 + StoreLimits.maxReactionsPerPost))
        }
    }

    @Test func newerSchemaIsRefused() async throws {
        let url = try await PostgresTestServer.shared.freshDatabase()
        try await self.withNodes(1, url: url) { stores in
            _ = try await stores[0].createCircle(name: "lobby", owner: "alice", isPrivate: false, createdAt: 1)
            try await stores[0].client.query("UPDATE circle_schema SET version = \(PostgresStore.schemaVersion + 1)")
            let error = await #expect(throws: StoreError.self) { try await stores[0].migrate() }
            #expect(error?.code == .unavailable)
            #expect(error?.message.contains("newer") == true)
        }
    }

    @Test func unreachableDatabaseIsUnavailable() async throws {
        // A port nothing listens on (bound, then closed).
        let port = try ServerProcess.freePort()
        let store = try PostgresStore(
            configuration: .init(host: "127.0.0.1", port: port, user: "circle", password: "x", database: "circle", tlsMode: .disable),
            commitTruthDeadline: .milliseconds(500),
            commitRetryDelay: .milliseconds(100),
            operationTimeout: .seconds(3),
            logger: Self.logger
        )
        let pool = Task { await store.run() }
        defer { pool.cancel() }
        let error = await #expect(throws: StoreError.self) { try await store.circle(named: "lobby") }
        #expect(error?.code == .unavailable)
        #expect(error?.message.contains("unreachable") == true)
        // A commit cannot learn its outcome either: it says so, after its deadline.
        let commitError = await #expect(throws: StoreError.self) {
            try await store.commit([NewPost(circle: "lobby", author: "alice", clientID: "1", text: "hi", attachment: nil, time: 1)])
        }
        #expect(commitError?.message.contains("unknown") == true)
    }

    /// PostgreSQL restarted as after a crash while 4 writers commit: every commit call still
    /// answers (the store commits again until it learns the outcome), every post is stored exactly
    /// once, sequence numbers stay 1…N, and every answer agrees with what is stored.
    @Test func commitsAcrossADatabaseRestartAreExactlyOnce() async throws {
        let database = try await PostgresTestServer.startPrivate()
        defer { Task { try? await database.stop() } }
        let store = try PostgresStore(
            configuration: .init(url: database.url + "?sslmode=disable"),
            commitRetryDelay: .milliseconds(100),
            // The default bound: a freshly started PostgreSQL on a loaded machine can take seconds
            // to migrate, and a commit that hangs after the restart is cut at this bound.
            operationTimeout: .seconds(10),
            logger: Self.logger
        )
        let pool = Task { await store.run() }
        defer { pool.cancel() }
        try await store.migrate()
        _ = try await store.createCircle(name: "storm", owner: "alice", isPrivate: false, createdAt: 1)

        let writers = 4
        let postsPerWriter = 120
        let restartAfter = AsyncStream<Void>.makeStream()
        let answers = try await withThrowingTaskGroup(of: [PostOutcome].self) { group in
            for writer in 0..<writers {
                group.addTask {
                    var outcomes: [PostOutcome] = []
                    for index in 0..<postsPerWriter {
                        if writer == 0 && index == postsPerWriter / 3 { restartAfter.continuation.yield() }
                        let post = NewPost(circle: "storm", author: "w\(writer)", clientID: "\(index)", text: "p\(index)", attachment: nil, time: Int64(index))
                        outcomes += try await store.commit([post])
                    }
                    return outcomes
                }
            }
            group.addTask {
                for await _ in restartAfter.stream {
                    try await database.restart()
                    break
                }
                return []
            }
            return try await group.reduce(into: [PostOutcome]()) { $0 += $1 }
        }
        restartAfter.continuation.finish()

        let stored = try await store.posts(in: "storm", after: 0, limit: 1_000)
        #expect(stored.map(\.seq) == Array(1...Int64(writers * postsPerWriter)))
        #expect(Set(stored.map { "\($0.author)/\($0.id)" }).count == writers * postsPerWriter)
        // Every answer is the stored post: a commit whose connection was cut may come back as a duplicate of itself.
        let byKey = Dictionary(uniqueKeysWithValues: stored.map { ("\($0.author)/\($0.id)", $0) })
        #expect(answers.count == writers * postsPerWriter)
        for answer in answers {
            guard let post = answer.post else {
                Issue.record("no post in \(answer)")
                continue
            }
            #expect(byKey["\(post.author)/\(post.id)"] == post)
        }
    }
}
