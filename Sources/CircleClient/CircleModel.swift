import CircleWire
import Foundation
import Observation

/// One circle as an app's UI shows it: its posts in current state (with the delivery state of
/// this client's own posts), the unread count, who is typing, and the connection state. A
/// SwiftUI view binds to it directly (`@Observable`); it is built on ``CircleClient``'s async
/// API and works the same on Linux.
///
/// ```swift
/// let model = CircleModel(client: client, circle: "general")
/// model.start()
/// // In a view: ForEach(model.posts) { item in Row(item.post, item.delivery) }
/// try await model.post("hello")
/// try await model.react("👍", to: model.posts.last!.post.seq)
/// if model.hasOlder { try await model.loadOlder() }       // the user scrolled to the top
/// try await model.retry(failedItem.id)                     // a post shown as failed
/// try await model.markRead()
/// model.stop()
/// ```
@Observable
@MainActor
public final class CircleModel {
    /// A post as shown: its current state and, for this client's own posts, how far it got.
    public struct Item: Identifiable, Sendable, Hashable {
        /// The post's request id (stable from the moment it is queued).
        public var id: String
        /// The post in its current state. A post still sending has seq 0 and this client's user
        /// as its author (empty when unknown).
        public var post: CirclePost
        public var delivery: Delivery
    }

    /// How far one of this client's posts got.
    public enum Delivery: Sendable, Hashable {
        /// In the outbox: not yet acknowledged by the server.
        case sending
        /// Stored by the server (every post received from the server is `sent`).
        case sent
        /// Refused, timed out or cancelled; it stays in ``posts`` until ``retry(_:)`` or
        /// ``dismiss(_:)``.
        case failed(CircleClientError)
    }

    public let circle: String
    /// The posts, oldest first: those received (at most `limit`, plus those ``loadOlder(limit:)``
    /// added), then own posts still sending or failed.
    public private(set) var posts: [Item] = []
    /// Whether the circle may hold posts older than the oldest in ``posts``: `true` until a page
    /// of ``loadOlder(limit:)`` (or the first page) reached the circle's first post, and again
    /// when posts were dropped to stay within the limit.
    public private(set) var hasOlder = true
    /// Posts by others, not deleted, above this user's read marker, among the posts held.
    public private(set) var unread = 0
    /// This user's read marker (from ``CircleClient/circleSummaries()`` when connected, and
    /// ``CircleEvent/read(seq:)`` events).
    public private(set) var readSeq: Int64 = 0
    /// Users who sent a typing notice within the typing timeout, sorted.
    public private(set) var typingUsers: [String] = []
    public private(set) var connectionState: ConnectionState = .disconnected

    @ObservationIgnored private let client: CircleClient
    @ObservationIgnored private let typingTimeout: Duration
    @ObservationIgnored private let historyPage: Int
    @ObservationIgnored private let limit: Int
    /// The most posts held: `limit`, grown by what ``loadOlder(limit:)`` added.
    @ObservationIgnored private var capacity: Int
    /// No post of the circle has a seq below this (a backward page said so).
    @ObservationIgnored private var firstSeq: Int64?
    @ObservationIgnored private var loadingOlder = false
    @ObservationIgnored private var timeline: CircleTimeline
    @ObservationIgnored private var pending: [Item] = []
    /// Own posts that failed, as the outbox had them (``retry(_:)`` sends them again).
    @ObservationIgnored private var failed: [String: OutboxEntry] = [:]
    @ObservationIgnored private var typingUntil: [String: ContinuousClock.Instant] = [:]
    @ObservationIgnored private var typingTimer: Task<Void, Never>?
    @ObservationIgnored private var tasks: [Task<Void, Never>] = []

    /// - Parameters:
    ///   - client: the client the model reads and posts through.
    ///   - circle: the circle.
    ///   - limit: the most posts held (oldest dropped first).
    ///   - historyPage: when the model is connected and holds no post yet (no offline cache), it
    ///     loads this many of the newest posts once; 0 does not.
    ///   - typingTimeout: how long a typing notice counts.
    public init(client: CircleClient, circle: String, limit: Int = 500, historyPage: Int = 50, typingTimeout: Duration = .seconds(5)) {
        self.client = client
        self.circle = circle
        self.timeline = CircleTimeline()
        self.limit = max(1, limit)
        self.capacity = self.limit
        self.historyPage = historyPage
        self.typingTimeout = typingTimeout
    }

    /// Starts following the circle (joins it through ``CircleClient/messages(in:)``). The
    /// client itself is connected by the app.
    public func start() {
        guard self.tasks.isEmpty else { return }
        let client = self.client
        let circle = self.circle
        self.tasks.append(
            Task { [weak self] in
                let outbox = await client.outboxEvents()
                let queued = await client.outbox
                self?.restore(queued)
                for await event in outbox {
                    guard let self else { return }
                    self.handle(event)
                }
            }
        )
        self.tasks.append(
            Task { [weak self] in
                for await event in await client.messages(in: circle) {
                    guard let self else { return }
                    self.handle(event)
                }
            }
        )
        self.tasks.append(
            Task { [weak self] in
                for await state in await client.states() {
                    guard let self else { return }
                    await self.connectionChanged(state)
                }
            }
        )
    }

