import ArgumentParser
import CircleClient
import Foundation

struct SendCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "send",
        abstract: "Post to a circle and wait until every post is acknowledged.",
        discussion: """
            Posts TEXT (the words joined by spaces), or each line of standard input when no TEXT \
            is given. Each acknowledged post prints "#SEQ" on stdout. Posts go through the SDK: \
            they survive reconnects and are stored once.

            Exit status: 0 every post acknowledged; 1 some post was rejected or timed out (a line \
            per failed post on stderr); 2 the server could not be reached in time; 64 usage.

            Examples:
              circle send general "the build is green" --user alice --data ./circle-data
              tail -f deploy.log | circle send ops --token "$TOKEN"
            """
    )

    @Argument(help: "The circle.")
    var circle: String

    @Argument(help: "The text; standard input lines when empty.")
    var text: [String] = []

    @Option(help: "Seconds a post may take, across reconnects; also how long rate-limited posts are retried.")
    var timeout: Int = 30

    @OptionGroup var client: ClientOptions

    func run() async throws {
        let client = try await CircleClient(configuration: try self.client.clientConfiguration(postTimeout: .seconds(self.timeout)))
        await client.connect()
        await awaitConnection(client, command: "send", server: self.client.server)
        var failures = 0
        let deadline = ContinuousClock.now + .seconds(self.timeout)
        func post(_ line: String) async {
            while true {
                do {
                    let receipt = try await client.post(line, to: self.circle)
                    FileHandle.standardOutput.write(Data("#\(receipt.seq)\n".utf8))
                    return
                } catch let error as CircleClientError where error.code == .rateLimited && ContinuousClock.now < deadline {
                    // A pipe can outrun the server's per-connection rate: wait for the bucket to refill.
                    try? await Task.sleep(for: .milliseconds(500))
                } catch {
                    failures += 1
                    FileHandle.standardError.write(Data("circle send: not posted: \(line.prefix(60)): \(error)\n".utf8))
                    return
                }
            }
        }
        if self.text.isEmpty {
            while let line = readLine() {
                if !line.isEmpty { await post(line) }
            }
        } else {
            await post(self.text.joined(separator: " "))
        }
        await client.shutdown()
        if failures > 0 { throw ExitCode(1) }
    }
}
