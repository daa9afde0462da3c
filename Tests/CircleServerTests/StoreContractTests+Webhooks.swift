import CircleTestSupport
import CircleWire
import Foundation
import Testing

@testable import CircleServer

/// ``WebhookStore``'s guarantees, on both stores: the outbox is written with the entries, each
/// queue goes in order, a lease is held by one node.
extension StoreContractTests {
    func hook(_ id: String, circle: String? = nil, events: Set<WebhookEvent> = Set(WebhookEvent.allCases)) -> Webhook {
        Webhook(id: id, url: "https://example.com/\(id)", circle: circle, events: events, secrets: ["whsec_a", "whsec_b"], createdBy: "ada", createdAt: 1)
    }

    @Test(arguments: StoreKind.allCases) func webhookDeliveriesAreWrittenWithTheirEntries(_ kind: StoreKind) async throws {
        try await self.withStore(kind) { store in
            _ = try await store.createCircle(name: "general", owner: "alice", isPrivate: false, createdAt: 1)
            _ = try await store.createCircle(name: "random", owner: "alice", isPrivate: false, createdAt: 1)
            try await store.createWebhook(self.hook("wh_all"))
            try await store.createWebhook(self.hook("wh_general_posts", circle: "general", events: [.post]))
            var off = self.hook("wh_off")
            off.status = .disabled
            try await store.createWebhook(off)
            #expect(try await store.webhooks().map(\.id) == ["wh_all", "wh_general_posts", "wh_off"])
            #expect(try await store.webhook(id: "wh_all")?.secrets == ["whsec_a", "whsec_b"])

            _ = try await store.commit([
                self.newPost("general", id: "p1"), self.newPost("random", id: "p2"), self.newPost("nowhere", id: "p3"),
                self.change("general", .edit, 1, id: "e1", text: "edited"),
                self.change("general", .react, 1, by: "bo", id: "r1", emoji: "👍"),
                self.change("general", .edit, 1, by: "mallory", id: "e2", text: "refused: not the author"),
            ])
            let all = try await store.deliveries(of: "wh_all", limit: 10)
            #expect(Set(all.map { "\($0.circle)/\($0.seq)/\($0.event.rawValue)" }) == ["general/1/post", "random/1/post", "general/2/edit", "general/3/reaction"])
            #expect(all.allSatisfy { $0.status == .pending && $0.attempts == 0 })
            let first = try #require(all.first { $0.circle == "general" && $0.seq == 1 })
            #expect(first.id == WebhookDelivery.id(webhook: "wh_all", circle: "general", seq: 1, time: first.createdAt))
            #expect(try await store.deliveries(of: "wh_general_posts", limit: 10).map(\.seq) == [1])
            #expect(try await store.deliveries(of: "wh_off", limit: 10).isEmpty, "a disabled subscription records nothing")
            #expect(try await store.deliveryCounts(of: "wh_all") == [.pending: 4])

            // A duplicate post stores nothing new, so no second delivery.
            _ = try await store.commit([self.newPost("general", id: "p1")])
            #expect(try await store.deliveries(of: "wh_all", limit: 10).count == 4)

            #expect(try await store.deleteWebhook(id: "wh_all"))
            #expect(try await !store.deleteWebhook(id: "wh_all"))
            #expect(try await store.deliveries(of: "wh_all", limit: 10).isEmpty)
        }
    }

