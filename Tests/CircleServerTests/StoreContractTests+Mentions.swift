import CircleTestSupport
import CircleWire
import Testing

@testable import CircleServer

/// Mentions resolved when the entry is committed, and the circle list's mention counts, on every store.
extension StoreContractTests {
    /// The circle `name` as `user` lists it.
    func listed(_ store: any CircleStore, _ name: String, by user: String) async throws -> CircleInfo? {
        try await store.circles(visibleTo: user, named: name).first
    }

    /// `@bob` resolves in a private circle only for members; an unknown name, the author and a
    /// non-member do nothing; the entry carries what resolved, in every read, after a restart too.
    @Test(arguments: StoreKind.allCases) func mentionsResolveToMembersOnly(_ kind: StoreKind) async throws {
        try await self.withLocation(kind) { location in
            try await self.withStore(at: location) { store in
                _ = try await store.createCircle(name: "den", owner: "alice", isPrivate: true, createdAt: 1)
                try await store.addMember("bob", to: "den")
                try await store.addMember("carol", to: "den")
                let outcome = try await self.commit(store, self.newPost("den", id: "p1", text: "hi @bob, @carol. and @dave and @alice, bob@example"))
                #expect(outcome.post?.mentions == ["bob", "carol"])
                #expect(outcome.post?.mentionsEveryone == false)
                // No mention: no field.
                let plain = try await self.commit(store, self.newPost("den", id: "p2", text: "nobody @ all"))
                #expect(plain.post?.mentions == nil)
                #expect(try await store.posts(in: "den", after: 0, limit: 10).map(\.mentions) == [["bob", "carol"], nil])
            }
            try await self.withStore(at: location) { store in
                let page = try await store.history(in: "den", before: nil, after: nil, limit: 10, viewer: "bob")
                #expect(page.map(\.mentions) == [["bob", "carol"], nil])
                #expect(try await self.listed(store, "den", by: "bob")?.mentions == 1)
                #expect(try await self.listed(store, "den", by: "carol")?.mentions == 1)
                #expect(try await self.listed(store, "den", by: "alice")?.mentions == 0)
                // The read marker clears the count.
                #expect(try await store.markRead("bob", in: "den", upTo: 1).seq == 1)
                #expect(try await self.listed(store, "den", by: "bob")?.mentions == 0)
                #expect(try await self.listed(store, "den", by: "carol")?.mentions == 1)
            }
        }
    }

    /// In a public circle, a name resolves for members, and for people not banned who have an
    /// account or have posted there.
    @Test(arguments: StoreKind.allCases) func mentionsInAPublicCircleNameAccountsAndPosters(_ kind: StoreKind) async throws {
        try await self.withStore(kind) { store in
            _ = try await store.createCircle(name: "lobby", owner: "alice", isPrivate: false, createdAt: 1)
            _ = try await store.createCircle(name: "attic", owner: "alice", isPrivate: false, createdAt: 1)
            _ = try await store.createAccount(Account(name: "erin", createdAt: 1), passwordHash: nil, invite: nil, now: 1)
            _ = try await store.createAccount(Account(name: "mallory", status: .banned, createdAt: 1), passwordHash: nil, invite: nil, now: 1)
            _ = try await self.commit(store, self.newPost("lobby", author: "mallory", id: "m1", text: "spam"))
            _ = try await self.commit(store, self.newPost("lobby", author: "frank", id: "f1", text: "hi"))
            _ = try await self.commit(store, self.newPost("attic", author: "gina", id: "g1", text: "hi"))
            let outcome = try await self.commit(store, self.newPost("lobby", author: "bob", id: "p1", text: "@erin @mallory @ghost @alice @frank @gina"))
            #expect(outcome.post?.mentions == ["erin", "alice", "frank"])
            #expect(try await self.listed(store, "lobby", by: "frank")?.mentions == 1)
            #expect(try await self.listed(store, "lobby", by: "erin")?.mentions == 1)
            #expect(try await self.listed(store, "lobby", by: "mallory")?.mentions == 0)
            #expect(try await self.listed(store, "lobby", by: "alice")?.mentions == 1)
        }
    }

