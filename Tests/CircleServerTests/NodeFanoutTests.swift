import CircleTestSupport
import CircleWire
import Foundation
import Logging
import Testing

@testable import CircleServer

/// Two servers in this process on one PostgreSQL database: what is posted, typed or revoked
/// through one node reaches the connections of the other, in order and once.
@Suite struct NodeFanoutTests {
    /// Nodes A and B on a fresh database, each with its own store (pool) and data directory.
    final class Nodes: @unchecked Sendable {
        // @unchecked: set up and torn down by the one test that owns it.
        let a: TestServer
        let b: TestServer
        private var pools: [Task<Void, Never>] = []

        /// - Parameter sharedData: both nodes on one data directory (photos, uploads).
        /// - Parameter configure: changes both nodes' configuration.
        init(
            muteA: Bool = false, pollInterval: Duration = .seconds(1), sharedData: Bool = false,
            configure: (inout CircleServerConfiguration) -> Void = { _ in }
        ) async throws {
            self.a = TestServer()
            self.b = TestServer(dataDirectory: sharedData ? self.a.dataDirectory : nil)
            let url = try await PostgresTestServer.shared.freshDatabase()
            var logger = Logger(label: "circle.test.nodes")
            logger.logLevel = .warning
            for (node, muted) in [(self.a, muteA), (self.b, false)] {
                let store = try PostgresStore(url: url, logger: logger)
                self.pools.append(Task { await store.run() })
                node.store = muted ? MutedStore(store) : store
                node.configuration.nodePollInterval = pollInterval
                configure(&node.configuration)
                try await node.start()
            }
        }

        func stop() async {
            await self.a.stop()
            await self.b.stop()
            for pool in self.pools { pool.cancel() }
            for pool in self.pools { await pool.value }
            self.a.remove()
            self.b.remove()
        }
    }

    /// Reads `count` posts of `circle` and returns their seqs, failing on anything out of order.
    static func posts(_ count: Int, on client: TestClient, in circle: String) async throws -> [Int64] {
        var seqs: [Int64] = []
        while seqs.count < count, let message = try await client.next(timeout: .seconds(20)) {
            if case .post(let post) = message, post.circle == circle { seqs.append(post.seq) }
        }
        return seqs
    }

    /// Whether `client` hears that `user` left `circle` (its own connection taken out of it).
    static func leaves(_ circle: String, user: String, on client: TestClient) async throws -> Bool {
        while let message = try await client.next(timeout: .seconds(20)) {
            if case .left(circle, user) = message { return true }
        }
        return false
    }

    /// A counter's value in a `/metrics` page (0 when absent).
    static func counter(_ name: String, in page: String) -> Double {
        for line in page.split(separator: "\n") where line.hasPrefix(name + " ") {
            return Double(line.dropFirst(name.count + 1)) ?? -1
        }
        return 0
    }

    @Test("posts through both nodes reach readers on both, each once and in order")
    func postsAcrossNodes() async throws {
        let nodes = try await Nodes()
        try await nodes.a.createCircle("general", owner: "ann")
        let readerA = try await TestClient.connect(nodes.a, user: "rita")
        let readerB = try await TestClient.connect(nodes.b, user: "rob")
        try await readerA.request { .join("general", id: $0) }
        try await readerB.request { .join("general", id: $0) }

        // Writers on both nodes post at once; their posts interleave in the circle.
        let perWriter = 40
        try await withThrowingTaskGroup(of: Void.self) { group in
            for (node, user) in [(nodes.a, "ann"), (nodes.b, "bea")] {
                group.addTask {
                    let writer = try await TestClient.connect(node, user: user)
                    try await writer.request { .join("general", id: $0, quiet: true) }
                    var ids: [String] = []
                    for index in 0..<perWriter {
                        let id = "\(user)-\(index)"
                        ids.append(id)
                        try await writer.send(.post("\(user) \(index)", to: "general", id: id))
                    }
                    var acked = Set<String>()
                    while acked.count < perWriter, let message = try await writer.next(timeout: .seconds(20)) {
                        if case .ack(let id, .some, _, false) = message { acked.insert(id) }
                    }
                    #expect(acked == Set(ids))
                    await writer.close()
                }
            }
            try await group.waitForAll()
        }
        let expected = Array(Int64(1)...Int64(2 * perWriter))
        #expect(try await Self.posts(2 * perWriter, on: readerA, in: "general") == expected)
        #expect(try await Self.posts(2 * perWriter, on: readerB, in: "general") == expected)
        let metrics = try await nodes.b.http("GET", "/metrics").body
        #expect(Self.counter("circle_node_signals_received_total", in: metrics) >= 1, "\(metrics)")
        #expect(Self.counter("circle_node_signals_sent_total", in: metrics) >= 1, "\(metrics)")

        // A late reader on B resumes from 10 and gets the rest once, in order.
        let late = try await TestClient.connect(nodes.b, user: "lou")
        try await late.request { .join("general", id: $0, since: 10) }
        #expect(try await Self.posts(2 * perWriter - 10, on: late, in: "general") == Array(expected.dropFirst(10)))

        for client in [readerA, readerB, late] { await client.close() }
        await nodes.stop()
    }

