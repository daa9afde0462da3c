import ArgumentParser
import CircleClient
import CircleServer
import CircleWire
import Foundation

struct TailCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "tail",
        abstract: "Print a circle's posts; with --follow, keep printing new ones.",
        discussion: """
            Prints the posts after --since (default: the last 20), then with --follow every new \
            one as it arrives, resuming across reconnects without gaps or duplicates. Lines look \
            like "#SEQ HH:MM:SS author: text"; posts show "(edited)", "(reply to #N)", \
            "[deleted]" and reaction counts "[👍 2]". With --follow, edits, deletes and reactions \
            made later print as lines of their own: "#SEQ HH:MM:SS ann edited #12: new text", \
            "ann deleted #12", "ann reacted 👍 to #12", "ann took back 👍 from #12". --json \
            prints each entry as the server sent it, one JSON object per line (change entries \
            with "change" and "target").

            A tail does not tell the circle that you joined or left. When stdout is closed (for \
            example `| head -1`), it stops quietly.

            Exit status: 0 done (with --follow: never, until interrupted); 1 the circle does not \
            exist or you may not read it; 2 the server could not be reached; 4 the token was \
            refused, or none could be made; 64 usage.

            Examples:
              circle tail general --user alice --data ./circle-data --follow
              circle tail ops --since 1200 --json --token "$TOKEN" | jq .text
            """
    )

    @Argument(help: "The circle.")
    var circle: String

    @Option(help: "Print posts after this sequence number.")
    var since: Int64?

    @Flag(help: "Keep running and print new posts as they come.")
    var follow = false

    @Flag(help: "One JSON object per post.")
    var json = false

    @Option(help: "Seconds to wait for the connection (1 to 86400).")
    var timeout: Int = 10

    @OptionGroup var client: ClientOptions

    func validate() throws {
        try OptionRanges.check("--timeout", self.timeout, OptionRanges.timeoutSeconds, unit: "seconds")
        if let since = self.since { try OptionRanges.checkAtLeast("--since", since, 0) }
    }

    func run() async throws {
        try await reportingFailures("tail", verbose: self.client.verbose, context: self.client.context(circle: self.circle)) {
            try await self.tail()
        }
    }

    private func tail() async throws {
        let configuration = try self.client.clientConfiguration(announcesPresence: false)
        let client = try await self.client.connect(configuration, circle: self.circle, timeout: .seconds(self.timeout))
        // Backlog through history (paged), then live through the subscription from there.
        var after = self.since
        if after == nil {
            let page = try await client.history(of: self.circle, before: nil, limit: 20)
            after = (page.posts.first?.seq ?? 1) - 1
        }
        var cursor = after ?? 0
        while true {
            let page = try await self.page(client, after: cursor)
            for post in page.posts { self.print(post) }
            cursor = page.posts.last?.seq ?? cursor
            if !page.more { break }
        }
        guard self.follow else {
            await client.shutdown()
            return
        }
        // From the last entry printed: a post committed after the last page is not missed.
        for await event in await client.messages(in: self.circle, after: cursor) {
            if case .post(let post) = event, post.seq > cursor {
                cursor = post.seq
                self.print(post)
            } else if case .gap(let from, let to) = event {
                Console.err("circle tail: posts \(from)–\(to) are missing\n")
            }
        }
    }

    private func page(_ client: CircleClient, after: Int64) async throws -> (posts: [CirclePost], more: Bool) {
        try await client.history(of: self.circle, after: after, limit: HistoryPaging.limits.upperBound)
    }

    private func print(_ post: CirclePost) {
        if self.json {
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
            guard let data = try? encoder.encode(post) else { return }
            Console.line(String(decoding: data, as: UTF8.self))
        } else {
            Console.out(EntryFormat.tailLine(post) + "\n")
        }
    }
}
