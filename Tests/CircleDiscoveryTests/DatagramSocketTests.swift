import NIOCore
import Testing

@testable import CircleDiscovery

/// Real UDP sockets on loopback (127.0.0.1 and ::1). Scoped link-local addresses and multicast
/// per interface are tested across network namespaces in ``NamespaceTests``.
@Suite struct DatagramSocketTests {
    /// Reads `count` datagrams with the socket's one iterator, or fails after `timeout`.
    static func receive(_ count: Int, from socket: DatagramSocket, within timeout: Duration = .seconds(10)) async throws -> [Datagram] {
        try await withThrowingTaskGroup(of: [Datagram]?.self) { group in
            group.addTask {
                var got: [Datagram] = []
                for try await datagram in socket.inbound {
                    got.append(datagram)
                    if got.count == count { break }
                }
                return got
            }
            group.addTask {
                try? await Task.sleep(for: timeout)
                return nil
            }
            let first = try await group.next() ?? nil
            group.cancelAll()
            guard let datagrams = first, datagrams.count == count else { throw DatagramError(.other, "not \(count) datagrams within \(timeout)") }
            return datagrams
        }
    }

    static func failure(_ body: () async throws -> Void) async -> DatagramError? {
        do {
            try await body()
            return nil
        } catch {
            return error as? DatagramError ?? DatagramError(.other, "\(error)")
        }
    }

    static func syncFailure(_ body: () throws -> Void) -> DatagramError? {
        do {
            try body()
            return nil
        } catch {
            return error as? DatagramError ?? DatagramError(.other, "\(error)")
        }
    }

    @Test(arguments: ["127.0.0.1", "::1"])
    func sendAndReceiveWithFullAddresses(host: String) async throws {
        let loopback = try NetworkInterface.all().first { $0.flags.contains(.loopback) }
        try await DatagramSocket.withSocket(boundTo: try DatagramAddress(host: host, port: 0)) { server in
            #expect(server.localAddress.port != 0)
            try await DatagramSocket.withSocket(boundTo: try DatagramAddress(host: host, port: 0)) { client in
                try await client.send(Array("ping".utf8), to: server.localAddress)
                let request = try #require(try await Self.receive(1, from: server).first)
                #expect(request.bytes == Array("ping".utf8))
                #expect(request.source == client.localAddress)
                #expect(request.destination?.ipAddress == server.localAddress.ipAddress)
                #expect(request.interfaceIndex == loopback?.index)
                try await server.send(Array("pong".utf8), to: request.source)
                let reply = try #require(try await Self.receive(1, from: client).first)
                #expect(reply.bytes == Array("pong".utf8))
                #expect(reply.source == server.localAddress)
            }
        }
    }

    @Test func inboundIsBufferedUntilRead() async throws {
        let configuration = DatagramSocketConfiguration(highWatermark: 8, lowWatermark: 2)
        try await DatagramSocket.withSocket(boundTo: try DatagramAddress(host: "127.0.0.1", port: 0), configuration: configuration) { server in
            try await DatagramSocket.withSocket(boundTo: try DatagramAddress(host: "127.0.0.1", port: 0)) { client in
                for index in 0..<50 { try await client.send([UInt8(index)], to: server.localAddress) }
                // Nobody read while they were sent; all arrive, in order, once read.
                let got = try await Self.receive(50, from: server).flatMap(\.bytes)
                #expect(got == (0..<50).map(UInt8.init))
                // A second reader is refused with an error, not a trap.
                var second = server.inbound.makeAsyncIterator()
                await #expect(throws: DatagramError.self) { _ = try await second.next() }
            }
        }
    }

    @Test func errorsSayWhatToFix() async throws {
        // Not an address of this machine.
        #expect(await Self.failure { try await DatagramSocket.withSocket(boundTo: try DatagramAddress(host: "192.0.2.1", port: 0)) { _ in } }?.code == .addressNotAvailable)
        // Link-local without an interface, and an interface that does not exist.
        #expect(Self.syncFailure { _ = try DatagramAddress(host: "fe80::1%no-such-if0", port: 1) }?.code == .noSuchInterface)
        #expect(Self.syncFailure { _ = try DatagramAddress(host: "not an address", port: 1) }?.code == .invalidAddress)
        #expect(Self.syncFailure { _ = try DatagramAddress(host: "10.0.0.1%1", port: 1) }?.code == .invalidAddress)
        #expect(await Self.failure {
            try await DatagramSocket.withSocket(boundTo: try DatagramAddress(host: "fe80::1", port: 0)) { _ in }
        }?.code == .scopeRequired)

        try await DatagramSocket.withSocket(boundTo: try DatagramAddress(host: "127.0.0.1", port: 0)) { socket in
            // The port is taken.
            let inUse = await Self.failure { try await DatagramSocket.withSocket(boundTo: socket.localAddress) { _ in } }
            #expect(inUse?.code == .addressInUse)
            // IPv6 peer from an IPv4 socket.
            let peer = try DatagramAddress(host: "::1", port: 9)
            let mismatch = await Self.failure { try await socket.send([1], to: peer) }
            #expect(mismatch?.code == .familyMismatch, "\(String(describing: mismatch))")
            #expect(mismatch?.message.contains("IPv6") == true)
            // Groups: not multicast, wrong family, an interface without multicast.
            let loopback = try #require(try NetworkInterface.all().first { $0.flags.contains(.loopback) })
            var plain = loopback
            plain.flags.remove(.multicast)
            #expect(await Self.failure { try await socket.join(group: try DatagramAddress(host: "127.0.0.1", port: 0), on: loopback) }?.code == .notMulticast)
            #expect(await Self.failure { try await socket.join(group: try DatagramAddress(host: "ff02::fb", port: 0), on: loopback) }?.code == .familyMismatch)
            #expect(await Self.failure { try await socket.join(group: try DatagramAddress(host: "224.0.0.251", port: 0), on: plain) }?.code == .multicastUnsupported)
        }
    }

    @Test func addressesParseAndPrint() throws {
        let scoped = try DatagramAddress(host: "[fe80::1%1]", port: 5353)
        #expect(scoped.scopeID == 1)
        #expect(scoped.isLinkLocal)
        #expect(scoped.family == .ipv6)
        #expect(scoped.description.hasPrefix("[fe80::1%"))
        #expect(try DatagramAddress(host: "169.254.3.4", port: 1).isLinkLocal)
        #expect(try DatagramAddress(host: "224.0.0.251", port: 1).isMulticast)
        #expect(try DatagramAddress(host: "ff02::fb", port: 1).isMulticast)
        #expect(try DatagramAddress(host: "192.0.2.1", port: 80).description == "192.0.2.1:80")
        #expect(try DatagramAddress(bytes: [192, 0, 2, 1], port: 80) == DatagramAddress(host: "192.0.2.1", port: 80))
        #expect(Self.syncFailure { _ = try DatagramAddress(bytes: [1, 2, 3], port: 1) }?.code == .invalidAddress)
    }

    @Test func interfacesListAddressesAndFlags() throws {
        let interfaces = try NetworkInterface.all()
        let loopback = try #require(interfaces.first { $0.flags.contains(.loopback) })
        #expect(loopback.flags.contains(.up))
        #expect(loopback.addresses.contains { $0.ipAddress == "127.0.0.1" })
        #expect(loopback.index > 0)
        #expect(try NetworkInterface.named(loopback.name) == loopback)
        #expect(Self.syncFailure { _ = try NetworkInterface.named("no-such-if0") }?.code == .noSuchInterface)
    }
}
