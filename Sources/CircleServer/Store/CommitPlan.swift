import CircleWire
import Foundation

/// A string compared and hashed by its UTF-8 bytes, as SQLite compares TEXT (BINARY collation).
///
/// Swift's `String ==` holds canonically equivalent strings equal ("caf\u{E9}" == "cafe\u{301}");
/// keyed by `String`, the batch planner would disagree with SQLite's indexes and could, for
/// instance, number a post to a circle SQLite does not know, failing the whole batch.
struct BinaryText: Hashable, Sendable {
    var string: String

    init(_ string: String) {
        self.string = string
    }

    static func == (lhs: Self, rhs: Self) -> Bool {
        var lhs = lhs.string
        var rhs = rhs.string
        return lhs.withUTF8 { left in
            rhs.withUTF8 { right in
                left.count == right.count && (left.isEmpty || memcmp(left.baseAddress!, right.baseAddress!, left.count) == 0)
            }
        }
    }

    func hash(into hasher: inout Hasher) {
        var string = self.string
        string.withUTF8 { hasher.combine(bytes: UnsafeRawBufferPointer($0)) }
        hasher.combine(0xFF as UInt8)  // never in UTF-8: ends the string, so fields cannot run together
    }
}

/// The idempotency key of an entry, compared as SQLite compares it.
struct PostKey: Hashable, Sendable {
    var circle: BinaryText
    var author: BinaryText
    var clientID: BinaryText

    init(circle: String, author: String, clientID: String) {
        self.circle = BinaryText(circle)
        self.author = BinaryText(author)
        self.clientID = BinaryText(clientID)
    }

    init(_ post: NewPost) {
        self.init(circle: post.circle, author: post.author, clientID: post.clientID)
    }

    init(_ post: CirclePost) {
        self.init(circle: post.circle, author: post.author, clientID: post.id)
    }
}

/// Where a stored entry is: its circle and `seq`.
struct EntryKey: Hashable, Sendable {
    var circle: BinaryText
    var seq: Int64

    init(circle: String, seq: Int64) {
        self.circle = BinaryText(circle)
        self.seq = seq
    }

    init(_ post: CirclePost) {
        self.init(circle: post.circle, seq: post.seq)
    }
}

/// One user's reaction with one emoji to one post.
struct ReactionKey: Hashable, Sendable {
    var post: EntryKey
    var emoji: BinaryText
    var user: BinaryText

    init(post: EntryKey, emoji: String, user: String) {
        self.post = post
        self.emoji = BinaryText(emoji)
        self.user = BinaryText(user)
    }
}

/// A user in a circle: who a mention may name.
struct MemberKey: Hashable, Sendable {
    var circle: BinaryText
    var user: BinaryText

    init(circle: String, user: String) {
        self.circle = BinaryText(circle)
        self.user = BinaryText(user)
    }
}

/// One notification a mention sets off: `user` was mentioned in post `post` of `circle` by the
/// entry `seq` (the post itself, or an edit that added the mention).
struct MentionWrite: Hashable, Sendable {
    var circle: String
    var post: Int64
    var seq: Int64
    var user: String
}

