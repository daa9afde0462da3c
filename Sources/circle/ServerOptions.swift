import ArgumentParser
import CircleServer
import Foundation

/// Where the server keeps its data and how it signs tokens; shared by `serve` and `token`.
struct KeyOptions: ParsableArguments {
    @Option(name: .long, help: ArgumentHelp("Data directory (SQLite file, photos, generated secret); created if missing, its parent must exist. Env: CIRCLE_DATA.", valueName: "dir"))
    var data: String = ProcessInfo.processInfo.environment["CIRCLE_DATA"] ?? "./circle-data"

    @Option(name: .long, help: ArgumentHelp("HS256 secret for tokens. Env: CIRCLE_JWT_SECRET. Default: a random secret kept in <data>/jwt-secret.", valueName: "secret"))
    var jwtSecret: String?

    @Option(name: .long, help: ArgumentHelp("Verify ES256 tokens with this PEM public key instead of HS256. Env: CIRCLE_JWT_PUBLIC_KEY.", valueName: "file"))
    var jwtPublicKey: String?

    @Option(name: .long, help: ArgumentHelp("PEM private key for minting ES256 tokens (with --jwt-public-key). Env: CIRCLE_JWT_PRIVATE_KEY.", valueName: "file"))
    var jwtPrivateKey: String?

    /// The token keys, creating and keeping a random secret in the data directory when none is given.
    func tokenKeys(createSecret: Bool) throws -> TokenKeys {
        let environment = ProcessInfo.processInfo.environment
        if let jwtPublicKey = self.jwtPublicKey ?? environment["CIRCLE_JWT_PUBLIC_KEY"] {
            let publicPEM = try String(contentsOfFile: jwtPublicKey, encoding: .utf8)
            let privatePEM = try (self.jwtPrivateKey ?? environment["CIRCLE_JWT_PRIVATE_KEY"]).map {
                try String(contentsOfFile: $0, encoding: .utf8)
            }
            return .es256(publicKeyPEM: publicPEM, privateKeyPEM: privatePEM)
        }
        if let jwtSecret = self.jwtSecret ?? environment["CIRCLE_JWT_SECRET"] {
            guard jwtSecret.utf8.count >= TokenAuthority.minimumSecretLength else {
                throw ValidationError("--jwt-secret must have at least \(TokenAuthority.minimumSecretLength) bytes")
            }
            return .hs256(secret: jwtSecret)
        }
        let path = (self.data as NSString).appendingPathComponent("jwt-secret")
        if let existing = try? String(contentsOfFile: path, encoding: .utf8) {
            return .hs256(secret: existing.trimmingCharacters(in: .whitespacesAndNewlines))
        }
        guard createSecret else {
            throw ValidationError("no secret: give --jwt-secret, set CIRCLE_JWT_SECRET, or point --data at a server's data directory (\(path) does not exist)")
        }
        try DataDirectory.prepare(self.data)
        var generator = SystemRandomNumberGenerator()
        let secret = (0..<32).map { _ in String(format: "%02x", UInt8.random(in: 0...255, using: &generator)) }.joined()
        // Written whole under another name, then linked into place: link(2) fails when the
        // file exists, so nodes sharing the data directory that start at once agree on the one
        // secret that won, and none reads a half-written file.
        let temporary = path + ".\(getpid()).tmp"
        guard FileManager.default.createFile(atPath: temporary, contents: Data((secret + "\n").utf8), attributes: [.posixPermissions: 0o600]) else {
            throw ValidationError("cannot write the token secret in \(self.data)")
        }
        defer { unlink(temporary) }
        if link(temporary, path) != 0 {
            let code = errno
            guard code == EEXIST, let existing = try? String(contentsOfFile: path, encoding: .utf8) else {
                throw ValidationError("cannot create the token secret \(path): \(String(cString: strerror(code)))")
            }
            return .hs256(secret: existing.trimmingCharacters(in: .whitespacesAndNewlines))
        }
        return .hs256(secret: secret)
    }
}

/// Parses durations such as `90s`, `15m`, `1h`, `7d` or plain seconds.
func parseDuration(_ text: String) -> Duration? {
    let units: [(String, Double)] = [("ms", 0.001), ("s", 1), ("m", 60), ("h", 3600), ("d", 86400)]
    var number = Substring(text)
    var scale = 1.0
    if let (suffix, seconds) = units.first(where: { text.hasSuffix($0.0) }) {
        number = text.dropLast(suffix.count)
        scale = seconds
    }
    // In Double first: "200000000000d" must be refused, not overflow an Int64 and trap.
    guard let value = Double(number), value.isFinite, value >= 0 else { return nil }
    let seconds = value * scale
    guard seconds <= maxDurationSeconds else { return nil }
    return .milliseconds(Int64((seconds * 1000).rounded()))
}

/// The longest duration any option takes: 100 years.
let maxDurationSeconds: Double = 100 * 365.25 * 86400
