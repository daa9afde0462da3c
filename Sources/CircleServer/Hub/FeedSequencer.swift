import CircleWire

/// Puts the posts a node hands to its subscribers in sequence order, whichever node stored them.
///
/// Posts reach the hub from two sides: this node's commits, and other nodes' commits that this
/// node learns of (a wake-up from the store, or the poll). They may arrive out of order — node
/// B stores seq 8 while node A's wake-up for seq 7 is still on its way — so per circle the
/// sequencer remembers the newest seq it has published and holds anything that would leave a
/// hole, asking for one store read that fills it. Subscribers then get every post once, in
/// order, and do not each read the store to fill the same hole (they still can: a session that
/// sees a hole replays it itself, so a lost read costs time, never a post).
///
/// Only circles with subscribers on this node are followed (``follow(_:)``/``unfollow(_:)``).
/// A value: events in, actions out, tested without I/O.
struct FeedSequencer {
    /// What the owner does.
    enum Action: Equatable {
        /// Hand these posts (one circle, ascending) to the circle's subscribers. They continue
        /// what was published before, except when a hole could not be filled from the store.
        case publish([CirclePost])
        /// Read the circle's posts after `after` from the store, then call ``read(_:after:_:)``.
        case read(circle: String, after: Int64)
    }

    struct Feed: Equatable {
        /// The newest seq handed to subscribers; `nil` until the first post is.
        var published: Int64?
        /// The newest seq known to be stored.
        var known: Int64 = 0
        /// Posts past a hole, ascending by seq, waiting for the read that fills it.
        var held: [CirclePost] = []
        /// A read is under way; at most one per circle.
        var reading = false
        /// News of newer posts came while the read was under way (it may not have seen them).
        var newsWhileReading = false
    }

    private(set) var feeds: [String: Feed] = [:]
    /// How many posts one read asks for; a longer hole takes several reads.
    static let readLimit = 256
    /// At most this many posts are held per circle; beyond, the oldest held are dropped (the
    /// reads bring them back from the store).
    let holdLimit: Int

    init(holdLimit: Int = 4096) {
        self.holdLimit = holdLimit
    }

    /// The circle has a subscriber on this node now.
    mutating func follow(_ circle: String) {
        if self.feeds[circle] == nil { self.feeds[circle] = Feed() }
    }

    /// The circle's last subscriber on this node left.
    mutating func unfollow(_ circle: String) {
        self.feeds[circle] = nil
    }

    var followed: some Collection<String> { self.feeds.keys }

    /// Posts of one circle that are stored, ascending by seq (a commit on this node, or posts
    /// another node sent along with its wake-up).
    mutating func stored(_ posts: [CirclePost]) -> [Action] {
        guard let first = posts.first else { return [] }
        guard var feed = self.feeds[first.circle] else { return [] }
        var actions: [Action] = []
        let last = posts[posts.count - 1].seq
        feed.known = max(feed.known, last)
        if feed.reading { feed.newsWhileReading = true }
        guard let published = feed.published else {
            // The first posts seen here: subscribers joined knowing the store's state, so these
            // continue it (a session that finds a hole before them reads it itself).
            feed.published = last
            actions.append(.publish(posts))
            self.feeds[first.circle] = feed
            return actions
        }
        let fresh = posts.drop { $0.seq <= published }
        guard let firstFresh = fresh.first else { return [] }
        if firstFresh.seq == published + 1 {
            feed.published = last
            actions.append(.publish(Array(fresh)))
            self.release(&feed, into: &actions)
        } else {
            self.hold(fresh, in: &feed)
        }
        self.readIfBehind(first.circle, &feed, into: &actions)
        self.feeds[first.circle] = feed
        return actions
    }

    /// Another node (or the poll) says the circle's newest stored seq is at least `last`; `first`
    /// is the oldest seq of that news when known (a wake-up names its batch's range).
    mutating func advanced(_ circle: String, first: Int64?, last: Int64) -> [Action] {
        guard var feed = self.feeds[circle], last > (feed.published ?? 0) || feed.published == nil else { return [] }
        var actions: [Action] = []
        feed.known = max(feed.known, last)
        if feed.reading { feed.newsWhileReading = true }
        if feed.published == nil {
            // Nothing published yet: start just before the news (subscribers fill older holes).
            guard !feed.reading else {
                self.feeds[circle] = feed
                return []
            }
            feed.reading = true
            actions.append(.read(circle: circle, after: max(0, (first ?? last) - 1)))
        } else {
            self.readIfBehind(circle, &feed, into: &actions)
        }
        self.feeds[circle] = feed
        return actions
    }

    /// The answer to a ``Action/read(circle:after:)``: the posts after `after`, ascending (or
    /// `nil` when the read failed: the next wake-up or poll tries again).
    mutating func read(_ circle: String, after: Int64, _ posts: [CirclePost]?) -> [Action] {
        guard var feed = self.feeds[circle] else { return [] }
        feed.reading = false
        let newsArrived = feed.newsWhileReading
        feed.newsWhileReading = false
        guard let posts else {
            self.feeds[circle] = feed
            return []
        }
        var actions: [Action] = []
        if let last = posts.last?.seq { feed.known = max(feed.known, last) }
        let published = feed.published ?? after
        let fresh = posts.drop { $0.seq <= published }
        if let firstFresh = fresh.first, firstFresh.seq == published + 1 {
            feed.published = fresh[fresh.index(before: fresh.endIndex)].seq
            actions.append(.publish(Array(fresh)))
        }
        self.release(&feed, into: &actions)
        if feed.published == nil, fresh.isEmpty {
            // Nothing after `after` is stored: that is where this node stands.
            feed.published = after
        }
        if fresh.isEmpty, !newsArrived {
            // The store has nothing past what is published, and no news came meanwhile: what
            // is held cannot be completed from here, so hand it on (a subscriber that sees the
            // hole reads it itself) rather than hold it forever.
            if !feed.held.isEmpty {
                actions.append(.publish(feed.held))
                feed.published = feed.held[feed.held.count - 1].seq
                feed.held = []
            }
            feed.known = feed.published ?? feed.known
        }
        self.readIfBehind(circle, &feed, into: &actions)
        self.feeds[circle] = feed
        return actions
    }

    /// Publishes held posts that now continue the published ones; drops held ones already published.
    private func release(_ feed: inout Feed, into actions: inout [Action]) {
        guard let published = feed.published, !feed.held.isEmpty else { return }
        var current = published
        var ready: [CirclePost] = []
        var index = 0
        while index < feed.held.count {
            let post = feed.held[index]
            if post.seq <= current {
                index += 1
                continue
            }
            guard post.seq == current + 1 else { break }
            ready.append(post)
            current = post.seq
            index += 1
        }
        feed.held.removeFirst(index)
        if !ready.isEmpty {
            feed.published = current
            actions.append(.publish(ready))
        }
    }

    private func hold(_ posts: some Collection<CirclePost>, in feed: inout Feed) {
        var merged = feed.held
        for post in posts where !merged.contains(where: { $0.seq == post.seq }) {
            merged.append(post)
        }
        merged.sort { $0.seq < $1.seq }
        if merged.count > self.holdLimit { merged.removeFirst(merged.count - self.holdLimit) }
        feed.held = merged
    }

    /// Asks for the posts after the published ones when the store is known to have more.
    private func readIfBehind(_ circle: String, _ feed: inout Feed, into actions: inout [Action]) {
        guard !feed.reading, let published = feed.published, feed.known > published else { return }
        feed.reading = true
        actions.append(.read(circle: circle, after: published))
    }
}