/// What a batch does, decided from what the transaction read: a pure value, no I/O.
///
/// Entries are applied in order, each seeing the ones before it (the rules are those of
/// ``CircleStore/commit(_:)``): an already stored key (before the batch, or earlier in it) is a
/// duplicate; an entry to a circle that does not exist is `.noSuchCircle`; a change the rules
/// refuse is `.rejected` and uses no `seq`; anything else is stored with its circle's next
/// sequence number and applied to the state the plan keeps of the posts it knows.
///
/// Stores use it in three steps, all inside the batch's transaction (after locking the circles,
/// where the store has to):
/// 1. read the batch's circles (``circleNames(_:)``) and the entries with its keys (``keys(_:)``)
///    into a ``Known``, and the memberships its system entries change (``membersToRead(_:)``);
/// 2. read the entries the batch names as targets and reply targets (``targetsToRead(_:known:)``),
///    then the reactions its `react`/`unreact` entries need (``reactionsToRead(_:known:)``);
///    and who the texts' mentions may name (``adminsToRead(_:known:)``, then
///    ``mentionsToRead(_:known:)``);
/// 3. plan, and write what the plan says: ``inserts``, ``memberWrites``, ``postUpdates``,
///    ``deletedPosts``, ``reactionWrites``, ``mentionWrites`` and ``newLastSeqs``, in that order.
///
/// System entries (``NewPost/event``): adding a member who is one, or removing someone who is
/// not, is ``PostOutcome/applied`` and writes nothing; otherwise the membership change is one of
/// ``memberWrites``, and the entry is stored (with the next `seq`, no text) only when the circle
/// has system entries on. A system entry is not a post (``CirclePost/isPost``): no change or
/// reply may target it, it mentions no one and is not indexed.
///
/// Mentions: a post's or an edit's text is read with ``MentionParser``; a `@name` resolves when
/// the user is a member of the circle, or, in a public circle, is not banned and has an account
/// or has posted there (the first candidate that does wins; the author never mentions themself); `@here`
/// and `@everyone` by the circle's owner or an admin (``NewPost/mayMentionEveryone``) mention
/// every member (the first ``StoreLimits/maxEveryoneMentions``), by anyone else nothing. The
/// entry carries what resolved, and so does its post after an edit. Each person mentioned gets
/// one ``mentionWrites`` row per post, with the `seq` of the entry that first mentioned them: an
/// edit that adds a mention adds a row, one that removes a mention keeps the row (a notification
/// is not taken back), and one that mentions them again adds nothing.
///
/// Every outcome, a duplicate's included, is the entry as it stands at the end of the batch:
/// what a read right after the commit returns.
struct CommitPlan: Sendable {
    /// A circle as the plan needs it.
    struct Circle: Sendable, Hashable {
        var lastSeq: Int64
        var owner: String
        var isPrivate: Bool
        /// A direct message's members (``DirectMessageKey``); `nil` for a circle.
        var direct: [String]? = nil
        /// The circle records membership changes as system entries (``CircleInfo/systemEntries``).
        var systemEntries: Bool = true
    }

    /// What the store read before planning.
    struct Known: Sendable {
        /// Every circle the batch names that exists.
        var circles: [BinaryText: Circle] = [:]
        /// Stored entries in their current state: at least those with the batch's keys and
        /// those ``targetsToRead(_:known:)`` names.
        var entries: [EntryKey: CirclePost] = [:]
        /// For each post ``reactionsToRead(_:known:)`` names: how many users reacted with each emoji.
        var reactionCounts: [EntryKey: [BinaryText: Int]] = [:]
        /// For the same posts: each emoji's place, the `first_seq` its reactions share (see
        /// ``reactionWrites``).
        var emojiFirstSeqs: [EntryKey: [BinaryText: Int64]] = [:]
        /// Of the reactions ``reactionsToRead(_:known:)`` names, those that are stored.
        var reactions: Set<ReactionKey> = []
        /// Of the authors ``adminsToRead(_:known:)`` names, the active admins.
        var admins: Set<BinaryText> = []
        /// Of the candidates ``mentionsToRead(_:known:)`` names, those a mention resolves to.
        var mentionable: Set<MemberKey> = []
        /// For each circle ``mentionsToRead(_:known:)`` names for `@everyone`: its members, by name,
        /// at most ``StoreLimits/maxEveryoneMentions``.
        var everyone: [BinaryText: [String]] = [:]
        /// Of the people ``pushCandidates()`` names, those with a push subscription, with the
        /// level they chose in that circle and their endpoints (``pushWrites(subscribers:)``).
        var pushSubscribers: [MemberKey: PushTarget] = [:]
        /// Of the memberships ``membersToRead(_:)`` names, those that are stored.
        var members: Set<MemberKey> = []

