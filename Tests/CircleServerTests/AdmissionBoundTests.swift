@testable import CircleServer
import NIOCore
import Testing

@Suite("Connection admission bounds")
struct AdmissionBoundTests {
    @Test(
        "the per-address bound stays at most a quarter of the total, whatever the limit",
        arguments: [
            // (configured per address, total, in force)
            (128, 128, 32),  // an open-file limit of 256: one address may not take all 128
            (128, 64, 16),
            (128, 100_000, 128),
            (8, 1_000, 8),
            (128, 2, 1),
            (0, 128, 0),  // 0: no per-address bound (behind a reverse proxy)
        ]
    )
    func perAddressBound(configured: Int, total: Int, expected: Int) {
        #expect(ConnectionAdmission.perAddressBound(configured: configured, total: total) == expected)
    }

    @Test("at a 256-descriptor limit one address holding all it may leaves room for others")
    func oneAddressCannotStarveOthers() throws {
        let admission = ConnectionAdmission(maxTotal: 128, maxPerAddress: 128)
        let attacker = try SocketAddress(ipAddress: "192.0.2.1", port: 1000)
        var held = 0
        while case .success = admission.admit(address: attacker) { held += 1 }
        #expect(held == 32)
        guard case .failure(let refused) = admission.admit(address: attacker) else {
            Issue.record("the attacker's 33rd connection was admitted")
            return
        }
        #expect(refused.reason == .perAddress)
        for host in 2...4 {
            let other = try SocketAddress(ipAddress: "192.0.2.\(host)", port: 1000)
            for _ in 0..<32 {
                guard case .success = admission.admit(address: other) else {
                    Issue.record("192.0.2.\(host) was refused with \(admission.pendingCount) pending")
                    return
                }
            }
        }
        #expect(admission.pendingCount == 128)
    }
}
