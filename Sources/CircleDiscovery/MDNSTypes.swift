/// An interface as the mDNS state machines see it: its index, name and addresses.
public struct MDNSInterface: Sendable, Hashable {
    public var index: UInt32
    public var name: String
    /// IPv4 addresses, 4 bytes each.
    public var ipv4: [[UInt8]]
    /// IPv6 addresses, 16 bytes each.
    public var ipv6: [[UInt8]]

    public init(index: UInt32, name: String, ipv4: [[UInt8]], ipv6: [[UInt8]]) {
        self.index = index
        self.name = name
        self.ipv4 = ipv4
        self.ipv6 = ipv6
    }

    /// The multicast-capable interfaces of the machine, loopback left out unless `includeLoopback`.
    public static func current(includeLoopback: Bool = false, only names: Set<String>? = nil) throws -> [MDNSInterface] {
        try NetworkInterface.all().compactMap { interface in
            guard interface.flags.isSuperset(of: [.up, .running]) else { return nil }
            if let names, !names.contains(interface.name) { return nil }
            if interface.flags.contains(.loopback) {
                guard includeLoopback else { return nil }
            } else {
                guard interface.flags.contains(.multicast) else { return nil }
            }
            return MDNSInterface(
                index: interface.index,
                name: interface.name,
                ipv4: interface.addresses(.ipv4).map(\.bytes),
                ipv6: interface.addresses(.ipv6).map(\.bytes)
            )
        }
    }
}

/// Where an mDNS packet came from: the interface and the sender's address.
public struct MDNSOrigin: Sendable, Hashable {
    public var interfaceIndex: UInt32
    public var source: DatagramAddress

    public init(interfaceIndex: UInt32, source: DatagramAddress) {
        self.interfaceIndex = interfaceIndex
        self.source = source
    }
}

/// Where an mDNS packet goes.
public enum MDNSDestination: Sendable, Hashable {
    /// The mDNS group on one interface: 224.0.0.251 for IPv4, ff02::fb for IPv6; `family` nil
    /// means each family the interface has an address of.
    case multicast(interfaceIndex: UInt32, family: DatagramAddress.Family? = nil)
    /// One peer (a QU or legacy unicast reply), out of the interface the question came in on.
    case unicast(DatagramAddress, interfaceIndex: UInt32)
}

/// A small deterministic random number generator (SplitMix64), seeded by the owner so that the
/// state machines are reproducible in tests.
public struct SplitMix64: RandomNumberGenerator, Sendable {
    private var state: UInt64
    public init(seed: UInt64) { self.state = seed }
    public mutating func next() -> UInt64 {
        self.state &+= 0x9E37_79B9_7F4A_7C15
        var z = self.state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

extension DNSName {
    /// `local.`
    static let local = DNSName(unchecked: [Array("local".utf8)])
    /// `_services._dns-sd._udp.local.`, the service type enumeration name (RFC 6763 §9).
    static let serviceTypeEnumeration = DNSName(unchecked: ["_services", "_dns-sd", "_udp", "local"].map { Array($0.utf8) })
}

/// The mDNS port and groups (RFC 6762 §3).
public enum MDNS {
    public static let port = 5353
    public static let ipv4Group: [UInt8] = [224, 0, 0, 251]
    public static let ipv6Group: [UInt8] = [0xFF, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFB]
}