    /// Stops following the circle (the streams end; the client stays connected).
    public func stop() {
        for task in self.tasks { task.cancel() }
        self.tasks = []
        self.typingTimer?.cancel()
        self.typingTimer = nil
    }

    // MARK: Actions

    /// Posts through the client's outbox; the post shows as `sending` at once.
    @discardableResult
    public func post(_ text: String, attachment: String? = nil, replyTo: Int64? = nil) async throws -> PostReceipt {
        try await self.client.post(text, to: self.circle, attachment: attachment, replyTo: replyTo)
    }

    @discardableResult
    public func edit(_ seq: Int64, text: String) async throws -> PostReceipt {
        try await self.client.edit(seq, in: self.circle, text: text)
    }

    @discardableResult
    public func delete(_ seq: Int64) async throws -> PostReceipt {
        try await self.client.delete(seq, in: self.circle)
    }

    @discardableResult
    public func react(_ emoji: String, to seq: Int64) async throws -> PostReceipt {
        try await self.client.react(emoji, to: seq, in: self.circle)
    }

    @discardableResult
    public func unreact(_ emoji: String, from seq: Int64) async throws -> PostReceipt {
        try await self.client.unreact(emoji, from: seq, in: self.circle)
    }

    /// Marks the circle read up to `seq` (the newest post held when `nil`).
    public func markRead(upTo seq: Int64? = nil) async throws {
        guard let target = seq ?? self.timeline.posts.last?.seq else { return }
        let stored = try await self.client.markRead(self.circle, upTo: target)
        self.setReadSeq(stored)
    }

    /// Tells the circle this user is typing.
    public func typing() async throws { try await self.client.typing(in: self.circle) }

    /// Loads up to `limit` posts older than the oldest in ``posts`` (the newest posts when none
    /// is held), in current state: from the server when connected, else from the client's
    /// offline cache. They are kept on top of the model's `limit`. ``hasOlder`` says whether
    /// more may exist. A call while another is loading returns at once.
    ///
    /// A page older than the posts held (a change arrived between the page's read and its
    /// arrival) is asked for again, three times in all; if every answer was older, nothing is
    /// added (call again).
    public func loadOlder(limit: Int = 50) async throws {
        guard !self.loadingOlder else { return }
        self.loadingOlder = true
        defer { self.loadingOlder = false }
        let before = self.timeline.posts.first?.seq
        guard let page = try await self.mergePage(before: before, limit: limit) else { return }
        if !page.more { self.firstSeq = page.posts.first?.seq ?? before ?? .max }
        self.capacity = max(self.capacity, self.timeline.posts.count)
        self.refresh()
    }

    /// Sends a post shown as `failed` again, through the outbox with the same id: the server
    /// stores a post once per id, so a post that timed out but was stored is not stored twice
    /// (the server answers with the original). It shows as `sending`, then `sent` (or `failed`
    /// again).
    ///
    /// - Throws: what ``post(_:attachment:replyTo:)`` throws; `bad_request` when `id` is not a
    ///   failed post of this model.
    @discardableResult
    public func retry(_ id: String) async throws -> PostReceipt {
        guard let entry = self.failed[id], let index = self.pending.firstIndex(where: { $0.id == id }) else {
            throw CircleClientError(.badRequest, "no failed post with id \(id) in \(self.circle)")
        }
        self.failed[id] = nil
        self.pending[index].delivery = .sending
        self.refresh()
        do {
            return try await self.client.core.enqueue(entry)
        } catch let error as CircleClientError {
            // Refused before it was queued (the client stopped, or failFast offline): no outbox
            // event will say so. After queueing, the outbox's own `failed` event says the same.
            self.handle(.failed(entry, error))
            throw error
        }
    }

    /// Removes a failed post from ``posts``.
    public func dismiss(_ id: String) {
        self.pending.removeAll { $0.id == id && $0.delivery != .sending }
        if self.pending.allSatisfy({ $0.id != id }) { self.failed[id] = nil }
        self.refresh()
    }

    /// Asks for a page and merges it into the posts held, asking again while it is older than
    /// them (at most ``ClientCore/historyAttempts`` times in all): merged then, it could take
    /// back a change applied here, or add posts without changes this model saw only for the
    /// posts it held. `nil` when every answer was older.
    private func mergePage(before: Int64?, limit: Int) async throws -> HistoryPage? {
        for _ in 0..<ClientCore.historyAttempts {
            let (page, follows) = try await self.client.core.pageForFollower(self.circle, before: before, limit: limit)
            // The entries up to `follows` reached this model's stream, or (on a first join) are
            // before its start: a page must be at least as new.
            if let follows { self.timeline.follow(from: follows) }
            var timeline = self.timeline
            if timeline.merge(page.posts, asOf: page.lastSeq) {
                self.timeline = timeline
                return page
            }
        }
        return nil
    }