    /// An edit that adds a mention notifies; one that removes it takes nothing back; adding it
    /// again does not notify twice; deleting the post drops it from the counts.
    @Test(arguments: StoreKind.allCases) func editsAddMentionsButNeverTakeThemBack(_ kind: StoreKind) async throws {
        try await self.withStore(kind) { store in
            _ = try await store.createCircle(name: "den", owner: "alice", isPrivate: true, createdAt: 1)
            for user in ["bob", "carol"] { try await store.addMember(user, to: "den") }
            _ = try await self.commit(store, self.newPost("den", id: "p1", text: "hi @bob"))
            #expect(try await store.markRead("carol", in: "den", upTo: 1).seq == 1)
            #expect(try await store.markRead("bob", in: "den", upTo: 1).seq == 1)

            // seq 2 adds carol (above her marker: counted) and drops bob (kept, and read already).
            let edit = try await self.commit(store, self.change("den", .edit, 1, id: "e1", text: "hi @carol"))
            #expect(edit.post?.mentions == ["carol"])
            #expect(try await self.listed(store, "den", by: "carol")?.mentions == 1)
            #expect(try await self.listed(store, "den", by: "bob")?.mentions == 0)
            let post = try await store.history(in: "den", before: nil, after: nil, limit: 10, viewer: "bob").first
            #expect(post?.mentions == ["carol"])

            // Dropping carol keeps her notification; naming her again (in one batch) adds none.
            let batch = try await store.commit([
                self.change("den", .edit, 1, id: "e2", text: "hi all"),
                self.change("den", .edit, 1, id: "e3", text: "hi @carol and @bob"),
            ])
            #expect(batch.map { $0.post?.mentions } == [nil, ["carol", "bob"]])
            #expect(try await self.listed(store, "den", by: "carol")?.mentions == 1)
            #expect(try await store.markRead("carol", in: "den", upTo: 10).seq == 4)
            #expect(try await self.listed(store, "den", by: "carol")?.mentions == 0)
            // bob was mentioned by the post (seq 1) before: no second notification.
            #expect(try await self.listed(store, "den", by: "bob")?.mentions == 0)

            // A deleted post's mentions count no more, and its tombstone names no one.
            _ = try await self.commit(store, self.newPost("den", id: "p2", text: "@carol again"))
            #expect(try await self.listed(store, "den", by: "carol")?.mentions == 1)
            let deletion = try await self.commit(store, self.change("den", .delete, 5, id: "d1"))
            #expect(self.storedSeq(deletion) == 6)
            #expect(try await self.listed(store, "den", by: "carol")?.mentions == 0)
            let tombstone = try await store.history(in: "den", before: nil, after: nil, limit: 10, viewer: "carol").last
            #expect(tombstone?.deleted == true)
            #expect(tombstone?.mentions == nil)
        }
    }

    /// `@here`/`@everyone` notify every member when the owner or an admin writes it, no one otherwise.
    @Test(arguments: StoreKind.allCases) func everyoneIsForOwnersAndAdmins(_ kind: StoreKind) async throws {
        try await self.withStore(kind) { store in
            _ = try await store.createCircle(name: "den", owner: "alice", isPrivate: true, createdAt: 1)
            for user in ["bob", "carol", "ada"] { try await store.addMember(user, to: "den") }
            _ = try await store.createAccount(Account(name: "ada", role: .admin, createdAt: 1), passwordHash: nil, invite: nil, now: 1)

            let byMember = try await self.commit(store, self.newPost("den", author: "bob", id: "b1", text: "@everyone look"))
            #expect(byMember.post?.mentionsEveryone == false)
            #expect(try await self.listed(store, "den", by: "carol")?.mentions == 0)

            let byOwner = try await self.commit(store, self.newPost("den", id: "a1", text: "@here meeting, @bob"))
            #expect(byOwner.post?.mentionsEveryone == true)
            #expect(byOwner.post?.mentions == ["bob"])
            let byAdmin = try await self.commit(store, self.newPost("den", author: "ada", id: "d1", text: "@everyone!"))
            #expect(byAdmin.post?.mentionsEveryone == true)
            // carol: both; bob: both (one row per post); alice: ada's; ada: alice's.
            #expect(try await self.listed(store, "den", by: "carol")?.mentions == 2)
            #expect(try await self.listed(store, "den", by: "bob")?.mentions == 2)
            #expect(try await self.listed(store, "den", by: "alice")?.mentions == 1)
            #expect(try await self.listed(store, "den", by: "ada")?.mentions == 1)
            let replayed = try await store.posts(in: "den", after: 0, limit: 10)
            #expect(replayed.map(\.mentionsEveryone) == [false, true, true])
        }
    }
}

