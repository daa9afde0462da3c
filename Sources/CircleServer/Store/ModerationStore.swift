/// What moderation keeps (docs/API.md, "Moderation"): read-only circles, and the word to every
/// node that a user's connections end.
public protocol ModerationStore: Sendable {
    /// Makes a circle read-only for its members (or not).
    func setReadOnly(_ circle: String, _ readOnly: Bool, by user: String, at time: Int64) async throws
    /// The read-only circles, by name.
    func readOnlyCircles() async throws -> [String]
    /// Records that every connection of `user` ends (not their sessions): a store shared by
    /// several nodes logs it where they look (``SharedCircleStore/accountEvents(after:)``), so a
    /// node that missed the signal still closes them; a store of one node has nothing to log.
    func logDisconnect(of user: String, at time: Int64) async throws
}
