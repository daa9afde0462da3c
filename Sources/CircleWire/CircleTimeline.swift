/// The current state of one circle's posts, made by applying its stream entries.
///
/// Applying is idempotent and order-tolerant in the way resuming needs: an entry applied twice
/// changes nothing the second time, and a reader that replays from its cursor after a
/// disconnect (or after loading a history page) ends with exactly the posts of a reader that
/// never left. The SDK's cache and models, `circle tail` and the tests use this one type.
///
/// ```swift
/// var timeline = CircleTimeline(viewer: "ann")
/// timeline.apply(entry)          // every `post` event, in seq order
/// timeline.merge(page.posts, asOf: page.lastSeq)  // a history page (a snapshot with reactions)
/// for post in timeline.posts { … } // oldest first, current state
/// ```
public struct CircleTimeline: Sendable, Hashable {
    /// The user whose reactions count as `me`; setting it recomputes `me` on every held post.
    public var viewer: String? {
        didSet {
            guard self.viewer != oldValue else { return }
            for index in self.posts.indices { self.posts[index] = self.seen(by: self.viewer, self.posts[index]) }
        }
    }
    /// Posts and system entries (``CirclePost/isSystem``; no change entries) in seq order, in
    /// their current state.
    public private(set) var posts: [CirclePost] = []
    /// The highest entry seq applied (posts and changes).
    public private(set) var lastSeq: Int64 = 0

    public init(viewer: String? = nil, posts: [CirclePost] = []) {
        self.viewer = viewer
        self.merge(posts)
    }

    /// The post with `seq`, if held.
    public func post(_ seq: Int64) -> CirclePost? {
        self.index(of: seq).map { self.posts[$0] }
    }

    /// What applying an entry did.
    public enum Effect: Sendable, Hashable {
        /// A post that was not held before.
        case added(CirclePost)
        /// A held post changed (edited, deleted, reactions): its new state.
        case updated(CirclePost)
        /// Nothing changed: a repeat, or a change to a post not held.
        case none
    }

    /// Applies one stream entry (a post or a change) and says what changed.
    @discardableResult
    public mutating func apply(_ entry: CirclePost) -> Effect {
        self.lastSeq = max(self.lastSeq, entry.seq)
        guard let change = entry.change else {
            if let index = self.index(of: entry.seq) {
                var post = entry
                // Streamed posts carry no reactions: keep the ones already known.
                if post.reactions == nil { post.reactions = self.posts[index].reactions }
                guard post != self.posts[index] else { return .none }
                self.posts[index] = post
                return .updated(post)
            }
            self.insert(entry)
            return .added(entry)
        }
        // A change applies to a post, never to a system entry (the server refuses those).
        guard let target = entry.target, let index = self.index(of: target), self.posts[index].isPost else { return .none }
        var post = self.posts[index]
        switch change {
        case .edit:
            guard !post.deleted, let text = entry.text else { return .none }
            post.text = text
            post.edited = max(post.edited ?? entry.time, entry.time)
        case .delete:
            post.deleted = true
            post.text = nil
            post.attachment = nil
            post.edited = nil
            post.reactions = post.reactions.map { _ in [] }
        case .react, .unreact:
            guard !post.deleted, let emoji = entry.emoji else { return .none }
            var reactions = post.reactions ?? []
            let position = reactions.firstIndex { $0.emoji == emoji }
            if change == .react {
                if let position {
                    guard !reactions[position].users.contains(entry.author) else { return .none }
                    reactions[position].users.append(entry.author)
                    reactions[position].count = Int64(reactions[position].users.count)
                    if entry.author == self.viewer { reactions[position].me = true }
                } else {
                    reactions.append(CircleReaction(emoji: emoji, users: [entry.author], me: entry.author == self.viewer))
                }
            } else {
                guard let position, let user = reactions[position].users.firstIndex(of: entry.author) else { return .none }
                reactions[position].users.remove(at: user)
                reactions[position].count = Int64(reactions[position].users.count)
                if entry.author == self.viewer { reactions[position].me = false }
                if reactions[position].users.isEmpty { reactions.remove(at: position) }
            }
            post.reactions = reactions
        }
        guard post != self.posts[index] else { return .none }
        self.posts[index] = post
        return .updated(post)
    }

    /// Takes posts from a history page or a cache: each replaces the held post with that seq
    /// (reactions included when the page has them). Change entries among them are applied.
    ///
    /// `asOf` is the page's `lastSeq`, the newest entry its posts reflect. A page older than what
    /// this timeline has applied (`asOf < lastSeq`: a change was committed between the page's
    /// read and its arrival, and streamed here first) would take that change back, so it replaces
    /// nothing held and only adds the posts not held; `merge` then returns `false`, and the
    /// caller should ask for the page again (the answer is then at least as new).
    @discardableResult
    public mutating func merge(_ page: [CirclePost], asOf: Int64? = nil) -> Bool {
        let current = asOf.map { $0 >= self.lastSeq } ?? true
        for post in page {
            if post.change != nil {
                self.apply(post)
            } else if let index = self.index(of: post.seq) {
                guard current else { continue }
                var post = post
                if post.reactions == nil { post.reactions = self.posts[index].reactions }
                self.posts[index] = self.seen(by: self.viewer, post)
            } else {
                self.insert(self.seen(by: self.viewer, post))
            }
        }
        return current
    }

    /// Marks that the stream is followed from `seq` on (a join's ack): entries up to it count as
    /// applied, so a page read before them is known to be older than this timeline.
    public mutating func follow(from seq: Int64) {
        self.lastSeq = max(self.lastSeq, seq)
    }

    /// `post` with `me` set for `viewer` (a page's `me` is for the user who asked, a cache's for
    /// whoever the viewer was when it was saved).
    private func seen(by viewer: String?, _ post: CirclePost) -> CirclePost {
        guard let reactions = post.reactions else { return post }
        var post = post
        post.reactions = reactions.map { reaction in
            var reaction = reaction
            reaction.me = viewer.map { reaction.users.contains($0) } ?? reaction.me
            return reaction
        }
        return post
    }

    /// Keeps the newest `count` posts, dropping older ones.
    public mutating func trim(keepingNewest count: Int) {
        guard self.posts.count > count else { return }
        self.posts.removeFirst(self.posts.count - max(count, 0))
    }

    private func index(of seq: Int64) -> Int? {
        var low = 0
        var high = self.posts.count
        while low < high {
            let middle = (low + high) / 2
            if self.posts[middle].seq < seq { low = middle + 1 } else { high = middle }
        }
        return low < self.posts.count && self.posts[low].seq == seq ? low : nil
    }

    private mutating func insert(_ post: CirclePost) {
        // Almost always the newest: append without a search.
        if let last = self.posts.last, last.seq > post.seq {
            let position = self.posts.firstIndex { $0.seq > post.seq } ?? self.posts.count
            self.posts.insert(post, at: position)
        } else {
            self.posts.append(post)
        }
    }
}
