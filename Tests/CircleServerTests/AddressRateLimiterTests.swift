import NIOCore
import Testing

@testable import CircleServer

/// Ceremony starts per address, without I/O.
@Suite("AddressRateLimiter")
struct AddressRateLimiterTests {
    let start = NIODeadline.uptimeNanoseconds(1_000_000_000_000)

    func address(_ text: String) throws -> SocketAddress {
        try SocketAddress(ipAddress: text, port: 443)
    }

    @Test("a burst, then one per refill interval, with the wait until the next")
    func burstThenRate() throws {
        var limiter = AddressRateLimiter(rate: 0.5, burst: 3)
        let peer = try self.address("192.0.2.7")
        for _ in 0..<3 { #expect(limiter.take(peer, now: self.start) == nil) }
        let wait = limiter.take(peer, now: self.start)
        #expect(wait == .seconds(2))
        #expect(limiter.take(peer, now: self.start + .milliseconds(1500)) == .milliseconds(500), "a refused start takes nothing")
        #expect(limiter.take(peer, now: self.start + .seconds(2)) == nil)
        #expect(limiter.take(peer, now: self.start + .seconds(2)) != nil)
        #expect(limiter.take(try self.address("192.0.2.8"), now: self.start) == nil, "another address has its own bucket")
    }

    @Test("IPv6 counts by /64; an IPv4-mapped address as its IPv4 address")
    func keys() throws {
        #expect(AddressRateLimiter.key(try self.address("2001:db8:1:2::1")) == AddressRateLimiter.key(try self.address("2001:db8:1:2:ffff::9")))
        #expect(AddressRateLimiter.key(try self.address("2001:db8:1:2::1")) != AddressRateLimiter.key(try self.address("2001:db8:1:3::1")))
        #expect(AddressRateLimiter.key(try self.address("::ffff:192.0.2.7")) == AddressRateLimiter.key(try self.address("192.0.2.7")))
        #expect(AddressRateLimiter.key(try self.address("192.0.2.7")) == [192, 0, 2, 7])

        var limiter = AddressRateLimiter(rate: 1, burst: 1)
        #expect(limiter.take(try self.address("2001:db8::1"), now: self.start) == nil)
        #expect(limiter.take(try self.address("2001:db8::2"), now: self.start) != nil, "same /64, same bucket")
    }

    @Test("the table stays within its capacity: refilled buckets go first, then the longest unused")
    func bounded() throws {
        var limiter = AddressRateLimiter(rate: 1, burst: 2, capacity: 3)
        for host in 1...3 { #expect(limiter.take(try self.address("198.51.100.\(host)"), now: self.start) == nil) }
        #expect(limiter.count == 3)
        // Ten seconds on, every bucket has refilled: all three are forgotten for the newcomer.
        #expect(limiter.take(try self.address("198.51.100.4"), now: self.start + .seconds(10)) == nil)
        #expect(limiter.count == 1)
        // None refilled: the one unused longest goes, and the others keep their counts.
        let later = self.start + .seconds(20)
        for host in 5...6 {
            _ = limiter.take(try self.address("198.51.100.\(host)"), now: later + .milliseconds(Int64(host)))
            _ = limiter.take(try self.address("198.51.100.\(host)"), now: later + .milliseconds(Int64(host)))
        }
        _ = limiter.take(try self.address("198.51.100.4"), now: later)
        _ = limiter.take(try self.address("198.51.100.4"), now: later)
        #expect(limiter.count == 3)
        #expect(limiter.take(try self.address("198.51.100.7"), now: later + .milliseconds(10)) == nil)
        #expect(limiter.count == 3)
        #expect(limiter.take(try self.address("198.51.100.5"), now: later + .milliseconds(10)) != nil, "kept its spent bucket")
        #expect(limiter.take(try self.address("198.51.100.4"), now: later + .milliseconds(10)) == nil, "was forgotten: starts full")
    }
}