    @Test(arguments: StoreKind.allCases) func webhookQueuesGoInOrderAndLeasesHoldOneNode(_ kind: StoreKind) async throws {
        try await self.withStore(kind) { store in
            _ = try await store.createCircle(name: "general", owner: "alice", isPrivate: false, createdAt: 1)
            _ = try await store.createCircle(name: "random", owner: "alice", isPrivate: false, createdAt: 1)
            try await store.createWebhook(self.hook("wh_a"))
            _ = try await store.commit((1...3).map { self.newPost("general", id: "g\($0)") } + (1...2).map { self.newPost("random", id: "r\($0)") })
            let now = Identity.now + 1000
            func names(_ deliveries: [WebhookDelivery]) -> [String] { deliveries.map { "\($0.circle)/\($0.seq)" } }
            func claim(_ node: String, at time: Int64, lease: Int64 = 60_000, queues: Int = 10, perWebhook: Int = 10, perQueue: Int = 10, excluding: [String] = [])
                async throws -> [WebhookDelivery]
            {
                try await store.claimDeliveries(node: node, now: time, lease: lease, queues: queues, perWebhook: perWebhook, perQueue: perQueue, excluding: excluding)
            }

            // A run of each queue from its head, in order; node B gets nothing while A holds them.
            let first = try await claim("A", at: now, perQueue: 2)
            #expect(names(first) == ["general/1", "general/2", "random/1", "random/2"])
            #expect(try await claim("B", at: now).isEmpty, "general/3 waits behind A's run")
            // At most perWebhook queues of one subscription; none of an excluded one.
            #expect(try await claim("C", at: now + 61_000, perWebhook: 1).map(\.circle).allSatisfy { $0 == "general" })
            #expect(try await claim("D", at: now + 200_000, lease: 1, excluding: ["wh_a"]).isEmpty)

            // A's lease ended and C took general's queue: A cannot record those any more.
            #expect(try await store.finishDeliveries([(first[0].id, .delivered(status: 200))], node: "A", at: now + 62_000) == 0)

            // A run recorded together: delivered, then a failure; what follows it is released untried.
            let later = now + 300_000
            let runs = try await claim("E", at: later)
            #expect(names(runs) == ["general/1", "general/2", "general/3", "random/1", "random/2"])
            let recorded = try await store.finishDeliveries(
                [
                    (runs[0].id, .delivered(status: 204)), (runs[1].id, .retry(status: 500, error: "the endpoint answered 500", retryAt: later + 5000)),
                    (runs[2].id, nil), (runs[3].id, .delivered(status: 200)), (runs[4].id, .delivered(status: 200)),
                ],
                node: "E",
                at: later
            )
            #expect(recorded == 4)
            #expect(try await claim("E", at: later + 1).isEmpty, "general/2 waits for its retry, general/3 behind it")
            try await store.renewLeases([runs[1].id], node: "E", until: later + 1)  // not leased: nothing to renew
            let retried = try await claim("E", at: later + 5000)
            #expect(names(retried) == ["general/2", "general/3"])
            #expect(retried.first?.attempts == 1)
            #expect(retried.first?.lastStatus == 500)
            #expect(retried.last?.attempts == 0, "released untried: no attempt counted")
            try await store.renewLeases(retried.map(\.id), node: "E", until: later + 500_000)
            #expect(try await claim("F", at: later + 100_000).isEmpty, "the renewed lease holds")

            // Given up: failed, and the subscription disabled with the reason; an admin retries it.
            #expect(try await store.finishDeliveries([(retried[0].id, .failed(status: nil, error: "refused", reason: "gave up")), (retried[1].id, nil)], node: "E", at: later + 5000) == 1)
            let disabled = try await store.webhook(id: "wh_a")
            #expect(disabled?.status == .disabled)
            #expect(disabled?.disabledReason == "gave up")
            #expect(try await claim("E", at: later + 10_000_000).isEmpty)
            var enabled = try #require(disabled)
            enabled.status = .active
            enabled.disabledReason = nil
            #expect(try await store.updateWebhook(enabled))
            #expect(try await store.retryDelivery(retried[0].id, of: "wh_a", now: later + 6000))
            #expect(try await !store.retryDelivery(retried[0].id, of: "wh_a", now: later + 6000), "pending now, not failed")
            #expect(names(try await claim("E", at: later + 10_000_000)) == ["general/2", "general/3"])
            #expect(try await store.deliveryCounts(of: "wh_a") == [.delivered: 3, .pending: 2])
            #expect(try await store.pruneDeliveries(deliveredBefore: later + 1) == 3)
            #expect(try await store.deliveryCounts(of: "wh_a") == [.pending: 2])
        }
    }

    @Test(arguments: StoreKind.allCases) func webhookClaimsFindEveryQueueBehindABacklog(_ kind: StoreKind) async throws {
        try await self.withStore(kind) { store in
            let circles = ["a", "b", "c", "d"]
            for name in circles { _ = try await store.createCircle(name: name, owner: "alice", isPrivate: false, createdAt: 1) }
            // Three subscriptions, the middle one disabled after its deliveries were recorded.
            for id in ["wh_1", "wh_2", "wh_3"] { try await store.createWebhook(self.hook(id)) }
            // A backlog: 40 posts in every circle (each a delivery for every subscription).
            for _ in 0..<40 {
                _ = try await store.commit(circles.map { self.newPost($0, id: UUID().uuidString) })
            }
            var off = try #require(try await store.webhook(id: "wh_2"))
            off.status = .disabled
            #expect(try await store.updateWebhook(off))
            let now = Identity.now + 1000
            func claim(_ node: String, queues: Int = 100, perWebhook: Int = 100, perQueue: Int = 5, excluding: [String] = []) async throws -> [String] {
                try await store.claimDeliveries(node: node, now: now, lease: 60_000, queues: queues, perWebhook: perWebhook, perQueue: perQueue, excluding: excluding)
                    .map { "\($0.webhook)/\($0.circle)/\($0.seq)" }
            }
            // Every queue of every active subscription, each from its head, perQueue long.
            let first = try await claim("A", excluding: ["wh_3"])
            #expect(first == circles.flatMap { circle in (1...5).map { "wh_1/\(circle)/\($0)" } })
            // The next claim hops over the leased queues and the disabled subscription.
            let second = try await claim("B", perQueue: 3)
            #expect(second == circles.flatMap { circle in (1...3).map { "wh_3/\(circle)/\($0)" } })
            #expect(try await claim("C").isEmpty)

            // Recorded: each queue's head moves on; claims then start from there.
            let leased = try await store.claimDeliveries(node: "D", now: now + 61_000, lease: 60_000, queues: 1, perWebhook: 1, perQueue: 40, excluding: ["wh_3"])
            #expect(leased.count == 40)
            #expect(Set(leased.map(\.circle)).count == 1, "one queue: queues 1")
            #expect(try await store.finishDeliveries(leased.map { ($0.id, .delivered(status: 204)) }, node: "D", at: now + 61_000) == 40)
            let rest = try await store.claimDeliveries(node: "E", now: now + 122_000, lease: 60_000, queues: 100, perWebhook: 2, perQueue: 2, excluding: [])
            let wh1 = rest.filter { $0.webhook == "wh_1" }
            #expect(wh1.count == 4, "at most two queues of one subscription")
            #expect(!wh1.contains { $0.circle == leased[0].circle }, "the delivered queue is empty")
            #expect(rest.filter { $0.webhook == "wh_3" }.count == 4)
            #expect(!rest.contains { $0.webhook == "wh_2" })
        }
    }
}
