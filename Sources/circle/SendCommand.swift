import ArgumentParser
import CircleClient
import CircleServer
import Foundation

struct SendCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "send",
        abstract: "Post to a circle and wait until every post is acknowledged.",
        discussion: """
            Posts TEXT (the words joined by spaces), or each non-empty line of standard input when \
            no TEXT is given. Each acknowledged post prints "#SEQ" on stdout. Posts go through the \
            SDK: they survive reconnects and are stored once. A post from `circle send` does not \
            tell the circle that you joined or left.

            An empty TEXT is refused unless --allow-empty is given.

            Exit status: 0 every post acknowledged; 1 some post was refused or timed out (a line \
            per failed post on stderr), or the circle does not exist; 2 the server could not be \
            reached; 4 the token was refused, or none could be made; 64 usage.

            Examples:
              circle send general "the build is green" --user alice --data ./circle-data
              tail -f deploy.log | circle send ops --token "$TOKEN"
            """
    )

    @Argument(help: "The circle.")
    var circle: String

    @Argument(help: "The text; standard input lines when empty.")
    var text: [String] = []

    @Option(help: "Seconds to wait for the connection and for each post, across reconnects; also how long rate-limited posts are retried (1 to 86400).")
    var timeout: Int = 30

    @Flag(help: "Post an empty TEXT (without it, an empty text is refused).")
    var allowEmpty = false

    @OptionGroup var client: ClientOptions

    func validate() throws {
        try OptionRanges.check("--timeout", self.timeout, OptionRanges.timeoutSeconds, unit: "seconds")
        if !self.text.isEmpty, self.text.joined(separator: " ").trimmingCharacters(in: .whitespaces).isEmpty, !self.allowEmpty {
            throw ValidationError("the text is empty: nothing to post (give --allow-empty to post it anyway)")
        }
    }

    func run() async throws {
        try await reportingFailures("send", verbose: self.client.verbose, context: self.client.context(circle: self.circle)) {
            try await self.send()
        }
    }

    private func send() async throws {
        let configuration = try self.client.clientConfiguration(postTimeout: .seconds(self.timeout), announcesPresence: false)
        let client = try await self.client.connect(configuration, circle: self.circle, timeout: .seconds(self.timeout))
        var failures = 0
        let deadline = ContinuousClock.now + .seconds(self.timeout)
        let context = self.client.context(circle: self.circle)
        func post(_ line: String) async {
            while true {
                do {
                    let receipt = try await client.post(line, to: self.circle)
                    Console.line("#\(receipt.seq)")
                    return
                } catch let error as CircleClientError where error.code == .rateLimited && ContinuousClock.now < deadline {
                    // A pipe can outrun the server's per-connection rate: wait for the bucket to refill.
                    try? await Task.sleep(for: .milliseconds(500))
                } catch {
                    failures += 1
                    let failure = CLIFailure.from(error, context)
                    var text = "circle send: not posted: \"\(line.prefix(60))\": \(failure.message)\n"
                    if self.client.verbose, let detail = failure.detail { text += "  details: \(detail)\n" }
                    Console.err(text)
                    return
                }
            }
        }
        if self.text.isEmpty {
            if Console.stdinIsTerminal {
                Console.err("circle send: type the posts for \(self.circle), one per line; Ctrl-D ends (or give the text as arguments)\n")
            }
            for await line in TerminalInput.start() {
                if !line.trimmingCharacters(in: .whitespaces).isEmpty { await post(line) }
            }
        } else {
            await post(self.text.joined(separator: " "))
        }
        await client.shutdown()
        if failures > 0 { throw ExitCode(ExitStatus.refused) }
    }
}