/// Direct messages found or created by their members, and notification levels, on every store.
extension StoreContractTests {
    func dmKey(_ members: [String], starter: String) throws -> DirectMessageKey {
        try DirectMessageKey.make(members: members, starter: starter).get()
    }

    /// Starting a DM twice, by another of its people or with the names in another order, finds the
    /// same one; it is private to its members, listed with `direct`, and defaults to level `all`.
    @Test(arguments: StoreKind.allCases) func directMessagesAreFoundByTheirMembers(_ kind: StoreKind) async throws {
        try await self.withLocation(kind) { location in
            let first = try await self.withStore(at: location) { store in
                _ = try await store.createCircle(name: "lobby", owner: "alice", isPrivate: false, createdAt: 1)
                let made = try await store.directMessage(try self.dmKey(["bob"], starter: "alice"), starter: "alice", createdAt: 5)
                #expect(made.name.hasPrefix("dm."))
                #expect(made.isPrivate)
                #expect(made.direct == ["alice", "bob"])
                #expect(try await store.members(of: made.name) == ["alice", "bob"])
                let again = try await store.directMessage(try self.dmKey(["alice", "bob"], starter: "bob"), starter: "bob", createdAt: 9)
                #expect(again == made)
                // Another set of people is another DM.
                let three = try await store.directMessage(try self.dmKey(["carol", "bob"], starter: "alice"), starter: "alice", createdAt: 6)
                #expect(three.name != made.name)
                #expect(three.direct == ["alice", "bob", "carol"])
                return made
            }
            try await self.withStore(at: location) { store in
                #expect(try await store.directMessage(try self.dmKey(["alice"], starter: "bob"), starter: "bob", createdAt: 10) == first)
                let listed = try await store.circles(visibleTo: "bob")
                #expect(listed.filter { $0.direct == nil }.map(\.name) == ["lobby"])
                #expect(listed.filter { $0.direct != nil }.count == 2)
                #expect(listed.first { $0.name == first.name }?.summary.notify == .all)
                #expect(listed.first { $0.name == "lobby" }?.summary.notify == .mentions)
                #expect(try await store.circles(visibleTo: "dave").map(\.name) == ["lobby"])
                // Everyone in a DM is a member, so mentions there resolve.
                let post = try await self.commit(store, self.newPost(first.name, author: "bob", id: "b1", text: "@alice hi"))
                #expect(post.post?.mentions == ["alice"])
            }
        }
    }

    @Test func directMessageKeysAreChecked() throws {
        #expect(throws: DirectMessageError.count(1)) { try self.dmKey([], starter: "alice") }
        #expect(throws: DirectMessageError.count(1)) { try self.dmKey(["alice"], starter: "alice") }
        #expect(throws: DirectMessageError.count(10)) { try self.dmKey((1...9).map { "u\($0)" }, starter: "alice") }
        #expect(throws: DirectMessageError.badName("bad name")) { try self.dmKey(["bad name"], starter: "alice") }
        #expect(try self.dmKey((1...8).map { "u\($0)" }, starter: "alice").members.count == 9)
        #expect(try self.dmKey(["bob", "Bob", "bob"], starter: "alice").members == ["Bob", "alice", "bob"])
    }

    /// A level is kept per user and circle; `nil` goes back to the default.
    @Test(arguments: StoreKind.allCases) func notificationLevelsArePerUser(_ kind: StoreKind) async throws {
        try await self.withStore(kind) { store in
            _ = try await store.createCircle(name: "lobby", owner: "alice", isPrivate: false, createdAt: 1)
            try await store.setNotificationLevel(NotificationLevel.none, of: "bob", in: "lobby")
            #expect(try await self.listed(store, "lobby", by: "bob")?.notify == NotificationLevel.none)
            #expect(try await self.listed(store, "lobby", by: "carol")?.notify == nil)
            try await store.setNotificationLevel(.all, of: "bob", in: "lobby")
            #expect(try await self.listed(store, "lobby", by: "bob")?.summary.notify == .all)
            try await store.setNotificationLevel(nil, of: "bob", in: "lobby")
            #expect(try await self.listed(store, "lobby", by: "bob")?.summary.notify == .mentions)
            let error = await #expect(throws: StoreError.self) { try await store.setNotificationLevel(.all, of: "bob", in: "nowhere") }
            #expect(error?.code == .notFound)
        }
    }
}
