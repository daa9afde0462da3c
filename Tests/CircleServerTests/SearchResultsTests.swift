import Foundation
import Testing

@testable import CircleServer

/// The pure parts of a search around the stores: cursors, pages, snippets, and the statements
/// built from a query (which must carry what was typed only as bound values).
@Suite struct SearchResultsTests {
    @Test func cursorsRoundTripAndAreChecked() throws {
        let below = SearchCursor.below(time: 1_795_737_600_000, seq: 42, circle: "ops:ünïcode/+=")
        #expect(try SearchCursor.decode(below.encoded, order: .newest) == below)
        #expect(!below.encoded.contains("=") && !below.encoded.contains("+") && !below.encoded.contains("/"))
        let offset = SearchCursor.offset(40)
        #expect(try SearchCursor.decode(offset.encoded, order: .relevance) == offset)
        for (text, order) in [
            (below.encoded, SearchOptions.Order.relevance), (offset.encoded, .newest), ("", .relevance), ("%%%", .newest),
            (SearchCursor.offset(SearchOptions.maxRelevanceOffset + 1).encoded, .relevance), (SearchCursor.offset(-1).encoded, .relevance),
            (Data("nx:1:a".utf8).base64EncodedString(), .newest), (Data("n1:2".utf8).base64EncodedString(), .newest),
            (String(repeating: "A", count: 2_000), .relevance),
        ] {
            #expect(throws: SearchError.self) { _ = try SearchCursor.decode(text, order: order) }
        }
    }

    @Test func pagesSayWhereToGoOn() throws {
        func hit(_ seq: Int64) -> SearchHit { SearchHit(circle: "c", seq: seq, author: "a", time: 100 - seq, snippet: "") }
        let options = SearchOptions(order: .newest, limit: 2)
        let full = SearchPage(rows: [hit(1), hit(2), hit(3)], options: options, cursor: nil)
        #expect(full.hits.map(\.seq) == [1, 2])
        #expect(try full.next.map { try SearchCursor.decode($0, order: .newest) } == .below(time: 98, seq: 2, circle: "c"))
        #expect(SearchPage(rows: [hit(1), hit(2)], options: options, cursor: nil).next == nil)
        let relevance = SearchPage(rows: [hit(1), hit(2), hit(3)], options: SearchOptions(limit: 2), cursor: .offset(4))
        #expect(try relevance.next.map { try SearchCursor.decode($0, order: .relevance) } == .offset(6))
        let deepest = SearchPage(rows: [hit(1), hit(2), hit(3)], options: SearchOptions(limit: 2), cursor: .offset(SearchOptions.maxRelevanceOffset - 1))
        #expect(deepest.next == nil)
        #expect(SearchOptions(limit: 0).pageSize == 1 && SearchOptions(limit: 5_000).pageSize == SearchOptions.maxLimit)
        #expect(SearchOptions(timeLimit: .milliseconds(1500)).timeLimitMilliseconds == 1500)
        #expect(SearchOptions(timeLimit: .zero).timeLimitMilliseconds == 1)
        #expect(SearchOptions(timeLimit: .seconds(-3)).timeLimitMilliseconds == 1)
        #expect(SearchOptions(timeLimit: .seconds(Int64.max)).timeLimitMilliseconds > 0)
    }

    @Test func snippetsMarkSubstrings() {
        #expect(SearchSnippet.make("東京タワーに行きました", terms: ["東京"]) == "\u{E000}東京\u{E001}タワーに行きました")
        #expect(SearchSnippet.make("Café CAFE cafe", terms: ["cafe"]) == "\u{E000}Café\u{E001} \u{E000}CAFE\u{E001} \u{E000}cafe\u{E001}")
        #expect(SearchSnippet.make("nothing here", terms: ["zz"]) == "nothing here")
        #expect(SearchSnippet.make("abc", terms: [""]) == "abc")
        let long = String(repeating: "x", count: 200) + "needle" + String(repeating: "y", count: 200)
        let snippet = SearchSnippet.make(long, terms: ["needle"])
        #expect(snippet.hasPrefix("…") && snippet.hasSuffix("…") && snippet.contains("\u{E000}needle\u{E001}"))
        #expect(snippet.count < 140)
    }

    /// What was typed reaches the SQL only as bound values.
    @Test func statementsBindWhatWasTyped() throws {
        let typed = #"'; DROP TABLE posts; -- "x"" NEAR(y) 東京タワー 東京 -z from:o'hara in:gen'eral before:2026-11-27"#
        let query = try SearchQuery.parse(typed)
        let sqlite = SQLiteSearchStatement(query: query, reader: "r'); --", options: SearchOptions(), cursor: .offset(3))
        let postgres = PostgresSearchStatement(query: query, reader: "r'); --", options: SearchOptions(), cursor: nil)
        for sql in [sqlite.sql, postgres.query.sql] {
            for fragment in ["DROP", "o'hara", "gen'eral", "東京", "NEAR", "r')", "x\""] {
                #expect(!sql.contains(fragment), "\(fragment) in \(sql)")
            }
        }
        #expect(sqlite.values.contains(.text(#"("DROP") AND ("TABLE") AND ("posts;") AND ("x") AND ("NEAR(y)")"#)))
        #expect(sqlite.values.contains(.text("o'hara")) && sqlite.values.contains(.text("r'); --")))
        #expect(sqlite.values.contains(.text("%東京%")))
        #expect(sqlite.values.contains(.text("(\"東京タワー\")")))
        // Five words, the exclusion, two substring groups, reader, author, circle, date, headline options, limit, offset.
        #expect(postgres.query.binds.count == 15)
    }

    @Test func ftsStringsAndPatterns() {
        #expect(SQLiteSearchStatement.ftsString(#"a"b"#) == #""a""b""#)
        #expect(SQLiteSearchStatement.likePattern(#"50%_\x"#) == #"%50\%\_\\x%"#)
        #expect(SQLiteSearchStatement.route(SearchQuery.Term("東京タワー")) == .trigrams)
        #expect(SQLiteSearchStatement.route(SearchQuery.Term("東京")) == .like)
        #expect(SQLiteSearchStatement.route(SearchQuery.Term("word")) == .words)
        #expect(SQLiteSearchStatement.route([.init("word"), .init("東京タワー")]) == nil)
        #expect(SQLiteSearchStatement.route([.init("東京"), .init("京都")]) == .like)
        #expect(SQLiteSearchStatement.route([.init("word"), .init("other")]) == .words)
        // `*ploy`: the trigram index from three characters on; `dep*`: the word index, as a prefix.
        #expect(SQLiteSearchStatement.route(SearchQuery.Term("ploy", match: .substring)) == .trigrams)
        #expect(SQLiteSearchStatement.route(SearchQuery.Term("pl", match: .substring)) == .like)
        #expect(SQLiteSearchStatement.route(SearchQuery.Term("dep", match: .prefix)) == .words)
        #expect(SQLiteSearchStatement.route(SearchQuery.Term("東京", match: .prefix)) == .like)
        #expect(SQLiteSearchStatement.ftsExpression(SearchQuery.Term("dep", match: .prefix)) == #""dep"*"#)
        #expect(SQLiteSearchStatement.ftsExpression(SearchQuery.Term("ploy", match: .substring)) == #""ploy""#)
        #expect(SQLiteSearchStatement.ftsExpression(SearchQuery.Term("東京タワー", match: .prefix)) == #""東京タワー""#)
    }
}
