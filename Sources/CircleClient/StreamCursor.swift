/// How a circle's stream continues for the app: what a post arriving after the cursor (the last
/// seq delivered) is. A join's replay and the live posts that follow it may overlap (the server
/// sends live posts committed while it reads the replay); this decides each post once.
enum StreamCursor {
    enum Arrival: Sendable, Hashable {
        /// At or before the cursor: delivered already (the overlap of a replay and live posts).
        case delivered
        /// The next one.
        case next
        /// After posts `from…to` that never arrived: delivered after saying so.
        case afterGap(from: Int64, to: Int64)
    }

    /// A post's arrival; with no cursor (a first, live-only join), every post is the next one.
    static func arrival(of seq: Int64, after cursor: Int64?) -> Arrival {
        guard let cursor else { return .next }
        if seq <= cursor { return .delivered }
        if seq == cursor + 1 { return .next }
        return .afterGap(from: cursor + 1, to: seq - 1)
    }
}
