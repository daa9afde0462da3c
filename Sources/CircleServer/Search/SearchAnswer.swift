import CircleWire

/// Answers a search the way both doors ask it (`GET /v1/search` and the `circle.v1` `search`
/// request): the ``HTTPAPI/SearchRequest`` checked and merged into one ``SearchQuery``, the
/// named circles checked for the reader, the store asked, the page shaped for the wire.
struct SearchAnswer: Sendable {
    let store: any CircleStore
    /// The longest one search may run in the store (``SearchOptions/timeLimit``).
    var timeLimit: Duration = .seconds(2)

    /// The page of hits for `request`, read by `reader`.
    ///
    /// - Throws: ``SearchRefusal``, whose code is one of docs/API.md's ("Search").
    func answer(_ request: HTTPAPI.SearchRequest, reader: String) async throws(SearchRefusal) -> HTTPAPI.SearchResults {
        var query: SearchQuery
        do {
            query = try SearchQuery.parse(request.q)
        } catch {
            throw SearchRefusal(error)
        }
        var options = SearchOptions(timeLimit: self.timeLimit)
        switch request.order {
        case nil, "relevance"?: options.order = .relevance
        case "newest"?: options.order = .newest
        case let other?: throw SearchRefusal(.badRequest, "order is relevance or newest, not \"\(other)\"")
        }
        let limit = request.limit ?? HTTPAPI.SearchRequest.defaultLimit
        guard (1...HTTPAPI.SearchRequest.maxLimit).contains(limit) else {
            throw SearchRefusal(.badRequest, "limit is between 1 and \(HTTPAPI.SearchRequest.maxLimit)")
        }
        options.limit = limit
        options.cursor = request.cursor
        // The parameters narrow what `q` says: a circle (or author) outside the query's own
        // `in:` (`from:`) filters leaves nothing to find.
        if let circle = request.circle {
            guard CircleRoutes.isValidCircleName(circle) else {
                throw SearchRefusal(.badRequest, "\"\(circle)\" is not a circle name (1–64 characters: a–z, 0–9, . _ -)")
            }
            guard query.circles.isEmpty || query.circles.contains(circle) else { return HTTPAPI.SearchResults(hits: []) }
            query.circles = [circle]
        }
        if let author = request.from.map({ $0.hasPrefix("@") ? String($0.dropFirst()) : $0 }) {
            guard TokenAuthority.isValidUserName(author) else {
                throw SearchRefusal(.badRequest, "\"\(author)\" is not a user name")
            }
            guard query.authors.isEmpty || query.authors.contains(author) else { return HTTPAPI.SearchResults(hits: []) }
            query.authors = [author]
        }
        do {
            if let before = request.before {
                let time = try SearchDate.parse(before, end: false)
                query.before = min(query.before ?? time, time)
            }
            if let after = request.after {
                let time = try SearchDate.parse(after, end: true)
                query.after = max(query.after ?? time, time)
            }
        } catch {
            throw SearchRefusal(error)
        }
        do {
            // A circle named on purpose that the reader cannot read is an error they can act on;
            // the store filters by readable circles anyway.
            for circle in Set(query.circles).sorted() {
                if let refusal = try await CircleVisibility.read(circle, for: reader, in: self.store).refusal() {
                    throw SearchRefusal(refusal.code, refusal.message)
                }
            }
            let page = try await self.store.search(query, reader: reader, options: options)
            return HTTPAPI.SearchResults(
                hits: page.hits,
                next: page.next
            )
        } catch let refusal as SearchRefusal {
            throw refusal
        } catch let error as SearchError {
            switch error.code {
            case .timedOut: throw SearchRefusal(.searchTimedOut, "the search took longer than it may; narrow it (a circle, an author, a time, rarer words)")
            case .badCursor: throw SearchRefusal(.badCursor, error.message)
            case .stillIndexing: throw SearchRefusal(.stillIndexing, error.message)
            }
        } catch let error as StoreError {
            throw SearchRefusal(.unavailable, "the search could not be answered now (\(error.message)); retry")
        } catch {
            throw SearchRefusal(.unavailable, "the search could not be answered now (\(error)); retry")
        }
    }
}

/// Why a search got no page: a documented code and a sentence a person can act on.
struct SearchRefusal: Error, Sendable, Hashable, CustomStringConvertible {
    var code: CircleErrorCode
    var message: String

    init(_ code: CircleErrorCode, _ message: String) {
        self.code = code
        self.message = message
    }

    init(_ error: SearchQueryError) {
        self.init(CircleErrorCode(rawValue: error.code.rawValue), error.message)
    }

    var description: String { "\(self.code): \(self.message)" }
}
