import CircleSocket
import CircleWire
import Foundation
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import SQLiteNIO
import VaporCSQLite

/// The connection that commits posts: a second handle on the store's database file, with its
/// statements prepared once, driven from a thread of its own.
///
/// A whole batch (`BEGIN IMMEDIATE`, the reads ``CommitPlan`` needs — the circles, the key
/// probes, the targets of changes and the reactions on them —, the inserts, the updates,
/// `COMMIT`) runs in one call on that thread, instead of a hop per statement. The thread is an
/// event loop of its own whose ``executor`` the server's commit loop prefers
/// (``CircleStore/commitExecutor``): the loop then wakes, commits, publishes and answers on this
/// one thread, and a batch costs no thread hop besides the posts' way in and the answers' way
/// out. Measured with benchmarks/postpath.py at one writer: the committer's hops through Swift's
/// cooperative pool were a large share of the server's CPU samples, and running it here cut the
/// CPU per post (docs/bench/postpath.md). The store's other connection (sqlite-nio)
/// keeps serving reads meanwhile: in WAL mode a reader sees the last committed state and does
/// not wait for a commit's fsync.
///
/// The handle comes from the same SQLite library sqlite-nio links (its vendored copy), so both
/// connections share SQLite's per-process file-lock bookkeeping.
final class SQLitePostWriter: @unchecked Sendable {
    // @unchecked: `handle` and `statements` are used only on `loop`, one thread that runs its
    // work one item after the other; `open` and `close` run there too.
    private var handle: OpaquePointer?
    private var statements: Statements?
    private let group: MultiThreadedEventLoopGroup
    private let loop: any EventLoop
    /// Runs a task's jobs on the writer's thread; the commit loop prefers it.
    let executor: EventLoopTaskExecutor
    private let started = NIOLockedValueBox(0)

    /// Batches that have begun on the writer's thread; for tests.
    var batchesStarted: Int { self.started.withLockedValue { $0 } }

    private init(group: MultiThreadedEventLoopGroup) {
        self.group = group
        self.loop = group.next()
        self.executor = EventLoopTaskExecutor(eventLoop: self.loop)
    }

    /// Opens a writer on the database at `path` (which ``SQLiteStore/open(path:threadPool:eventLoopGroup:logger:)``
    /// has opened and put in WAL mode). Statements are prepared by the first ``commit(_:)``, after
    /// the migrations have made the tables.
    static func open(path: String, busyTimeoutMilliseconds: Int) async throws -> SQLitePostWriter {
        let writer = SQLitePostWriter(group: MultiThreadedEventLoopGroup(numberOfThreads: 1))
        do {
            try await writer.onThread { try writer.openOnThread(path: path, busyTimeoutMilliseconds: busyTimeoutMilliseconds) }
        } catch {
            try? await writer.group.shutdownGracefully()
            throw error
        }
        return writer
    }

    /// Stores a batch in one transaction; see ``SQLiteStore/commit(_:)``. Called on the
    /// writer's thread (from a task preferring ``executor``), it runs there without a hop.
    func commit(_ posts: [NewPost]) async throws -> [PostOutcome] {
        try await self.onThread { try self.commitOnThread(posts) }
    }

    /// Finalizes the statements, closes the handle and stops the thread. Call once, from
    /// another thread.
    func close() async throws {
        var failure: (any Error)?
        do {
            try await self.onThread { try self.closeOnThread() }
        } catch {
            failure = error
        }
        try await self.group.shutdownGracefully()
        if let failure { throw failure }
    }

    /// Runs `work` on the writer's thread: at once when already there, else as a task of its loop.
    private func onThread<T: Sendable>(_ work: @escaping @Sendable () throws -> T) async throws -> T {
        if self.loop.inEventLoop { return try work() }
        return try await self.loop.submit(work).get()
    }

    /// The integer value of a `PRAGMA` on the writer's connection (some are per connection); for tests.
    func pragma(_ name: String) async throws -> Int64? {
        try await self.onThread {
            let statement = try self.prepare("PRAGMA \(name)", persistent: false)
            defer { sqlite_nio_sqlite3_finalize(statement) }
            guard try self.step(statement, "read a pragma") else { return nil }
            return sqlite_nio_sqlite3_column_int64(statement, 0)
        }
    }

    // MARK: - On the thread