        init() {}
    }

    /// One per entry, in input order.
    private(set) var outcomes: [PostOutcome] = []
    /// The entries to insert, in `seq` order per circle, each in its state at the end of the batch.
    private(set) var inserts: [CirclePost] = []
    /// Posts stored before the batch whose state it changed (text, attachment, `edited`,
    /// `deleted`): their state at the end of the batch.
    private(set) var postUpdates: [CirclePost] = []
    /// Posts the batch deleted: the store removes their reactions and clears the text of the
    /// edits made to them (stored before the batch; the plan cleared those it inserts).
    private(set) var deletedPosts: [EntryKey] = []
    /// Reactions to write: `seq` is the entry that added the reaction, `nil` removes it. None of
    /// a post in ``deletedPosts``.
    ///
    /// `firstSeq` (set with `seq`) is the emoji's place in the post's reactions: the `seq` of
    /// the entry that first used the emoji on the post since it last had none of it. Every
    /// reaction with that emoji on that post has the same one, and it stays while any of them
    /// stands, so an emoji's place does not change when the user who first used it takes it
    /// back; once the last one is taken back the emoji is gone, and a later use starts at the end.
    private(set) var reactionWrites: [(reaction: ReactionKey, seq: Int64?, firstSeq: Int64?)] = []
    /// The notifications the batch's mentions set off (see the type's documentation); stores
    /// insert them keeping an existing row with the same `(circle, post, user)`.
    private(set) var mentionWrites: [MentionWrite] = []
    /// The new `last_seq` of each circle that got entries, in order of first touch.
    private(set) var newLastSeqs: [(circle: String, lastSeq: Int64)] = []
    /// The membership changes the batch's system entries make (``NewPost/event``), in order:
    /// `added` adds the member, `removed` and `left` remove them. Each changes something (an
    /// entry that would not is ``PostOutcome/applied`` and writes nothing). Written whether or not
    /// the circle records the entry.
    private(set) var memberWrites: [(circle: String, user: String, add: Bool)] = []
    /// The members of the batch's circles that are direct messages (for ``pushCandidates()``).
    private(set) var directMembers: [BinaryText: [String]] = [:]
    /// The batch's circles that are private (for ``circlesForEveryPost()``).
    private(set) var privateCircles: Set<BinaryText> = []
    /// The entries of ``inserts`` restored by an import (``NewPost/restored``): no webhook
    /// deliveries and no pushes for them.
    private(set) var restored: Set<EntryKey> = []

    // MARK: Reading

    /// The batch's circles, once each, in order of first mention.
    static func circleNames(_ posts: [NewPost]) -> [String] {
        var seen = Set<BinaryText>()
        return posts.compactMap { seen.insert(BinaryText($0.circle)).inserted ? $0.circle : nil }
    }

    /// The batch's idempotency keys, once each, in order of first mention.
    static func keys(_ posts: [NewPost]) -> [PostKey] {
        var seen = Set<PostKey>()
        return posts.compactMap { seen.insert(PostKey($0)).inserted ? PostKey($0) : nil }
    }

    /// The memberships the batch's system entries change, once each: the store reads which of
    /// them are stored into ``Known/members``.
    static func membersToRead(_ posts: [NewPost]) -> [(circle: String, user: String)] {
        var seen = Set<MemberKey>()
        return posts.compactMap { post in
            guard post.event != nil, !post.recordOnly, let member = post.member, seen.insert(MemberKey(circle: post.circle, user: member)).inserted else { return nil }
            return (post.circle, member)
        }
    }

