import CircleWire

/// The offline cache's pages: ``CircleClient/history(of:before:limit:)`` and
/// ``CircleClient/history(of:after:limit:)`` answer from these while not connected.
extension CircleTimeline {
    /// Applies a stream entry and keeps at most `limit` posts (the oldest go first).
    mutating func apply(_ entry: CirclePost, keepingNewest limit: Int) {
        self.apply(entry)
        self.trim(keepingNewest: limit)
    }

    /// Takes a history page into the cache: its posts replace the held ones with their seq
    /// (reactions included) and are added when not held, then the newest `limit` are kept.
    /// A page older than this timeline (`asOf` below ``lastSeq``) changes nothing, since
    /// ``merge(_:asOf:)`` would still add its posts, which may lack changes this cache applied
    /// only to the posts it held then.
    ///
    /// - Returns: `false` for such a stale page: ask for it again.
    mutating func takePage(_ posts: [CirclePost], asOf: Int64, keepingNewest limit: Int) -> Bool {
        var merged = self
        guard merged.merge(posts, asOf: asOf) else { return false }
        merged.trim(keepingNewest: limit)
        self = merged
        return true
    }

    /// Posts older than `before` (all when `nil`), the newest `limit` of them oldest first, and
    /// whether older ones are held.
    func page(before: Int64?, limit: Int) -> (posts: [CirclePost], more: Bool) {
        let end = before.map { before in self.firstIndex { $0.seq >= before } } ?? self.posts.count
        let start = end - min(end, max(0, limit))
        return (Array(self.posts[start..<end]), start > 0)
    }

    /// Posts newer than `after`, the oldest `limit` of them, and whether newer ones are held.
    func page(after: Int64, limit: Int) -> (posts: [CirclePost], more: Bool) {
        // Compared, not `after + 1`, and the count clamped before adding: any `after` and any
        // `limit` an app passes (`Int64.max`, `Int.max`) give a page, not a trap.
        let start = self.firstIndex { $0.seq > after }
        let end = start + min(self.posts.count - start, max(0, limit))
        return (Array(self.posts[start..<end]), end < self.posts.count)
    }

    /// The index of the first post for which `isAtOrPast` holds (the posts are in seq order, so
    /// it holds for every later one too); the count when there is none.
    private func firstIndex(where isAtOrPast: (CirclePost) -> Bool) -> Int {
        var low = 0
        var high = self.posts.count
        while low < high {
            let middle = low + (high - low) / 2
            if isAtOrPast(self.posts[middle]) { high = middle } else { low = middle + 1 }
        }
        return low
    }
}
