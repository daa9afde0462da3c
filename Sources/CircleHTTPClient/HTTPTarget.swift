import Foundation
import NIOCore

/// Where a URL points: the one parser of `http`, `https`, `ws` and `wss` URLs for the HTTP client
/// and the WebSocket transport.
public struct HTTPTarget: Hashable, Sendable {
    /// The host name or address literal (an IPv6 literal without its brackets).
    public var host: String
    public var port: Int
    /// `https` or `wss`.
    public var usesTLS: Bool

    /// A target from its parts.
    public init(host: String, port: Int, usesTLS: Bool) {
        self.host = host
        self.port = port
        self.usesTLS = usesTLS
    }

    /// The target of a URL, with `uri` the path and query to ask for (`/` when empty).
    ///
    /// - Parameter schemes: the schemes accepted; `http`/`ws` mean plain TCP, `https`/`wss` TLS.
    /// - Throws: ``HTTPClientError`` with ``HTTPClientError/Code/invalidURL``.
    public static func parse(_ url: URL, schemes: Set<String> = ["http", "https", "ws", "wss"]) throws -> (target: HTTPTarget, uri: String) {
        guard let scheme = url.scheme?.lowercased(), schemes.contains(scheme) else {
            let list = schemes.sorted().map { "\($0)://" }.joined(separator: " or ")
            throw HTTPClientError(.invalidURL, "\"\(url.absoluteString)\" is not a \(list) URL")
        }
        guard var host = url.host, !host.isEmpty else {
            throw HTTPClientError(.invalidURL, "\"\(url.absoluteString)\" has no host")
        }
        if host.hasPrefix("["), host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        let usesTLS = scheme == "https" || scheme == "wss"
        var uri = url.path(percentEncoded: true)
        if uri.isEmpty { uri = "/" }
        if let query = url.query(percentEncoded: true) { uri += "?" + query }
        return (HTTPTarget(host: host, port: url.port ?? (usesTLS ? 443 : 80), usesTLS: usesTLS), uri)
    }

    /// The target of a URL string; see ``parse(_:schemes:)``.
    public static func parse(_ url: String, schemes: Set<String> = ["http", "https", "ws", "wss"]) throws -> (target: HTTPTarget, uri: String) {
        guard let parsed = URL(string: url) else {
            throw HTTPClientError(.invalidURL, "\"\(url)\" is not a URL")
        }
        return try self.parse(parsed, schemes: schemes)
    }

    /// The target of an `http`, `https`, `ws` or `wss` URL (its path is not kept).
    public init(url: URL) throws {
        self = try Self.parse(url).target
    }

    /// Whether the host is an IPv4 or IPv6 address literal (TLS then sends no server name).
    public var isIPLiteral: Bool {
        (try? SocketAddress(ipAddress: self.host, port: 0)) != nil
    }

    /// The `Host` header value: the port only when it is not the scheme's default.
    public var hostHeader: String {
        let literal = self.host.contains(":") ? "[\(self.host)]" : self.host
        return self.port == (self.usesTLS ? 443 : 80) ? literal : "\(literal):\(self.port)"
    }

    /// `host:port` for sentences (IPv6 in brackets).
    public var address: String {
        self.host.contains(":") ? "[\(self.host)]:\(self.port)" : "\(self.host):\(self.port)"
    }
}
