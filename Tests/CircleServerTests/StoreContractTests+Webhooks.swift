import CircleTestSupport
import CircleWire
import Foundation
import Testing

@testable import CircleServer

/// ``WebhookStore``'s guarantees, on both stores: the outbox is written with the entries, each
/// queue goes in order, a lease is held by one node.
extension StoreContractTests {
    private func hook(_ id: String, circle: String? = nil, events: Set<WebhookEvent> = Set(WebhookEvent.allCases)) -> Webhook {
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
            #expect(all.first { $0.circle == "general" && $0.seq == 1 }?.id == WebhookDelivery.id(webhook: "wh_all", circle: "general", seq: 1))
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

            // Only each queue's first: general/1 and random/1; node B gets nothing while A holds them.
            let first = try await store.claimDeliveries(node: "A", now: now, lease: 60_000, limit: 10, perWebhook: 10, excluding: [])
            #expect(Set(first.map { "\($0.circle)/\($0.seq)" }) == ["general/1", "random/1"])
            #expect(try await store.claimDeliveries(node: "B", now: now, lease: 60_000, limit: 10, perWebhook: 10, excluding: []).isEmpty)
            // At most perWebhook of one subscription; none of an excluded one.
            #expect(try await store.claimDeliveries(node: "C", now: now + 61_000, lease: 60_000, limit: 10, perWebhook: 1, excluding: []).count == 1)
            #expect(try await store.claimDeliveries(node: "D", now: now + 200_000, lease: 1, limit: 10, perWebhook: 10, excluding: ["wh_a"]).isEmpty)

            // A's lease ended and C took one: A cannot record it any more.
            let taken = try #require(first.first)
            #expect(try await !store.finishDelivery(taken.id, node: "A", result: .delivered(status: 200), at: now + 62_000))

            // Delivered: the queue moves on. A retry waits for its time.
            let later = now + 300_000
            let heads = try await store.claimDeliveries(node: "E", now: later, lease: 60_000, limit: 10, perWebhook: 10, excluding: [])
            #expect(heads.count == 2)
            for head in heads {
                let result: DeliveryResult = head.circle == "general" ? .delivered(status: 204) : .retry(status: 500, error: "the endpoint answered 500", retryAt: later + 5000)
                #expect(try await store.finishDelivery(head.id, node: "E", result: result, at: later))
            }
            let next = try await store.claimDeliveries(node: "E", now: later + 1, lease: 60_000, limit: 10, perWebhook: 10, excluding: [])
            #expect(next.map { "\($0.circle)/\($0.seq)" } == ["general/2"], "random/1 waits for its retry, random/2 behind it")
            let retried = try await store.claimDeliveries(node: "E", now: later + 5000, lease: 60_000, limit: 10, perWebhook: 10, excluding: [])
            #expect(retried.map { "\($0.circle)/\($0.seq)" } == ["random/1"])
            #expect(retried.first?.attempts == 1)
            #expect(retried.first?.lastStatus == 500)

            // Given up: failed, and the subscription disabled with the reason; an admin retries it.
            #expect(try await store.finishDelivery(retried[0].id, node: "E", result: .failed(status: nil, error: "refused", reason: "gave up"), at: later + 5000))
            let disabled = try await store.webhook(id: "wh_a")
            #expect(disabled?.status == .disabled)
            #expect(disabled?.disabledReason == "gave up")
            #expect(try await store.claimDeliveries(node: "E", now: later + 10_000_000, lease: 60_000, limit: 10, perWebhook: 10, excluding: []).isEmpty)
            var enabled = try #require(disabled)
            enabled.status = .active
            enabled.disabledReason = nil
            #expect(try await store.updateWebhook(enabled))
            #expect(try await store.retryDelivery(retried[0].id, of: "wh_a", now: later + 6000))
            #expect(try await !store.retryDelivery(retried[0].id, of: "wh_a", now: later + 6000), "pending now, not failed")
            let again = try await store.claimDeliveries(node: "E", now: later + 10_000_000, lease: 60_000, limit: 10, perWebhook: 10, excluding: [])
            #expect(Set(again.map { "\($0.circle)/\($0.seq)" }) == ["random/1", "general/2"])
            #expect(try await store.deliveryCounts(of: "wh_a") == [.delivered: 1, .pending: 4])
            #expect(try await store.pruneDeliveries(deliveredBefore: later + 1) == 1)
            #expect(try await store.deliveryCounts(of: "wh_a") == [.pending: 4])
        }
    }
}
