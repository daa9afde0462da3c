import CircleWire
import Foundation

/// How a search is answered: its order, page size, where to go on, and its time bound.
public struct SearchOptions: Sendable, Hashable {
    /// The order of the hits.
    public enum Order: String, Sendable, Hashable {
        /// Best match first (SQLite: BM25; PostgreSQL: `ts_rank_cd`), newest first among equals.
        case relevance
        /// Newest first (by post time, then circle and seq, both descending).
        case newest
    }

    public var order: Order
    /// Hits per page, clamped to `1...maxLimit`.
    public var limit: Int
    /// ``SearchPage/next`` of the page before; `nil` for the first page.
    public var cursor: String?
    /// The longest one search may run in the store. Past it the store stops the query and
    /// throws ``SearchError`` with code `.timedOut` (SQLite: `sqlite3_interrupt` from a timer
    /// started with the statement, after any wait for one of the searcher's threads;
    /// PostgreSQL: `SET LOCAL statement_timeout`); nothing is returned for that request, the
    /// store and other requests carry on. A person gets "narrow the search".
    public var timeLimit: Duration

    /// The most hits one page may ask for.
    public static let maxLimit = 100
    /// How deep relevance-ordered pages go (hits skipped); newest-first pages have no such bound.
    public static let maxRelevanceOffset = 1_000

    public init(order: Order = .relevance, limit: Int = 20, cursor: String? = nil, timeLimit: Duration = .seconds(2)) {
        self.order = order
        self.limit = limit
        self.cursor = cursor
        self.timeLimit = timeLimit
    }

    /// ``limit`` within `1...maxLimit`.
    var pageSize: Int { min(max(self.limit, 1), Self.maxLimit) }

    /// ``timeLimit`` in whole milliseconds, at least 1.
    var timeLimitMilliseconds: Int64 {
        let (seconds, attoseconds) = self.timeLimit.components
        let milliseconds = seconds.multipliedReportingOverflow(by: 1000)
        guard !milliseconds.overflow, seconds >= 0 else { return seconds < 0 ? 1 : Int64.max / 2 }
        return max(1, milliseconds.partialValue + attoseconds / 1_000_000_000_000_000)
    }
}

/// One post that matched: the wire's shape (``HTTPAPI/SearchHit``), which the stores fill. Its
/// snippet marks each matched word (or substring, for terms in scripts without spaces) between
/// U+E000 and U+E001, two private-use characters no post's rendering gives a meaning to;
/// clients replace the pair with their own highlighting (the web page: `<mark>`), after escaping
/// the rest.
public typealias SearchHit = HTTPAPI.SearchHit

/// A page of hits and how to get the next one.
public struct SearchPage: Sendable, Hashable {
    public var hits: [SearchHit]
    /// An opaque cursor for ``SearchOptions/cursor``: the next page, in the same order; `nil`
    /// when there is none.
    public var next: String?

    public init(hits: [SearchHit], next: String?) {
        self.hits = hits
        self.next = next
    }
}

extension SearchPage {
    /// The page from a store's rows: it asked for one more than ``SearchOptions/pageSize`` to
    /// learn whether another page follows.
    init(rows: [SearchHit], options: SearchOptions, cursor: SearchCursor?) {
        let size = options.pageSize
        let hits = Array(rows.prefix(size))
        var next: SearchCursor?
        if rows.count > size, let last = hits.last {
            switch options.order {
            case .relevance:
                var skipped = 0
                if case .offset(let offset) = cursor { skipped = offset }
                let offset = skipped + size
                next = offset <= SearchOptions.maxRelevanceOffset ? .offset(offset) : nil
            case .newest:
                next = .below(time: last.time, seq: last.seq, circle: last.circle)
            }
        }
        self.init(hits: hits, next: next?.encoded)
    }
}

/// Why a store did not answer a search.
public struct SearchError: Error, Sendable, Hashable, CustomStringConvertible {
    public enum Code: String, Sendable, Hashable {
        /// The search ran past ``SearchOptions/timeLimit`` and was stopped.
        case timedOut = "search_timed_out"
        /// The cursor was not made by this kind of search (another order, damaged, too deep).
        case badCursor = "bad_cursor"
        /// The index does not hold every post yet: posts stored before it existed are being
        /// indexed in the background (after an upgrade; ``SearchBackfill``). Ask again later.
        case stillIndexing = "still_indexing"
    }

    /// Both stores' answer while their backfill runs (``SearchBackfill``).
    static let stillIndexing = SearchError(
        .stillIndexing, "the server is still indexing the posts stored before search existed; try again in a few minutes"
    )

    public var code: Code
    public var message: String

    public init(_ code: Code, _ message: String) {
        self.code = code
        self.message = message
    }

    public var description: String { self.message }
}

/// Where the next page starts, as both stores read it. Opaque to clients: base64url of
/// `o<offset>` (relevance order: hits to skip) or `n<time>:<seq>:<circle>` (newest first: the
/// last hit shown; the next page starts below it).
enum SearchCursor: Sendable, Hashable {
    case offset(Int)
    case below(time: Int64, seq: Int64, circle: String)

    var encoded: String {
        let text: String
        switch self {
        case .offset(let offset): text = "o\(offset)"
        case .below(let time, let seq, let circle): text = "n\(time):\(seq):\(circle)"
        }
        return Data(text.utf8).base64EncodedString()
            .replacingOccurrences(of: "+", with: "-")
            .replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }

    /// The cursor `text` encodes for a search in `order`.
    static func decode(_ text: String, order: SearchOptions.Order) throws(SearchError) -> SearchCursor {
        let bad = SearchError(.badCursor, "the cursor does not belong to this search; start again without one")
        guard text.utf8.count <= 1024 else { throw bad }
        var base64 = text.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        base64 += String(repeating: "=", count: (4 - base64.utf8.count % 4) % 4)
        guard let data = Data(base64Encoded: base64), let decoded = String(data: data, encoding: .utf8), let kind = decoded.first else {
            throw bad
        }
        let rest = decoded.dropFirst()
        switch (kind, order) {
        case ("o", .relevance):
            guard let offset = Int(rest), offset >= 0, offset <= SearchOptions.maxRelevanceOffset else { throw bad }
            return .offset(offset)
        case ("n", .newest):
            let parts = rest.split(separator: ":", maxSplits: 2, omittingEmptySubsequences: false)
            guard parts.count == 3, let time = Int64(parts[0]), let seq = Int64(parts[1]) else { throw bad }
            return .below(time: time, seq: seq, circle: String(parts[2]))
        default:
            throw bad
        }
    }
}
