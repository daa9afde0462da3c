import ArgumentParser
import CircleServer
import Foundation

/// `circle serve`'s identity providers: tokens from these issuers are verified with the keys of
/// their JWKS (docs/CLI.md, docs/API.md "Tokens from your identity provider").
struct IssuerOptions: ParsableArguments {
    @Option(
        name: .long,
        help: ArgumentHelp(
            "Accept tokens from an identity provider (repeatable): iss=ISSUER,jwks=URL-or-file[,aud=AUDIENCE]...[,user-claim=CLAIM][,allow-private]. Env: CIRCLE_JWT_ISSUERS (several separated by ';').",
            valueName: "spec"
        )
    )
    var jwtIssuer: [String] = []

    @Flag(help: "Let JWKS fetches reach private, loopback and link-local addresses (default: public addresses only). Env: CIRCLE_ALLOW_PRIVATE_OUTBOUND=1.")
    var allowPrivateOutbound = false

    @Option(help: "A JWKS fetch (resolve, connect, TLS, answer) that takes longer fails and the issuer keeps its keys, e.g. 5s.")
    var jwksFetchTimeout: String = "5s"

    @Option(help: "Refresh each JWKS this often (sooner when its Cache-Control max-age says so, not under 1m), e.g. 10m.")
    var jwksRefreshInterval: String = "10m"

    @Option(help: "A token naming an unknown kid refreshes its issuer's JWKS at most this often, e.g. 60s.")
    var jwksUnknownKeyInterval: String = "60s"

    /// Checks the specs and durations before anything else runs (a usage error, 64).
    func validate() throws {
        var configuration = CircleServerConfiguration(tokenKeys: .hs256(secret: String(repeating: "x", count: TokenAuthority.minimumSecretLength)))
        try self.apply(to: &configuration)
        do {
            try configuration.validateIssuers()
        } catch {
            throw ValidationError("\(error)")
        }
    }

    /// The issuers and JWKS settings, written into `configuration`.
    func apply(to configuration: inout CircleServerConfiguration) throws {
        let environment = ProcessInfo.processInfo.environment
        var specs = self.jwtIssuer
        if specs.isEmpty, let value = environment["CIRCLE_JWT_ISSUERS"] {
            specs = value.split(whereSeparator: { $0 == ";" || $0 == "\n" }).map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
        }
        configuration.tokenIssuers = try specs.map(Self.issuer(from:))
        configuration.allowPrivateOutbound = self.allowPrivateOutbound || environment["CIRCLE_ALLOW_PRIVATE_OUTBOUND"] == "1"
        func duration(_ text: String, _ flag: String, minimum: Duration) throws -> Duration {
            guard let value = parseDuration(text), value >= minimum else {
                throw ValidationError("--\(flag) must be a duration of at least \(minimum), such as 5s or 10m, not \"\(text)\"")
            }
            return value
        }
        configuration.jwks.fetchTimeout = try duration(self.jwksFetchTimeout, "jwks-fetch-timeout", minimum: .milliseconds(100))
        configuration.jwks.refreshInterval = try duration(self.jwksRefreshInterval, "jwks-refresh-interval", minimum: .seconds(1))
        configuration.jwks.minimumRefreshInterval = min(configuration.jwks.minimumRefreshInterval, configuration.jwks.refreshInterval)
        configuration.jwks.unknownKeyRefreshInterval = try duration(self.jwksUnknownKeyInterval, "jwks-unknown-key-interval", minimum: .zero)
    }

    /// Reads one `--jwt-issuer` spec.
    static func issuer(from spec: String) throws -> TokenIssuer {
        var iss: String?
        var jwks: String?
        var audiences: [String] = []
        var userClaim = "sub"
        var allowPrivate = false
        for part in spec.split(separator: ",") {
            let pair = part.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false).map(String.init)
            switch (pair[0], pair.count) {
            case ("iss", 2): iss = pair[1]
            case ("jwks", 2): jwks = pair[1]
            case ("aud", 2): audiences.append(pair[1])
            case ("user-claim", 2): userClaim = pair[1]
            case ("allow-private", 1): allowPrivate = true
            default:
                throw ValidationError("--jwt-issuer: unknown part \"\(part)\"; use iss=ISSUER,jwks=URL-or-file[,aud=AUDIENCE]...[,user-claim=CLAIM][,allow-private]")
            }
        }
        guard let iss, !iss.isEmpty else { throw ValidationError("--jwt-issuer needs iss=ISSUER (the tokens' \"iss\")") }
        guard let jwks, !jwks.isEmpty else { throw ValidationError("--jwt-issuer \(iss) needs jwks=URL or jwks=FILE") }
        guard !userClaim.isEmpty else { throw ValidationError("--jwt-issuer \(iss): user-claim must name a claim") }
        let lowered = jwks.lowercased()
        if lowered.contains("://") && !(lowered.hasPrefix("https://") || lowered.hasPrefix("http://")) {
            throw ValidationError("--jwt-issuer \(iss): jwks=\(jwks) is neither an https:// (or http://) URL nor a file path")
        }
        let source: TokenIssuer.KeySource = lowered.hasPrefix("https://") || lowered.hasPrefix("http://") ? .url(jwks) : .file(jwks)
        return TokenIssuer(issuer: iss, audiences: audiences, keys: source, userClaim: userClaim, allowsPrivateAddresses: allowPrivate)
    }
}
