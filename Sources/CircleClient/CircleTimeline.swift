import CircleWire

/// The posts of one circle in their current state, built by applying the circle's stream
/// entries (posts and changes) in order. Applying is idempotent: a reader that resumes with
/// `since` and applies what it missed ends equal to one that never left.
///
/// The rules (docs/PROTOCOL.md, "Applying entries"):
/// - a post is inserted, or replaces the known one with its seq (keeping the known reactions);
/// - an edit of a known, not deleted post takes the entry's text and `edited` = the entry's time;
/// - a delete makes the post a tombstone: no text, no attachment, no reactions;
/// - a react adds the entry's author to the emoji's users; an unreact removes them;
/// - a change to a post this timeline does not hold (older than it keeps) is ignored.
///
/// ```swift
/// var timeline = CircleTimeline(limit: 500)
/// for await event in await client.messages(in: "general") {
///     if case .post(let entry) = event { timeline.apply(entry); render(timeline.posts) }
/// }
/// ```
///
/// At most `limit` posts are kept: the oldest are dropped first.
public struct CircleTimeline: Sendable, Hashable {
    /// The most posts kept (at least 1).
    public let limit: Int
    /// The user whose reactions count as ``CircleReaction/me``; `nil` when unknown.
    public var me: String? {
        didSet { if oldValue != self.me { self.refreshMe() } }
    }
    /// Posts ordered by seq (no change entries).
    public private(set) var posts: [CirclePost] = []
    /// The highest seq applied (a post or a change), or 0.
    public private(set) var lastSeq: Int64 = 0

    public init(limit: Int = 500, me: String? = nil, posts: [CirclePost] = []) {
        self.limit = max(1, limit)
        self.me = me
        for post in posts { self.apply(post) }
    }

    /// The post with this seq, if held.
    public func post(_ seq: Int64) -> CirclePost? {
        self.index(of: seq).map { self.posts[$0] }
    }

    /// Applies one stream entry (a post or a change). Returns whether anything changed.
    @discardableResult
    public mutating func apply(_ entry: CirclePost) -> Bool {
        self.lastSeq = max(self.lastSeq, entry.seq)
        guard let change = entry.change else { return self.insert(entry) }
        guard let target = entry.target, let index = self.index(of: target) else { return false }
        let before = self.posts[index]
        var post = before
        switch change {
        case .edit:
            guard !post.deleted else { return false }
            if let text = entry.text { post.text = text }
            post.edited = entry.time
        case .delete:
            post.deleted = true
            post.text = nil
            post.attachment = nil
            post.reactions = nil
        case .react, .unreact:
            guard !post.deleted, let emoji = entry.emoji else { return false }
            var reactions = post.reactions ?? []
            if let position = reactions.firstIndex(where: { $0.emoji == emoji }) {
                var users = reactions[position].users
                if change == .react {
                    if !users.contains(entry.author) { users.append(entry.author) }
                } else {
                    users.removeAll { $0 == entry.author }
                }
                if users.isEmpty {
                    reactions.remove(at: position)
                } else {
                    reactions[position] = CircleReaction(emoji: emoji, users: users, me: self.me.map(users.contains) ?? false)
                }
            } else if change == .react {
                reactions.append(CircleReaction(emoji: emoji, users: [entry.author], me: entry.author == self.me))
            }
            post.reactions = reactions.isEmpty ? nil : reactions
        }
        self.posts[index] = post
        return post != before
    }

    /// Applies a history page: posts held are replaced by the page's state, reactions
    /// included (a snapshot). Posts the timeline does not hold are left out when older than
    /// the oldest held and the timeline is full.
    public mutating func applyHistory(_ page: [CirclePost]) {
        for var post in page where post.isPost {
            post.reactions = self.normalized(post.reactions)
            if let index = self.index(of: post.seq) {
                self.posts[index] = post
            } else {
                self.insert(post)
            }
        }
    }

    /// Posts older than `before` (all when `nil`), the newest `limit` of them oldest first, and
    /// whether older ones are held.
    public func page(before: Int64?, limit: Int) -> (posts: [CirclePost], more: Bool) {
        let end = before.map { self.insertionIndex(of: $0) } ?? self.posts.count
        let start = max(0, end - max(0, limit))
        return (Array(self.posts[start..<end]), start > 0)
    }

    /// Posts newer than `after`, the oldest `limit` of them, and whether newer ones are held.
    public func page(after: Int64, limit: Int) -> (posts: [CirclePost], more: Bool) {
        let start = self.insertionIndex(of: after + 1)
        let end = min(self.posts.count, start + max(0, limit))
        return (Array(self.posts[start..<end]), end < self.posts.count)
    }

    @discardableResult
    private mutating func insert(_ entry: CirclePost) -> Bool {
        var post = entry
        if let index = self.index(of: post.seq) {
            // Keep the known reactions: streamed posts carry none.
            if post.reactions == nil { post.reactions = self.posts[index].reactions }
            if post.deleted { post.reactions = nil }
            post.reactions = self.normalized(post.reactions)
            guard self.posts[index] != post else { return false }
            self.posts[index] = post
            return true
        }
        post.reactions = self.normalized(post.reactions)
        let position = self.insertionIndex(of: post.seq)
        if self.posts.count >= self.limit && position == 0 { return false }
        self.posts.insert(post, at: position)
        if self.posts.count > self.limit { self.posts.removeFirst(self.posts.count - self.limit) }
        return true
    }

    /// Reactions with `me` computed for this timeline's user; `nil` when none.
    private func normalized(_ reactions: [CircleReaction]?) -> [CircleReaction]? {
        guard let reactions, !reactions.isEmpty else { return nil }
        guard let me = self.me else { return reactions }
        return reactions.map { CircleReaction(emoji: $0.emoji, users: $0.users, me: $0.users.contains(me)) }
    }

    private mutating func refreshMe() {
        for index in self.posts.indices where self.posts[index].reactions != nil {
            self.posts[index].reactions = self.normalized(self.posts[index].reactions)
        }
    }

    private func index(of seq: Int64) -> Int? {
        let index = self.insertionIndex(of: seq)
        return index < self.posts.count && self.posts[index].seq == seq ? index : nil
    }

    /// The first index whose post has a seq at or above `seq`.
    private func insertionIndex(of seq: Int64) -> Int {
        var low = 0
        var high = self.posts.count
        while low < high {
            let middle = (low + high) / 2
            if self.posts[middle].seq < seq { low = middle + 1 } else { high = middle }
        }
        return low
    }
}
