import ArgumentParser
import CircleClient
import CircleServer
import CircleSocket
import CircleWire
import Foundation
import Logging

/// How `send`, `tail`, `chat`, `circle`, `upload` and `download` reach a server and who they are.
struct ClientOptions: ParsableArguments {
    @Option(help: "The server's WebSocket URL. Env: CIRCLE_SERVER.")
    var server: String = ProcessInfo.processInfo.environment["CIRCLE_SERVER"] ?? "ws://127.0.0.1:8080/v1/ws"

    @Option(help: "An access token. Env: CIRCLE_TOKEN.")
    var token: String?

    @Option(help: "Act as this user: a token is minted with the key in --data (or --jwt-secret), or asked from a --dev server.")
    var user: String?

    @OptionGroup var keys: KeyOptions

    @Flag(name: .shortAndLong, help: "On failure, print the technical details too; log the connection's events to stderr.")
    var verbose = false

    func validate() throws {
        guard (try? HTTPTarget.parse(self.server, schemes: ["ws", "wss"])) != nil else {
            throw ValidationError("--server takes a ws:// or wss:// URL, e.g. ws://127.0.0.1:8080/v1/ws")
        }
        try OptionRanges.checkURLPort("--server", self.server)
        if let user, !TokenAuthority.isValidUserName(user) {
            throw ValidationError("\"\(user)\" is not a valid user name (letters, digits, . _ - @; at most 64)")
        }
        if self.token == nil, ProcessInfo.processInfo.environment["CIRCLE_TOKEN"] == nil, self.user == nil,
            CredentialStore.entry(for: self.server) == nil
        {
            throw ValidationError(
                "say who you are: circle login --server \(self.server), or --user NAME (with the server's --data or --jwt-secret), or --token T (or CIRCLE_TOKEN)"
            )
        }
    }

    /// What failures name: this server, user and `circle`.
    func context(circle: String? = nil) -> FailureContext {
        FailureContext(server: self.server, user: self.user ?? self.tokenUser, circle: circle)
    }

    /// The user a given token is for (its `sub`), or the one `circle login` signed in, for
    /// sentences only; the server checks it.
    private var tokenUser: String? {
        guard let token = self.token ?? ProcessInfo.processInfo.environment["CIRCLE_TOKEN"] else {
            return self.user == nil ? CredentialStore.entry(for: self.server)?.user : nil
        }
        let parts = token.split(separator: ".")
        guard parts.count == 3 else { return nil }
        var payload = String(parts[1]).replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        while payload.count % 4 != 0 { payload += "=" }
        guard let data = Data(base64Encoded: payload) else { return nil }
        return (try? JSONDecoder().decode(TokenClaims.self, from: data))?.sub
    }

    /// The one claim of a token the CLI reads.
    private struct TokenClaims: Decodable {
        var sub: String?
    }

    /// Who the commands act as: `--user`, or the `sub` of the token.
    var userName: String { self.user ?? self.tokenUser ?? "me" }

    /// A fresh token, each time it is asked (the SDK asks again when one expires).
    func tokenProvider() throws -> @Sendable () async throws -> String {
        if let token = self.token ?? ProcessInfo.processInfo.environment["CIRCLE_TOKEN"] {
            return { token }
        }
        if self.user == nil, let kept = CredentialStore.entry(for: self.server) {
            let token = kept.token
            return { token }
        }
        guard let user = self.user else {
            throw CLIFailure(.usage, "say who you are: --user NAME (with the server's --data or --jwt-secret), or --token T (or CIRCLE_TOKEN)")
        }
        if let keys = try? self.keys.tokenKeys(createSecret: false) {
            return {
                let authority = try await TokenAuthority(keys)
                return try await authority.mint(user: user, ttl: .seconds(3600))
            }
        }
        let server = self.server
        let data = self.keys.data
        return {
            do {
                return try await CircleClient.developmentToken(for: user, server: server)
            } catch let error as CircleClientError where error.httpStatus == nil {
                throw CLIFailure(
                    .unauthorized,
                    "no key to mint a token for \(user): \(data)/jwt-secret does not exist here, and \(FailureContext(server: server).address) could not be asked for a development token — run this where the server keeps its data (or give --data DIR, --jwt-secret, or --token)",
                    detail: "\(error)"
                )
            } catch {
                throw CLIFailure(
                    .unauthorized,
                    "no key to mint a token for \(user): \(data)/jwt-secret does not exist here and the server does not hand out development tokens — give --data pointing at the server's data directory, --jwt-secret, or --token (or start the server with --dev)",
                    detail: "\(error)"
                )
            }
        }
    }

