import CircleTestSupport
import CircleWire
import Crypto
import Testing

@testable import CircleServer

/// Push subscriptions and the push outbox, on every store.
extension StoreContractTests {
    func pushSubscription(_ user: String, _ name: String, at time: Int64 = 1) -> PushSubscription {
        PushSubscription(
            user: user, endpoint: "https://push.example.net/\(name)",
            p256dh: Base64URL.encode(P256.KeyAgreement.PrivateKey().publicKey.x963Representation), auth: Base64URL.encode([UInt8](repeating: 1, count: 16)),
            createdAt: time
        )
    }

    /// Subscriptions belong to their user: listed, replaced by endpoint (moving to another user),
    /// at most `maxPerUser` (the oldest go), deleted one by one or all at once.
    @Test(arguments: StoreKind.allCases) func pushSubscriptionsBelongToTheirUser(_ kind: StoreKind) async throws {
        try await self.withStore(kind) { store in
            for index in 1...3 {
                try await store.putPushSubscription(self.pushSubscription("bob", "b\(index)", at: Int64(index)), maxPerUser: 2)
            }
            #expect(try await store.pushSubscriptions(of: "bob").map(\.endpoint) == ["https://push.example.net/b2", "https://push.example.net/b3"])
            // The same browser signed in as carol: the subscription moves.
            try await store.putPushSubscription(self.pushSubscription("carol", "b3", at: 9), maxPerUser: 2)
            #expect(try await store.pushSubscriptions(of: "bob").map(\.endpoint) == ["https://push.example.net/b2"])
            #expect(try await store.pushSubscriptions(of: "carol").map(\.endpoint) == ["https://push.example.net/b3"])
            #expect(try await store.deletePushSubscription(endpoint: "https://push.example.net/b3", of: "bob") == false)
            #expect(try await store.deletePushSubscription(endpoint: "https://push.example.net/b3", of: "carol") == true)
            try await store.putPushSubscription(self.pushSubscription("bob", "b4", at: 10), maxPerUser: 2)
            #expect(try await store.deletePushSubscriptions(user: "bob") == 2)
            #expect(try await store.pushSubscriptions(of: "bob").isEmpty)
            // The VAPID key is made once: a second candidate does not replace it.
            let first = try await store.serverKey("vapid-p256", candidate: "one")
            #expect(first == "one")
            #expect(try await store.serverKey("vapid-p256", candidate: "two") == "one")
        }
    }

    /// A mention queues a push per subscription in the post's transaction (kept across a
    /// restart); levels and the author are respected; a claim leases each push to one node
    /// until it is recorded; 404/410 delete the subscription and its pushes.
    @Test(arguments: StoreKind.allCases) func pushOutboxIsWrittenWithThePost(_ kind: StoreKind) async throws {
        try await self.withLocation(kind) { location in
            try await self.withStore(at: location) { store in
                _ = try await store.createCircle(name: "den", owner: "alice", isPrivate: true, createdAt: 1)
                for user in ["bob", "carol", "dave"] { try await store.addMember(user, to: "den") }
                try await store.putPushSubscription(self.pushSubscription("bob", "b1"), maxPerUser: 10)
                try await store.putPushSubscription(self.pushSubscription("bob", "b2"), maxPerUser: 10)
                try await store.putPushSubscription(self.pushSubscription("carol", "c1"), maxPerUser: 10)
                try await store.putPushSubscription(self.pushSubscription("alice", "a1"), maxPerUser: 10)
                try await store.setNotificationLevel(NotificationLevel.none, of: "carol", in: "den")
                // dave has no subscription; alice is the author; carol chose none.
                _ = try await self.commit(store, self.newPost("den", id: "p1", text: "@bob @carol @dave @alice hi"))
                _ = try await self.commit(store, self.newPost("den", id: "p2", text: "nobody"))
                #expect(try await store.queuedPushes() == 2)
            }
            try await self.withStore(at: location) { store in
                #expect(try await store.queuedPushes() == 2)
                // Times after the commit (the pushes are due from then).
                let t = Identity.now + 1000
                let claimed = try await store.claimPushes(node: "n1", now: t, lease: 10_000, limit: 10)
                #expect(claimed.map(\.subscription.endpoint).sorted() == ["https://push.example.net/b1", "https://push.example.net/b2"])
                #expect(claimed.allSatisfy { $0.circle == "den" && $0.seq == 1 && $0.kind == .mention && $0.subscription.user == "bob" })
                // Leased: another node gets nothing until the lease ends.
                #expect(try await store.claimPushes(node: "n2", now: t + 1000, lease: 10_000, limit: 10).isEmpty)
                let b1 = try #require(claimed.first { $0.subscription.endpoint.hasSuffix("b1") })
                let b2 = try #require(claimed.first { $0.subscription.endpoint.hasSuffix("b2") })
                try await store.finishPushes([(b1, .retry(at: t + 5000)), (b2, .gone)], node: "n1")
                #expect(try await store.pushSubscriptions(of: "bob").map(\.endpoint) == ["https://push.example.net/b1"])
                #expect(try await store.claimPushes(node: "n2", now: t + 4999, lease: 10_000, limit: 10).isEmpty)
                let retried = try await store.claimPushes(node: "n2", now: t + 5000, lease: 10_000, limit: 10)
                #expect(retried.map(\.attempts) == [1])
                // n1 no longer holds it: its record is ignored.
                try await store.finishPushes([(b1, .delivered)], node: "n1")
                #expect(try await store.queuedPushes() == 1)
                // The lease ends unrecorded (n2 died): another node takes it.
                let taken = try await store.claimPushes(node: "n3", now: t + 5000 + 10_001, lease: 10_000, limit: 10)
                #expect(taken.map(\.id) == retried.map(\.id))
                try await store.finishPushes(taken.map { ($0, PushResult.delivered) }, node: "n3")
                #expect(try await store.queuedPushes() == 0)
            }
        }
    }

