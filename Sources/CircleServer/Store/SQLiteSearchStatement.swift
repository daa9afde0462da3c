/// A ``SearchQuery`` as one SQLite `SELECT` over the search index (schema step 6): the SQL is
/// made only of fixed text and numbered parameters; everything the person typed is a bound value.
///
/// Each group of terms (and each exclusion) goes to one of three places:
/// - `search_words` (FTS5, `unicode61 remove_diacritics 2`) when none of its terms is in a script
///   written without spaces: each term is an FTS5 string (`"…"`, inner quotes doubled), so FTS5
///   operators and column filters in it are just text; a group is `("a" OR "b")`, groups are
///   joined with `AND`;
/// - `search_trigrams` (FTS5, `trigram remove_diacritics 1`) when one is (CJK, Thai, …) and each
///   has at least three characters: substring matches;
/// - otherwise (a one- or two-character CJK term) `LIKE '%…%'` on the post's text, which the
///   query's time bound keeps from running long.
/// The first of the two indexes that has groups drives the query (its BM25 rank and snippet); the
/// other's groups and every exclusion are `rowid IN`/`NOT IN` subqueries. Readability (public
/// circles, or private ones with the reader as a member), the filters, the cursor and the page
/// size are part of the same statement.
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

    /// Where a group of terms is looked up.
    enum Route: Sendable, Hashable {
        case words, trigrams, like
    }

    static func route(_ terms: [SearchQuery.Term]) -> Route {
        if !terms.contains(where: \.isSpaceless) { return .words }
        if terms.allSatisfy({ $0.scalarCount >= 3 }) { return .trigrams }
        return .like
    }

    /// An FTS5 string: a phrase of whatever tokens the table's tokenizer finds in `text`.
    static func ftsString(_ text: String) -> String {
        "\"" + text.replacingOccurrences(of: "\"", with: "\"\"") + "\""
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
            groups.map { "(" + $0.map { Self.ftsString($0.text) }.joined(separator: " OR ") + ")" }.joined(separator: " AND ")
        }

        var wordGroups: [[SearchQuery.Term]] = []
        var trigramGroups: [[SearchQuery.Term]] = []
        var likeGroups: [[SearchQuery.Term]] = []
        for group in query.groups {
            switch Self.route(group) {
            case .words: wordGroups.append(group)
            case .trigrams: trigramGroups.append(group)
            case .like: likeGroups.append(group)
            }
        }
        let driver: String? = !wordGroups.isEmpty ? "search_words" : (!trigramGroups.isEmpty ? "search_trigrams" : nil)

        var conditions: [String] = []
        let from: String
        let snippet: String
        let rank: String
        if let driver {
            from = "\(driver) JOIN search_docs AS d ON d.id = \(driver).rowid"
            conditions.append("\(driver) MATCH \(bind(.text(fts(driver == "search_words" ? wordGroups : trigramGroups))))")
            snippet = "snippet(\(driver), 0, \(Self.marks), '…', 24)"
            rank = "bm25(\(driver)), "
        } else {
            from = "search_docs AS d"
            snippet = "p.text"
            rank = ""
            self.snippetTerms = likeGroups.flatMap { $0.map(\.text) }
        }
        if driver == "search_words", !trigramGroups.isEmpty {
            conditions.append("d.id IN (SELECT rowid FROM search_trigrams WHERE search_trigrams MATCH \(bind(.text(fts(trigramGroups)))))")
        }
        for group in likeGroups {
            conditions.append("(" + group.map { "p.text LIKE \(bind(.text(Self.likePattern($0.text)))) ESCAPE '\\'" }.joined(separator: " OR ") + ")")
        }
        for term in query.excluded {
            switch Self.route([term]) {
            case .words:
                conditions.append("d.id NOT IN (SELECT rowid FROM search_words WHERE search_words MATCH \(bind(.text(Self.ftsString(term.text)))))")
            case .trigrams:
                conditions.append("d.id NOT IN (SELECT rowid FROM search_trigrams WHERE search_trigrams MATCH \(bind(.text(Self.ftsString(term.text)))))")
            case .like:
                conditions.append("p.text NOT LIKE \(bind(.text(Self.likePattern(term.text)))) ESCAPE '\\'")
            }
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
            conditions.append("d.circle IN (" + query.circles.map { bind(.text($0)) }.joined(separator: ", ") + ")")
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
            JOIN posts AS p ON p.circle = d.circle AND p.seq = d.seq
            JOIN circles AS c ON c.name = d.circle
            WHERE \(conditions.joined(separator: "\n  AND "))
            ORDER BY \(order)
            LIMIT \(bind(.integer(Int64(options.pageSize + 1)))) OFFSET \(bind(.integer(offset)))
            """
        self.values = values
    }
}
