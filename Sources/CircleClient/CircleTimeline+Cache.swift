import CircleWire

/// The offline cache's pages: ``CircleClient/history(of:before:limit:)`` and
/// ``CircleClient/history(of:after:limit:)`` answer from these while not connected.
extension CircleTimeline {
    /// Applies a stream entry and keeps at most `limit` posts (the oldest go first).
    mutating func apply(_ entry: CirclePost, keepingNewest limit: Int) {
        self.apply(entry)
        self.trim(keepingNewest: limit)
    }

    /// Posts older than `before` (all when `nil`), the newest `limit` of them oldest first, and
    /// whether older ones are held.
    func page(before: Int64?, limit: Int) -> (posts: [CirclePost], more: Bool) {
        let end = before.map { self.firstIndex(atOrAbove: $0) } ?? self.posts.count
        let start = max(0, end - max(0, limit))
        return (Array(self.posts[start..<end]), start > 0)
    }

    /// Posts newer than `after`, the oldest `limit` of them, and whether newer ones are held.
    func page(after: Int64, limit: Int) -> (posts: [CirclePost], more: Bool) {
        let start = self.firstIndex(atOrAbove: after + 1)
        let end = min(self.posts.count, start + max(0, limit))
        return (Array(self.posts[start..<end]), end < self.posts.count)
    }

    /// The index of the first post whose seq is `seq` or more.
    private func firstIndex(atOrAbove seq: Int64) -> Int {
        var low = 0
        var high = self.posts.count
        while low < high {
            let middle = (low + high) / 2
            if self.posts[middle].seq < seq { low = middle + 1 } else { high = middle }
        }
        return low
    }
}