    /// Two nodes claiming at once (two dispatchers on one PostgreSQL; SQLite's claims take
    /// turns) never lease the same push: every push is claimed once.
    @Test(arguments: StoreKind.allCases) func concurrentClaimsTakeEachPushOnce(_ kind: StoreKind) async throws {
        try await self.withStore(kind) { store in
            _ = try await store.createCircle(name: "den", owner: "alice", isPrivate: true, createdAt: 1)
            try await store.addMember("bob", to: "den")
            try await store.putPushSubscription(self.pushSubscription("bob", "b1"), maxPerUser: 10)
            for index in 1...30 {
                _ = try await self.commit(store, self.newPost("den", id: "p\(index)", text: "@bob \(index)"))
            }
            #expect(try await store.queuedPushes() == 30)
            let now = Identity.now + 1000
            let claims = try await withThrowingTaskGroup(of: [Int64].self) { group in
                for node in ["n1", "n2", "n3"] {
                    group.addTask {
                        var ids: [Int64] = []
                        while true {
                            let claimed = try await store.claimPushes(node: node, now: now, lease: 60_000, limit: 4)
                            if claimed.isEmpty { return ids }
                            ids += claimed.map(\.id)
                        }
                    }
                }
                var all: [[Int64]] = []
                for try await ids in group { all.append(ids) }
                return all
            }
            let ids = claims.flatMap { $0 }
            #expect(ids.count == 30)
            #expect(Set(ids).count == 30)
        }
    }

    /// A direct message pushes to its other members at level all (the default), not to the author.
    @Test(arguments: StoreKind.allCases) func directMessagesPush(_ kind: StoreKind) async throws {
        try await self.withStore(kind) { store in
            let key = try DirectMessageKey.make(members: ["bob", "carol"], starter: "alice").get()
            let dm = try await store.directMessage(key, starter: "alice", createdAt: 1)
            for user in ["alice", "bob", "carol"] {
                try await store.putPushSubscription(self.pushSubscription(user, user), maxPerUser: 10)
            }
            try await store.setNotificationLevel(.mentions, of: "carol", in: dm.name)
            _ = try await self.commit(store, self.newPost(dm.name, id: "d1", text: "lunch?"))
            let claimed = try await store.claimPushes(node: "n", now: Identity.now + 1000, lease: 1000, limit: 10)
            #expect(claimed.map(\.subscription.user) == ["bob"])
            #expect(claimed.map(\.kind) == [.dm])
        }
    }

    /// Level `all` in a circle pushes every post to who chose it: in a private circle only to
    /// members (a removed member who chose `all` gets nothing); never to the author; a mention
    /// comes once, as a mention.
    @Test(arguments: StoreKind.allCases) func levelAllPushesEveryPostOfACircle(_ kind: StoreKind) async throws {
        try await self.withStore(kind) { store in
            _ = try await store.createCircle(name: "den", owner: "alice", isPrivate: true, createdAt: 1)
            _ = try await store.createCircle(name: "lobby", owner: "alice", isPrivate: false, createdAt: 1)
            for user in ["bob", "carol"] { try await store.addMember(user, to: "den") }
            for user in ["alice", "bob", "carol", "erin"] {
                try await store.putPushSubscription(self.pushSubscription(user, user), maxPerUser: 10)
            }
            for user in ["alice", "bob", "carol"] { try await store.setNotificationLevel(.all, of: user, in: "den") }
            // erin reads the public lobby without being a member; carol leaves den.
            try await store.setNotificationLevel(.all, of: "erin", in: "lobby")
            try await store.removeMember("carol", from: "den")
            _ = try await self.commit(store, self.newPost("den", id: "d1", text: "deploy at five"))
            _ = try await self.commit(store, self.newPost("den", id: "d2", text: "@bob ok?"))
            _ = try await self.commit(store, self.newPost("lobby", id: "l1", text: "welcome"))
            _ = try await self.commit(store, self.change("den", .react, 1, by: "bob", id: "r1", emoji: "👍"))
            let claimed = try await store.claimPushes(node: "n", now: Identity.now + 1000, lease: 1000, limit: 20)
            let described = claimed.map { "\($0.circle)/\($0.seq)/\($0.subscription.user)/\($0.kind.rawValue)" }.sorted()
            #expect(described == ["den/1/bob/post", "den/2/bob/mention", "lobby/1/erin/post"])
        }
    }
}