    private func openOnThread(path: String, busyTimeoutMilliseconds: Int) throws {
        var handle: OpaquePointer?
        let flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX
        let status = sqlite_nio_sqlite3_open_v2(path, &handle, flags, nil)
        guard status == SQLITE_OK, let handle else {
            let message = handle.map { String(cString: sqlite_nio_sqlite3_errmsg($0)) } ?? "out of memory"
            sqlite_nio_sqlite3_close_v2(handle)
            throw StoreError(.unavailable, "SQLite store: open the post writer on \(path) failed: \(message)")
        }
        self.handle = handle
        // The store's other connection writes too (webhook deliveries' bookkeeping, accounts).
        // SQLite's own busy timeout sleeps 1, 2, 5, 10… up to 100 ms between tries, far longer
        // than such a write holds the lock, and every post waiting behind it would wait that
        // long: this handler tries again after 20 µs, doubling to at most 1 ms, for about the
        // same total time.
        sqlite_nio_sqlite3_busy_handler(handle, fineBusyHandler, UnsafeMutableRawPointer(bitPattern: max(1, busyTimeoutMilliseconds)))
        do {
            // Per connection: an ack promises durability, so FULL syncs the WAL on every commit.
            for pragma in ["PRAGMA synchronous = FULL", "PRAGMA foreign_keys = ON"] {
                let statement = try self.prepare(pragma, persistent: false)
                defer { sqlite_nio_sqlite3_finalize(statement) }
                try self.run(statement, "configure")
            }
        } catch {
            sqlite_nio_sqlite3_close_v2(handle)
            self.handle = nil
            throw error
        }
    }

    private func closeOnThread() throws {
        self.statements?.finalize()
        self.statements = nil
        if let handle = self.handle {
            self.handle = nil
            let status = sqlite_nio_sqlite3_close_v2(handle)
            guard status == SQLITE_OK else {
                throw StoreError(.unavailable, "SQLite store: closing the post writer failed (\(status))")
            }
        }
    }

