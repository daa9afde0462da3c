#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import NIOCore

/// A network interface with its addresses and flags, as `getifaddrs` reports it now.
public struct NetworkInterface: Sendable, Hashable, CustomStringConvertible {
    /// Interface flags (`IFF_*`).
    public struct Flags: OptionSet, Sendable, Hashable {
        public var rawValue: UInt32
        public init(rawValue: UInt32) { self.rawValue = rawValue }
        public static let up = Flags(rawValue: 1 << 0)
        public static let running = Flags(rawValue: 1 << 1)
        public static let loopback = Flags(rawValue: 1 << 2)
        public static let pointToPoint = Flags(rawValue: 1 << 3)
        public static let broadcast = Flags(rawValue: 1 << 4)
        public static let multicast = Flags(rawValue: 1 << 5)
    }

    /// `eth0`, `en0`, `lo`.
    public var name: String
    /// The index the system gives the interface (the scope id of its link-local addresses).
    public var index: UInt32
    public var flags: Flags
    /// Its IPv4 and IPv6 addresses (port 0; IPv6 link-local ones scoped to this interface).
    public var addresses: [DatagramAddress]

    public init(name: String, index: UInt32, flags: Flags, addresses: [DatagramAddress]) {
        self.name = name
        self.index = index
        self.flags = flags
        self.addresses = addresses
    }

    /// Up, running and able to do multicast.
    public var supportsMulticast: Bool { self.flags.isSuperset(of: [.up, .running, .multicast]) }

    public func addresses(_ family: DatagramAddress.Family) -> [DatagramAddress] {
        self.addresses.filter { $0.family == family }
    }

    public var description: String {
        var words: [String] = []
        if self.flags.contains(.up) { words.append("up") }
        if self.flags.contains(.running) { words.append("running") }
        if self.flags.contains(.loopback) { words.append("loopback") }
        if self.flags.contains(.pointToPoint) { words.append("point-to-point") }
        if self.flags.contains(.broadcast) { words.append("broadcast") }
        if self.flags.contains(.multicast) { words.append("multicast") }
        return "\(self.name) (index \(self.index); \(words.joined(separator: ","))): \(self.addresses.map(\.host).joined(separator: " "))"
    }

    /// Every interface of the machine (of this network namespace), in system order.
    public static func all() throws -> [NetworkInterface] {
        var list: UnsafeMutablePointer<ifaddrs>?
        guard getifaddrs(&list) == 0 else {
            throw DatagramError(.other, "cannot list the network interfaces: \(String(cString: strerror(errno)))")
        }
        defer { freeifaddrs(list) }
        var interfaces: [NetworkInterface] = []
        var cursor = list
        while let entry = cursor?.pointee {
            cursor = entry.ifa_next
            let name = String(cString: entry.ifa_name)
            let index = if_nametoindex(entry.ifa_name)
            guard index > 0 else { continue }
            var flags: Flags = []
            let raw = UInt32(entry.ifa_flags)
            if raw & UInt32(IFF_UP) != 0 { flags.insert(.up) }
            if raw & UInt32(IFF_RUNNING) != 0 { flags.insert(.running) }
            if raw & UInt32(IFF_LOOPBACK) != 0 { flags.insert(.loopback) }
            if raw & UInt32(IFF_POINTOPOINT) != 0 { flags.insert(.pointToPoint) }
            if raw & UInt32(IFF_BROADCAST) != 0 { flags.insert(.broadcast) }
            if raw & UInt32(IFF_MULTICAST) != 0 { flags.insert(.multicast) }
            var address: DatagramAddress?
            if let sockaddr = entry.ifa_addr {
                switch Int32(sockaddr.pointee.sa_family) {
                case AF_INET:
                    let v4 = UnsafeRawPointer(sockaddr).loadUnaligned(as: sockaddr_in.self)
                    address = try? DatagramAddress(SocketAddress(v4, host: ""))
                case AF_INET6:
                    var v6 = UnsafeRawPointer(sockaddr).loadUnaligned(as: sockaddr_in6.self)
                    let linkLocal = withUnsafeBytes(of: v6.sin6_addr) { $0[0] == 0xFE && $0[1] & 0xC0 == 0x80 }
                    v6.sin6_scope_id = linkLocal ? index : 0
                    address = try? DatagramAddress(bytes: withUnsafeBytes(of: v6.sin6_addr) { Array($0) }, port: 0, scopeID: v6.sin6_scope_id)
                default:
                    address = nil
                }
            }
            if let at = interfaces.firstIndex(where: { $0.name == name }) {
                interfaces[at].flags.formUnion(flags)
                if let address, !interfaces[at].addresses.contains(address) { interfaces[at].addresses.append(address) }
            } else {
                interfaces.append(NetworkInterface(name: name, index: index, flags: flags, addresses: address.map { [$0] } ?? []))
            }
        }
        return interfaces
    }

    /// The interface called `name`, or ``DatagramError/Code/noSuchInterface``.
    public static func named(_ name: String) throws -> NetworkInterface {
        guard let found = try Self.all().first(where: { $0.name == name }) else {
            throw DatagramError(.noSuchInterface, "there is no interface named \"\(name)\"")
        }
        return found
    }
}