    @Test("changes made through one node reach the other in the circle's order; a read marker reaches the user's connection there")
    func changesAndReadMarkersAcrossNodes() async throws {
        let nodes = try await Nodes()
        try await nodes.a.createCircle("general", owner: "ann")
        let annA = try await TestClient.connect(nodes.a, user: "ann")
        let annB = try await TestClient.connect(nodes.b, user: "ann")
        let boB = try await TestClient.connect(nodes.b, user: "bo")
        let cyB = try await TestClient.connect(nodes.b, user: "cy")
        for client in [annA, annB, boB, cyB] { try await client.request { .join("general", id: $0) } }
        let first = try #require(try await annA.request { .post("helo", to: "general", id: $0) }.ackSeq)
        try await annA.request { .edit(first, in: "general", text: "hello", id: $0) }
        try await boB.request { .react("🎉", to: first, in: "general", id: $0) }
        #expect(try await annA.request { .react("🎉", to: first + 1, in: "general", id: $0) }.errorCode == .noSuchPost)
        let reply = try #require(try await boB.request { .post("hi", to: "general", id: $0, replyTo: first) }.ackSeq)

        // Readers on node B (who send nothing meanwhile) end with the same state.
        var timelines: [CircleTimeline] = []
        for client in [annB, cyB] {
            var timeline = CircleTimeline()
            while timeline.lastSeq < reply, let message = try await client.next(timeout: .seconds(20)) {
                if let post = message.post {
                    #expect(post.seq == timeline.lastSeq + 1)
                    timeline.apply(post)
                }
            }
            timelines.append(timeline)
        }
        #expect(timelines[0] == timelines[1])
        #expect(timelines[0].post(first)?.text == "hello")
        #expect(timelines[0].post(first)?.reactions?.first?.users == ["bo"])
        #expect(timelines[0].post(reply)?.replyTo == first)

        // ann reads on node A; her connection on node B hears it.
        #expect(try await annA.request { .read("general", upTo: reply, id: $0) }.ackSeq == reply)
        var marker: Int64?
        while marker == nil, let message = try await annB.next(timeout: .seconds(20)) {
            if case .read("general", let seq) = message { marker = seq }
        }
        #expect(marker == reply)
        for client in [annA, annB, boB, cyB] { await client.close() }
        await nodes.stop()
    }

