import Crypto
import Foundation
import NIOCore
import NIOSSL

/// TLS settings of client connections (`https://` requests and `wss://` WebSockets): which
/// certificates are trusted and, optionally, which server keys are accepted (SPKI pins).
///
/// ```swift
/// var tls = ClientTLSConfiguration()
/// tls.trust = try .certificateAuthorities(pemFile: "ca.pem")   // a private CA
/// tls.pinnedPublicKeys = ["sha256/47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU="]
/// ```
///
/// This is the one place that builds the NIOSSL client configuration; ``TLSHandshakeGate``
/// is the one place that checks the pins.
public struct ClientTLSConfiguration: Sendable {
    /// Which certificates the connection trusts.
    public struct Trust: Sendable {
        fileprivate enum Value: Sendable {
            case system
            case certificates([NIOSSLCertificate])
            case selfSignedOnLocalhost
        }
        fileprivate let value: Value

        /// The operating system's trust roots.
        public static let system = Trust(value: .system)

        /// Only these certificate authorities (for a private CA); the system roots are not used.
        public static func certificateAuthorities(_ certificates: [NIOSSLCertificate]) -> Trust {
            Trust(value: .certificates(certificates))
        }

        /// Only the certificate authorities in a PEM file.
        public static func certificateAuthorities(pemFile path: String) throws -> Trust {
            Trust(value: .certificates(try NIOSSLCertificate.fromPEMFile(path)))
        }

        /// Accept any certificate, self-signed included, but only when the URL's host is a
        /// loopback name or address (`localhost`, `*.localhost`, `127.0.0.0/8`, `::1`), as for a
        /// local `wss://localhost:8080` development server. For every other host the system
        /// roots apply, so a self-signed certificate there is still refused.
        public static let selfSignedOnLocalhost = Trust(value: .selfSignedOnLocalhost)
    }

    /// Which certificates are trusted. Default: the system roots.
    public var trust: Trust
    /// SHA-256 hashes of the SubjectPublicKeyInfo of acceptable server keys, base64 (optionally
    /// prefixed `sha256/`, as in HPKP and OkHttp) or hex. When not empty, the server's leaf
    /// certificate must pass the trust check *and* match one pin; a valid but unpinned
    /// certificate is refused (``HTTPClientError/Code/pinMismatch``).
    public var pinnedPublicKeys: [String]

    /// Creates TLS settings.
    ///
    /// - Parameters:
    ///   - trust: which certificates are trusted.
    ///   - pinnedPublicKeys: SPKI pins; empty accepts any trusted key.
    public init(trust: Trust = .system, pinnedPublicKeys: [String] = []) {
        self.trust = trust
        self.pinnedPublicKeys = pinnedPublicKeys
    }

    /// The pin string (`sha256/` + base64) of a certificate's public key, for configuring pins.
    public static func publicKeyPin(of certificate: NIOSSLCertificate) throws -> String {
        "sha256/" + Data(try Self.spkiSHA256(of: certificate)).base64EncodedString()
    }

    /// SHA-256 of a certificate's SubjectPublicKeyInfo.
    static func spkiSHA256(of certificate: NIOSSLCertificate) throws -> [UInt8] {
        Array(SHA256.hash(data: try certificate.extractPublicKey().toSPKIBytes()))
    }

    /// The configured pins as raw 32-byte digests.
    ///
    /// - Throws: ``HTTPClientError`` (``HTTPClientError/Code/tlsFailed``) for a pin that is not a
    ///   SHA-256 digest.
    package func decodedPins() throws -> [[UInt8]] {
        try self.pinnedPublicKeys.map { pin in
            var text = pin.trimmingCharacters(in: .whitespaces)
            if text.lowercased().hasPrefix("sha256/") { text.removeFirst(7) }
            if text.count == 64, let bytes = Self.hexBytes(text) { return bytes }
            if let data = Data(base64Encoded: text), data.count == 32 { return Array(data) }
            throw HTTPClientError(.tlsFailed, "the pin \"\(pin)\" is not a SHA-256 digest in base64 or hex")
        }
    }

    private static func hexBytes(_ text: String) -> [UInt8]? {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(32)
        var iterator = text.utf8.makeIterator()
        while let high = iterator.next(), let low = iterator.next() {
            guard let h = hexValue(high), let l = hexValue(low) else { return nil }
            bytes.append(h << 4 | l)
        }
        return bytes.count == 32 ? bytes : nil
    }

    private static func hexValue(_ c: UInt8) -> UInt8? {
        switch c {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): return c - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): return c - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): return c - UInt8(ascii: "A") + 10
        default: return nil
        }
    }

    /// Whether `host` names this machine's loopback interface.
    static func isLoopback(host: String) -> Bool {
        let lower = host.lowercased()
        if lower == "localhost" || lower.hasSuffix(".localhost") || lower == "::1" { return true }
        let parts = lower.split(separator: ".", omittingEmptySubsequences: false)
        return parts.count == 4 && parts[0] == "127" && parts.allSatisfy { UInt8($0) != nil }
    }

    /// The NIOSSL context for a connection to `host`.
    ///
    /// - Throws: ``HTTPClientError`` (``HTTPClientError/Code/tlsFailed``).
    package func makeContext(host: String) throws -> NIOSSLContext {
        var configuration = TLSConfiguration.makeClientConfiguration()
        // Both the API and the WebSocket upgrade speak HTTP/1.1: say so, so a server that also
        // offers h2 picks HTTP/1.1 for these connections.
        configuration.applicationProtocols = ["http/1.1"]
        switch self.trust.value {
        case .system:
            break
        case .certificates(let certificates):
            configuration.trustRoots = .certificates(certificates)
        case .selfSignedOnLocalhost:
            if Self.isLoopback(host: host) {
                configuration.certificateVerification = .none
            }
        }
        do {
            return try NIOSSLContext(configuration: configuration)
        } catch {
            throw HTTPClientError(.tlsFailed, "could not set up TLS", underlying: error)
        }
    }

    /// The handlers that put TLS on a new client channel to `target`: the NIOSSL handler and a
    /// ``TLSHandshakeGate`` that completes `handshake` once the handshake is done and the key
    /// matches the pins. Build `context` and `pins` once per connection attempt, outside the
    /// channel initializer (``makeContext(host:)``, ``decodedPins()``).
    package static func handlers(
        context: NIOSSLContext,
        pins: [[UInt8]],
        target: HTTPTarget,
        handshake: EventLoopPromise<Void>
    ) throws -> [any ChannelHandler] {
        [
            try NIOSSLClientHandler(context: context, serverHostname: target.isIPLiteral ? nil : target.host),
            TLSHandshakeGate(promise: handshake, pins: pins, host: target.host),
        ]
    }
}
