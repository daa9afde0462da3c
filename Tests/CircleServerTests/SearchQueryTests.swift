import Foundation
import Testing

@testable import CircleServer

/// ``SearchQuery/parse(_:)``: the syntax, the limits and hostile input.
@Suite struct SearchQueryTests {
    typealias Term = SearchQuery.Term

    func parse(_ text: String) throws -> SearchQuery {
        try SearchQuery.parse(text)
    }

    func code(_ text: String) -> SearchQueryError.Code? {
        do {
            _ = try SearchQuery.parse(text)
            return nil
        } catch {
            return error.code
        }
    }

    @Test func wordsPhrasesAndExclusions() throws {
        let query = try self.parse(#"  deploy  "dry run"   -staging -"old box" "#)
        #expect(query.groups == [[Term("deploy")], [Term("dry run", isPhrase: true)]])
        #expect(query.excluded == [Term("staging"), Term("old box", isPhrase: true)])
        #expect(query.authors.isEmpty && query.circles.isEmpty && query.before == nil && query.after == nil)
    }

    @Test func prefixesAndSubstrings() throws {
        // A `*` at the end: a prefix; at the start (or both ends): a substring. The `*`s are not text.
        let query = try self.parse("dep* *ploy *plo* -*izz x*y **")
        #expect(query.groups == [[Term("dep", match: .prefix)], [Term("ploy", match: .substring)], [Term("plo", match: .substring)], [Term("x*y")]])
        #expect(query.excluded == [Term("izz", match: .substring)])
        #expect(query.groups.flatMap { $0 }.map(\.description) == ["dep*", "*ploy*", "*plo*", "x*y"])
        // Inside quotes a `*` is text; a term of only `*`s has nothing to find.
        #expect(try self.parse(#""dep*""#).groups == [[Term("dep*", isPhrase: true)]])
        #expect(self.code("*** -**") == .nothingToFind)
        #expect(Term("ploy", match: .substring).isSubstring && Term("東京").isSubstring && !Term("dep", match: .prefix).isSubstring)
    }

    @Test func orBindsTighterThanAnd() throws {
        let query = try self.parse(#"cat OR dog OR "guinea pig" food"#)
        #expect(query.groups == [[Term("cat"), Term("dog"), Term("guinea pig", isPhrase: true)], [Term("food")]])
        #expect(query.terms.count == 4)
        // Lower case `or` is a word; a dangling OR is dropped.
        #expect(try self.parse("cat or dog").groups == [[Term("cat")], [Term("or")], [Term("dog")]])
        #expect(try self.parse("OR cat OR").groups == [[Term("cat")]])
        #expect(try self.parse("cat OR OR dog").groups == [[Term("cat")], [Term("dog")]])
        // An OR does not reach over an exclusion or a filter.
        #expect(try self.parse("cat OR -dog fish").groups == [[Term("cat")], [Term("fish")]])
        #expect(try self.parse("cat OR from:bo fish").groups == [[Term("cat")], [Term("fish")]])
        // Nor over a dropped symbol-only term: the OR waits for the next real term.
        #expect(try self.parse("cat OR * dog").groups == [[Term("cat"), Term("dog")]])
    }

    @Test func filters() throws {
        let query = try self.parse("release from:alice FROM:@bob in:#general In:Random")
        #expect(query.groups == [[Term("release")]])
        #expect(query.authors == ["alice", "bob"])
        #expect(query.circles == ["general", "random"])
        // Empty values and unknown names are words; a negated filter is excluded text.
        #expect(try self.parse("from: x").groups == [[Term("from:")], [Term("x")]])
        #expect(try self.parse("text:hello").groups == [[Term("text:hello")]])
        let negated = try self.parse("x -from:alice")
        #expect(negated.authors.isEmpty && negated.excluded == [Term("from:alice")])
        #expect(try self.parse("x from:@").groups == [[Term("x")], [Term("from:@")]])
    }

    @Test func dates() throws {
        let day: Int64 = 86_400_000
        let start = SearchDate.days(year: 2026, month: 11, day: 27) * day
        #expect(start == 1_795_737_600_000)
        let query = try self.parse("x before:2026-11-27 after:2026-11-01")
        #expect(query.before == start)
        #expect(query.after == SearchDate.days(year: 2026, month: 11, day: 2) * day - 1)
        // Several: the narrowest wins.
        let narrow = try self.parse("x before:2026-11-27 before:2026-11-20 after:2026-01-01 after:2026-02-01")
        #expect(narrow.before == SearchDate.days(year: 2026, month: 11, day: 20) * day)
        #expect(narrow.after == SearchDate.days(year: 2026, month: 2, day: 2) * day - 1)
        // Full times, with zones and fractions.
        #expect(try self.parse("x before:2026-11-27T10:15:00Z").before == start + (10 * 60 + 15) * 60_000)
        #expect(try self.parse("x before:2026-11-27T10:15:30.25+01:00").before == start + (9 * 60 + 15) * 60_000 + 30_250)
        #expect(try self.parse("x after:2026-11-27T10:15-0130").after == start + (11 * 60 + 45) * 60_000)
        #expect(try self.parse("x before:1970-01-01").before == 0)
        #expect(try self.parse("x before:2024-02-29").before == SearchDate.days(year: 2024, month: 3, day: 1) * day - day)
    }

    @Test(arguments: [
        "2026-13-01", "2026-02-30", "2025-02-29", "2026-1-01", "26-11-27", "2026-11-27T", "2026-11-27T25:00Z",
        "2026-11-27T10:15", "2026-11-27T10:15:00", "2026-11-27T10:15:00.Z", "2026-11-27T10:15:00.1234567890Z",
        "2026-11-27Z", "tomorrow", "2026-11-27T10:15:00Zjunk", "٢٠٢٦-١١-٢٧", "9999999999-01-01", "2026-11-27T10:15+99:00",
    ])
    func badDates(_ value: String) {
        #expect(self.code("x before:\(value)") == .badDate)
        #expect(self.code("x after:\(value)") == .badDate)
    }

    @Test func limits() throws {
        let longest = String(repeating: "a", count: SearchQuery.Limits.maxBytes)
        #expect(try self.parse(longest).groups == [[Term(longest)]])
        #expect(self.code(longest + "a") == .tooLong)
        // Bytes, not characters.
        #expect(self.code(String(repeating: "é", count: SearchQuery.Limits.maxBytes / 2 + 1)) == .tooLong)
        let most = (1...SearchQuery.Limits.maxTerms).map { "w\($0)" }.joined(separator: " ")
        #expect(try self.parse(most).terms.count == SearchQuery.Limits.maxTerms)
        #expect(self.code(most + " more") == .tooManyTerms)
        #expect(self.code(most + " -more") == .tooManyTerms)
        #expect(self.code(most + " from:x") == .tooManyTerms)
        // Dropped symbols do not count.
        #expect(try self.parse(most + " * ^ --").terms.count == SearchQuery.Limits.maxTerms)
    }

    @Test(arguments: ["", "   ", "-word", "from:alice in:general", "* ^ -- ()", "\"\"", "OR OR", "-\"a phrase\"", "\u{0}\u{1}"])
    func nothingToFind(_ text: String) {
        #expect(self.code(text) == .nothingToFind)
    }

    @Test func normalizedToNFC() throws {
        let decomposed = try self.parse("cafe\u{301} \"n\u{303}o\"")
        #expect(decomposed.groups.map { $0.map(\.text.unicodeScalars.count) } == [[4], [2]])
        #expect(decomposed.groups[0][0].text == "caf\u{E9}")
        #expect(Array(decomposed.groups[0][0].text.unicodeScalars) == Array("caf\u{E9}".unicodeScalars))
    }

    /// FTS syntax of both stores stays text: it ends up in a term or is dropped, never as an operator.
    @Test func ftsSyntaxIsPlainText() throws {
        #expect(try self.parse("NEAR(a b)").groups == [[Term("NEAR(a")], [Term("b)")]])
        // `*` at a word's ends is Circle's own prefix/substring syntax, a bound value in the SQL either way.
        #expect(try self.parse("foo* ^bar").groups == [[Term("foo", match: .prefix)], [Term("^bar")]])
        #expect(try self.parse("a AND b NOT c").groups == [[Term("a")], [Term("AND")], [Term("b")], [Term("NOT")], [Term("c")]])
        #expect(try self.parse("text:secret").groups == [[Term("text:secret")]])
        #expect(try self.parse("{text author}:x").groups == [[Term("{text")], [Term("author}:x")]])
        #expect(try self.parse("a & b | !c <-> d").groups == [[Term("a")], [Term("b")], [Term("!c")], [Term("d")]])
        // An unbalanced quote is ignored; the rest reads as words.
        #expect(try self.parse("say \"hello world").groups == [[Term("say")], [Term("hello")], [Term("world")]])
        let unbalanced = try self.parse("x -\"oops")
        #expect(unbalanced.groups == [[Term("x")]] && unbalanced.excluded == [Term("oops")])
        // Quotes inside a word and doubled quotes are part of the text.
        #expect(try self.parse("it\"s").groups == [[Term("it\"s")]])
        #expect(try self.parse("\"a \"\"b\"").groups == [[Term("a", isPhrase: true)], [Term("b", isPhrase: true)]])
        // A lone minus is not an exclusion; a double one excludes a word starting with one.
        #expect(try self.parse("a - b").groups == [[Term("a")], [Term("b")]])
        #expect(try self.parse("a --b").excluded == [Term("-b")])
        // Quoted OR and quoted filters are text.
        #expect(try self.parse("a \"OR\" b").groups == [[Term("a")], [Term("OR", isPhrase: true)], [Term("b")]])
        #expect(try self.parse("\"from:alice\"").authors.isEmpty)
    }

    @Test func spacelessScripts() {
        #expect(Term("東京").isSpaceless)
        #expect(Term("カタカナ").isSpaceless)
        #expect(Term("ภาษาไทย").isSpaceless)
        #expect(Term("abc東").isSpaceless)
        #expect(!Term("café").isSpaceless)
        #expect(!Term("한국어").isSpaceless)
        #expect(!Term("привет").isSpaceless)
    }

    /// Hostile and random input: every result is a query or a typed error, and a query keeps the limits.
    @Test func neverTraps() {
        var generator = SystemRandomNumberGenerator()
        let pieces = [
            "\"", "-", "OR", " ", "from:", "in:", "before:", "after:", "2026-11-27", "T10:15:00Z", "*", "^", "(", ")",
            "NEAR", ":", "東京", "e\u{301}", "\u{0}", "\u{FFFF}", "\u{1F600}", "\u{200D}", "\t", "\n", "a", "bc", "\u{E000}", "\\",
        ]
        for _ in 0..<2_000 {
            let count = Int.random(in: 0...40, using: &generator)
            let text = (0..<count).map { _ in pieces.randomElement(using: &generator) ?? "" }.joined()
            do {
                let query = try SearchQuery.parse(text)
                #expect(!query.groups.isEmpty)
                #expect(query.groups.allSatisfy { !$0.isEmpty })
                #expect(query.terms.count + query.excluded.count + query.authors.count + query.circles.count <= SearchQuery.Limits.maxTerms)
            } catch {
                #expect(!error.message.isEmpty)
            }
        }
        // Random bytes decoded leniently.
        for _ in 0..<2_000 {
            let bytes = (0..<Int.random(in: 0...64, using: &generator)).map { _ in UInt8.random(in: 0...255, using: &generator) }
            let text = String(decoding: bytes, as: UTF8.self)
            #expect((try? SearchQuery.parse(text)).map { !$0.groups.isEmpty } ?? true)
        }
    }
}