    private func commitOnThread(_ posts: [NewPost]) throws -> [PostOutcome] {
        guard self.handle != nil else {
            throw StoreError(.unavailable, "the SQLite store is closed")
        }
        let statements = try self.preparedStatements()
        self.started.withLockedValue { $0 += 1 }
        try self.run(statements[.begin], "begin")
        do {
            // 1. The batch's circles and the entries with its keys.
            var known = CommitPlan.Known()
            for name in CommitPlan.circleNames(posts) {
                if let circle = try self.circle(name, statements[.circle]) {
                    known.circles[BinaryText(name)] = circle
                }
            }
            for key in CommitPlan.keys(posts) {
                if let entry = try self.storedEntry(key, statements[.findKey]) {
                    known.entries[EntryKey(entry)] = entry
                }
            }
            // The memberships the system entries change.
            for (circle, user) in CommitPlan.membersToRead(posts) {
                let probe = statements[.isMember]
                defer { self.reset(probe) }
                try self.bind(probe, 1, circle)
                try self.bind(probe, 2, user)
                if try self.step(probe, "read a membership") {
                    known.members.insert(MemberKey(circle: circle, user: user))
                }
            }
            // 2. What the changes and replies name: their targets, then the reactions on them.
            for target in CommitPlan.targetsToRead(posts, known: known) {
                if let entry = try self.storedEntry(at: target, statements[.findEntry]) {
                    known.entries[target] = entry
                }
            }
            let reactions = CommitPlan.reactionsToRead(posts, known: known)
            for post in reactions.posts {
                let tally = try self.reactionTally(post, statements[.reactionCounts])
                known.reactionCounts[post] = tally.counts
                known.emojiFirstSeqs[post] = tally.firstSeqs
            }
            for reaction in reactions.reactions {
                if try self.isStored(reaction, statements[.findReaction]) {
                    known.reactions.insert(reaction)
                }
            }
            // Who the texts' mentions can name.
            for author in CommitPlan.adminsToRead(posts, known: known) {
                let probe = statements[.isAdmin]
                defer { self.reset(probe) }
                try self.bind(probe, 1, author)
                if try self.step(probe, "read an author's role") {
                    known.admins.insert(BinaryText(author))
                }
            }
            let mentions = CommitPlan.mentionsToRead(posts, known: known)
            for (circle, user) in mentions.candidates {
                let probe = statements[.mentionable]
                defer { self.reset(probe) }
                try self.bind(probe, 1, circle)
                try self.bind(probe, 2, user)
                try self.bind(probe, 3, known.circles[BinaryText(circle)]?.isPrivate == false ? 0 : 1)
                if try self.step(probe, "resolve a mention") {
                    known.mentionable.insert(MemberKey(circle: circle, user: user))
                }
            }
            for circle in mentions.everyone {
                let members = statements[.everyone]
                defer { self.reset(members) }
                try self.bind(members, 1, circle)
                try self.bind(members, 2, Int64(StoreLimits.maxEveryoneMentions))
                var names: [String] = []
                while try self.step(members, "read the members for @everyone") {
                    names.append(self.columnText(members, 0) ?? "")
                }
                known.everyone[BinaryText(circle)] = names
            }

            // 3. Plan and write.
            var search = SearchWrites()
            let plan = CommitPlan(posts: posts, known: known)
            for entry in plan.inserts {
                let insert = statements[.insert]
                defer { self.reset(insert) }
                try self.bind(insert, 1, entry.circle)
                try self.bind(insert, 2, entry.seq)
                try self.bind(insert, 3, entry.author)
                try self.bind(insert, 4, entry.id)
                try self.bind(insert, 5, entry.text)
                try self.bind(insert, 6, entry.attachment)
                try self.bind(insert, 7, entry.time)
                try self.bind(insert, 8, entry.change?.rawValue)
                try self.bind(insert, 9, entry.target)
                try self.bind(insert, 10, entry.emoji)
                try self.bind(insert, 11, entry.replyTo)
                try self.bind(insert, 12, entry.edited)
                try self.bind(insert, 13, entry.deleted ? 1 : 0)
                try self.bind(insert, 14, CommitPlan.mentionsColumn(entry))
                try self.bind(insert, 15, entry.mentionsEveryone ? 1 : 0)
                try self.bind(insert, 16, entry.event?.rawValue)
                try self.bind(insert, 17, entry.member)
                let searchText = CommitPlan.searchText(entry)
                let searchID = try searchText.map { _ in try self.newSearchID(&search, statements) }
                try self.bind(insert, 18, searchID)
                try self.run(insert, "insert an entry")
                if let searchText, let searchID {
                    try self.index(entry, searchText, as: searchID, statements, into: &search)
                }
            }
            for write in plan.memberWrites {
                let statement = write.add ? statements[.addMember] : statements[.removeMember]
                defer { self.reset(statement) }
                try self.bind(statement, 1, write.circle)
                try self.bind(statement, 2, write.user)
                try self.run(statement, "change a membership")
            }
            for post in plan.postUpdates {
                // The index forgets the post's old text (read before the update: the exact text it indexed) …
                if let indexed = try self.indexed(post, statements) {
                    try self.unindex(indexed, statements, pending: &search)
                }
                let update = statements[.updatePost]
                defer { self.reset(update) }
                try self.bind(update, 1, post.circle)
                try self.bind(update, 2, post.seq)
                try self.bind(update, 3, post.text)
                try self.bind(update, 4, post.attachment)
                try self.bind(update, 5, post.edited)
                try self.bind(update, 6, post.deleted ? 1 : 0)
                try self.bind(update, 7, CommitPlan.mentionsColumn(post))
                try self.bind(update, 8, post.mentionsEveryone ? 1 : 0)
                let searchText = CommitPlan.searchText(post)
                let searchID = try searchText.map { _ in try self.newSearchID(&search, statements) }
                try self.bind(update, 9, searchID)
                try self.run(update, "update a post")
                // … and learns its new one, if it has any.
                if let searchText, let searchID {
                    try self.index(post, searchText, as: searchID, statements, into: &search)
                }
            }
            for post in plan.deletedPosts {
                for statement in [statements[.clearEdits], statements[.deleteReactions]] {
                    defer { self.reset(statement) }
                    try self.bind(statement, 1, post.circle.string)
                    try self.bind(statement, 2, post.seq)
                    try self.run(statement, "clean up after a delete")
                }
            }
            for (reaction, seq, firstSeq) in plan.reactionWrites {
                let statement = seq == nil ? statements[.deleteReaction] : statements[.putReaction]
                defer { self.reset(statement) }
                try self.bind(statement, 1, reaction.post.circle.string)
                try self.bind(statement, 2, reaction.post.seq)
                try self.bind(statement, 3, reaction.emoji.string)
                try self.bind(statement, 4, reaction.user.string)
                if let seq {
                    try self.bind(statement, 5, seq)
                    try self.bind(statement, 6, firstSeq ?? seq)
                }
                try self.run(statement, "write a reaction")
            }
            // 4. What the commit sets off, in the same transaction: webhook deliveries.
            if !plan.inserts.isEmpty {
                let webhooks = try self.activeWebhooks(statements[.activeWebhooks])
                for delivery in plan.webhookDeliveries(webhooks, now: Int64(Date().timeIntervalSince1970 * 1000)) {
                    let insert = statements[.insertDelivery]
                    defer { self.reset(insert) }
                    try self.bind(insert, 1, delivery.id)
                    try self.bind(insert, 2, delivery.webhook)
                    try self.bind(insert, 3, delivery.circle)
                    try self.bind(insert, 4, delivery.seq)
                    try self.bind(insert, 5, delivery.event.rawValue)
                    try self.bind(insert, 6, delivery.createdAt)
                    try self.bind(insert, 7, delivery.nextAttemptAt)
                    try self.run(insert, "record a webhook delivery")
                }
            }
            for mention in plan.mentionWrites {
                let insert = statements[.insertMention]
                defer { self.reset(insert) }
                try self.bind(insert, 1, mention.circle)
                try self.bind(insert, 2, mention.post)
                try self.bind(insert, 3, mention.user)
                try self.bind(insert, 4, mention.seq)
                try self.run(insert, "record a mention")
            }
            // … and pushes (CommitPlan+Push): who wants every post of the circles posted in, then
            // who of the candidates has a subscription, at what level.
            var everyPost: [String: [String]] = [:]
            for (circle, isPrivate) in plan.circlesForEveryPost() {
                var users: [String] = []
                do {
                    let lookup = statements[.everyPost]
                    defer { self.reset(lookup) }
                    try self.bind(lookup, 1, circle)
                    while try self.step(lookup, "look up who wants every post") { users.append(self.columnText(lookup, 0) ?? "") }
                }
                if isPrivate {
                    let member = statements[.isMember]
                    users = try users.filter { user in
                        defer { self.reset(member) }
                        try self.bind(member, 1, circle)
                        try self.bind(member, 2, user)
                        return try self.step(member, "look up a member")
                    }
                }
                if !users.isEmpty { everyPost[circle] = users }
            }
            let candidates = plan.pushCandidates(everyPost: everyPost)
            if !candidates.isEmpty {
                var subscribers: [MemberKey: CommitPlan.PushTarget] = [:]
                let lookup = statements[.pushTarget]
                for (circle, user) in candidates {
                    defer { self.reset(lookup) }
                    try self.bind(lookup, 1, circle)
                    try self.bind(lookup, 2, user)
                    var target = CommitPlan.PushTarget(level: nil, endpoints: [])
                    while try self.step(lookup, "look up push subscriptions") {
                        target.endpoints.append(self.columnText(lookup, 0) ?? "")
                        target.level = self.columnText(lookup, 1).flatMap(NotificationLevel.init(rawValue:))
                    }
                    if !target.endpoints.isEmpty { subscribers[MemberKey(circle: circle, user: user)] = target }
                }
                let now = Int64(Date().timeIntervalSince1970 * 1000)
                for push in plan.pushWrites(subscribers: subscribers, everyPost: everyPost) {
                    let insert = statements[.insertPush]
                    defer { self.reset(insert) }
                    try self.bind(insert, 1, push.endpoint)
                    try self.bind(insert, 2, push.user)
                    try self.bind(insert, 3, push.circle)
                    try self.bind(insert, 4, push.seq)
                    try self.bind(insert, 5, push.kind.rawValue)
                    try self.bind(insert, 6, now)
                    try self.run(insert, "queue a push")
                }
            }
            for entry in plan.newLastSeqs {
                let update = statements[.updateLastSeq]
                defer { self.reset(update) }
                try self.bind(update, 1, entry.circle)
                try self.bind(update, 2, entry.lastSeq)
                try self.run(update, "update last_seq")
            }
            // 5. The search index's new texts, last: see ``SearchAdd``.
            try self.addToSearchIndex(search.adds, statements)
            try self.run(statements[.commit], "commit")
            return plan.outcomes
        } catch {
            // SQLite may already have rolled back (some I/O errors do); then this fails harmlessly.
            _ = try? self.run(statements[.rollback], "rollback")
            throw error
        }
    }

