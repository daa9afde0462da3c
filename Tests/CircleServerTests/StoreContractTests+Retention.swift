import CircleTestSupport
import CircleWire
import Foundation
import Testing

@testable import CircleServer

/// Retention policies and removing a circle's oldest entries, on every store.
extension StoreContractTests {
    /// Keeping the newest 6 of 10 entries removes 1…4 with their reactions, mention rows, search
    /// index rows and the photo only they had; the rest keep their seqs and new entries follow.
    @Test(arguments: StoreKind.allCases) func retentionRemovesTheOldestEntries(_ kind: StoreKind) async throws {
        try await self.withStore(kind) { store in
            _ = try await store.createCircle(name: "den", owner: "alice", isPrivate: true, createdAt: 1)
            try await store.addMember("bob", to: "den")
            for (upload, media) in [("u1", "m1"), ("u2", "m2")] {
                try await store.createUpload(MediaUpload(id: upload, owner: "alice", length: 3, contentType: "image/png", createdAt: 1))
                _ = try await store.completeUpload(id: upload, media: MediaInfo(id: media, size: 3, contentType: "image/png", createdAt: 2), uploader: "alice")
            }
            #expect(try await store.retentionPolicy(of: "den") == nil)
            let entries: [NewPost] = [
                self.newPost("den", id: "p1", text: "old deploy @bob", attachment: "m1", time: 1_000),
                self.newPost("den", id: "p2", text: "second deploy", attachment: "m2", time: 2_000),
                self.change("den", .react, 1, by: "bob", id: "r1", emoji: "👍", time: 3_000),
                self.change("den", .edit, 2, id: "e1", text: "second deploy, edited", time: 4_000),
                self.newPost("den", id: "p5", text: "fifth deploy", time: 5_000),
                self.newPost("den", id: "p6", text: "sixth deploy", time: 6_000),
                self.newPost("den", id: "p7", text: "seventh deploy", time: 7_000),
                self.newPost("den", id: "p8", text: "eighth deploy", time: 8_000),
                self.newPost("den", id: "p9", text: "kept deploy", attachment: "m2", time: 9_000),
                self.change("den", .react, 9, by: "bob", id: "r2", emoji: "🎉", time: 10_000),
            ]
            for entry in entries { #expect(self.storedSeq(try await self.commit(store, entry)) != nil) }
            #expect(try await self.listed(store, "den", by: "bob")?.mentions == 1)

            let policy = RetentionPolicy(maxAgeDays: nil, keepNewest: 6)
            try await store.setRetentionPolicy(policy, of: "den")
            #expect(try await store.retentionPolicy(of: "den") == policy)
            #expect(try await store.retentionPolicies() == ["den": policy])
            let oldest = try await store.oldestEntries(in: "den", limit: 500)
            #expect(oldest.map(\.seq) == Array(1...10))
            #expect(oldest.first?.time == 1_000)
            let through = try #require(policy.trimThrough(oldest: oldest, lastSeq: 10, now: 20_000))
            #expect(through == 4)

            let trimmed = try await store.trimEntries(in: "den", through: through)
            #expect(trimmed == TrimmedEntries(entries: 4, media: ["m1"]))
            #expect(try await store.posts(in: "den", after: 0, limit: 50).map(\.seq) == Array(5...10))
            #expect(try await store.media(id: "m1") == nil)
            #expect(try await store.media(id: "m2") != nil)
            #expect(try await store.canRead(media: "m2", user: "bob"))
            #expect(try await self.listed(store, "den", by: "bob")?.mentions == 0)
            let found = try await store.search(try SearchQuery.parse("deploy"), reader: "bob", options: SearchOptions(order: .newest))
            #expect(found.hits.map(\.seq).sorted() == [5, 6, 7, 8, 9])
            let history = try await store.history(in: "den", before: nil, after: nil, limit: 50, viewer: "bob")
            #expect(history.first { $0.seq == 9 }?.reactions?.map(\.emoji) == ["🎉"])
            if let sqlite = store as? SQLiteStore { try await SQLiteStoreTests().checkIndex(sqlite) }

            // Done already: nothing more goes. New entries follow the old numbers.
            #expect(try await store.trimEntries(in: "den", through: through) == TrimmedEntries(entries: 0, media: []))
            #expect(self.storedSeq(try await self.commit(store, self.newPost("den", id: "p11", text: "new"))) == 11)
            #expect(try await store.circle(named: "den")?.lastSeq == 11)

            try await store.setRetentionPolicy(nil, of: "den")
            #expect(try await store.retentionPolicy(of: "den") == nil)
            #expect(try await store.retentionPolicies().isEmpty)
        }
    }

    /// The sweeper applies each circle's policy in batches; by age, from the oldest on, up to the
    /// first entry to keep.
    @Test(arguments: StoreKind.allCases) func retentionSweepsEveryCircleWithAPolicy(_ kind: StoreKind) async throws {
        try await self.withStore(kind) { store in
            let day: Int64 = 86_400_000
            let now: Int64 = 100 * day
            for name in ["aged", "counted", "kept"] { _ = try await store.createCircle(name: name, owner: "alice", isPrivate: false, createdAt: 1) }
            for index in 1...12 {
                // 1…8 are 40 days old, 9…12 an hour old.
                let time = index <= 8 ? now - 40 * day : now - 3_600_000
                for name in ["aged", "counted", "kept"] {
                    _ = try await self.commit(store, self.newPost(name, id: "p\(index)", text: "entry \(index)", time: time))
                }
            }
            try await store.setRetentionPolicy(RetentionPolicy(maxAgeDays: 30, keepNewest: nil), of: "aged")
            try await store.setRetentionPolicy(RetentionPolicy(maxAgeDays: nil, keepNewest: 3), of: "counted")
            let directory = FileManager.default.temporaryDirectory.appendingPathComponent("circle-retention-\(UUID().uuidString)").path
            let sweeper = RetentionSweeper(
                store: store, media: MediaFiles(dataDirectory: directory), interval: .seconds(3600), logger: Self.logger, batchSize: 5
            )
            #expect(try await sweeper.sweep(now: now) == 8 + 9)
            #expect(try await store.posts(in: "aged", after: 0, limit: 50).map(\.seq) == Array(9...12))
            #expect(try await store.posts(in: "counted", after: 0, limit: 50).map(\.seq) == Array(10...12))
            #expect(try await store.posts(in: "kept", after: 0, limit: 50).count == 12)
            #expect(try await sweeper.sweep(now: now) == 0)
        }
    }
}
