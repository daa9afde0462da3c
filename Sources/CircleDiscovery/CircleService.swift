/// How a Circle server describes itself in DNS-SD: service type `_circle._tcp` and TXT keys
/// `txtvers=1`, `path` (the WebSocket path), `tls` (`1` for wss://, `0` for ws://) and `protocol`
/// (the WebSocket subprotocol, the protocol version: `circle.v1`).
public enum CircleService {
    /// `_circle._tcp`.
    public static let type = "_circle._tcp"
    /// The protocol version announced today.
    public static let protocolVersion = "circle.v1"

    /// The instance a Circle server announces.
    public static func instance(name: String, port: Int, path: String = "/v1/ws", tls: Bool) throws -> ServiceInstance {
        guard (1...65535).contains(port) else { throw DatagramError(.invalidAddress, "port \(port) is not in 1…65535") }
        guard !name.isEmpty, name.utf8.count <= 63 else {
            throw DNSMessageError("a service name must be 1 to 63 bytes of UTF-8 (\"\(name)\" has \(name.utf8.count))")
        }
        return ServiceInstance(
            name: name,
            type: Self.type,
            port: UInt16(port),
            txt: [TXTEntry("txtvers", "1"), TXTEntry("path", path), TXTEntry("tls", tls ? "1" : "0"), TXTEntry("protocol", Self.protocolVersion)]
        )
    }
}

extension DiscoveredService {
    /// The WebSocket path from TXT `path`, `/v1/ws` when absent.
    public var path: String {
        guard let path = self.txt["path"], path.hasPrefix("/") else { return "/v1/ws" }
        return path
    }

    /// Whether TXT `tls` says the server speaks wss://.
    public var usesTLS: Bool { self.txt["tls"] == "1" || self.txt["tls"]?.lowercased() == "true" }

    /// TXT `protocol` (`circle.v1`), or `nil`.
    public var protocolVersion: String? { self.txt["protocol"] }

    /// One WebSocket URL per address, in the order of ``addresses``; link-local IPv6 addresses carry
    /// their zone as RFC 6874 writes it (`ws://[fe80::1%25eth0]:8080/v1/ws`).
    public var webSocketURLs: [String] {
        let scheme = self.usesTLS ? "wss" : "ws"
        return self.addresses.map { address in
            let host: String
            if address.family == .ipv6 {
                let zone = address.scopeID.map { _ in "%25" + (address.interfaceName ?? "\(address.scopeID ?? 0)") } ?? ""
                host = "[\(address.ipAddress)\(zone)]"
            } else {
                host = address.ipAddress
            }
            return "\(scheme)://\(host):\(self.port)\(self.path)"
        }
    }
}