    // MARK: - The search index

    /// A post as the search index holds it: its search id, its indexed text, and whether that
    /// is in the trigram index too.
    private struct Indexed {
        var id: Int64
        var text: String
        var trigrams: Bool
    }

    /// The post as the index holds it, when it is indexed.
    private func indexed(_ post: CirclePost, _ statements: Statements) throws -> Indexed? {
        let find = statements[.searchFind]
        defer { self.reset(find) }
        try self.bind(find, 1, post.circle)
        try self.bind(find, 2, post.seq)
        guard try self.step(find, "look up a post in the search index") else { return nil }
        return Indexed(
            id: sqlite_nio_sqlite3_column_int64(find, 0),
            text: self.columnText(find, 1) ?? "",
            trigrams: sqlite_nio_sqlite3_column_int64(find, 2) != 0
        )
    }

    /// What a commit writes to the search index, gathered as it goes.
    private struct SearchWrites {
        /// The next search id to give (``newSearchID(_:_:)``), once read.
        var nextID: Int64?
        /// The texts to give FTS5, in order: see ``SearchAdd``.
        var adds: [SearchAdd] = []
    }

    /// A text for the search index, given to FTS5 at the end of the commit's statements
    /// (``addToSearchIndex(_:_:)``) rather than with its post. FTS5 keeps what it is given in
    /// memory and writes it out as a new segment at the commit — and also whenever a statement
    /// opens a statement savepoint, which every later write to `posts` does (a multi-row write
    /// that may abort, since `foreign_keys` is on). Given with each post, the texts went out as
    /// one segment per post, each merged again later; given last, a commit writes one. See
    /// docs/bench/postpath.md, "With the search index".
    private struct SearchAdd {
        var id: Int64
        var text: String
    }

