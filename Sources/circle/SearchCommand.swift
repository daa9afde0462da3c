import ArgumentParser
import CircleClient
import CircleWire
import Foundation

/// `circle search QUERY`: `GET /v1/search`, a line per hit.
struct SearchCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "search",
        abstract: "Search the posts of every circle you can read.",
        discussion: """
            QUERY is in the syntax of docs/API.md ("Search"): words, "phrases", -exclusions, \
            OR, from:NAME, in:CIRCLE, before:DATE, after:DATE. Prints a line per hit: \
            circle#seq, author, time (UTC), and the text around the match with the matched \
            words in bold on a terminal (between * otherwise), tab-separated; --json prints \
            the hits as the API answers them, one JSON object a line. Best match first; \
            --newest for newest first.

            Exit status: 0 searched (also when nothing was found); 1 refused (a query that \
            cannot be run, a private circle, a search that took too long); 2 the server could \
            not be reached; 4 the token was refused; 64 usage.

            Examples:
              circle search deploy --user alice
              circle search '"dry run" -staging' --circle ops --newest --limit 5
              circle search release --from bob --after 2026-11-01 --json | jq .snippet
            """
    )
    @Argument(help: "What to find.") var query: String
    @Option(help: "Only this circle.") var circle: String?
    @Option(help: "Only posts by this user.") var from: String?
    @Option(help: "Only posts before this UTC date (2026-11-27) or ISO-8601 time.") var before: String?
    @Option(help: "Only posts after this UTC date or ISO-8601 time.") var after: String?
    @Flag(help: "Newest first instead of best match first.") var newest = false
    @Option(help: "Hits to print, 1–100.") var limit: Int = HTTPAPI.SearchRequest.defaultLimit
    @Flag(help: "One JSON object per hit.") var json = false
    @OptionGroup var client: ClientOptions

    func validate() throws {
        guard (1...HTTPAPI.SearchRequest.maxLimit).contains(self.limit) else {
            throw ValidationError("--limit is between 1 and \(HTTPAPI.SearchRequest.maxLimit)")
        }
    }

    func run() async throws {
        let request = HTTPAPI.SearchRequest(
            q: self.query, circle: self.circle, from: self.from, before: self.before, after: self.after, order: self.newest ? "newest" : nil,
            limit: self.limit
        )
        let json = self.json
        let bold = Console.colours(on: STDOUT_FILENO)
        try await CirclesCommand.call("search", self.client, circle: self.circle, refusal: { "the search was refused: \($0)" }) { api in
            let results = try await api.searchPage(request)
            for hit in results.hits {
                if json {
                    Console.line(String(decoding: HTTPAPI.encode(hit), as: UTF8.self))
                } else {
                    Console.line(Self.line(hit, bold: bold))
                }
            }
        }
    }

    /// `circle#seq<TAB>author<TAB>time<TAB>snippet`, marks as bold or `*`.
    static func line(_ hit: HTTPAPI.SearchHit, bold: Bool) -> String {
        let (start, end) = bold ? ("\u{1B}[1m", "\u{1B}[0m") : ("*", "*")
        var snippet = ""
        for character in hit.snippet {
            switch character {
            case HTTPAPI.SearchHit.markStart: snippet += start
            case HTTPAPI.SearchHit.markEnd: snippet += end
            case "\n", "\r", "\t": snippet += " "
            default: snippet.append(character)
            }
        }
        let time = Date(timeIntervalSince1970: Double(hit.time) / 1000).formatted(.iso8601)
        return "\(hit.circle)#\(hit.seq)\t\(hit.author)\t\(time)\t\(snippet)"
    }
}
