import CircleWire
import Foundation

/// Search over the posts an offline cache holds: the query syntax of docs/API.md ("Search")
/// read simply, each term matched as text anywhere (so `dep*` and `*ploy` as `dep` and `ploy`).
/// A value with no I/O.
struct CachedSearch: Sendable, Hashable {
    /// Every group must match; a group matches when one of its terms occurs.
    var groups: [[String]] = []
    var excluded: [String] = []
    var authors: [String] = []
    var circles: [String] = []
    /// Milliseconds since 1970, exclusive.
    var before: Int64?
    var after: Int64?

    /// The query of `request` with its parameters; `nil` when it has nothing to look for.
    init?(_ request: HTTPAPI.SearchRequest) {
        var pendingOr = false
        for (typed, quoted) in Self.tokens(request.q) {
            // A prefix or substring term's `*`s (server side: `SearchQuery.Term.Match`).
            let text = quoted ? typed : Self.withoutStars(typed)
            if !quoted, text == "OR" {
                pendingOr = !self.groups.isEmpty
                continue
            }
            if !quoted, let colon = text.firstIndex(of: ":") {
                let name = text[..<colon].lowercased()
                let value = String(text[text.index(after: colon)...])
                if !value.isEmpty, ["from", "in", "before", "after"].contains(name) {
                    switch name {
                    case "from": self.authors.append(value.hasPrefix("@") ? String(value.dropFirst()) : value)
                    case "in": self.circles.append((value.hasPrefix("#") ? String(value.dropFirst()) : value).lowercased())
                    case "before": self.before = Self.time(value, end: false).map { min(self.before ?? $0, $0) } ?? self.before
                    default: self.after = Self.time(value, end: true).map { max(self.after ?? $0, $0) } ?? self.after
                    }
                    pendingOr = false
                    continue
                }
            }
            if !quoted, text.hasPrefix("-"), text.count > 1 {
                self.excluded.append(String(text.dropFirst()))
                pendingOr = false
                continue
            }
            guard text.unicodeScalars.contains(where: { $0.properties.isAlphabetic || $0.properties.numericType != nil }) else { continue }
            if pendingOr {
                self.groups[self.groups.count - 1].append(text)
            } else {
                self.groups.append([text])
            }
            pendingOr = false
        }
        if let circle = request.circle { self.circles = self.circles.isEmpty || self.circles.contains(circle) ? [circle] : ["\u{0}"] }
        if let author = request.from { self.authors = self.authors.isEmpty || self.authors.contains(author) ? [author] : ["\u{0}"] }
        if let before = request.before.flatMap({ Self.time($0, end: false) }) { self.before = min(self.before ?? before, before) }
        if let after = request.after.flatMap({ Self.time($0, end: true) }) { self.after = max(self.after ?? after, after) }
        if self.groups.isEmpty { return nil }
    }

    /// `text` without the `*`s at its ends (after a leading `-`).
    static func withoutStars(_ text: String) -> String {
        let negated = text.hasPrefix("-") && text.count > 1
        let body = (negated ? text.dropFirst() : Substring(text)).trimmingCharacters(in: CharacterSet(charactersIn: "*"))
        return (negated ? "-" : "") + body
    }

    /// Words and "quoted phrases" (a `-` before the quote excludes the phrase).
    static func tokens(_ text: String) -> [(String, Bool)] {
        var tokens: [(String, Bool)] = []
        var current = ""
        var quoted = false
        var wasQuoted = false
        func finish() {
            let trimmed = current.trimmingCharacters(in: .whitespaces)
            if !trimmed.isEmpty { tokens.append((trimmed, wasQuoted)) }
            current = ""
            wasQuoted = false
        }
        for character in text {
            if character == "\"" {
                if quoted {
                    quoted = false
                    finish()
                } else {
                    let negated = current == "-"
                    if negated { current = "" }
                    finish()
                    quoted = true
                    wasQuoted = true
                    if negated { current = "-" }
                }
            } else if !quoted, character.isWhitespace {
                finish()
            } else {
                current.append(character)
            }
        }
        finish()
        // A quoted phrase after "-" is an exclusion: written as "-phrase", not quoted.
        return tokens.map { $0.1 && $0.0.hasPrefix("-") ? ($0.0, false) : $0 }
    }

    /// A date (its start for `before`, its end for `after`) or an ISO-8601 time, in ms.
    static func time(_ text: String, end: Bool) -> Int64? {
        let full = ISO8601DateFormatter()
        if let date = full.date(from: text) { return Int64(date.timeIntervalSince1970 * 1000) }
        let day = ISO8601DateFormatter()
        day.formatOptions = [.withFullDate]
        guard let date = day.date(from: text) else { return nil }
        let start = Int64(date.timeIntervalSince1970 * 1000)
        return end ? start + 86_400_000 - 1 : start
    }

    private static let options: String.CompareOptions = [.caseInsensitive, .diacriticInsensitive]

    /// Whether `post` matches.
    func matches(_ post: CirclePost) -> Bool {
        guard !post.deleted, post.change == nil, let text = post.text else { return false }
        if !self.circles.isEmpty, !self.circles.contains(post.circle) { return false }
        if !self.authors.isEmpty, !self.authors.contains(post.author) { return false }
        if let before, post.time >= before { return false }
        if let after, post.time <= after { return false }
        let has = { (term: String) in text.range(of: term, options: Self.options) != nil }
        return self.groups.allSatisfy { $0.contains(where: has) } && !self.excluded.contains(where: has)
    }

    /// The hits among `posts`, newest first, `limit` from `offset`; `more` when others follow.
    func hits(in posts: [CirclePost], offset: Int, limit: Int) -> (hits: [HTTPAPI.SearchHit], more: Bool) {
        let matching = posts.filter(self.matches).sorted { ($0.time, $0.circle, $0.seq) > ($1.time, $1.circle, $1.seq) }
        let page = matching.dropFirst(offset).prefix(limit)
        let terms = self.groups.flatMap { $0 }
        return (page.map { HTTPAPI.SearchHit(circle: $0.circle, seq: $0.seq, author: $0.author, time: $0.time, snippet: Self.snippet($0.text ?? "", terms)) }, matching.count > offset + page.count)
    }

    /// Up to 120 characters from a little before the first match, every match marked.
    static func snippet(_ text: String, _ terms: [String]) -> String {
        let first = terms.compactMap { text.range(of: $0, options: Self.options)?.lowerBound }.min() ?? text.startIndex
        let start = text.index(first, offsetBy: -30, limitedBy: text.startIndex) ?? text.startIndex
        let end = text.index(start, offsetBy: 120, limitedBy: text.endIndex) ?? text.endIndex
        let window = text[start..<end]
        var marked = ""
        var position = window.startIndex
        while position < window.endIndex {
            let next = terms.compactMap { window.range(of: $0, options: Self.options, range: position..<window.endIndex) }.filter { !$0.isEmpty }
                .min { $0.lowerBound < $1.lowerBound }
            guard let next else {
                marked += window[position...]
                break
            }
            marked += window[position..<next.lowerBound]
            marked.append(HTTPAPI.SearchHit.markStart)
            marked += window[next]
            marked.append(HTTPAPI.SearchHit.markEnd)
            position = next.upperBound
        }
        return (start > text.startIndex ? "…" : "") + marked + (end < text.endIndex ? "…" : "")
    }
}
