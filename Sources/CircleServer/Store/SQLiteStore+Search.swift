extension SQLiteStore {
    /// One statement (``SQLiteSearchStatement``) on a read-only handle of the ``SQLiteSearcher``,
    /// interrupted past ``SearchOptions/timeLimit``; it reads one snapshot of the index and the
    /// posts, which the post writer keeps in step in each commit's transaction.
    public func search(_ query: SearchQuery, reader: String, options: SearchOptions) async throws -> SearchPage {
        guard try await self.searchIndexComplete() else {
            throw SearchError.stillIndexing
        }
        let cursor = try options.cursor.map { text throws(SearchError) in try SearchCursor.decode(text, order: options.order) }
        let statement = SQLiteSearchStatement(query: query, reader: reader, options: options, cursor: cursor)
        var rows = try await self.searcher.search(statement, options: options)
        if let terms = statement.snippetTerms {
            for index in rows.indices {
                rows[index].snippet = SearchSnippet.make(rows[index].snippet, terms: terms)
            }
        }
        return SearchPage(rows: rows, options: options, cursor: cursor)
    }
}