    /// A search id for a post this commit indexes, known before its row is written so that the
    /// row is written once. The ids follow the largest in `search_docs`, read once per commit:
    /// the commit's write transaction (`BEGIN IMMEDIATE`) keeps every other writer out.
    private func newSearchID(_ search: inout SearchWrites, _ statements: Statements) throws -> Int64 {
        if let id = search.nextID {
            search.nextID = id + 1
            return id
        }
        let next = statements[.searchNextID]
        defer { self.reset(next) }
        guard try self.step(next, "read the next search id") else {
            throw StoreError(.unavailable, "SQLite store: reading the next search id returned no row")
        }
        let id = sqlite_nio_sqlite3_column_int64(next, 0)
        search.nextID = id + 1
        return id
    }

    /// Gives the index the texts of ``SearchAdd``s, after every other write of the commit.
    private func addToSearchIndex(_ adds: [SearchAdd], _ statements: Statements) throws {
        for add in adds {
            for statement in [statements[.searchAddWords], statements[.searchAddTrigrams]] {
                defer { self.reset(statement) }
                try self.bind(statement, 1, add.id)
                try self.bind(statement, 2, add.text)
                try self.run(statement, "index a post's text")
            }
        }
    }

    /// Indexes `text` as the post's under search id `id`, which the post's row already keeps.
    /// The text itself goes to FTS5 with the commit's other ``SearchAdd``s.
    private func index(_ post: CirclePost, _ text: String, as id: Int64, _ statements: Statements, into search: inout SearchWrites) throws {
        let add = statements[.searchAddDoc]
        defer { self.reset(add) }
        try self.bind(add, 1, id)
        try self.bind(add, 2, post.circle)
        try self.bind(add, 3, post.seq)
        try self.run(add, "add a post to the search index")
        search.adds.append(SearchAdd(id: id, text: text))
    }

    /// Removes a post from the index (external content: FTS5 needs the very text it indexed to
    /// remove its tokens). A text this commit indexed is still among `pending`, not yet in FTS5:
    /// it leaves that list instead.
    private func unindex(_ indexed: Indexed, _ statements: Statements, pending: inout SearchWrites) throws {
        if let at = pending.adds.firstIndex(where: { $0.id == indexed.id }) {
            pending.adds.remove(at: at)
        } else {
            let removals = indexed.trigrams ? [statements[.searchRemoveWords], statements[.searchRemoveTrigrams]] : [statements[.searchRemoveWords]]
            for statement in removals {
                defer { self.reset(statement) }
                try self.bind(statement, 1, indexed.id)
                try self.bind(statement, 2, indexed.text)
                try self.run(statement, "remove a post's text from the search index")
            }
        }
        let remove = statements[.searchRemoveDoc]
        defer { self.reset(remove) }
        try self.bind(remove, 1, indexed.id)
        try self.run(remove, "remove a post from the search index")
    }

    /// The stored entry with idempotency key `key`, if any.
    private func storedEntry(_ key: PostKey, _ statement: OpaquePointer) throws -> CirclePost? {
        defer { self.reset(statement) }
        try self.bind(statement, 1, key.circle.string)
        try self.bind(statement, 2, key.author.string)
        try self.bind(statement, 3, key.clientID.string)
        guard try self.step(statement, "look up an entry key") else { return nil }
        return try self.entry(statement)
    }

    /// The stored entry at `key`, if any.
    private func storedEntry(at key: EntryKey, _ statement: OpaquePointer) throws -> CirclePost? {
        defer { self.reset(statement) }
        try self.bind(statement, 1, key.circle.string)
        try self.bind(statement, 2, key.seq)
        guard try self.step(statement, "look up an entry") else { return nil }
        return try self.entry(statement)
    }

    /// The row `statement` is on, in the columns of ``SQLiteEntryRow/columns``.
    private func entry(_ statement: OpaquePointer) throws -> CirclePost {
        try SQLiteEntryRow.post(StatementRow(writer: self, statement: statement))
    }

    /// The row a statement of this writer is on, read through the C API.
    private struct StatementRow: SQLiteEntryRow.Reader {
        let writer: SQLitePostWriter
        let statement: OpaquePointer

        func text(_ index: Int) throws -> String? {
            switch sqlite_nio_sqlite3_column_type(self.statement, Int32(index)) {
            case SQLITE_NULL: nil
            case SQLITE_TEXT, SQLITE_BLOB: self.writer.columnText(self.statement, Int32(index))
            default: throw SQLiteEntryRow.damaged(index, "is not text")
            }
        }

        func integer(_ index: Int) throws -> Int64? {
            switch sqlite_nio_sqlite3_column_type(self.statement, Int32(index)) {
            case SQLITE_NULL: nil
            case SQLITE_INTEGER: sqlite_nio_sqlite3_column_int64(self.statement, Int32(index))
            default: throw SQLiteEntryRow.damaged(index, "is not an integer")
            }
        }
    }

