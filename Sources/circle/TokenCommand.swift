import ArgumentParser
import CircleServer
import Foundation

struct TokenCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "token",
        abstract: "Mint an access token with the server's key (for development; apps mint tokens in their backend).",
        discussion: """
            Uses the same key as `circle serve`: --jwt-secret / CIRCLE_JWT_SECRET, or the secret \
            the server generated in its data directory. Prints the token on stdout.

            Exit status: 0 printed; 4 no key to sign with (no --jwt-secret, and no jwt-secret \
            in --data); 5 a key file cannot be read; 64 usage.

            Examples:
              circle token --user alice
              circle token --user alice --data /srv/circle-data --ttl 7d
              circle chat general --token "$(circle token --user alice)"
            """
    )

    @Option(name: .long, help: "The user name (letters, digits, . _ - @; at most 64).")
    var user: String

    @Option(name: .long, help: "Lifetime, e.g. 90s, 15m, 1h, 7d.")
    var ttl: String = "1h"

    @OptionGroup var keys: KeyOptions

    func run() async throws {
        guard TokenAuthority.isValidUserName(self.user) else {
            throw ValidationError("\"\(self.user)\" is not a valid user name (letters, digits, . _ - @; at most 64)")
        }
        guard let ttl = parseDuration(self.ttl), ttl > .zero else {
            throw ValidationError("--ttl takes a duration of at most 100 years, such as 90s, 15m, 1h or 7d")
        }
        let keys: TokenKeys
        do {
            keys = try self.keys.tokenKeys(createSecret: false)
        } catch let error as ValidationError {
            exitWithFailure(
                "token",
                CLIFailure(.unauthorized, "\(error.message) — run this where the server keeps its data, or give --data DIR (the server's), or --jwt-secret")
            )
        } catch {
            exitWithFailure("token", CLIFailure(.local, "cannot read the key: \(error.localizedDescription)", detail: "\(error)"))
        }
        do {
            let authority = try await TokenAuthority(keys)
            Console.line(try await authority.mint(user: self.user, ttl: ttl))
        } catch {
            exitWithFailure("token", CLIFailure(.local, "cannot sign a token with that key: \(error)"))
        }
    }
}
