import Logging
import NIOCore
import PostgresNIO

/// A ``SearchQuery`` as one PostgreSQL `SELECT` (schema step 7): fixed SQL and numbered
/// parameters; everything the person typed is a bound value.
///
/// Groups whose terms are all words (as `SQLiteSearchStatement.route` decides) are a `tsquery`
/// built term by term:
/// `phraseto_tsquery('simple', circle_search_fold($n))` for each (a word is a one-word phrase; a
/// prefix term's last lexeme gets `:*`),
/// `||` within a group, `&&` between groups, `&& !!` for exclusions: the semantics of
/// `websearch_to_tsquery`, without handing it the raw text. It is matched with the posts'
/// `search` column (GIN; kept by a trigger, schema step 7), ranked with `ts_rank_cd` and marked with `ts_headline`
/// (over the post's text as written, so a word found only through diacritic folding is not
/// marked). Substring terms (`*ploy`, and terms in scripts without spaces: CJK, Thai, …) are `ILIKE '%…%'` on the folded
/// text, which the `pg_trgm` GIN index serves from three characters on; a group mixing them
/// with words is an `OR` of one condition per term. Snippets without a `tsquery` are made by
/// ``SearchSnippet``. Routing is ``SQLiteSearchStatement``'s, so both stores answer alike.
struct PostgresSearchStatement {
    var query: PostgresQuery
    /// Set when no `tsquery` is part of the search: snippets come from ``SearchSnippet`` with these.
    var snippetTerms: [String]?

    /// The headline options: the marks of ``SearchHit``, about two dozen words.
    static let headlineOptions =
        "StartSel=\u{E000}, StopSel=\u{E001}, MaxWords=24, MinWords=8, ShortWord=0, MaxFragments=1, FragmentDelimiter=…"

    /// A statement as given; for tests.
    init(query: PostgresQuery, snippetTerms: [String]?) {
        self.query = query
        self.snippetTerms = snippetTerms
    }

    init(query: SearchQuery, reader: String, options: SearchOptions, cursor: SearchCursor?) {
        var binds = PostgresBindings()
        var count = 0
        func bind(_ value: String) -> String {
            binds.append(value)
            count += 1
            return "$\(count)"
        }
        func bind(_ value: Int64) -> String {
            binds.append(value)
            count += 1
            return "$\(count)"
        }
        func bindBytes(_ value: String) -> String {
            binds.append(ByteBuffer(string: value))
            count += 1
            return "$\(count)"
        }
        func tsquery(_ term: SearchQuery.Term) -> String {
            let phrase = "phraseto_tsquery('simple'::regconfig, circle_search_fold(\(bind(term.text))))"
            guard term.match == .prefix, SQLiteSearchStatement.route(term) == .words else { return phrase }
            // `'dep'` → `'dep':*` (and `'a' <-> 'b'` → `'a' <-> 'b':*`); an empty query stays empty.
            return "(SELECT CASE WHEN numnode(t.q) = 0 THEN t.q ELSE (t.q::text || ':*')::tsquery END FROM (SELECT \(phrase)) AS t(q))"
        }
        func like(_ term: SearchQuery.Term) -> String {
            "circle_search_fold(circle_search_plain(p.text)) ILIKE circle_search_fold(\(bind(SQLiteSearchStatement.likePattern(term.text))))"
        }

        func condition(_ term: SearchQuery.Term) -> String {
            SQLiteSearchStatement.route(term) == .words ? "coalesce(p.search @@ \(tsquery(term)), false)" : like(term)
        }
        var wordGroups: [[SearchQuery.Term]] = []
        var otherGroups: [[SearchQuery.Term]] = []
        for group in query.groups {
            if SQLiteSearchStatement.route(group) == .words { wordGroups.append(group) } else { otherGroups.append(group) }
        }
        var conditions: [String] = []
        var tsqueryText: String?
        if !wordGroups.isEmpty {
            var parts = wordGroups.map { "(" + $0.map(tsquery).joined(separator: " || ") + ")" }
            for term in query.excluded where SQLiteSearchStatement.route(term) == .words {
                parts.append("!!\(tsquery(term))")
            }
            tsqueryText = "(" + parts.joined(separator: " && ") + ")"
        } else {
            for term in query.excluded where SQLiteSearchStatement.route(term) == .words {
                conditions.append("NOT \(condition(term))")
            }
        }
        for group in otherGroups {
            conditions.append("(" + group.map(condition).joined(separator: " OR ") + ")")
        }
        for term in query.excluded where SQLiteSearchStatement.route(term) != .words {
            conditions.append("NOT \(condition(term))")
        }
        // Indexed current text only: the indexes hold the rows whose `search` is set, and
        // the backfill sets it for posts stored before the index.
        conditions.append("p.search IS NOT NULL AND p.change IS NULL AND NOT p.deleted AND p.text IS NOT NULL")
        conditions.append("(NOT c.private OR EXISTS (SELECT 1 FROM members AS m WHERE m.circle = c.name AND m.user_name = \(bind(reader))))")
        if !query.authors.isEmpty {
            conditions.append("p.author IN (" + query.authors.map(bindBytes).joined(separator: ", ") + ")")
        }
        if !query.circles.isEmpty {
            conditions.append("p.circle IN (" + query.circles.map { bind($0) }.joined(separator: ", ") + ")")
        }
        if let before = query.before { conditions.append("p.time < \(bind(before))") }
        if let after = query.after { conditions.append("p.time > \(bind(after))") }

        let from: String
        let rank: String
        let headline: String
        if let tsqueryText {
            from = "posts AS p CROSS JOIN (SELECT \(tsqueryText)) AS q(query)"
            conditions.insert("p.search @@ q.query", at: 0)
            rank = "ts_rank_cd(p.search, q.query)"
            headline = "ts_headline('simple'::regconfig, circle_search_plain(page.text), page.query, \(bind(Self.headlineOptions)))"
            self.snippetTerms = nil
        } else {
            from = "posts AS p"
            rank = "0::real"
            headline = "NULL::text"
            self.snippetTerms = otherGroups.flatMap { $0.map(\.text) }
        }

        var offset: Int64 = 0
        let order: String
        let outerOrder: String
        switch options.order {
        case .relevance:
            if case .offset(let skip) = cursor { offset = Int64(skip) }
            order = "rank DESC, p.time DESC, p.circle DESC, p.seq DESC"
            outerOrder = "page.rank DESC, page.time DESC, page.circle DESC, page.seq DESC"
        case .newest:
            if case .below(let time, let seq, let circle) = cursor {
                conditions.append("(p.time, p.circle, p.seq) < (\(bind(time)), \(bind(circle)), \(bind(seq)))")
            }
            order = "p.time DESC, p.circle DESC, p.seq DESC"
            outerOrder = "page.time DESC, page.circle DESC, page.seq DESC"
        }
        // The headline is computed for the page only, not for every match.
        let sql = """
            SELECT page.circle, page.seq, page.author, page.time, \(headline), page.text
            FROM (
                SELECT p.circle, p.seq, p.author, p.time, p.text, \(tsqueryText == nil ? "NULL::tsquery" : "q.query") AS query, \(rank) AS rank
                FROM \(from)
                JOIN circles AS c ON c.name = p.circle
                WHERE \(conditions.joined(separator: "\n  AND "))
                ORDER BY \(order)
                LIMIT \(bind(Int64(options.pageSize + 1))) OFFSET \(bind(offset))
            ) AS page
            ORDER BY \(outerOrder)
            """
        self.query = PostgresQuery(unsafeSQL: sql, binds: binds)
    }
}

