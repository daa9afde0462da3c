import Foundation

/// Snippets made outside the stores' full-text functions: for matches found by substring
/// (`LIKE`/`ILIKE`), which FTS5's `snippet` and PostgreSQL's `ts_headline` cannot mark.
enum SearchSnippet {
    /// How many characters a snippet shows around the first match.
    static let context = 60

    /// A part of `text` around the first place one of `terms` occurs (case and diacritics
    /// ignored), each occurrence in it between ``SearchHit/markStart`` and ``SearchHit/markEnd``;
    /// the start of the text when none occurs. "…" where text is left out.
    static func make(_ text: String, terms: [String]) -> String {
        let needles = terms.filter { !$0.isEmpty }
        let options: String.CompareOptions = [.caseInsensitive, .diacriticInsensitive]
        let first = needles.compactMap { text.range(of: $0, options: options)?.lowerBound }.min()
        let start = first.map { text.index($0, offsetBy: -Self.context / 2, limitedBy: text.startIndex) ?? text.startIndex } ?? text.startIndex
        let end = text.index(start, offsetBy: Self.context * 2, limitedBy: text.endIndex) ?? text.endIndex
        let window = text[start..<end]
        var marked = ""
        var position = window.startIndex
        while position < window.endIndex {
            let next = needles.compactMap { needle -> Range<String.Index>? in
                window.range(of: needle, options: options, range: position..<window.endIndex)
            }.min { $0.lowerBound < $1.lowerBound || ($0.lowerBound == $1.lowerBound && $0.upperBound > $1.upperBound) }
            guard let next, !next.isEmpty else {
                marked += window[position...]
                break
            }
            marked += window[position..<next.lowerBound]
            marked.append(SearchHit.markStart)
            marked += window[next]
            marked.append(SearchHit.markEnd)
            position = next.upperBound
        }
        return (start > text.startIndex ? "…" : "") + marked + (end < text.endIndex ? "…" : "")
    }
}
