/// A ``SearchQuery`` as one SQLite `SELECT` over the search index (schema steps 7 and 9): the SQL is
/// made only of fixed text and numbered parameters; everything the person typed is a bound value.
///
/// Each term (see ``route(_:)``) is looked up in one of three places:
/// - `search_words` (FTS5, `unicode61 remove_diacritics 2`) when it is matched as words: an FTS5
///   string (`"…"`, inner quotes doubled), so FTS5 operators and column filters in it are just
///   text; a prefix term (`dep*`) is that string followed by FTS5's `*`;
/// - `search_trigrams` (FTS5, `trigram remove_diacritics 1`, holding every indexed post) when it
///   is matched as a substring (`*ploy`, or text in a script written without spaces: CJK, Thai,
///   …) and has at least three characters;
/// - otherwise (a substring of one or two characters) `LIKE '%…%'` on the post's text, which the
///   query's time bound keeps from running long.
/// Groups whose terms all go to one index are one FTS5 expression (`("a" OR "b") AND ("c")`); the
/// first index that has such groups drives the query (its BM25 rank and snippet), the other's are
/// a `rowid IN` subquery; a group mixing places is an `OR` of one condition per term; exclusions
/// are `NOT IN`/`NOT LIKE`. Readability (public circles, or private ones with the reader as a
/// member), the filters, the cursor and the page size are part of the same statement.
struct SQLiteSearchStatement: Sendable, Hashable {
    enum Value: Sendable, Hashable {
        case text(String)
        case integer(Int64)
    }

    var sql: String
    var values: [Value]
    /// When no index drives the query, its fifth column is the post's whole text and the
    /// snippet is made from it with these terms (``SearchSnippet``); `nil`: it is FTS5's snippet.
    var snippetTerms: [String]?

    /// Where a term is looked up (the same for both stores; PostgreSQL's substring matches are
    /// `ILIKE`, served by its trigram index from three characters on).
    enum Route: Sendable, Hashable {
        case words, trigrams, like
    }

    static func route(_ term: SearchQuery.Term) -> Route {
        if !term.isSubstring { return .words }
        return term.scalarCount >= 3 ? .trigrams : .like
    }

    /// Where a group's terms are looked up, when they all go to one place.
    static func route(_ terms: [SearchQuery.Term]) -> Route? {
        let routes = Set(terms.map(Self.route))
        return routes.count == 1 ? routes.first : nil
    }

    /// An FTS5 string: a phrase of whatever tokens the table's tokenizer finds in `text`.
    static func ftsString(_ text: String) -> String {
        "\"" + text.replacingOccurrences(of: "\"", with: "\"\"") + "\""
    }

    /// A term as an FTS5 expression of its route's table: its ``ftsString(_:)``, marked as a
    /// prefix (`"dep"*`) when it is one and goes to `search_words`.
    static func ftsExpression(_ term: SearchQuery.Term) -> String {
        Self.ftsString(term.text) + (term.match == .prefix && Self.route(term) == .words ? "*" : "")
    }

    /// A `LIKE … ESCAPE '\'` pattern for text containing `text`.
    static func likePattern(_ text: String) -> String {
        var pattern = "%"
        for character in text {
            if character == "\\" || character == "%" || character == "_" { pattern.append("\\") }
            pattern.append(character)
        }
        return pattern + "%"
    }

    /// The marks around matched words in snippets: ``SearchHit/markStart`` and ``SearchHit/markEnd``.
    static let marks = "char(57344), char(57345)"

    /// A statement as given; for tests.
    init(sql: String, values: [Value], snippetTerms: [String]? = nil) {
        self.sql = sql
        self.values = values
        self.snippetTerms = snippetTerms
    }

