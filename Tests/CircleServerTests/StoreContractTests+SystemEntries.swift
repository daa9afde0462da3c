import CircleTestSupport
import CircleWire
import Testing

@testable import CircleServer

/// System entries: a membership change is committed as an entry (``NewPost/event``), and the
/// membership and its entry are written in one transaction, on every store.
extension StoreContractTests {
    func membership(_ circle: String, _ event: CircleSystemEvent, _ member: String, by author: String = "alice", id: String) -> NewPost {
        NewPost(circle: circle, author: author, clientID: id, text: nil, attachment: nil, time: 1_700_000_000_000, event: event, member: member)
    }

    /// Adding commits the member and an `added` entry with the circle's next seq; adding again,
    /// or removing a non-member, writes nothing; removing and leaving write their entries. The
    /// entries are in the stream, in history pages, after a restart, and are not unread.
    @Test(arguments: StoreKind.allCases) func membershipChangesAreEntries(_ kind: StoreKind) async throws {
        try await self.withLocation(kind) { location in
            try await self.withStore(at: location) { store in
                _ = try await store.createCircle(name: "den", owner: "alice", isPrivate: true, createdAt: 1)
                _ = try await self.commit(store, self.newPost("den", id: "p1", text: "hi"))
                let added = try await self.commit(store, self.membership("den", .added, "bob", id: "s1"))
                #expect(self.storedSeq(added) == 2)
                #expect(added.post?.event == .added)
                #expect(added.post?.member == "bob")
                #expect(added.post?.author == "alice")
                #expect(added.post?.text == nil)
                #expect(try await store.isMember("bob", of: "den"))
                // Idempotent: nothing to change, nothing written.
                #expect(try await self.commit(store, self.membership("den", .added, "bob", id: "s2")) == .applied)
                #expect(try await self.commit(store, self.membership("den", .removed, "carol", id: "s3")) == .applied)
                #expect(try await self.commit(store, self.membership("den", .added, "bob", id: "s1")).post?.seq == 2)  // a retry: the original
                // Bob's view: the entry is not unread.
                #expect(try await store.circles(visibleTo: "bob", named: "den").first?.unread == 1)
                let left = try await self.commit(store, self.membership("den", .left, "bob", by: "bob", id: "s4"))
                #expect(self.storedSeq(left) == 3)
                #expect(try await !store.isMember("bob", of: "den"))
                // Several in one batch, each seeing the one before it.
                let batch = try await store.commit([
                    self.membership("den", .added, "carol", id: "s5"),
                    self.membership("den", .added, "carol", id: "s6"),
                    self.membership("den", .removed, "carol", id: "s7"),
                ])
                #expect(self.storedSeqs(batch) == [4, nil, 5])
                #expect(batch[1] == .applied)
                #expect(try await store.members(of: "den") == ["alice"])
            }
            try await self.withStore(at: location) { store in
                let stream = try await store.posts(in: "den", after: 0, limit: 10)
                #expect(stream.map(\.event) == [nil, .added, .left, .added, .removed])
                #expect(stream.map(\.member) == [nil, "bob", "bob", "carol", "carol"])
                #expect(stream.map(\.systemText) == [nil, "alice added bob", "bob left", "alice added carol", "alice removed carol"])
                let page = try await store.history(in: "den", before: nil, after: nil, limit: 10, viewer: "alice")
                #expect(page.map(\.seq) == [1, 2, 3, 4, 5])
                #expect(page.filter(\.isSystem).count == 4)
                #expect(try await store.circles(visibleTo: "alice", named: "den").first?.lastSeq == 5)
            }
        }
    }