extension PostgresStore {
    /// Code PostgreSQL answers a statement stopped by `statement_timeout` with.
    static let queryCanceled = "57014"

    /// One statement (``PostgresSearchStatement``) in a read-only transaction whose
    /// `statement_timeout` is ``SearchOptions/timeLimit``.
    public func search(_ query: SearchQuery, reader: String, options: SearchOptions) async throws -> SearchPage {
        guard try await self.searchIndexComplete() else { throw SearchError.stillIndexing }
        let cursor = try options.cursor.map { text throws(SearchError) in try SearchCursor.decode(text, order: options.order) }
        let statement = PostgresSearchStatement(query: query, reader: reader, options: options, cursor: cursor)
        var rows = try await self.search(statement, options: options)
        if let terms = statement.snippetTerms {
            for index in rows.indices {
                rows[index].snippet = SearchSnippet.make(rows[index].snippet, terms: terms)
            }
        }
        return SearchPage(rows: rows, options: options, cursor: cursor)
    }

    /// Runs a search statement (its rows: circle, seq, author, time, headline or `NULL`, text)
    /// within the time bound of `options`.
    func search(_ statement: PostgresSearchStatement, options: SearchOptions) async throws -> [SearchHit] {
        let milliseconds = options.timeLimitMilliseconds
        let logger = self.logger
        do {
            // The store's own bound stays the backstop for an unreachable server.
            return try await self.withTimeout("search", limit: options.timeLimit + .seconds(5)) {
                try await self.client.withTransaction(logger: logger) { connection -> [SearchHit] in
                    try await connection.query("SET TRANSACTION READ ONLY", logger: logger)
                    // SET takes no parameters; the value is our own integer.
                    try await connection.query("SET LOCAL statement_timeout = \(unescaped: String(milliseconds))", logger: logger)
                    var hits: [SearchHit] = []
                    let result = try await connection.query(statement.query, logger: logger)
                    for try await row in result.decode((String, Int64, ByteBuffer, Int64, String?, ByteBuffer).self) {
                        hits.append(
                            SearchHit(circle: row.0, seq: row.1, author: String(buffer: row.2), time: row.3, snippet: row.4 ?? String(buffer: row.5))
                        )
                    }
                    return hits
                }
            }
        } catch {
            if Self.sqlState(of: error) == Self.queryCanceled {
                throw SearchError(.timedOut, "the search took longer than \(milliseconds) ms and was stopped; narrow it (a circle, an author, a date)")
            }
            throw Self.storeError(error, "search")
        }
    }
}