    /// The subscriptions a commit delivers to (only what ``Webhook/wants(_:)`` asks).
    private func activeWebhooks(_ statement: OpaquePointer) throws -> [Webhook] {
        defer { self.reset(statement) }
        var webhooks: [Webhook] = []
        while try self.step(statement, "read the webhooks") {
            guard let id = self.columnText(statement, 0) else { continue }
            webhooks.append(
                Webhook(
                    id: id, url: "", circle: self.columnText(statement, 1), events: Webhook.events(from: self.columnText(statement, 2) ?? ""),
                    secrets: [], bot: self.columnText(statement, 3), createdBy: "", createdAt: 0
                )
            )
        }
        return webhooks
    }

    private func circle(_ name: String, _ statement: OpaquePointer) throws -> CommitPlan.Circle? {
        defer { self.reset(statement) }
        try self.bind(statement, 1, name)
        guard try self.step(statement, "read a circle") else { return nil }
        return CommitPlan.Circle(
            lastSeq: sqlite_nio_sqlite3_column_int64(statement, 0),
            owner: self.columnText(statement, 1) ?? "",
            isPrivate: sqlite_nio_sqlite3_column_int64(statement, 2) != 0,
            direct: DirectMessageKey.members(fromColumn: self.columnText(statement, 3)),
            systemEntries: sqlite_nio_sqlite3_column_int64(statement, 4) != 0
        )
    }

    /// How many users reacted to `post` with each emoji, and each emoji's place (`first_seq`).
    private func reactionTally(_ post: EntryKey, _ statement: OpaquePointer) throws -> (counts: [BinaryText: Int], firstSeqs: [BinaryText: Int64]) {
        defer { self.reset(statement) }
        try self.bind(statement, 1, post.circle.string)
        try self.bind(statement, 2, post.seq)
        var counts: [BinaryText: Int] = [:]
        var firstSeqs: [BinaryText: Int64] = [:]
        while try self.step(statement, "count reactions") {
            let emoji = BinaryText(self.columnText(statement, 0) ?? "")
            counts[emoji] = Int(sqlite_nio_sqlite3_column_int64(statement, 1))
            firstSeqs[emoji] = sqlite_nio_sqlite3_column_int64(statement, 2)
        }
        return (counts, firstSeqs)
    }

    private func isStored(_ reaction: ReactionKey, _ statement: OpaquePointer) throws -> Bool {
        defer { self.reset(statement) }
        try self.bind(statement, 1, reaction.post.circle.string)
        try self.bind(statement, 2, reaction.post.seq)
        try self.bind(statement, 3, reaction.emoji.string)
        try self.bind(statement, 4, reaction.user.string)
        return try self.step(statement, "look up a reaction")
    }

    // MARK: - Statements

    /// The statements a commit uses, prepared once per connection.
    private enum Statement: Int, CaseIterable {
        case begin, commit, rollback
        case circle, findKey, findEntry, reactionCounts, findReaction
        case insert, updatePost, clearEdits, deleteReactions, deleteReaction, putReaction, updateLastSeq
        case activeWebhooks, insertDelivery
        case isAdmin, mentionable, everyone, insertMention
        case isMember, addMember, removeMember
        case everyPost, pushTarget, insertPush
        case searchFind, searchNextID, searchAddDoc, searchRemoveDoc, searchAddWords, searchAddTrigrams, searchRemoveWords, searchRemoveTrigrams

        /// The columns ``SQLitePostWriter/entry(_:)`` reads, in its order.
        static let entryColumns = SQLiteEntryRow.list