    init(query: SearchQuery, reader: String, options: SearchOptions, cursor: SearchCursor?) {
        var values: [Value] = []
        func bind(_ value: Value) -> String {
            values.append(value)
            return "?\(values.count)"
        }
        func fts(_ groups: [[SearchQuery.Term]]) -> String {
            groups.map { "(" + $0.map(Self.ftsExpression).joined(separator: " OR ") + ")" }.joined(separator: " AND ")
        }

        var wordGroups: [[SearchQuery.Term]] = []
        var trigramGroups: [[SearchQuery.Term]] = []
        var otherGroups: [[SearchQuery.Term]] = []
        for group in query.groups {
            switch Self.route(group) {
            case .words: wordGroups.append(group)
            case .trigrams: trigramGroups.append(group)
            case .like, nil: otherGroups.append(group)
            }
        }
        func condition(_ term: SearchQuery.Term) -> String {
            switch Self.route(term) {
            case .words:
                "d.id IN (SELECT rowid FROM search_words WHERE search_words MATCH \(bind(.text(Self.ftsExpression(term)))))"
            case .trigrams:
                "d.id IN (SELECT rowid FROM search_trigrams WHERE search_trigrams MATCH \(bind(.text(Self.ftsExpression(term)))))"
            case .like:
                "p.text LIKE \(bind(.text(Self.likePattern(term.text)))) ESCAPE '\\'"
            }
        }
        let driver: String? = !wordGroups.isEmpty ? "search_words" : (!trigramGroups.isEmpty ? "search_trigrams" : nil)

        var conditions: [String] = []
        let from: String
        let snippet: String
        let rank: String
        if let driver {
            from = "\(driver) JOIN search_docs AS d ON d.id = \(driver).rowid JOIN posts AS p ON p.circle = d.circle AND p.seq = d.seq"
            conditions.append("\(driver) MATCH \(bind(.text(fts(driver == "search_words" ? wordGroups : trigramGroups))))")
            snippet = "snippet(\(driver), 0, \(Self.marks), '…', 24)"
            rank = "bm25(\(driver)), "
        } else {
            // Every indexed post, by its row's search id (a LIKE scan in any case; with a circle,
            // of that circle's posts only).
            from = "posts AS p JOIN search_docs AS d ON d.id = p.search_id"
            snippet = "p.text"
            rank = ""
            self.snippetTerms = otherGroups.flatMap { $0.map(\.text) }
        }
        if driver == "search_words", !trigramGroups.isEmpty {
            conditions.append("d.id IN (SELECT rowid FROM search_trigrams WHERE search_trigrams MATCH \(bind(.text(fts(trigramGroups)))))")
        }
        for group in otherGroups {
            conditions.append("(" + group.map(condition).joined(separator: " OR ") + ")")
        }
        for term in query.excluded {
            conditions.append("NOT \(condition(term))")
        }
        // The index holds only posts' current text; this says so again, should it ever lag.
        conditions.append("p.change IS NULL AND p.deleted = 0 AND p.text IS NOT NULL")
        conditions.append(
            "(c.private = 0 OR EXISTS (SELECT 1 FROM members AS m WHERE m.circle = c.name AND m.user = \(bind(.text(reader)))))"
        )
        if !query.authors.isEmpty {
            conditions.append("p.author IN (" + query.authors.map { bind(.text($0)) }.joined(separator: ", ") + ")")
        }
        if !query.circles.isEmpty {
            conditions.append("p.circle IN (" + query.circles.map { bind(.text($0)) }.joined(separator: ", ") + ")")
        }
        if let before = query.before { conditions.append("p.time < \(bind(.integer(before)))") }
        if let after = query.after { conditions.append("p.time > \(bind(.integer(after)))") }

        var offset: Int64 = 0
        let order: String
        switch options.order {
        case .relevance:
            if case .offset(let skip) = cursor { offset = Int64(skip) }
            order = "\(rank)p.time DESC, d.circle DESC, d.seq DESC"
        case .newest:
            if case .below(let time, let seq, let circle) = cursor {
                conditions.append("(p.time, d.circle, d.seq) < (\(bind(.integer(time))), \(bind(.text(circle))), \(bind(.integer(seq))))")
            }
            order = "p.time DESC, d.circle DESC, d.seq DESC"
        }

        self.sql = """
            SELECT d.circle, d.seq, p.author, p.time, \(snippet)
            FROM \(from)
            JOIN circles AS c ON c.name = d.circle
            WHERE \(conditions.joined(separator: "\n  AND "))
            ORDER BY \(order)
            LIMIT \(bind(.integer(Int64(options.pageSize + 1)))) OFFSET \(bind(.integer(offset)))
            """
        self.values = values
    }
}