    /// The stored entries the batch names (a change's `target`, a reply's `replyTo`) that
    /// ``Known/entries`` lacks, once each: only those that can exist (`1...last_seq`).
    static func targetsToRead(_ posts: [NewPost], known: Known) -> [EntryKey] {
        var seen = Set<EntryKey>()
        var targets: [EntryKey] = []
        for post in posts {
            guard let seq = post.change == nil ? post.replyTo : post.target,
                let circle = known.circles[BinaryText(post.circle)], seq >= 1, seq <= circle.lastSeq
            else { continue }
            let key = EntryKey(circle: post.circle, seq: seq)
            if known.entries[key] == nil, seen.insert(key).inserted {
                targets.append(key)
            }
        }
        return targets
    }

    /// What the batch's reactions need: the stored posts they target (not deleted), whose
    /// reaction counts per emoji the store reads into ``Known/reactionCounts``, and the
    /// reactions they add or remove, which the store looks up into ``Known/reactions``.
    static func reactionsToRead(_ posts: [NewPost], known: Known) -> (posts: [EntryKey], reactions: [ReactionKey]) {
        var seenPosts = Set<EntryKey>()
        var seenReactions = Set<ReactionKey>()
        var targets: [EntryKey] = []
        var reactions: [ReactionKey] = []
        for post in posts where post.change == .react || post.change == .unreact {
            guard let seq = post.target, let emoji = Self.reactionEmoji(post) else { continue }
            let key = EntryKey(circle: post.circle, seq: seq)
            guard let target = known.entries[key], target.isPost, !target.deleted else { continue }
            if seenPosts.insert(key).inserted {
                targets.append(key)
            }
            let reaction = ReactionKey(post: key, emoji: emoji, user: post.author)
            if seenReactions.insert(reaction).inserted {
                reactions.append(reaction)
            }
        }
        return (targets, reactions)
    }

    /// The authors whose `@here`/`@everyone` counts only if they are admins (not the circle's
    /// owner, not flagged ``NewPost/mayMentionEveryone``): the store reads which of them are
    /// active admin accounts into ``Known/admins``, before ``mentionsToRead(_:known:)``.
    static func adminsToRead(_ posts: [NewPost], known: Known) -> [String] {
        var seen = Set<BinaryText>()
        var authors: [String] = []
        for post in posts where post.change == nil || post.change == .edit {
            guard let text = post.text, text.utf8.contains(UInt8(ascii: "@")), let circle = known.circles[BinaryText(post.circle)],
                !post.mayMentionEveryone, BinaryText(circle.owner) != BinaryText(post.author),
                MentionParser.mentions(in: text).contains(.everyone), seen.insert(BinaryText(post.author)).inserted
            else { continue }
            authors.append(post.author)
        }
        return authors
    }

    /// What the batch's mentions need: each `(circle, name)` a `@name` could resolve to, which
    /// the store looks up into ``Known/mentionable``, and the circles whose members an allowed
    /// `@here`/`@everyone` names, which it reads into ``Known/everyone``.
    static func mentionsToRead(_ posts: [NewPost], known: Known) -> (candidates: [(circle: String, user: String)], everyone: [String]) {
        var seenCandidates = Set<MemberKey>()
        var seenCircles = Set<BinaryText>()
        var candidates: [(circle: String, user: String)] = []
        var everyone: [String] = []
        for post in posts where post.change == nil || post.change == .edit {
            guard let text = post.text, text.utf8.contains(UInt8(ascii: "@")), let circle = known.circles[BinaryText(post.circle)] else { continue }
            for mention in MentionParser.mentions(in: text) {
                switch mention {
                case .user(let names):
                    for name in names where seenCandidates.insert(MemberKey(circle: post.circle, user: name)).inserted {
                        candidates.append((post.circle, name))
                    }
                case .everyone:
                    if Self.mayMentionEveryone(post, in: circle, known: known), seenCircles.insert(BinaryText(post.circle)).inserted {
                        everyone.append(post.circle)
                    }
                }
            }
        }
        return (candidates, everyone)
    }