    /// No change, reply or reaction may target a system entry: `no_such_post`, as for a missing
    /// post; and a system entry is never indexed for search.
    @Test(arguments: StoreKind.allCases) func systemEntriesAreNotPosts(_ kind: StoreKind) async throws {
        try await self.withStore(kind) { store in
            _ = try await store.createCircle(name: "den", owner: "alice", isPrivate: false, createdAt: 1)
            _ = try await self.commit(store, self.membership("den", .added, "bob", id: "s1"))
            #expect(self.rejection(try await self.commit(store, self.change("den", .edit, 1, id: "e1", text: "x"))) == .noSuchPost)
            #expect(self.rejection(try await self.commit(store, self.change("den", .delete, 1, id: "d1"))) == .noSuchPost)
            #expect(self.rejection(try await self.commit(store, self.change("den", .react, 1, id: "r1", emoji: "👍"))) == .noSuchPost)
            #expect(self.rejection(try await self.commit(store, self.reply("den", to: 1, id: "y1"))) == .noSuchPost)
            #expect(try await store.posts(in: "den", after: 0, limit: 10).count == 1)
        }
    }

    /// With system entries off the membership still changes, and no entry is written; on again,
    /// they are. `GET /v1/circles` shows the switch.
    @Test(arguments: StoreKind.allCases) func systemEntriesSwitch(_ kind: StoreKind) async throws {
        try await self.withStore(kind) { store in
            _ = try await store.createCircle(name: "den", owner: "alice", isPrivate: true, createdAt: 1)
            #expect(try await store.circle(named: "den")?.systemEntries == true)
            try await store.setSystemEntries(false, in: "den")
            #expect(try await store.circle(named: "den")?.systemEntries == false)
            #expect(try await store.circles(visibleTo: "alice", named: "den").first?.systemEntries == false)
            #expect(try await self.commit(store, self.membership("den", .added, "bob", id: "s1")) == .applied)
            #expect(try await store.isMember("bob", of: "den"))
            #expect(try await store.circle(named: "den")?.lastSeq == 0)
            try await store.setSystemEntries(true, in: "den")
            #expect(self.storedSeq(try await self.commit(store, self.membership("den", .removed, "bob", id: "s2"))) == 1)
            #expect(try await !store.isMember("bob", of: "den"))
            await #expect(throws: StoreError.self) { try await store.setSystemEntries(false, in: "nowhere") }
        }
    }

    /// An imported system entry (`recordOnly`) is stored as it was, whatever the membership.
    @Test(arguments: StoreKind.allCases) func recordOnlySystemEntriesChangeNoMembership(_ kind: StoreKind) async throws {
        try await self.withStore(kind) { store in
            _ = try await store.createCircle(name: "den", owner: "alice", isPrivate: true, createdAt: 1)
            try await store.addMember("bob", to: "den")
            var entry = self.membership("den", .added, "bob", id: "s1")
            entry.recordOnly = true
            #expect(self.storedSeq(try await self.commit(store, entry)) == 1)
            var removal = self.membership("den", .removed, "carol", id: "s2")
            removal.recordOnly = true
            #expect(self.storedSeq(try await self.commit(store, removal)) == 2)
            #expect(try await store.members(of: "den") == ["alice", "bob"])
        }
    }

    /// A `member` webhook subscription gets a delivery for a system entry, written with it.
    @Test(arguments: StoreKind.allCases) func systemEntriesAreMemberWebhookEvents(_ kind: StoreKind) async throws {
        try await self.withStore(kind) { store in
            _ = try await store.createCircle(name: "den", owner: "alice", isPrivate: false, createdAt: 1)
            try await store.createWebhook(self.hook("wh_members", events: [.member]))
            try await store.createWebhook(self.hook("wh_posts", events: [.post]))
            _ = try await self.commit(store, self.membership("den", .added, "bob", id: "s1"))
            _ = try await self.commit(store, self.newPost("den", id: "p1"))
            let pending = try await store.deliveries(of: "wh_members", limit: 10)
            #expect(pending.map(\.seq) == [1])
            #expect(pending.map(\.event) == [.member])
            #expect(try await store.deliveries(of: "wh_posts", limit: 10).map(\.seq) == [2])
        }
    }
}
