import CircleWire
import Foundation
import SQLiteNIO
import Testing

@testable import CircleServer

/// The upgrade of webhook deliveries to a table without a rowid (the schema's last step).
extension SQLiteStoreTests {
    @Test func webhookDeliveriesKeepTheirIDsThroughTheUpgrade() async throws {
        try await self.withDatabasePath { path in
            let old = try await SQLiteStore.open(path: path, logger: Self.logger)
            try await old.migrate(upTo: SQLiteStore.schemaVersion - 1)
            _ = try await old.createCircle(name: "general", owner: "ada", isPrivate: false, createdAt: 1)
            try await old.createWebhook(
                Webhook(id: "wh", url: "https://example.com/hook", circle: nil, events: Set(WebhookEvent.allCases), secrets: ["whsec_a"], createdBy: "ada", createdAt: 1)
            )
            _ = try await old.commit([NewPost(circle: "general", author: "ada", clientID: "p1", text: "before", attachment: nil, time: 10)])
            let before = try await old.deliveries(of: "wh", limit: 10)
            #expect(before.map(\.seq) == [1])
            // An id as the previous version made them (the queue first, then the seq).
            let oldID = "msg_3f1c0c6a4e1b9d2e0000000000000001"
            try await old.execute("UPDATE webhook_deliveries SET id = ?", [.text(oldID)])
            try await old.close()

            try await self.withStore(at: path) { store in
                let version = try await store.pragma("user_version")
                #expect(version == .integer(SQLiteInt64(SQLiteStore.schemaVersion)))
                #expect(try await store.deliveries(of: "wh", limit: 10).map(\.id) == [oldID])
                _ = try await store.commit([NewPost(circle: "general", author: "ada", clientID: "p2", text: "after", attachment: nil, time: 20)])
                let after = try await store.deliveries(of: "wh", limit: 10)
                #expect(Set(after.map(\.id)) == [oldID, WebhookDelivery.id(webhook: "wh", circle: "general", seq: 2, time: 20)])
                // The queue goes on in order across the two kinds of id: the old one first.
                let now = Int64(Date().timeIntervalSince1970 * 1000) + 1_000
                let claimed = try await store.claimDeliveries(node: "n1", now: now, lease: 60_000, queues: 4, perWebhook: 4, perQueue: 8, excluding: [])
                #expect(claimed.map(\.seq) == [1, 2])
                #expect(claimed.first?.id == oldID)
                let recorded = try await store.finishDeliveries(claimed.map { ($0.id, DeliveryResult.delivered(status: 204)) }, node: "n1", at: now)
                #expect(recorded == 2)
                #expect(try await store.deliveryCounts(of: "wh") == [.delivered: 2])
            }
        }
    }
}
