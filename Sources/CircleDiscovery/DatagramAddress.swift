#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import NIOCore

/// An IPv4 or IPv6 address and port, with the interface (scope id) of an IPv6 link-local address.
///
/// ```swift
/// let peer = try DatagramAddress(host: "fe80::2%veth0", port: 9000)  // or "fe80::2%3"
/// print(peer)  // [fe80::2%veth0]:9000
/// ```
public struct DatagramAddress: Sendable, Hashable, CustomStringConvertible {
    /// The IP version of an address.
    public enum Family: Sendable, Hashable, CustomStringConvertible {
        case ipv4, ipv6
        public var description: String { self == .ipv4 ? "IPv4" : "IPv6" }
    }

    /// The address as NIO holds it (`sockaddr_in6.sin6_scope_id` set for scoped addresses).
    public let socketAddress: SocketAddress

    /// Wraps an IPv4 or IPv6 socket address.
    public init(_ socketAddress: SocketAddress) throws {
        switch socketAddress {
        case .v4, .v6: self.socketAddress = socketAddress
        default: throw DatagramError(.invalidAddress, "\(socketAddress) is not an IP address")
        }
    }

    /// Parses `192.0.2.7`, `::`, `2001:db8::1`, or a scoped `fe80::1%eth0` / `fe80::1%3`
    /// (brackets allowed around IPv6). A link-local IPv6 address without a scope is accepted here
    /// (it suits `bind` to `::`-like wildcards); sending to one fails with ``DatagramError/Code/scopeRequired``.
    public init(host: String, port: Int) throws {
        guard (0...65535).contains(port) else { throw DatagramError(.invalidAddress, "port \(port) is not in 0…65535") }
        var text = host
        if text.hasPrefix("["), text.hasSuffix("]") { text = String(text.dropFirst().dropLast()) }
        var scope: UInt32 = 0
        if let percent = text.firstIndex(of: "%") {
            let zone = String(text[text.index(after: percent)...])
            text = String(text[..<percent])
            guard !zone.isEmpty else { throw DatagramError(.invalidAddress, "\"\(host)\" has an empty scope after %") }
            if let index = UInt32(zone) {
                var buffer = [CChar](repeating: 0, count: Int(IF_NAMESIZE) + 1)
                guard index > 0, if_indextoname(index, &buffer) != nil else {
                    throw DatagramError(.noSuchInterface, "there is no interface with index \(zone) (in \"\(host)\")")
                }
                scope = index
            } else {
                let index = if_nametoindex(zone)
                guard index > 0 else { throw DatagramError(.noSuchInterface, "there is no interface named \"\(zone)\" (in \"\(host)\")") }
                scope = index
            }
        }
        let plain: SocketAddress
        do {
            plain = try SocketAddress(ipAddress: text, port: port)
        } catch {
            throw DatagramError(.invalidAddress, "\"\(host)\" is not an IPv4 or IPv6 address")
        }
        switch plain {
        case .v6(let v6):
            var raw = v6.address
            raw.sin6_scope_id = scope
            self.socketAddress = SocketAddress(raw, host: text)
        case .v4:
            guard scope == 0 else { throw DatagramError(.invalidAddress, "\"\(host)\": only IPv6 addresses take a %scope") }
            self.socketAddress = plain
        default:
            throw DatagramError(.invalidAddress, "\"\(host)\" is not an IPv4 or IPv6 address")
        }
    }

    /// An address from its bytes (4 or 16), port and, for IPv6, the interface index.
    public init(bytes: [UInt8], port: Int, scopeID: UInt32 = 0) throws {
        var buffer = ByteBuffer(bytes: bytes)
        guard bytes.count == 4 || bytes.count == 16, let plain = try? SocketAddress(packedIPAddress: buffer, port: port) else {
            buffer.clear()
            throw DatagramError(.invalidAddress, "an IP address has 4 or 16 bytes, not \(bytes.count)")
        }
        if case .v6(let v6) = plain, scopeID != 0 {
            var raw = v6.address
            raw.sin6_scope_id = scopeID
            self.socketAddress = SocketAddress(raw)
        } else {
            self.socketAddress = plain
        }
    }

    public var family: Family {
        if case .v4 = self.socketAddress { return .ipv4 }
        return .ipv6
    }

    public var port: Int { self.socketAddress.port ?? 0 }

    /// The interface index of a scoped IPv6 address, else `nil`.
    public var scopeID: UInt32? {
        if case .v6(let v6) = self.socketAddress, v6.address.sin6_scope_id != 0 { return v6.address.sin6_scope_id }
        return nil
    }

    /// The name of the scope's interface (`eth0`), or `nil`.
    public var interfaceName: String? {
        guard let scope = self.scopeID else { return nil }
        var buffer = [CChar](repeating: 0, count: Int(IF_NAMESIZE) + 1)
        guard if_indextoname(scope, &buffer) != nil else { return nil }
        return String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// The address bytes: 4 for IPv4, 16 for IPv6.
    public var bytes: [UInt8] {
        switch self.socketAddress {
        case .v4(let v4):
            return withUnsafeBytes(of: v4.address.sin_addr) { Array($0) }
        case .v6(let v6):
            return withUnsafeBytes(of: v6.address.sin6_addr) { Array($0) }
        default:
            return []
        }
    }

    /// The numeric address without port or scope (`fe80::1`, `192.0.2.7`).
    public var ipAddress: String { self.socketAddress.ipAddress ?? "" }

    /// The address with its scope as text: `fe80::1%eth0` (or `%3` when the interface has gone).
    public var host: String {
        guard let scope = self.scopeID else { return self.ipAddress }
        return "\(self.ipAddress)%\(self.interfaceName ?? String(scope))"
    }

    /// `fe80::/10` or `169.254.0.0/16`.
    public var isLinkLocal: Bool {
        let bytes = self.bytes
        if bytes.count == 16 { return bytes[0] == 0xFE && bytes[1] & 0xC0 == 0x80 }
        return bytes.count == 4 && bytes[0] == 169 && bytes[1] == 254
    }

    /// `224.0.0.0/4` or `ff00::/8`.
    public var isMulticast: Bool {
        let bytes = self.bytes
        if bytes.count == 16 { return bytes[0] == 0xFF }
        return bytes.count == 4 && bytes[0] & 0xF0 == 0xE0
    }

    /// Whether this is `0.0.0.0` or `::`.
    public var isWildcard: Bool { self.bytes.allSatisfy { $0 == 0 } }

    /// The same address with another port.
    public func with(port: Int) throws -> DatagramAddress {
        try DatagramAddress(bytes: self.bytes, port: port, scopeID: self.scopeID ?? 0)
    }

    /// `192.0.2.7:9000` or `[fe80::1%eth0]:9000`.
    public var description: String {
        self.family == .ipv6 ? "[\(self.host)]:\(self.port)" : "\(self.host):\(self.port)"
    }

    public static func == (lhs: DatagramAddress, rhs: DatagramAddress) -> Bool {
        lhs.bytes == rhs.bytes && lhs.port == rhs.port && lhs.scopeID == rhs.scopeID
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(self.bytes)
        hasher.combine(self.port)
        hasher.combine(self.scopeID)
    }
}