    /// Whether the author's `@here`/`@everyone` mentions every member: the circle's owner's or an admin's.
    static func mayMentionEveryone(_ post: NewPost, in circle: Circle, known: Known) -> Bool {
        post.mayMentionEveryone || BinaryText(circle.owner) == BinaryText(post.author) || known.admins.contains(BinaryText(post.author))
    }

    /// What `text` by `post`'s author mentions, resolved with what the store read.
    static func resolveMentions(_ text: String?, of post: NewPost, in circle: Circle, known: Known) -> (names: [String], everyone: Bool) {
        guard let text, text.utf8.contains(UInt8(ascii: "@")) else { return ([], false) }
        var names: [String] = []
        var seen = Set<BinaryText>()
        var everyone = false
        let author = BinaryText(post.author)
        for mention in MentionParser.mentions(in: text) {
            switch mention {
            case .user(let candidates):
                guard let name = candidates.first(where: { known.mentionable.contains(MemberKey(circle: post.circle, user: $0)) }),
                    BinaryText(name) != author, seen.insert(BinaryText(name)).inserted
                else { continue }
                names.append(name)
            case .everyone:
                everyone = everyone || Self.mayMentionEveryone(post, in: circle, known: known)
            }
        }
        return (names, everyone)
    }

    /// Everyone an entry's mentions notify (its author aside).
    static func recipients(_ entry: CirclePost, known: Known) -> [String] {
        var users = entry.mentions ?? []
        if entry.mentionsEveryone {
            users += known.everyone[BinaryText(entry.circle)] ?? []
        }
        var seen = Set<BinaryText>([BinaryText(entry.author)])
        return users.filter { seen.insert(BinaryText($0)).inserted }
    }

    /// An entry's `mentions` as both stores' `posts.mentions` column keeps them: names joined by newlines (which no user
    /// name has); `nil` for none.
    static func mentionsColumn(_ entry: CirclePost) -> String? {
        guard let mentions = entry.mentions, !mentions.isEmpty else { return nil }
        return mentions.joined(separator: "\n")
    }

    /// The `mentions` of a ``mentionsColumn(_:)`` value.
    static func mentions(fromColumn column: String?) -> [String]? {
        guard let column, !column.isEmpty else { return nil }
        return column.split(separator: "\n", omittingEmptySubsequences: true).map(String.init)
    }

    /// The emoji of a `react`/`unreact` entry in the form it is compared and stored in
    /// (``CircleEmoji/normalized(_:)``; a text that is not an emoji, which the session refuses
    /// before it gets here, is kept as given).
    static func reactionEmoji(_ post: NewPost) -> String? {
        post.emoji.map { CircleEmoji.normalized($0) ?? $0 }
    }

    /// What the search index holds for an entry in the state given (one of ``inserts`` or
    /// ``postUpdates``): a post's current text; `nil` for a change entry (an edit's text is in
    /// its post), a deleted post or one without text. A store indexes the entries of ``inserts``
    /// that have some, and for each of ``postUpdates`` replaces what it indexed of the post with this.
    /// Both stores index it as words and as substrings (trigrams) alike.
    static func searchText(_ entry: CirclePost) -> String? {
        guard entry.isPost, !entry.deleted, let text = entry.text, !text.isEmpty else { return nil }
        return text
    }

    // MARK: Planning

    /// An outcome, resolved at the end of the batch (entries change as later ones apply).
    private enum Pending {
        case entry(EntryKey, duplicate: Bool)
        case other(PostOutcome)
    }