        var sql: String {
            switch self {
            case .begin: "BEGIN IMMEDIATE"
            case .commit: "COMMIT"
            case .rollback: "ROLLBACK"
            case .circle: "SELECT last_seq, owner, private, direct, system_entries FROM circles WHERE name = ?1"
            case .findKey: "SELECT \(Self.entryColumns) FROM posts WHERE circle = ?1 AND author = ?2 AND client_id = ?3"
            case .findEntry: "SELECT \(Self.entryColumns) FROM posts WHERE circle = ?1 AND seq = ?2"
            case .reactionCounts: "SELECT emoji, count(*), min(first_seq) FROM reactions WHERE circle = ?1 AND post = ?2 GROUP BY emoji"
            case .findReaction: "SELECT 1 FROM reactions WHERE circle = ?1 AND post = ?2 AND emoji = ?3 AND user = ?4"
            case .insert:
                """
                INSERT INTO posts (\(Self.entryColumns), search_id)
                VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18)
                """
            case .updatePost:
                // The search id of the text it now has, if any (``newSearchID(_:_:)``).
                """
                UPDATE posts SET text = ?3, attachment = ?4, edited_at = ?5, deleted = ?6, mentions = ?7, mentions_everyone = ?8, search_id = ?9
                WHERE circle = ?1 AND seq = ?2
                """
            case .clearEdits:
                "UPDATE posts SET text = NULL, mentions = NULL, mentions_everyone = 0 WHERE circle = ?1 AND target = ?2 AND change = 'edit'"
            case .deleteReactions: "DELETE FROM reactions WHERE circle = ?1 AND post = ?2"
            case .deleteReaction: "DELETE FROM reactions WHERE circle = ?1 AND post = ?2 AND emoji = ?3 AND user = ?4"
            case .putReaction:
                """
                INSERT INTO reactions (circle, post, emoji, user, seq, first_seq) VALUES (?1, ?2, ?3, ?4, ?5, ?6)
                ON CONFLICT (circle, post, emoji, user) DO UPDATE SET seq = excluded.seq, first_seq = excluded.first_seq
                """
            case .updateLastSeq: "UPDATE circles SET last_seq = ?2 WHERE name = ?1"
            case .isMember: "SELECT 1 FROM members WHERE circle = ?1 AND user = ?2"
            case .addMember: "INSERT INTO members (circle, user) VALUES (?1, ?2) ON CONFLICT DO NOTHING"
            case .removeMember: "DELETE FROM members WHERE circle = ?1 AND user = ?2"
            case .isAdmin: "SELECT 1 FROM accounts WHERE name = ?1 AND role = 'admin' AND status = 'active'"
            case .mentionable:
                """
                SELECT 1 WHERE EXISTS (SELECT 1 FROM members WHERE circle = ?1 AND user = ?2)
                    OR (?3 = 0 AND NOT EXISTS (SELECT 1 FROM accounts WHERE name = ?2 AND status = 'banned')
                        AND (EXISTS (SELECT 1 FROM accounts WHERE name = ?2) OR EXISTS (SELECT 1 FROM posts WHERE circle = ?1 AND author = ?2)))
                """
            case .everyone: "SELECT user FROM members WHERE circle = ?1 ORDER BY user LIMIT ?2"
            case .everyPost:
                // Who chose `all` in circle ?1 (a private circle's are then checked with
                // `isMember`; the push lookup drops those without a subscription). Statements
                // without a join: this writer's SQLite re-prepared one that joined
                // notification_levels with push_subscriptions or members at every commit
                // (sqlite3_stmt_status REPREPARE), parsing it anew each time.
                "SELECT user FROM notification_levels WHERE circle = ?1 AND level = 'all'"
            case .pushTarget:
                "SELECT s.endpoint, n.level FROM push_subscriptions s LEFT JOIN notification_levels n ON n.circle = ?1 AND n.user = s.user WHERE s.user = ?2"
            case .insertPush:
                "INSERT INTO pushes (endpoint, user, circle, seq, kind, created_at, next_attempt_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?6)"
            case .insertMention: "INSERT INTO mentions (circle, post, user, seq) VALUES (?1, ?2, ?3, ?4) ON CONFLICT DO NOTHING"
            case .activeWebhooks: "SELECT id, circle, events, bot FROM webhooks WHERE status = 'active'"
            case .insertDelivery:
                """
                INSERT OR IGNORE INTO webhook_deliveries (id, webhook, circle, seq, event, status, created_at, next_attempt_at)
                VALUES (?1, ?2, ?3, ?4, ?5, 'pending', ?6, ?7)
                """
            case .searchFind:
                """
                SELECT d.id, p.text, d.trigrams FROM posts AS p JOIN search_docs AS d ON d.id = p.search_id
                WHERE p.circle = ?1 AND p.seq = ?2
                """
            case .searchNextID: "SELECT coalesce(max(id), 0) + 1 FROM search_docs"
            case .searchAddDoc: "INSERT INTO search_docs (id, circle, seq, trigrams) VALUES (?1, ?2, ?3, 1)"
            case .searchRemoveDoc: "DELETE FROM search_docs WHERE id = ?1"
            case .searchAddWords: "INSERT INTO search_words (rowid, text) VALUES (?1, ?2)"
            case .searchAddTrigrams: "INSERT INTO search_trigrams (rowid, text) VALUES (?1, ?2)"
            case .searchRemoveWords: "INSERT INTO search_words (search_words, rowid, text) VALUES ('delete', ?1, ?2)"
            case .searchRemoveTrigrams: "INSERT INTO search_trigrams (search_trigrams, rowid, text) VALUES ('delete', ?1, ?2)"
            }
        }
    }

    private struct Statements {
        var prepared: [OpaquePointer]

        subscript(_ statement: Statement) -> OpaquePointer { self.prepared[statement.rawValue] }

        func finalize() {
            for statement in self.prepared {
                sqlite_nio_sqlite3_finalize(statement)
            }
        }
    }

    private func preparedStatements() throws -> Statements {
        if let statements = self.statements { return statements }
        var prepared: [OpaquePointer] = []
        do {
            for statement in Statement.allCases {
                prepared.append(try self.prepare(statement.sql, persistent: true))
            }
        } catch {
            for statement in prepared { sqlite_nio_sqlite3_finalize(statement) }
            throw error
        }
        let statements = Statements(prepared: prepared)
        self.statements = statements
        return statements
    }