    @Test("a member added through node A: the system entry reaches a subscriber on node B, in order with the posts")
    func systemEntriesAcrossNodes() async throws {
        let nodes = try await Nodes()
        try await nodes.a.createCircle("hall", owner: "ann")
        let bob = try await TestClient.connect(nodes.b, user: "bob")
        try await bob.request { .join("hall", id: $0) }
        let ann = try await TestClient.connect(nodes.a, user: "ann")
        try await ann.request { .join("hall", id: $0) }
        #expect(try await ann.request { .post("before", to: "hall", id: $0) }.ackSeq == 1)
        let add = try await nodes.a.http("POST", "/v1/circles/hall/members", token: try await nodes.a.token("ann"), json: #"{"user":"cy"}"#)
        #expect(add.status == 200, "\(add.body)")
        #expect(try await ann.request { .post("after", to: "hall", id: $0) }.ackSeq == 3)
        var entries: [CirclePost] = []
        while entries.count < 3, let message = try await bob.next(timeout: .seconds(20)) {
            if case .post(let post) = message, post.circle == "hall" { entries.append(post) }
        }
        #expect(entries.map(\.seq) == [1, 2, 3])
        #expect(entries.map(\.systemText) == [nil, "ann added cy", nil])
        await bob.close()
        await ann.close()
        await nodes.stop()
    }

    @Test("typing and presence on one node are heard on the other; a removed member loses the circle everywhere")
    func ephemeralAndRevocationAcrossNodes() async throws {
        let nodes = try await Nodes()
        try await nodes.a.createCircle("lab", owner: "ann", isPrivate: true)
        let add = try await nodes.a.http("POST", "/v1/circles/lab/members", token: try await nodes.a.token("ann"), json: #"{"user":"bob"}"#)
        #expect(add.status == 200 || add.status == 201 || add.status == 204, "\(add.body)")

        let bob = try await TestClient.connect(nodes.b, user: "bob")
        try await bob.request { .join("lab", id: $0) }
        let ann = try await TestClient.connect(nodes.a, user: "ann")
        try await ann.request { .join("lab", id: $0) }
        try await ann.send(.typing(in: "lab", id: ann.nextID()))

        var heard: [CircleServerMessage] = []
        while heard.count < 2, let message = try await bob.next(timeout: .seconds(20)) {
            switch message {
            case .joined, .typing: heard.append(message)
            default: break
            }
        }
        #expect(heard == [.joined(circle: "lab", user: "ann"), .typing(circle: "lab", user: "ann")])

        // Removing bob through node A takes his connection on node B out of the circle.
        let removed = try await nodes.a.http("DELETE", "/v1/circles/lab/members/bob", token: try await nodes.a.token("ann"))
        #expect(removed.status == 204 || removed.status == 200, "\(removed.body)")
        #expect(try await Self.leaves("lab", user: "bob", on: bob))
        await bob.close()
        await ann.close()
        await nodes.stop()
    }

    @Test("with every signal of node A lost, B's poll still delivers A's posts in order and applies A's removals")
    func pollMakesGoodLostSignals() async throws {
        let nodes = try await Nodes(muteA: true, pollInterval: .milliseconds(100))
        try await nodes.a.createCircle("quiet", owner: "ann", isPrivate: true)
        let token = try await nodes.a.token("ann")
        #expect(try await nodes.a.http("POST", "/v1/circles/quiet/members", token: token, json: #"{"user":"bob"}"#).status < 300)
        let bob = try await TestClient.connect(nodes.b, user: "bob")
        try await bob.request { .join("quiet", id: $0) }
        let ann = try await TestClient.connect(nodes.a, user: "ann")
        try await ann.request { .join("quiet", id: $0, quiet: true) }
        for index in 1...20 {
            #expect(try await ann.request { .post("p\(index)", to: "quiet", id: $0) }.errorCode == nil)
        }
        #expect(try await Self.posts(20, on: bob, in: "quiet") == Array(2...21))  // 1: the system entry "ann added bob"
        // B learned of them only by reading the store; A sent no signal.
        let metrics = try await nodes.b.http("GET", "/metrics").body
        #expect(Self.counter("circle_node_reads_total", in: metrics) >= 1, "\(metrics)")
        #expect(Self.counter("circle_node_signals_received_total", in: metrics) == 0, "\(metrics)")

        #expect(try await nodes.a.http("DELETE", "/v1/circles/quiet/members/bob", token: token).status < 300)
        #expect(try await Self.leaves("quiet", user: "bob", on: bob))
        await bob.close()
        await ann.close()
        await nodes.stop()
    }
}

extension NodeFanoutTests {
    @Test("a photo uploaded through one node downloads through the other; an upload begun on one continues on the other")
    func mediaAcrossNodes() async throws {
        let nodes = try await Nodes(sharedData: true)
        let token = try await nodes.a.token("ann")
        let bytes = TestImage.bytes(200_000, magic: TestImage.pngMagic, seed: 5)
        let posted = try await MediaHTTP(server: nodes.a).exchange(.POST, HTTPAPI.Path.media, token: token, headers: [("Content-Type", "image/png")], body: [bytes])
        #expect(posted.status == 201, "\(posted.text)")
        let media = try #require(HTTPAPI.decode(HTTPAPI.Media.self, from: posted.body))
        let fetched = try await MediaHTTP(server: nodes.b).exchange(.GET, HTTPAPI.Path.mediaItem(media.id), token: token)
        #expect(fetched.status == 200)
        #expect(fetched.body == bytes)

        // A resumable upload: the first half through A, the rest through B.
        let photo = TestImage.bytes(100_000, magic: TestImage.pngMagic, seed: 6)
        let created = try await MediaHTTP(server: nodes.a).exchange(
            .POST, HTTPAPI.Path.uploads, token: token, headers: [("Content-Type", "application/json")],
            body: [Array(HTTPAPI.encode(HTTPAPI.CreateUpload(length: Int64(photo.count), contentType: "image/png")))]
        )
        #expect(created.status == 201, "\(created.text)")
        let upload = try #require(HTTPAPI.decode(HTTPAPI.Upload.self, from: created.body))
        let half = photo.count / 2
        let first = try await MediaHTTP(server: nodes.a).exchange(
            .PATCH, HTTPAPI.Path.upload(upload.upload), token: token,
            headers: [("Upload-Offset", "0"), ("Content-Type", "application/offset+octet-stream")], body: [Array(photo[..<half])]
        )
        #expect(first.status < 300, "\(first.text)")
        let rest = try await MediaHTTP(server: nodes.b).exchange(
            .PATCH, HTTPAPI.Path.upload(upload.upload), token: token,
            headers: [("Upload-Offset", "\(half)"), ("Content-Type", "application/offset+octet-stream")], body: [Array(photo[half...])]
        )
        #expect(rest.status == 201, "\(rest.text)")
        let completed = try #require(HTTPAPI.decode(HTTPAPI.Media.self, from: rest.body))
        #expect(try await MediaHTTP(server: nodes.a).exchange(.GET, HTTPAPI.Path.mediaItem(completed.id), token: token).body == photo)
        await nodes.stop()
    }

    @Test("two nodes on one data directory never append to one upload at once")
    func uploadFileLock() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("circle-flock-\(UUID().uuidString)").path
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let nodeA = MediaFiles(dataDirectory: directory)
        let nodeB = MediaFiles(dataDirectory: directory)
        try nodeA.prepare()
        let (fd, _) = try await nodeA.openUpload("u1")
        await #expect(throws: UploadBusy.self) { _ = try await nodeB.openUpload("u1") }
        await nodeA.close(fd)
        let (again, _) = try await nodeB.openUpload("u1")
        await nodeB.close(again)
    }
}

/// A PostgreSQL store whose node signals are all lost: the other nodes learn what it did only
/// from their poll.
final class MutedStore: SharedCircleStore {
    let base: PostgresStore
    init(_ base: PostgresStore) { self.base = base }

