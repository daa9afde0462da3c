import CircleWire
import Foundation

/// A page of search hits, from the server or, offline, from the client's cache.
public struct CircleSearchResults: Sendable, Hashable {
    /// The hits, each with a snippet whose matched words are between
    /// ``HTTPAPI/SearchHit/markStart`` and ``HTTPAPI/SearchHit/markEnd``.
    public var hits: [HTTPAPI.SearchHit]
    /// The cursor of the next page (pass it as `cursor` with the same query); `nil` on the last.
    public var next: String?
    /// `true` when the client was not connected and answered from its offline cache: only the
    /// posts it holds (``CircleClient/cachedPosts(in:)``) were searched, with the simpler
    /// matching described at ``CircleClient/search(_:)``, newest first; results may be missing.
    public var fromCache: Bool

    public init(hits: [HTTPAPI.SearchHit], next: String? = nil, fromCache: Bool = false) {
        self.hits = hits
        self.next = next
        self.fromCache = fromCache
    }
}

extension CircleClient {
    /// Searches the posts of every circle the user may read (the `search` request over the
    /// connection; the query syntax of docs/API.md, "Search").
    ///
    /// Offline, with an offline cache (a ``CircleClientConfiguration/stateFile``), the answer
    /// comes from the cached posts instead and says so (``CircleSearchResults/fromCache``):
    /// every word, phrase and `OR` alternative is matched as text (case and diacritics ignored,
    /// also inside longer words), `-` exclusions, `from:`, `in:`, `before:` and `after:` (dates
    /// and times) apply, newest first whatever the order. Offline without a cache it throws
    /// ``CircleClientError/Code/notConnected``.
    ///
    /// ```swift
    /// let page = try await client.search(HTTPAPI.SearchRequest(q: #"deploy -"dry run""#, order: "newest"))
    /// for hit in page.hits { print(hit.circle, hit.seq, hit.snippet) }
    /// ```
    ///
    /// - Parameter request: What to find; `q` is required.
    /// - Returns: A page of hits.
    /// - Throws: ``CircleClientError`` with the server's code (`query_too_long`,
    ///   `too_many_terms`, `nothing_to_find`, `bad_date`, `bad_cursor`, `forbidden`,
    ///   `not_found`, `search_timed_out`, `still_indexing`, …), `timed_out`, or `not_connected`.
    public func search(_ request: HTTPAPI.SearchRequest) async throws -> CircleSearchResults {
        try await self.core.search(request)
    }

    /// Searches with the query and the usual filters (see ``search(_:)``).
    ///
    /// - Parameters:
    ///   - query: The query, in the syntax of docs/API.md ("Search").
    ///   - circle: Only this circle.
    ///   - author: Only posts by this user.
    ///   - before: Only posts older than this date (`2026-11-27`) or ISO-8601 time.
    ///   - after: Only posts newer than this date or ISO-8601 time.
    ///   - newest: Newest first instead of best match first.
    ///   - limit: Hits per page, 1...100.
    ///   - cursor: ``CircleSearchResults/next`` of the page before.
    public func search(
        _ query: String, in circle: String? = nil, from author: String? = nil, before: String? = nil, after: String? = nil, newest: Bool = false,
        limit: Int = HTTPAPI.SearchRequest.defaultLimit, cursor: String? = nil
    ) async throws -> CircleSearchResults {
        try await self.search(
            HTTPAPI.SearchRequest(
                q: query, circle: circle, from: author, before: before, after: after, order: newest ? "newest" : nil, limit: limit, cursor: cursor
            )
        )
    }
}
