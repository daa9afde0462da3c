import NIOCore

/// Which addresses the server may connect to when it fetches a URL someone configured (a JWKS
/// today; webhooks and push later): by default only public ones, so that a configured URL
/// cannot reach the machine's own services, the local network or a cloud metadata endpoint.
///
/// The check runs on every address a name resolves to, and the connection goes to the checked
/// address (``OutboundHTTP``), so a name that resolves differently the second time cannot slip
/// past it.
package struct OutboundAddressPolicy: Sendable, Hashable {
    /// Whether private, loopback, link-local and unspecified addresses are allowed too.
    package var allowsPrivate: Bool

    /// Only public addresses.
    package static let publicOnly = OutboundAddressPolicy(allowsPrivate: false)
    /// Any address (tests on 127.0.0.1; an identity provider on the local network).
    package static let any = OutboundAddressPolicy(allowsPrivate: true)

    package init(allowsPrivate: Bool) {
        self.allowsPrivate = allowsPrivate
    }

    /// Why `address` may not be used, or `nil` when it may.
    package func refusal(of address: SocketAddress) -> String? {
        guard !self.allowsPrivate else { return nil }
        switch address {
        case .v4(let v4):
            // s_addr is in network byte order.
            let value = UInt32(bigEndian: v4.address.sin_addr.s_addr)
            return Self.refusal(ipv4: value)
        case .v6(let v6):
            let bytes = withUnsafeBytes(of: v6.address.sin6_addr) { Array($0) }
            return Self.refusal(ipv6: bytes)
        case .unixDomainSocket:
            return "a Unix domain socket"
        }
    }

    /// Why an IPv4 address (host byte order) is not public, or `nil`.
    package static func refusal(ipv4 value: UInt32) -> String? {
        let a = value >> 24
        let b = (value >> 16) & 0xFF
        switch a {
        case 0: return "an unspecified or \"this network\" address (0.0.0.0/8)"
        case 10: return "a private address (10.0.0.0/8)"
        case 127: return "a loopback address (127.0.0.0/8)"
        case 169 where b == 254: return "a link-local address (169.254.0.0/16)"
        case 172 where (16...31).contains(b): return "a private address (172.16.0.0/12)"
        case 192 where b == 168: return "a private address (192.168.0.0/16)"
        case 100 where (64...127).contains(b): return "a shared (carrier-grade NAT) address (100.64.0.0/10)"
        case 224...255: return "a multicast or reserved address (224.0.0.0/3)"
        default: return nil
        }
    }

    /// Why an IPv6 address (16 bytes) is not public, or `nil`. IPv4-mapped and IPv4-compatible
    /// addresses are judged as the IPv4 address they carry.
    package static func refusal(ipv6 bytes: [UInt8]) -> String? {
        guard bytes.count == 16 else { return "not an IPv6 address" }
        if bytes.allSatisfy({ $0 == 0 }) { return "the unspecified address (::)" }
        if bytes[0..<15].allSatisfy({ $0 == 0 }) && bytes[15] == 1 { return "the loopback address (::1)" }
        let isMapped = bytes[0..<10].allSatisfy { $0 == 0 } && bytes[10] == 0xFF && bytes[11] == 0xFF
        let isCompatible = bytes[0..<12].allSatisfy { $0 == 0 }
        // NAT64 (64:ff9b::/96) carries an IPv4 address too.
        let isNAT64 = bytes[0] == 0x00 && bytes[1] == 0x64 && bytes[2] == 0xFF && bytes[3] == 0x9B && bytes[4..<12].allSatisfy { $0 == 0 }
        if isMapped || isCompatible || isNAT64 {
            let v4 = UInt32(bytes[12]) << 24 | UInt32(bytes[13]) << 16 | UInt32(bytes[14]) << 8 | UInt32(bytes[15])
            return Self.refusal(ipv4: v4).map { "\($0), in an IPv6 address" }
        }
        if bytes[0] == 0xFE && bytes[1] & 0xC0 == 0x80 { return "a link-local address (fe80::/10)" }
        if bytes[0] == 0xFE && bytes[1] & 0xC0 == 0xC0 { return "a site-local address (fec0::/10)" }
        if bytes[0] & 0xFE == 0xFC { return "a unique local address (fc00::/7)" }
        if bytes[0] == 0xFF { return "a multicast address (ff00::/8)" }
        return nil
    }
}
