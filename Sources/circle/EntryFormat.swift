import CircleClient
import Foundation

/// How `circle tail` and `circle chat` put an entry of a circle's stream into words: a post in
/// its current state (edited, deleted, a reply, its reactions when a history page gave them), or
/// a change to an earlier post (an edit, a delete, a reaction added or taken back).
enum EntryFormat {
    /// The text of a post as it reads now: `[photo] caption` for a photo, `[deleted]` for a
    /// tombstone, with ` (edited)` after an edited one.
    static func body(_ post: CirclePost) -> String {
        if post.deleted { return "[deleted]" }
        var text = post.text ?? ""
        if let attachment = post.attachment {
            let caption = text.trimmingCharacters(in: .whitespaces)
            text = caption.isEmpty ? "[photo \(attachment.prefix(6))]" : "[photo] \(caption)"
        }
        return text
    }

    /// Reaction counts as ` [👍 2 🎉 1]`, or "" when there are none.
    static func reactions(_ counts: [(emoji: String, count: Int)]) -> String {
        let shown = counts.filter { $0.count > 0 }
        guard !shown.isEmpty else { return "" }
        return " [" + shown.map { "\($0.emoji) \($0.count)" }.joined(separator: " ") + "]"
    }

    /// What a change entry did, without its own number or time: `ann edited #12: new text`,
    /// `ann deleted #12`, `ann reacted 👍 to #12`, `ann took back 👍 from #12`.
    static func change(_ entry: CirclePost) -> String? {
        guard let change = entry.change else { return nil }
        let target = entry.target.map { "#\($0)" } ?? "a post"
        switch change {
        case .edit:
            return entry.text.map { "\(entry.author) edited \(target): \($0)" } ?? "\(entry.author) edited \(target)"
        case .delete:
            return "\(entry.author) deleted \(target)"
        case .react:
            return "\(entry.author) reacted \(entry.emoji ?? "?") to \(target)"
        case .unreact:
            return "\(entry.author) took back \(entry.emoji ?? "?") from \(target)"
        }
    }

    /// One line of `circle tail`: `#SEQ HH:MM:SS author: text` for a post (with `(edited)`,
    /// `(reply to #N)`, reaction counts), `#SEQ HH:MM:SS ann reacted 👍 to #12` for a change,
    /// `#SEQ HH:MM:SS — ann added bob` for a system entry.
    static func tailLine(_ entry: CirclePost) -> String {
        let date = Date(timeIntervalSince1970: Double(entry.time) / 1000)
        let formatter = DateFormatter()
        formatter.dateFormat = "HH:mm:ss"
        let prefix = "#\(entry.seq) \(formatter.string(from: date)) "
        if let change = self.change(entry) { return prefix + change }
        if let system = entry.systemText { return prefix + "— " + system }
        var author = entry.author
        if let replyTo = entry.replyTo { author += " (reply to #\(replyTo))" }
        if entry.edited != nil, !entry.deleted { author += " (edited)" }
        var text = entry.deleted ? "[deleted]" : (entry.text ?? "")
        if !entry.deleted, let attachment = entry.attachment { text += " [attachment \(attachment)]" }
        let counts = (entry.reactions ?? []).map { (emoji: $0.emoji, count: Int($0.count)) }
        return prefix + author + ": " + text + self.reactions(counts)
    }
}