    // MARK: Events

    private func restore(_ queued: [OutboxEntry]) {
        for entry in queued { self.handle(.queued(entry)) }
    }

    private func handle(_ event: OutboxEvent) {
        switch event {
        case .queued(let entry), .sending(let entry):
            guard entry.circle == self.circle, entry.action == .post, !self.pending.contains(where: { $0.id == entry.id }),
                !self.timeline.posts.contains(where: { $0.id == entry.id })
            else { return }
            let post = CirclePost(
                circle: entry.circle, seq: 0, author: self.timeline.viewer ?? "", text: entry.text, attachment: entry.attachment,
                time: entry.createdAt, id: entry.id, replyTo: entry.replyTo
            )
            self.pending.append(Item(id: entry.id, post: post, delivery: .sending))
        case .sent(let entry, _):
            guard entry.circle == self.circle else { return }
            // The post itself arrives through the circle's stream (before or after the ack).
            if let index = self.pending.firstIndex(where: { $0.id == entry.id }) { self.pending[index].delivery = .sent }
        case .failed(let entry, let error):
            guard entry.circle == self.circle, let index = self.pending.firstIndex(where: { $0.id == entry.id }) else { return }
            self.pending[index].delivery = .failed(error)
            self.failed[entry.id] = entry
        }
        self.refresh()
    }

    private func handle(_ event: CircleEvent) {
        switch event {
        case .post(let entry):
            self.timeline.apply(entry, keepingNewest: self.capacity)
            if entry.isPost {
                self.pending.removeAll { $0.id == entry.id }
                self.typingUntil[entry.author] = nil
                self.refreshTyping()
            }
        case .read(let seq):
            self.setReadSeq(seq)
        case .typing(let user):
            self.typingUntil[user] = .now + self.typingTimeout
            self.refreshTyping()
        case .gap, .joined, .left, .notify:
            return
        }
        self.refresh()
    }

    private func connectionChanged(_ state: ConnectionState) async {
        self.connectionState = state
        // The user is known once the client fetched a token, connected or not. Setting the
        // viewer recomputes `me` on the posts held: reactions applied before it was known (the
        // cache of another user, entries that arrived first) show this user's own.
        if let user = await self.client.user, user != self.timeline.viewer {
            self.timeline.viewer = user
            for index in self.pending.indices where self.pending[index].post.author.isEmpty { self.pending[index].post.author = user }
            self.refresh()
        }
        guard state == .connected else { return }
        if let summary = try? await self.client.circleSummaries().first(where: { $0.name == self.circle }) {
            self.setReadSeq(summary.readSeq)
        }
        if self.timeline.posts.isEmpty, self.historyPage > 0, let page = try? await self.mergePage(before: nil, limit: self.historyPage) {
            if !page.more { self.firstSeq = page.posts.first?.seq ?? .max }
            self.timeline.trim(keepingNewest: self.capacity)
            self.refresh()
        }
    }

    private func setReadSeq(_ seq: Int64) {
        guard seq > self.readSeq else { return }
        self.readSeq = seq
        self.refresh()
    }

    private func refresh() {
        let held = self.timeline.posts.map { Item(id: $0.id, post: $0, delivery: .sent) }
        let posts = held + self.pending.filter { item in item.delivery != .sent || !held.contains { $0.id == item.id } }
        if posts != self.posts { self.posts = posts }
        // Held from the circle's first post on: nothing older (posts dropped by the limit are).
        let hasOlder = self.firstSeq.map { (self.timeline.posts.first?.seq ?? .max) > $0 } ?? true
        if hasOlder != self.hasOlder { self.hasOlder = hasOlder }
        let me = self.timeline.viewer
        let unread = self.timeline.posts.reduce(0) { count, post in
            count + (post.seq > self.readSeq && post.isPost && !post.deleted && post.author != me ? 1 : 0)
        }
        if unread != self.unread { self.unread = unread }
    }

    private func refreshTyping() {
        let now = ContinuousClock.now
        self.typingUntil = self.typingUntil.filter { $0.value > now }
        let users = self.typingUntil.keys.sorted()
        if users != self.typingUsers { self.typingUsers = users }
        self.typingTimer?.cancel()
        guard let next = self.typingUntil.values.min() else {
            self.typingTimer = nil
            return
        }
        self.typingTimer = Task { [weak self] in
            try? await Task.sleep(until: next, clock: .continuous)
            guard !Task.isCancelled else { return }
            self?.refreshTyping()
        }
    }
}
