import CircleWire

/// Builds the `reactions` of history posts from reaction rows read by post, then by their
/// emoji's place (`first_seq`, see ``CommitPlan/reactionWrites``), then by the `seq` of the entry
/// that added each: per post, the emoji in the order each was first used (an emoji keeps its
/// place while any reaction with it stands), and each emoji's users in the order they reacted.
struct ReactionGrouping: Sendable {
    /// The user asking, for ``CircleReaction/me``.
    let viewer: BinaryText
    private var posts: [Int64: [(emoji: BinaryText, users: [String])]] = [:]

    init(viewer: String) {
        self.viewer = BinaryText(viewer)
    }

    /// Adds one reaction row; call in the order described above.
    mutating func add(post: Int64, emoji: String, user: String) {
        let key = BinaryText(emoji)
        // In place (no copy of a popular emoji's users per row).
        if let index = self.posts[post]?.firstIndex(where: { $0.emoji == key }) {
            self.posts[post, default: []][index].users.append(user)
        } else {
            self.posts[post, default: []].append((key, [user]))
        }
    }

    /// The reactions of post `seq`; an empty array when it has none.
    func reactions(of seq: Int64) -> [CircleReaction] {
        (self.posts[seq] ?? []).map { group in
            CircleReaction(emoji: group.emoji.string, users: group.users, me: group.users.contains { BinaryText($0) == self.viewer })
        }
    }
}