extension StoreContractTests {
    /// The marks the away rule reads: each node's count of a user's connections and when it was
    /// written; a refresh moves the time of the connected ones of its node only; old marks go.
    @Test(arguments: StoreKind.allCases) func connectionMarksPerUserPerNode(_ kind: StoreKind) async throws {
        try await self.withStore(kind) { store in
            try await store.markConnections(node: "n1", counts: ["bob": 2, "carol": 1], now: 1000)
            try await store.markConnections(node: "n2", counts: ["bob": 1], now: 1100)
            try await store.markConnections(node: "n1", counts: ["carol": 0], now: 1200)
            var marks = try await store.connectionMarks(users: ["bob", "carol", "dave"])
            #expect(marks["dave"] == nil)
            #expect(Set(marks["bob"] ?? []) == [ConnectionMark(node: "n1", connections: 2, seenAt: 1000), ConnectionMark(node: "n2", connections: 1, seenAt: 1100)])
            #expect(marks["carol"] == [ConnectionMark(node: "n1", connections: 0, seenAt: 1200)])
            // An older write does not move a mark's time back.
            try await store.markConnections(node: "n2", counts: ["bob": 1], now: 900)
            #expect(try await store.connectionMarks(users: ["bob"])["bob"]?.first { $0.node == "n2" }?.seenAt == 1100)
            // n1 refreshes: bob's mark there moves, carol's (no connection) does not; marks
            // older than 1150 of any node go (bob's on n2).
            try await store.refreshConnections(node: "n1", now: 5000, forgetBefore: 1150)
            marks = try await store.connectionMarks(users: ["bob", "carol"])
            #expect(marks["bob"] == [ConnectionMark(node: "n1", connections: 2, seenAt: 5000)])
            #expect(marks["carol"] == [ConnectionMark(node: "n1", connections: 0, seenAt: 1200)])
            try await store.refreshConnections(node: "n1", now: 6000, forgetBefore: 5500)
            #expect(try await store.connectionMarks(users: ["bob", "carol"]) == ["bob": [ConnectionMark(node: "n1", connections: 2, seenAt: 6000)]])
        }
    }

    /// When a device was last pushed about a circle (the burst rule): recorded, read, moved only
    /// forward, forgotten when old; a deferred push is due again at its time, attempts unchanged.
    @Test(arguments: StoreKind.allCases) func pushesSentAndDeferred(_ kind: StoreKind) async throws {
        try await self.withStore(kind) { store in
            let den = PushBurstKey(endpoint: "https://push.example.net/b1", circle: "den")
            let yard = PushBurstKey(endpoint: "https://push.example.net/b1", circle: "yard")
            #expect(try await store.lastPushesSent([den, yard]).isEmpty)
            try await store.recordPushesSent([den, yard], at: 1000, forgetBefore: 0)
            try await store.recordPushesSent([den], at: 900, forgetBefore: 0)
            #expect(try await store.lastPushesSent([den, yard]) == [den: 1000, yard: 1000])
            try await store.recordPushesSent([den], at: 3000, forgetBefore: 2000)
            #expect(try await store.lastPushesSent([den, yard]) == [den: 3000])

            _ = try await store.createCircle(name: "den", owner: "alice", isPrivate: true, createdAt: 1)
            try await store.addMember("bob", to: "den")
            try await store.putPushSubscription(self.pushSubscription("bob", "b1"), maxPerUser: 10)
            _ = try await self.commit(store, self.newPost("den", id: "p1", text: "@bob 1"))
            _ = try await self.commit(store, self.newPost("den", id: "p2", text: "@bob 2"))
            let t = Identity.now + 1000
            let claimed = try await store.claimPushes(node: "n1", now: t, lease: 10_000, limit: 10)
            #expect(claimed.count == 2)
            try await store.finishPushes([(claimed[0], .folded), (claimed[1], .deferred(until: t + 5000))], node: "n1")
            #expect(try await store.queuedPushes() == 1)
            #expect(try await store.claimPushes(node: "n1", now: t + 4999, lease: 10_000, limit: 10).isEmpty)
            let again = try await store.claimPushes(node: "n2", now: t + 5000, lease: 10_000, limit: 10)
            #expect(again.map(\.id) == [claimed[1].id])
            #expect(again.map(\.attempts) == [0])
        }
    }
}
