import CircleTestSupport
import CircleWire
import Testing

@testable import CircleServer

/// The order of a post's reactions and the one form of an emoji, on every store.
extension StoreContractTests {
    /// The reactions of post `seq` in `circle`, as `viewer` reads them in a history page.
    func reactions(_ store: any CircleStore, _ circle: String = "lobby", of seq: Int64, viewer: String = "carol") async throws -> [CircleReaction] {
        let page = try await store.history(in: circle, before: nil, after: nil, limit: 50, viewer: viewer)
        return page.first { $0.seq == seq }?.reactions ?? []
    }

    /// alice 🎉, bob 🇫🇷, bob 🎉, then alice takes her 🎉 back: 🎉 was used first and stays first,
    /// whether the entries come one by one, in one batch, or before a restart.
    @Test(arguments: StoreKind.allCases) func anEmojiKeepsItsPlaceWhenItsFirstUserTakesItBack(_ kind: StoreKind) async throws {
        let expected = [
            CircleReaction(emoji: "🎉", users: ["bob"], me: false),
            CircleReaction(emoji: "🇫🇷", users: ["bob"], me: false),
        ]
        try await self.withLocation(kind) { location in
            try await self.withStore(at: location) { store in
                _ = try await store.createCircle(name: "lobby", owner: "alice", isPrivate: false, createdAt: 1)
                _ = try await store.commit([self.newPost("lobby", id: "p1"), self.newPost("lobby", id: "p2")])
                // Post 1: one entry per commit, so each reads what the one before stored.
                for entry in [
                    self.change("lobby", .react, 1, by: "alice", id: "a1", emoji: "🎉"),
                    self.change("lobby", .react, 1, by: "bob", id: "b1", emoji: "🇫🇷"),
                    self.change("lobby", .react, 1, by: "bob", id: "b2", emoji: "🎉"),
                ] {
                    #expect(self.storedSeq(try await self.commit(store, entry)) != nil)
                }
                #expect(try await self.reactions(store, of: 1).map(\.emoji) == ["🎉", "🇫🇷"])
                #expect(self.storedSeq(try await self.commit(store, self.change("lobby", .unreact, 1, by: "alice", id: "a2", emoji: "🎉"))) != nil)
                #expect(try await self.reactions(store, of: 1) == expected)

                // Post 2: the same four in one batch.
                let batch = try await store.commit([
                    self.change("lobby", .react, 2, by: "alice", id: "a3", emoji: "🎉"),
                    self.change("lobby", .react, 2, by: "bob", id: "b3", emoji: "🇫🇷"),
                    self.change("lobby", .react, 2, by: "bob", id: "b4", emoji: "🎉"),
                    self.change("lobby", .unreact, 2, by: "alice", id: "a4", emoji: "🎉"),
                ])
                #expect(batch.allSatisfy { self.storedSeq($0) != nil })
                #expect(try await self.reactions(store, of: 2) == expected)
            }
            // After a restart, and for reactions added then.
            try await self.withStore(at: location) { store in
                #expect(try await self.reactions(store, of: 1) == expected)
                _ = try await store.commit([
                    self.change("lobby", .react, 1, by: "carol", id: "c1", emoji: "🇫🇷"),
                    self.change("lobby", .react, 1, by: "carol", id: "c2", emoji: "👀"),
                    self.change("lobby", .react, 1, by: "alice", id: "a5", emoji: "🎉"),
                ])
                #expect(try await self.reactions(store, of: 1) == [
                    CircleReaction(emoji: "🎉", users: ["bob", "alice"], me: false),
                    CircleReaction(emoji: "🇫🇷", users: ["bob", "carol"], me: true),
                    CircleReaction(emoji: "👀", users: ["carol"], me: true),
                ])
                // Once nobody's 🎉 stands, it is gone; used again, it comes last, as a client that
                // watched the entries live shows it.
                _ = try await store.commit([
                    self.change("lobby", .unreact, 1, by: "bob", id: "b5", emoji: "🎉"),
                    self.change("lobby", .unreact, 1, by: "alice", id: "a6", emoji: "🎉"),
                ])
                #expect(self.storedSeq(try await self.commit(store, self.change("lobby", .react, 1, by: "alice", id: "a7", emoji: "🎉"))) != nil)
                let reactions = try await self.reactions(store, of: 1)
                #expect(reactions.map(\.emoji) == ["🇫🇷", "👀", "🎉"])

                // What the live stream builds is what history says.
                var timeline = CircleTimeline(viewer: "carol")
                for entry in try await store.posts(in: "lobby", after: 0, limit: 100) { timeline.apply(entry) }
                #expect(timeline.post(1)?.reactions == reactions)
                #expect(timeline.post(2)?.reactions == expected)
            }
        }
    }

    /// Look-alikes of one emoji (extra variation selectors) are one reaction, stored in one form.
    @Test(arguments: StoreKind.allCases) func lookAlikeEmojiAreOneReaction(_ kind: StoreKind) async throws {
        try await self.withStore(kind) { store in
            _ = try await store.createCircle(name: "lobby", owner: "alice", isPrivate: false, createdAt: 1)
            _ = try await store.commit([self.newPost("lobby", id: "p1")])
            let outcomes = try await store.commit([
                self.change("lobby", .react, 1, by: "bob", id: "r1", emoji: "👍"),
                self.change("lobby", .react, 1, by: "carol", id: "r2", emoji: "👍\u{FE0F}"),
                self.change("lobby", .react, 1, by: "dave", id: "r3", emoji: "👍\u{FE0E}"),
                self.change("lobby", .react, 1, by: "bob", id: "r4", emoji: "\u{1F3F3}\u{200D}\u{1F308}"),
                self.change("lobby", .react, 1, by: "carol", id: "r5", emoji: "\u{1F3F3}\u{FE0F}\u{200D}\u{1F308}"),
            ])
            #expect(self.storedSeqs(outcomes) == [2, 3, 4, 5, 6])
            #expect(try await self.reactions(store, of: 1) == [
                CircleReaction(emoji: "👍", users: ["bob", "carol", "dave"], me: true),
                CircleReaction(emoji: Self.rainbowFlag, users: ["bob", "carol"], me: true),
            ])
            // The entries carry the stored form too, so a client applying them agrees.
            let stream = try await store.posts(in: "lobby", after: 1, limit: 10)
            #expect(stream.map { $0.emoji.map { Array($0.unicodeScalars) } } == [
                Array("👍".unicodeScalars), Array("👍".unicodeScalars), Array("👍".unicodeScalars),
                Array(Self.rainbowFlag.unicodeScalars), Array(Self.rainbowFlag.unicodeScalars),
            ])
            // Taking back a look-alike takes back the reaction.
            _ = try await store.commit([self.change("lobby", .unreact, 1, by: "carol", id: "r6", emoji: "👍\u{FE0E}")])
            #expect(try await self.reactions(store, of: 1).first == CircleReaction(emoji: "👍", users: ["bob", "dave"], me: false))
        }
    }

    /// Reactions stored before emoji kept their place upgrade in place: each emoji's place is its
    /// oldest standing reaction, and from then on it keeps it.
    @Test(arguments: StoreKind.allCases) func migrationKeepsTheReactionOrder(_ kind: StoreKind) async throws {
        try await self.withLocation(kind) { (location: StoreLocation) async throws -> Void in
            let user: String
            let flag: String
            switch location {
            case .sqlite:
                user = "user"
                flag = "0"
            case .postgres:
                user = "user_name"
                flag = "false"
            }
            func text(_ string: String) -> String {
                if case .postgres = location { return "convert_to('\(string)', 'UTF8')" }
                return "'\(string)'"
            }
            // 🎉 by alice (#2), 🇫🇷 by bob (#3), 🎉 by bob (#4), as the schema before this step kept them.
            var statements = [
                "INSERT INTO circles (name, owner, private, created_at, last_seq) VALUES ('old', 'alice', \(flag), 1, 4)",
                "INSERT INTO posts (circle, seq, author, client_id, text, time) VALUES ('old', 1, \(text("alice")), \(text("p1")), \(text("hi")), 10)",
            ]
            for (seq, author, emoji) in [(2, "alice", "🎉"), (3, "bob", "🇫🇷"), (4, "bob", "🎉")] {
                statements.append(
                    """
                    INSERT INTO posts (circle, seq, author, client_id, time, change, target, emoji)
                    VALUES ('old', \(seq), \(text(author)), \(text("r\(seq)")), 10, 'react', 1, \(text(emoji)))
                    """
                )
                statements.append(
                    "INSERT INTO reactions (circle, post, emoji, \(user), seq) VALUES ('old', 1, \(text(emoji)), \(text(author)), \(seq))"
                )
            }
            try await self.makeOldDatabase(at: location, version: Self.reactionPlaceSchemaVersion - 1, statements)

            try await self.withStore(at: location) { (store: any CircleStore) async throws -> Void in
                #expect(try await self.reactions(store, "old", of: 1).map(\.emoji) == ["🎉", "🇫🇷"])
                #expect(self.storedSeq(try await self.commit(store, self.change("old", .unreact, 1, by: "alice", id: "a1", emoji: "🎉"))) == 5)
                #expect(try await self.reactions(store, "old", of: 1) == [
                    CircleReaction(emoji: "🎉", users: ["bob"], me: false),
                    CircleReaction(emoji: "🇫🇷", users: ["bob"], me: false),
                ])
            }
        }
    }

    /// 🏳️‍🌈 in its fully qualified form (U+FE0F after the white flag).
    static let rainbowFlag = "\u{1F3F3}\u{FE0F}\u{200D}\u{1F308}"

    /// The schema version that added each emoji's place (`first_seq`) to reactions.
    static let reactionPlaceSchemaVersion = 4
}