    /// The SDK's settings for these options. Logs go nowhere unless `--verbose` (a log line
    /// must not land in the middle of `circle chat`'s screen).
    func clientConfiguration(postTimeout: Duration = .seconds(60), announcesPresence: Bool = true, logs: Bool = true) throws -> CircleClientConfiguration {
        var logger = Logger(label: "circle.client", factory: { _ in SwiftLogNoOpLogHandler() })
        if self.verbose && logs {
            logger = Logger(label: "circle.client", factory: { StreamLogHandler.standardError(label: $0) })
            logger.logLevel = .debug
        }
        return CircleClientConfiguration(
            servers: [self.server],
            tokenProvider: try self.tokenProvider(),
            reconnect: .init(base: .milliseconds(250), cap: .seconds(5)),
            postTimeout: postTimeout,
            announcesPresence: announcesPresence,
            logger: logger
        )
    }

    /// Connects as every SDK command does, failing at once with the right sentence and status:
    /// first one plain connection with the token (so a server that is down, a refused token or
    /// a wrong URL are told apart within `timeout`, without retries), then the client itself;
    /// with `circle`, it also checks that the circle exists and may be read.
    func connect(_ configuration: CircleClientConfiguration, circle: String?, timeout: Duration) async throws -> CircleClient {
        let client = try await CircleClient(configuration: configuration)
        do {
            try await client.checkConnection(timeout: timeout)
        } catch let error as CircleClientError where error.code == .timedOut {
            await client.shutdown()
            throw CLIFailure.from(WSCommand.ConnectDeadlineExceeded(deadline: timeout), self.context())
        } catch {
            await client.shutdown()
            throw error
        }
        await client.connect()
        let deadline = ContinuousClock.now + timeout
        while await client.state != .connected {
            if case .closed(let reason) = await client.state {
                if case .unauthorized = reason {
                    throw CLIFailure.refusedUpgrade(status: 401, body: "", detail: "\(reason)", self.context())
                }
                throw CLIFailure(.refused, CLIFailure.describe(reason), detail: "\(reason)")
            }
            if ContinuousClock.now > deadline {
                throw CLIFailure(.unreachable, "could not connect to \(self.context().address) within \(timeout)")
            }
            try? await Task.sleep(for: .milliseconds(10))
        }
        if let circle {
            _ = try await client.history(of: circle, before: nil, limit: 1)
        }
        return client
    }

    /// Runs calls of the SDK's HTTP API (``CircleClient/circles()`` and the rest) with a client
    /// that does not open its WebSocket. A refusal with 401 or 5xx, no answer, or a TLS failure
    /// becomes the CLI's failure here; other refusals are the caller's to word.
    func withAPI<Result: Sendable>(_ body: (CircleClient) async throws -> Result) async throws -> Result {
        let client = try await CircleClient(configuration: try self.clientConfiguration())
        do {
            let result = try await body(client)
            await client.shutdown()
            return result
        } catch let error as CircleClientError {
            await client.shutdown()
            let detail = "\(error)"
            switch error.httpStatus {
            case .some(let status) where status == 401 || status >= 500:
                throw CLIFailure.refusedUpgrade(status: status, reason: error.message, detail: detail, self.context())
            case .some:
                throw error
            case .none where error.code == .tlsFailed:
                throw CLIFailure.from(error, self.context())
            case .none:
                throw CLIFailure(
                    .unreachable,
                    "cannot reach \(self.context().address) — is `circle serve` running there? Start it, or point --server at it",
                    detail: detail
                )
            }
        } catch {
            await client.shutdown()
            throw error
        }
    }
}
