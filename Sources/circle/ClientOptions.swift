import ArgumentParser
import CircleClient
import CircleServer
import Foundation

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// How `send`, `tail` and `circles` reach a server and who they are.
struct ClientOptions: ParsableArguments {
    @Option(help: "The server's WebSocket URL. Env: CIRCLE_SERVER.")
    var server: String = ProcessInfo.processInfo.environment["CIRCLE_SERVER"] ?? "ws://127.0.0.1:8080/v1/ws"

    @Option(help: "An access token. Env: CIRCLE_TOKEN.")
    var token: String?

    @Option(help: "Act as this user: a token is minted with the key in --data (or --jwt-secret), or asked from a --dev server.")
    var user: String?

    @OptionGroup var keys: KeyOptions

    /// The HTTP base URL of the same server (`ws://host:port/v1/ws` → `http://host:port`).
    var httpBase: String {
        var base = self.server
        if base.hasPrefix("wss://") { base = "https://" + base.dropFirst(6) } else if base.hasPrefix("ws://") { base = "http://" + base.dropFirst(5) }
        if let range = base.range(of: "/v1/ws") { base = String(base[..<range.lowerBound]) }
        return base
    }

    func validate() throws {
        guard self.server.hasPrefix("ws://") || self.server.hasPrefix("wss://") else {
            throw ValidationError("--server takes a ws:// or wss:// URL, e.g. ws://127.0.0.1:8080/v1/ws")
        }
    }

    /// A fresh token, each time it is asked (the SDK asks again when one expires).
    func tokenProvider() throws -> @Sendable () async throws -> String {
        if let token = self.token ?? ProcessInfo.processInfo.environment["CIRCLE_TOKEN"] {
            return { token }
        }
        guard let user = self.user else {
            throw ValidationError("say who you are: --token T (or CIRCLE_TOKEN), or --user NAME")
        }
        guard TokenAuthority.isValidUserName(user) else {
            throw ValidationError("\"\(user)\" is not a valid user name (letters, digits, . _ - @; at most 64)")
        }
        if let keys = try? self.keys.tokenKeys(createSecret: false) {
            return {
                let authority = try await TokenAuthority(keys)
                return try await authority.mint(user: user, ttl: .seconds(3600))
            }
        }
        let base = self.httpBase
        return {
            let url = URL(string: "\(base)/v1/dev/token?user=\(user)")!
            let (data, response) = try await URLSession.shared.data(from: url)
            guard (response as? HTTPURLResponse)?.statusCode == 200,
                let object = try JSONSerialization.jsonObject(with: data) as? [String: Any],
                let token = object["token"] as? String
            else {
                throw ValidationError(
                    "no key to mint a token for \(user): give --data pointing at the server's data directory, --jwt-secret, or --token (the server at \(base) does not hand out development tokens)"
                )
            }
            return token
        }
    }

    func clientConfiguration(postTimeout: Duration = .seconds(60), failFast: Bool = false) throws -> CircleClientConfiguration {
        CircleClientConfiguration(
            servers: [self.server],
            tokenProvider: try self.tokenProvider(),
            reconnect: .init(base: .milliseconds(250), cap: .seconds(5)),
            postTimeout: postTimeout,
            failFast: failFast
        )
    }

    /// One authenticated HTTP request to the server's API.
    func http(_ method: String, _ path: String, json: String? = nil) async throws -> (status: Int, body: Data) {
        var request = URLRequest(url: URL(string: self.httpBase + path)!)
        request.httpMethod = method
        request.setValue("Bearer \(try await self.tokenProvider()())", forHTTPHeaderField: "Authorization")
        if let json {
            request.httpBody = Data(json.utf8)
            request.setValue("application/json", forHTTPHeaderField: "Content-Type")
        }
        do {
            let (data, response) = try await URLSession.shared.data(for: request)
            return ((response as? HTTPURLResponse)?.statusCode ?? 0, data)
        } catch {
            throw CLIFailure("cannot reach \(self.httpBase): \(error.localizedDescription)", exitCode: 2)
        }
    }
}

/// A failure with a message for stderr and an exit code.
struct CLIFailure: Error, CustomStringConvertible {
    var description: String
    var exitCode: Int32
    init(_ description: String, exitCode: Int32) {
        self.description = description
        self.exitCode = exitCode
    }
}

/// Prints the message and exits with the code; for the failures a person acts on.
func exitWithFailure(_ command: String, _ failure: CLIFailure) -> Never {
    FileHandle.standardError.write(Data("circle \(command): \(failure.description)\n".utf8))
    exit(failure.exitCode)
}

/// The `message` of an API error body, or the body itself.
func apiErrorMessage(_ data: Data) -> String {
    if let object = try? JSONSerialization.jsonObject(with: data) as? [String: Any],
        let error = object["error"] as? [String: Any], let message = error["message"] as? String
    {
        return message
    }
    return String(decoding: data, as: UTF8.self)
}

/// Waits until the client is connected; exits with status 2 and a message when it cannot be.
func awaitConnection(_ client: CircleClient, command: String, server: String, within timeout: Duration = .seconds(10)) async {
    let deadline = ContinuousClock.now + timeout
    while await client.state != .connected {
        if case .closed(let reason) = await client.state {
            exitWithFailure(command, CLIFailure("the server refused the connection: \(reason)", exitCode: 2))
        }
        if ContinuousClock.now > deadline {
            exitWithFailure(command, CLIFailure("could not connect to \(server) within \(timeout)", exitCode: 2))
        }
        try? await Task.sleep(for: .milliseconds(20))
    }
}
