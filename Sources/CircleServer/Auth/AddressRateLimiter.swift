import NIOCore

/// How often one address may start a sign-in ceremony (passkey options, a device code): a
/// value, tested without I/O (AddressRateLimiterTests).
///
/// Each address has a ``TokenBucket``. IPv6 addresses count by their /64, the block one
/// subscriber usually gets, so one host cannot walk its prefix to get a fresh bucket for each
/// request; an IPv4-mapped IPv6 address counts as its IPv4 address. The table is bounded: when
/// ``capacity`` addresses are tracked, those whose bucket has refilled are forgotten (they would
/// start full anyway), and if none has, the one unused longest.
///
/// Limits are per node: N nodes allow N times the rate, which still bounds what a flood costs
/// (the store also caps the ceremonies in flight, ``CeremonyLimits/outstanding``).
struct AddressRateLimiter {
    let rate: Double
    let burst: Double
    let capacity: Int
    private var buckets: [[UInt8]: TokenBucket] = [:]

    init(rate: Double, burst: Double, capacity: Int = 10_000) {
        self.rate = rate
        self.burst = burst
        self.capacity = max(1, capacity)
    }

    /// Addresses tracked now.
    var count: Int { self.buckets.count }

    /// Takes one start for `address`, or returns how long until it may start one. Requests
    /// without a peer address (a Unix socket, an embedding app's own transport) share one bucket.
    mutating func take(_ address: SocketAddress?, now: NIODeadline) -> TimeAmount? {
        let key = Self.key(address)
        if self.buckets[key] == nil, self.buckets.count >= self.capacity {
            self.evict(now: now)
        }
        var bucket = self.buckets[key] ?? TokenBucket(rate: self.rate, burst: self.burst)
        let wait = bucket.takeOrWait(now: now)
        self.buckets[key] = bucket
        return wait
    }

    private mutating func evict(now: NIODeadline) {
        self.buckets = self.buckets.filter { !$0.value.isFull(now: now) }
        if self.buckets.count >= self.capacity,
            let oldest = self.buckets.min(by: { ($0.value.lastUse ?? now) < ($1.value.lastUse ?? now) })?.key
        {
            self.buckets[oldest] = nil
        }
    }

    /// The bytes an address counts by: IPv4's four, IPv6's first eight.
    static func key(_ address: SocketAddress?) -> [UInt8] {
        switch address {
        case .v4(let v4):
            return withUnsafeBytes(of: v4.address.sin_addr.s_addr) { Array($0) }
        case .v6(let v6):
            let bytes = withUnsafeBytes(of: v6.address.sin6_addr) { Array($0) }
            // ::ffff:a.b.c.d is an IPv4 peer on a dual-stack socket.
            if bytes[0..<10].allSatisfy({ $0 == 0 }), bytes[10] == 0xFF, bytes[11] == 0xFF {
                return Array(bytes[12..<16])
            }
            return Array(bytes[0..<8])
        case .unixDomainSocket, nil:
            return []
        }
    }
}
