import ArgumentParser
import CircleServer
import Crypto
import Foundation

/// `circle bench push-crypto`: what one Web Push costs in cryptography alone — the RFC 8291
/// encryption (a fresh P-256 key pair, ECDH, HKDF, AES-128-GCM) and the VAPID JWT (an ES256
/// signature) — with the server's own code, in a loop. benchmarks/push.py prints it beside the
/// server's CPU per push, so that the rest (store, HTTP) can be read off.
struct BenchPushCryptoCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "push-crypto",
        abstract: "Times Web Push encryption and VAPID signing in a loop (one JSON line).",
        discussion: """
            Prints {"encrypt_us": …, "vapid_us": …, "count": N}: microseconds of this process's \
            CPU per encryption of a 200-byte payload and per VAPID Authorization header.

            Exit status: 0 measured; 64 usage.

            Examples:
              taskset -c 0 circle bench push-crypto --count 20000
            """
    )

    @Option(help: "Operations of each kind, 100 to 10,000,000.")
    var count: Int = 20_000

    func validate() throws {
        guard (100...10_000_000).contains(self.count) else {
            throw ValidationError("--count must be from 100 to 10,000,000, not \(self.count)")
        }
    }

    func run() throws {
        let subscriber = Array(P256.KeyAgreement.PrivateKey().publicKey.x963Representation)
        let auth = (0..<16).map { _ in UInt8.random(in: 0...255) }
        let payload = Array(String(repeating: "x", count: 200).utf8)
        let key = VAPIDKey()
        var sink = 0
        // Warm up, then time each kind on its own.
        for _ in 0..<50 { sink &+= try Self.encrypt(payload, subscriber, auth).count }
        let encryptStart = processCPUSeconds()
        for _ in 0..<self.count { sink &+= try Self.encrypt(payload, subscriber, auth).count }
        let encryptSeconds = processCPUSeconds() - encryptStart
        let expires = Int64(Date().timeIntervalSince1970) + 12 * 3600
        let vapidStart = processCPUSeconds()
        for index in 0..<self.count {
            sink &+= key.authorization(audience: "https://push.example.net", subject: "mailto:ops@example.com", expires: expires + Int64(index)).utf8.count
        }
        let vapidSeconds = processCPUSeconds() - vapidStart
        printJSONLine([
            "count": self.count,
            "encrypt_us": 1e6 * encryptSeconds / Double(self.count),
            "vapid_us": 1e6 * vapidSeconds / Double(self.count),
            "bytes": sink,
        ])
    }

    private static func encrypt(_ payload: [UInt8], _ subscriber: [UInt8], _ auth: [UInt8]) throws -> [UInt8] {
        do {
            return try WebPushEncryption.encrypt(payload, subscriberKey: subscriber, authSecret: auth)
        } catch {
            throw ValidationError("encryption failed: \(error)")
        }
    }
}
