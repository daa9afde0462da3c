/// The JSON shapes of search (docs/API.md, "Search"): `GET /v1/search` and the `circle.v1`
/// `search` request read the same ``HTTPAPI/SearchRequest`` and answer the same
/// ``HTTPAPI/SearchResults``.
extension HTTPAPI.Path {
    public static let search = "/v1/search"
}

extension HTTPAPI {
    /// What to search for: the query parameters of `GET /v1/search`, and the `search` object of
    /// the `circle.v1` `search` request.
    public struct SearchRequest: Codable, Sendable, Hashable {
        /// The query, in the syntax of docs/API.md ("Search"): at most 512 bytes and 16 terms.
        public var q: String
        /// Only this circle (as `in:NAME` in `q`; with `in:` filters there too, the circle must be one of them).
        public var circle: String?
        /// Only posts by this user (as `from:NAME`; with `from:` filters there too, one of them).
        public var from: String?
        /// Only posts older than this: a date (`2026-11-27`: before that UTC day) or an ISO-8601 time.
        public var before: String?
        /// Only posts newer than this: a date (`2026-11-27`: after that UTC day) or an ISO-8601 time.
        public var after: String?
        /// `relevance` (the default) or `newest`.
        public var order: String?
        /// Hits per page, 1...100 (default 20).
        public var limit: Int?
        /// ``SearchResults/next`` of the page before, with the same query and order.
        public var cursor: String?

        public init(
            q: String, circle: String? = nil, from: String? = nil, before: String? = nil, after: String? = nil, order: String? = nil, limit: Int? = nil,
            cursor: String? = nil
        ) {
            self.q = q
            self.circle = circle
            self.from = from
            self.before = before
            self.after = after
            self.order = order
            self.limit = limit
            self.cursor = cursor
        }

        /// The most hits one page may ask for.
        public static let maxLimit = 100
        /// Hits per page when `limit` is absent.
        public static let defaultLimit = 20

        /// The request as `GET /v1/search` query parameters, in this order, absent ones left out.
        public var queryItems: [(name: String, value: String)] {
            var items: [(name: String, value: String)] = [("q", self.q)]
            if let circle { items.append(("circle", circle)) }
            if let from { items.append(("from", from)) }
            if let before { items.append(("before", before)) }
            if let after { items.append(("after", after)) }
            if let order { items.append(("order", order)) }
            if let limit { items.append(("limit", String(limit))) }
            if let cursor { items.append(("cursor", cursor)) }
            return items
        }
    }

    /// One post that matched.
    public struct SearchHit: Codable, Sendable, Hashable {
        public var circle: String
        public var seq: Int64
        public var author: String
        /// The post's time, milliseconds since 1970.
        public var time: Int64
        /// Text around the match, each matched word between ``markStart`` (U+E000) and
        /// ``markEnd`` (U+E001); "…" where text is left out.
        public var snippet: String

        /// Where a matched word starts in ``snippet``.
        public static let markStart: Character = "\u{E000}"
        /// Where a matched word ends in ``snippet``.
        public static let markEnd: Character = "\u{E001}"

        public init(circle: String, seq: Int64, author: String, time: Int64, snippet: String) {
            self.circle = circle
            self.seq = seq
            self.author = author
            self.time = time
            self.snippet = snippet
        }
    }

    /// A page of hits: `GET /v1/search`, and the `search` reply on the WebSocket.
    public struct SearchResults: Codable, Sendable, Hashable {
        public var hits: [SearchHit]
        /// The cursor of the next page; absent on the last.
        public var next: String?

        public init(hits: [SearchHit], next: String? = nil) {
            self.hits = hits
            self.next = next
        }
    }
}