    private func prepare(_ sql: String, persistent: Bool) throws -> OpaquePointer {
        var statement: OpaquePointer?
        let flags = persistent ? UInt32(SQLITE_PREPARE_PERSISTENT) : 0
        let status = sqlite_nio_sqlite3_prepare_v3(self.handle, sql, -1, flags, &statement, nil)
        guard status == SQLITE_OK, let statement else {
            throw self.error(status, "prepare \"\(sql)\"")
        }
        return statement
    }

    /// Steps `statement` once: `true` for a row, `false` when done.
    private func step(_ statement: OpaquePointer, _ operation: String) throws -> Bool {
        switch sqlite_nio_sqlite3_step(statement) {
        case SQLITE_ROW:
            return true
        case SQLITE_DONE:
            return false
        case let status:
            throw self.error(status, operation)
        }
    }

    /// Runs a statement that returns no rows, then resets it.
    private func run(_ statement: OpaquePointer, _ operation: String) throws {
        defer { self.reset(statement) }
        _ = try self.step(statement, operation)
    }

    private func reset(_ statement: OpaquePointer) {
        sqlite_nio_sqlite3_reset(statement)
        sqlite_nio_sqlite3_clear_bindings(statement)
    }

    private func bind(_ statement: OpaquePointer, _ index: Int32, _ value: String?) throws {
        let status: Int32
        if var value {
            // With its byte count, so a string with an embedded NUL is stored whole.
            status = value.withUTF8 { bytes -> Int32 in
                guard let base = bytes.baseAddress, !bytes.isEmpty else {
                    return sqlite_nio_sqlite3_bind_text64(statement, index, "", 0, transientDestructor, UInt8(SQLITE_UTF8))
                }
                return base.withMemoryRebound(to: CChar.self, capacity: bytes.count) { text in
                    sqlite_nio_sqlite3_bind_text64(statement, index, text, UInt64(bytes.count), transientDestructor, UInt8(SQLITE_UTF8))
                }
            }
        } else {
            status = sqlite_nio_sqlite3_bind_null(statement, index)
        }
        guard status == SQLITE_OK else { throw self.error(status, "bind") }
    }

    private func bind(_ statement: OpaquePointer, _ index: Int32, _ value: Int64) throws {
        let status = sqlite_nio_sqlite3_bind_int64(statement, index, value)
        guard status == SQLITE_OK else { throw self.error(status, "bind") }
    }

    private func bind(_ statement: OpaquePointer, _ index: Int32, _ value: Int64?) throws {
        guard let value else {
            let status = sqlite_nio_sqlite3_bind_null(statement, index)
            guard status == SQLITE_OK else { throw self.error(status, "bind") }
            return
        }
        try self.bind(statement, index, value)
    }

    /// An INTEGER column; `nil` for NULL.
    private func columnInteger(_ statement: OpaquePointer, _ column: Int32) -> Int64? {
        guard sqlite_nio_sqlite3_column_type(statement, column) != SQLITE_NULL else { return nil }
        return sqlite_nio_sqlite3_column_int64(statement, column)
    }

    /// A TEXT column as a string with all its bytes (an embedded NUL included); `nil` for NULL.
    fileprivate func columnText(_ statement: OpaquePointer, _ column: Int32) -> String? {
        guard sqlite_nio_sqlite3_column_type(statement, column) != SQLITE_NULL else { return nil }
        // text before bytes: the count is that of the UTF-8 form just produced.
        guard let text = sqlite_nio_sqlite3_column_text(statement, column) else { return "" }
        let count = Int(sqlite_nio_sqlite3_column_bytes(statement, column))
        return String(decoding: UnsafeBufferPointer(start: text, count: count), as: UTF8.self)
    }

    private func error(_ status: Int32, _ operation: String) -> StoreError {
        let message = self.handle.map { String(cString: sqlite_nio_sqlite3_errmsg($0)) } ?? "no connection"
        return StoreError(.unavailable, "SQLite store: \(operation) failed: \(message) (\(status))")
    }
}

/// SQLite's "copy the bound value now" destructor, which the C macro `SQLITE_TRANSIENT` spells as -1.
private let transientDestructor = unsafeBitCast(-1, to: sqlite3_destructor_type.self)

/// The post writer's busy handler (see `openOnThread`): `context` carries the limit in
/// milliseconds; `count` is how many times it was called for this lock.
private func fineBusyHandler(_ context: UnsafeMutableRawPointer?, _ count: Int32) -> Int32 {
    let limit = Int(bitPattern: context)
    // 20, 40, … 640 µs, then 1 ms a try: the first seven tries take 1.3 ms, then one per ms.
    let waited = count < 6 ? 0 : Int(count - 6)
    guard waited < limit else { return 0 }
    usleep(count < 6 ? UInt32(20 << count) : 1000)
    return 1
}