    func notify(_ notifications: [String]) async throws {}
    func listen(connected: @escaping @Sendable () async -> Void, receive: @escaping @Sendable (String) -> Void) async {
        await self.base.listen(connected: connected, receive: receive)
    }
    func lastSeqs(of circles: [String]) async throws -> [String: Int64] { try await self.base.lastSeqs(of: circles) }
    func revocations(after: Int64?) async throws -> (revoked: [(circle: String, user: String)], newest: Int64) {
        try await self.base.revocations(after: after)
    }

    func migrate() async throws { try await self.base.migrate() }
    func serverKey(_ name: String, candidate: String) async throws -> String { try await self.base.serverKey(name, candidate: candidate) }
    func putPushSubscription(_ subscription: PushSubscription, maxPerUser: Int) async throws {
        try await self.base.putPushSubscription(subscription, maxPerUser: maxPerUser)
    }
    func pushSubscriptions(of user: String) async throws -> [PushSubscription] { try await self.base.pushSubscriptions(of: user) }
    func deletePushSubscription(endpoint: String, of user: String) async throws -> Bool {
        try await self.base.deletePushSubscription(endpoint: endpoint, of: user)
    }
    func deletePushSubscriptions(user: String) async throws -> Int { try await self.base.deletePushSubscriptions(user: user) }
    func claimPushes(node: String, now: Int64, lease: Int64, limit: Int) async throws -> [PendingPush] {
        try await self.base.claimPushes(node: node, now: now, lease: lease, limit: limit)
    }
    func finishPushes(_ results: [(push: PendingPush, result: PushResult)], node: String) async throws {
        try await self.base.finishPushes(results, node: node)
    }
    func queuedPushes() async throws -> Int { try await self.base.queuedPushes() }
    func markConnections(node: String, counts: [String: Int], now: Int64) async throws {
        try await self.base.markConnections(node: node, counts: counts, now: now)
    }
    func refreshConnections(node: String, now: Int64, forgetBefore: Int64) async throws {
        try await self.base.refreshConnections(node: node, now: now, forgetBefore: forgetBefore)
    }
    func connectionMarks(users: [String]) async throws -> [String: [ConnectionMark]] { try await self.base.connectionMarks(users: users) }
    func lastPushesSent(_ keys: [PushBurstKey]) async throws -> [PushBurstKey: Int64] { try await self.base.lastPushesSent(keys) }
    func recordPushesSent(_ keys: [PushBurstKey], at: Int64, forgetBefore: Int64) async throws {
        try await self.base.recordPushesSent(keys, at: at, forgetBefore: forgetBefore)
    }
    func livePosts(by author: String, limit: Int) async throws -> [EntryRef] { try await self.base.livePosts(by: author, limit: limit) }
    func reactions(by user: String, limit: Int) async throws -> [ReactionRef] { try await self.base.reactions(by: user, limit: limit) }
    func eraseAccountData(of user: String, removeAccount: Bool, audit: AuditEntry) async throws -> ErasedFiles {
        try await self.base.eraseAccountData(of: user, removeAccount: removeAccount, audit: audit)
    }
    func auditLog(before: Int64?, limit: Int) async throws -> [AuditEntry] { try await self.base.auditLog(before: before, limit: limit) }
    func retentionPolicy(of circle: String) async throws -> RetentionPolicy? { try await self.base.retentionPolicy(of: circle) }
    func setRetentionPolicy(_ policy: RetentionPolicy?, of circle: String) async throws { try await self.base.setRetentionPolicy(policy, of: circle) }
    func retentionPolicies() async throws -> [String: RetentionPolicy] { try await self.base.retentionPolicies() }
    func oldestEntries(in circle: String, limit: Int) async throws -> [RetainedEntry] { try await self.base.oldestEntries(in: circle, limit: limit) }
    func trimEntries(in circle: String, through seq: Int64) async throws -> TrimmedEntries { try await self.base.trimEntries(in: circle, through: seq) }
    func startCircle(_ circle: String, after seq: Int64) async throws { try await self.base.startCircle(circle, after: seq) }
    func createCircle(name: String, owner: String, isPrivate: Bool, createdAt: Int64) async throws -> CircleInfo {
        try await self.base.createCircle(name: name, owner: owner, isPrivate: isPrivate, createdAt: createdAt)
    }
    func circle(named name: String) async throws -> CircleInfo? { try await self.base.circle(named: name) }
    func circles(visibleTo user: String, named name: String?) async throws -> [CircleInfo] {
        try await self.base.circles(visibleTo: user, named: name)
    }
    func directMessage(_ members: DirectMessageKey, starter: String, createdAt: Int64) async throws -> CircleInfo {
        try await self.base.directMessage(members, starter: starter, createdAt: createdAt)
    }
    func setNotificationLevel(_ level: NotificationLevel?, of user: String, in circle: String) async throws {
        try await self.base.setNotificationLevel(level, of: user, in: circle)
    }
    func addMember(_ user: String, to circle: String) async throws { try await self.base.addMember(user, to: circle) }
    func setSystemEntries(_ enabled: Bool, in circle: String) async throws { try await self.base.setSystemEntries(enabled, in: circle) }
    func removeMember(_ user: String, from circle: String) async throws { try await self.base.removeMember(user, from: circle) }
    func isMember(_ user: String, of circle: String) async throws -> Bool { try await self.base.isMember(user, of: circle) }
    func members(of circle: String) async throws -> [String] { try await self.base.members(of: circle) }
    func commit(_ posts: [NewPost]) async throws -> [PostOutcome] { try await self.base.commit(posts) }
    func posts(in circle: String, after: Int64, limit: Int) async throws -> [CirclePost] {
        try await self.base.posts(in: circle, after: after, limit: limit)
    }
    func historySnapshot(in circle: String, before: Int64?, after: Int64?, limit: Int, viewer: String) async throws -> HistorySnapshot {
        try await self.base.historySnapshot(in: circle, before: before, after: after, limit: limit, viewer: viewer)
    }
    func markRead(_ user: String, in circle: String, upTo seq: Int64) async throws -> ReadMarker {
        try await self.base.markRead(user, in: circle, upTo: seq)
    }
    func search(_ query: SearchQuery, reader: String, options: SearchOptions) async throws -> SearchPage {
        try await self.base.search(query, reader: reader, options: options)
    }
    func backfillSearchIndex(batchSize: Int) async throws -> SearchBackfillProgress { try await self.base.backfillSearchIndex(batchSize: batchSize) }
    func createUpload(_ upload: MediaUpload) async throws { try await self.base.createUpload(upload) }
    func upload(id: String) async throws -> MediaUpload? { try await self.base.upload(id: id) }
    func deleteUpload(id: String) async throws { try await self.base.deleteUpload(id: id) }
    func uploads(createdBefore: Int64) async throws -> [String] { try await self.base.uploads(createdBefore: createdBefore) }
    func pendingUploadCount(owner: String) async throws -> Int { try await self.base.pendingUploadCount(owner: owner) }
    func completeUpload(id: String, media: MediaInfo, uploader: String) async throws -> MediaInfo {
        try await self.base.completeUpload(id: id, media: media, uploader: uploader)
    }
    func media(id: String) async throws -> MediaInfo? { try await self.base.media(id: id) }
    func isUploader(_ user: String, of media: String) async throws -> Bool { try await self.base.isUploader(user, of: media) }
    func canRead(media id: String, user: String) async throws -> Bool { try await self.base.canRead(media: id, user: user) }
    func close() async throws { try await self.base.close() }
}

/// The identity half, as the base store does it.
extension MutedStore {
    func accountCount() async throws -> Int { try await self.base.accountCount() }
    func account(named name: String) async throws -> Account? { try await self.base.account(named: name) }
    func accounts() async throws -> [Account] { try await self.base.accounts() }
    func createAccount(_ account: Account, passwordHash: String?, invite: String?, now: Int64) async throws -> Account { try await self.base.createAccount(account, passwordHash: passwordHash, invite: invite, now: now) }
    func updateAccount(_ name: String, _ change: AccountChange) async throws -> Account { try await self.base.updateAccount(name, change) }
    func passwordHash(of name: String) async throws -> String? { try await self.base.passwordHash(of: name) }
    func setPasswordHash(_ hash: String?, of name: String) async throws { try await self.base.setPasswordHash(hash, of: name) }
    func touchAccount(_ name: String, at time: Int64) async throws { try await self.base.touchAccount(name, at: time) }
    func createSession(_ session: StoredSession) async throws { try await self.base.createSession(session) }
    func session(tokenHash: String, now: Int64) async throws -> StoredSession? { try await self.base.session(tokenHash: tokenHash, now: now) }
    func touchSession(id: String, at time: Int64) async throws { try await self.base.touchSession(id: id, at: time) }
    func sessions(of user: String) async throws -> [StoredSession] { try await self.base.sessions(of: user) }
    @discardableResult
    func deleteSessions(of user: String, id: String?, kind: SessionKind?) async throws -> [String] { try await self.base.deleteSessions(of: user, id: id, kind: kind) }
    func deleteExpiredSessions(now: Int64, idleBefore: Int64) async throws -> Int { try await self.base.deleteExpiredSessions(now: now, idleBefore: idleBefore) }
    func createInvite(_ invite: Invite) async throws { try await self.base.createInvite(invite) }
    func invites() async throws -> [Invite] { try await self.base.invites() }
    func invite(tokenHash: String) async throws -> Invite? { try await self.base.invite(tokenHash: tokenHash) }
    func revokeInvite(id: String) async throws -> Bool { try await self.base.revokeInvite(id: id) }
    func signInFailures(keys: [String]) async throws -> [String: SignInFailures] { try await self.base.signInFailures(keys: keys) }
    func recordSignInFailure(keys: [String], at time: Int64) async throws { try await self.base.recordSignInFailure(keys: keys, at: time) }
    func clearSignInFailures(keys: [String]) async throws { try await self.base.clearSignInFailures(keys: keys) }
    func addPasskey(_ passkey: StoredPasskey) async throws { try await self.base.addPasskey(passkey) }
    func passkeys(of user: String) async throws -> [StoredPasskey] { try await self.base.passkeys(of: user) }
    func passkey(id: String) async throws -> StoredPasskey? { try await self.base.passkey(id: id) }
    func usePasskey(id: String, signCount: Int64, at time: Int64) async throws { try await self.base.usePasskey(id: id, signCount: signCount, at: time) }
    func deletePasskey(id: String, of user: String) async throws -> Bool { try await self.base.deletePasskey(id: id, of: user) }
    func createChallenge(_ challenge: StoredChallenge, now: Int64, outstandingLimit: Int) async throws -> Bool {
        try await self.base.createChallenge(challenge, now: now, outstandingLimit: outstandingLimit)
    }
    func takeChallenge(id: String, now: Int64) async throws -> StoredChallenge? { try await self.base.takeChallenge(id: id, now: now) }
    func challenge(id: String, now: Int64) async throws -> StoredChallenge? { try await self.base.challenge(id: id, now: now) }
    func approveChallenge(id: String, user: String, now: Int64) async throws -> Bool { try await self.base.approveChallenge(id: id, user: user, now: now) }
    func accountEvents(after: Int64?) async throws -> (events: [AccountEvent], newest: Int64) { try await self.base.accountEvents(after: after) }
}

extension MutedStore {
    func createWebhook(_ webhook: Webhook) async throws { try await self.base.createWebhook(webhook) }
    func webhooks() async throws -> [Webhook] { try await self.base.webhooks() }
    func webhook(id: String) async throws -> Webhook? { try await self.base.webhook(id: id) }
    func updateWebhook(_ webhook: Webhook) async throws -> Bool { try await self.base.updateWebhook(webhook) }
    func deleteWebhook(id: String) async throws -> Bool { try await self.base.deleteWebhook(id: id) }
    func deliveries(of webhook: String, limit: Int) async throws -> [WebhookDelivery] { try await self.base.deliveries(of: webhook, limit: limit) }
    func deliveryCounts(of webhook: String) async throws -> [WebhookDeliveryStatus: Int] { try await self.base.deliveryCounts(of: webhook) }
    func claimDeliveries(node: String, now: Int64, lease: Int64, queues: Int, perWebhook: Int, perQueue: Int, excluding: [String]) async throws
        -> [WebhookDelivery]
    {
        try await self.base.claimDeliveries(node: node, now: now, lease: lease, queues: queues, perWebhook: perWebhook, perQueue: perQueue, excluding: excluding)
    }
    func renewLeases(_ ids: [String], node: String, until: Int64) async throws { try await self.base.renewLeases(ids, node: node, until: until) }
    func finishDeliveries(_ results: [(id: String, result: DeliveryResult?)], node: String, at now: Int64) async throws -> Int {
        try await self.base.finishDeliveries(results, node: node, at: now)
    }
    func retryDelivery(_ id: String, of webhook: String, now: Int64) async throws -> Bool { try await self.base.retryDelivery(id, of: webhook, now: now) }
    func pruneDeliveries(deliveredBefore time: Int64) async throws -> Int { try await self.base.pruneDeliveries(deliveredBefore: time) }
    func createAPIKey(_ key: APIKey) async throws { try await self.base.createAPIKey(key) }
    func apiKeys() async throws -> [APIKey] { try await self.base.apiKeys() }
    func apiKey(id: String) async throws -> APIKey? { try await self.base.apiKey(id: id) }
    func revokeAPIKey(id: String, at time: Int64) async throws -> Bool { try await self.base.revokeAPIKey(id: id, at: time) }
    func touchAPIKey(id: String, at time: Int64) async throws { try await self.base.touchAPIKey(id: id, at: time) }
    func setPublishHook(_ hook: PublishHook) async throws { try await self.base.setPublishHook(hook) }
    func publishHooks() async throws -> [PublishHook] { try await self.base.publishHooks() }
    func deletePublishHook(circle: String) async throws -> Bool { try await self.base.deletePublishHook(circle: circle) }
    func storedEntry(circle: String, author: String, clientID: String) async throws -> CirclePost? {
        try await self.base.storedEntry(circle: circle, author: author, clientID: clientID)
    }
    func setReadOnly(_ circle: String, _ readOnly: Bool, by user: String, at time: Int64) async throws {
        try await self.base.setReadOnly(circle, readOnly, by: user, at: time)
    }
    func readOnlyCircles() async throws -> [String] { try await self.base.readOnlyCircles() }
    func logDisconnect(of user: String, at time: Int64) async throws { try await self.base.logDisconnect(of: user, at: time) }
}