    /// - Parameters:
    ///   - posts: The batch.
    ///   - known: What the store read (see the steps above).
    init(posts: [NewPost], known: Known) {
        var entries = known.entries
        var keyIndex: [PostKey: EntryKey] = [:]
        var editsByTarget: [EntryKey: [EntryKey]] = [:]
        for (key, entry) in entries {
            keyIndex[PostKey(entry)] = key
            if entry.change == .edit, let target = entry.target {
                editsByTarget[EntryKey(circle: entry.circle, seq: target), default: []].append(key)
            }
        }
        var circles = known.circles
        var counts = known.reactionCounts
        var firstSeqs = known.emojiFirstSeqs
        var present = known.reactions
        var pending: [Pending] = []
        var inserted: [EntryKey] = []
        var insertedSet = Set<EntryKey>()
        var updated: [EntryKey] = []
        var updatedSet = Set<EntryKey>()
        var deletedSet = Set<EntryKey>()
        var reactionFinal: [ReactionKey: (seq: Int64, firstSeq: Int64)?] = [:]
        var reactionOrder: [ReactionKey] = []
        var touched: [BinaryText: Int] = [:]  // circle → index in newLastSeqs
        var notified = Set<MentionWrite>()  // with seq 0: one per (circle, post, user)
        var mentionWrites: [MentionWrite] = []
        var members = known.members
        var memberWrites: [(circle: String, user: String, add: Bool)] = []
        pending.reserveCapacity(posts.count)

        func reject(_ code: CircleErrorCode, _ message: String) {
            pending.append(.other(.rejected(code, message)))
        }

        func changed(_ key: EntryKey) {
            if !insertedSet.contains(key), updatedSet.insert(key).inserted {
                updated.append(key)
            }
        }

        func writeReaction(_ reaction: ReactionKey, _ stored: (seq: Int64, firstSeq: Int64)?) {
            if reactionFinal.updateValue(stored, forKey: reaction) == nil {
                reactionOrder.append(reaction)
            }
        }

        for newPost in posts {
            let key = PostKey(newPost)
            if let stored = keyIndex[key] {
                pending.append(.entry(stored, duplicate: true))
                continue
            }
            guard var circle = circles[key.circle] else {
                pending.append(.other(.noSuchCircle))
                continue
            }
            let seq = circle.lastSeq + 1
            var entry = CirclePost(
                circle: newPost.circle,
                seq: seq,
                author: newPost.author,
                text: newPost.text,
                attachment: newPost.attachment,
                time: newPost.time,
                id: newPost.clientID
            )

            if let event = newPost.event {
                // A membership change: made here, recorded as an entry if the circle has them on.
                guard let member = newPost.member else {
                    reject(.badRequest, "a membership change names its member")
                    continue
                }
                if !newPost.recordOnly {
                    let memberKey = MemberKey(circle: newPost.circle, user: member)
                    let adds = event == .added
                    guard members.contains(memberKey) != adds else {
                        pending.append(.other(.applied))  // nothing to change
                        continue
                    }
                    if adds { members.insert(memberKey) } else { members.remove(memberKey) }
                    memberWrites.append((newPost.circle, member, adds))
                    guard circle.systemEntries else {
                        pending.append(.other(.applied))
                        continue
                    }
                }
                entry.event = event
                entry.member = member
                entry.text = nil
                entry.attachment = nil
            } else if let change = newPost.change, newPost.restored, let targetSeq = newPost.target,
                entries[EntryKey(circle: newPost.circle, seq: targetSeq)] == nil
            {
                // An import of a circle whose retention policy had removed the post this change
                // names (the export's reader checked every other target): the record, as the
                // exporting server kept it, changing nothing.
                entry.change = change
                entry.target = targetSeq
                entry.attachment = nil
                switch change {
                case .edit:
                    // Whom the edit names, as its entry says; no mention rows: the post is gone.
                    let mentions = Self.resolveMentions(newPost.text, of: newPost, in: circle, known: known)
                    entry.mentions = mentions.names.isEmpty ? nil : mentions.names
                    entry.mentionsEveryone = mentions.everyone
                case .delete: entry.text = nil
                case .react, .unreact:
                    entry.text = nil
                    entry.emoji = Self.reactionEmoji(newPost)
                }
            } else if let change = newPost.change {
                guard let targetSeq = newPost.target else {
                    reject(.badRequest, "a change needs the target post's seq")
                    continue
                }
                let targetKey = EntryKey(circle: newPost.circle, seq: targetSeq)
                guard var target = entries[targetKey], target.isPost else {
                    reject(.noSuchPost, "no post \(targetSeq) in circle \"\(newPost.circle)\"")
                    continue
                }
                entry.change = change
                entry.target = targetSeq
                entry.attachment = nil
                switch change {
                case .edit:
                    guard let text = newPost.text else {
                        reject(.badRequest, "an edit needs the new text")
                        continue
                    }
                    guard BinaryText(target.author) == key.author else {
                        reject(.notAuthor, "only the author may edit post \(targetSeq)")
                        continue
                    }
                    guard !target.deleted else {
                        reject(.postDeleted, "post \(targetSeq) was deleted")
                        continue
                    }
                    let before = Set(Self.recipients(target, known: known).map(BinaryText.init))
                    let mentions = Self.resolveMentions(text, of: newPost, in: circle, known: known)
                    target.text = text
                    target.edited = newPost.time
                    target.mentions = mentions.names.isEmpty ? nil : mentions.names
                    target.mentionsEveryone = mentions.everyone
                    entry.mentions = target.mentions
                    entry.mentionsEveryone = mentions.everyone
                    editsByTarget[targetKey, default: []].append(EntryKey(entry))
                    // An edit notifies only whom it adds; whom it drops keep their notification.
                    for user in Self.recipients(entry, known: known) where !before.contains(BinaryText(user)) {
                        if notified.insert(MentionWrite(circle: newPost.circle, post: targetSeq, seq: 0, user: user)).inserted {
                            mentionWrites.append(MentionWrite(circle: newPost.circle, post: targetSeq, seq: seq, user: user))
                        }
                    }
                case .delete:
                    let ownsPrivateCircle = circle.isPrivate && BinaryText(circle.owner) == key.author
                    guard BinaryText(target.author) == key.author || ownsPrivateCircle || newPost.moderated else {
                        reject(.notAuthor, "only the author (or the owner of a private circle) may delete post \(targetSeq)")
                        continue
                    }
                    guard !target.deleted else {
                        reject(.postDeleted, "post \(targetSeq) was deleted already")
                        continue
                    }
                    entry.text = nil
                    target.deleted = true
                    target.text = nil
                    target.attachment = nil
                    target.mentions = nil
                    target.mentionsEveryone = false
                    // A tombstone keeps nothing of what the post said, nor when it was last edited.
                    target.edited = nil
                    for edit in editsByTarget[targetKey] ?? [] {
                        entries[edit]?.text = nil
                        entries[edit]?.mentions = nil
                        entries[edit]?.mentionsEveryone = false
                    }
                    counts[targetKey] = nil
                    firstSeqs[targetKey] = nil
                    present = present.filter { $0.post != targetKey }
                    reactionOrder.removeAll { $0.post == targetKey }
                    reactionFinal = reactionFinal.filter { $0.key.post != targetKey }
                    deletedSet.insert(targetKey)
                case .react, .unreact:
                    guard let emoji = Self.reactionEmoji(newPost) else {
                        reject(.badRequest, "a reaction needs an emoji")
                        continue
                    }
                    guard !target.deleted else {
                        reject(.postDeleted, "post \(targetSeq) was deleted")
                        continue
                    }
                    entry.text = nil
                    entry.emoji = emoji
                    let reaction = ReactionKey(post: targetKey, emoji: emoji, user: newPost.author)
                    var postCounts = counts[targetKey] ?? [:]
                    var postFirstSeqs = firstSeqs[targetKey] ?? [:]
                    if change == .react, !present.contains(reaction) {
                        if postCounts[reaction.emoji] == nil, postCounts.count >= StoreLimits.maxReactionsPerPost {
                            reject(.tooManyReactions, "post \(targetSeq) has \(StoreLimits.maxReactionsPerPost) different reactions already")
                            continue
                        }
                        // A new emoji (or one whose last reaction was taken back) goes last.
                        if postCounts[reaction.emoji] == nil || postFirstSeqs[reaction.emoji] == nil {
                            postFirstSeqs[reaction.emoji] = seq
                        }
                        postCounts[reaction.emoji, default: 0] += 1
                        present.insert(reaction)
                        writeReaction(reaction, (seq, postFirstSeqs[reaction.emoji] ?? seq))
                    } else if change == .unreact, present.contains(reaction) {
                        let left = (postCounts[reaction.emoji] ?? 1) - 1
                        postCounts[reaction.emoji] = left > 0 ? left : nil
                        if left <= 0 { postFirstSeqs[reaction.emoji] = nil }
                        present.remove(reaction)
                        writeReaction(reaction, nil)
                    }
                    counts[targetKey] = postCounts
                    firstSeqs[targetKey] = postFirstSeqs
                }
                if target != entries[targetKey] {
                    entries[targetKey] = target
                    changed(targetKey)
                }
            } else {
                if let replyTo = newPost.replyTo, newPost.restored, entries[EntryKey(circle: newPost.circle, seq: replyTo)] == nil {
                    entry.replyTo = replyTo  // an import: the post replied to was removed by retention
                } else if let replyTo = newPost.replyTo {
                    guard let original = entries[EntryKey(circle: newPost.circle, seq: replyTo)], original.isPost else {
                        reject(.noSuchPost, "no post \(replyTo) in circle \"\(newPost.circle)\" to reply to")
                        continue
                    }
                    entry.replyTo = replyTo
                }
                let mentions = Self.resolveMentions(newPost.text, of: newPost, in: circle, known: known)
                entry.mentions = mentions.names.isEmpty ? nil : mentions.names
                entry.mentionsEveryone = mentions.everyone
                for user in Self.recipients(entry, known: known) {
                    notified.insert(MentionWrite(circle: newPost.circle, post: seq, seq: 0, user: user))
                    mentionWrites.append(MentionWrite(circle: newPost.circle, post: seq, seq: seq, user: user))
                }
            }

            let entryKey = EntryKey(entry)
            circle.lastSeq = seq
            circles[key.circle] = circle
            entries[entryKey] = entry
            keyIndex[key] = entryKey
            inserted.append(entryKey)
            insertedSet.insert(entryKey)
            if newPost.restored { self.restored.insert(entryKey) }
            pending.append(.entry(entryKey, duplicate: false))
            if let index = touched[key.circle] {
                self.newLastSeqs[index].lastSeq = seq
            } else {
                touched[key.circle] = self.newLastSeqs.count
                self.newLastSeqs.append((newPost.circle, seq))
            }
        }

        func current(_ key: EntryKey) -> CirclePost {
            // Every key in `pending` and `inserted` was put in `entries` first.
            entries[key] ?? CirclePost(circle: key.circle.string, seq: key.seq, author: "", text: nil, attachment: nil, time: 0, id: "")
        }
        self.outcomes = pending.map { pending in
            switch pending {
            case .entry(let key, let duplicate):
                return duplicate ? .duplicate(current(key)) : .stored(current(key))
            case .other(let outcome):
                return outcome
            }
        }
        self.inserts = inserted.map(current)
        self.postUpdates = updated.map(current)
        self.deletedPosts = updated.filter(deletedSet.contains) + inserted.filter(deletedSet.contains)
        self.mentionWrites = mentionWrites
        self.memberWrites = memberWrites
        self.directMembers = known.circles.compactMapValues(\.direct)
        self.privateCircles = Set(known.circles.filter(\.value.isPrivate).keys)
        self.reactionWrites = reactionOrder.map { reaction in
            let stored = reactionFinal[reaction] ?? nil
            return (reaction, stored?.seq, stored?.firstSeq)
        }
    }
}
