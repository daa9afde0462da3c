#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix

/// Settings for a ``DatagramSocket``; every field has a default.
public struct DatagramSocketConfiguration: Sendable {
    /// `SO_REUSEADDR`: several sockets may bind the same port (needed to share 5353 with other mDNS stacks).
    public var reuseAddress: Bool
    /// `SO_REUSEPORT` where the system has it; with ``reuseAddress`` for multicast listeners.
    public var reusePort: Bool
    /// Multicast sent from this socket goes out of this interface (`IP_MULTICAST_IF`/`IPV6_MULTICAST_IF`);
    /// `nil` lets the routing table choose.
    public var multicastInterface: NetworkInterface?
    /// The hop limit of multicast sent from this socket (1 stays on the link; mDNS uses 255).
    public var multicastHops: Int
    /// Whether this host's own multicast comes back to its sockets.
    public var multicastLoopback: Bool
    /// Inbound datagrams buffered before reading from the socket pauses (backpressure): reading
    /// resumes when the buffer falls to `lowWatermark`.
    public var highWatermark: Int
    public var lowWatermark: Int
    /// The largest datagram read; longer ones are truncated by the system.
    public var maximumDatagramSize: Int

    public init(
        reuseAddress: Bool = false,
        reusePort: Bool = false,
        multicastInterface: NetworkInterface? = nil,
        multicastHops: Int = 1,
        multicastLoopback: Bool = true,
        highWatermark: Int = 256,
        lowWatermark: Int = 32,
        maximumDatagramSize: Int = 9216
    ) {
        self.reuseAddress = reuseAddress
        self.reusePort = reusePort
        self.multicastInterface = multicastInterface
        self.multicastHops = multicastHops
        self.multicastLoopback = multicastLoopback
        self.highWatermark = highWatermark
        self.lowWatermark = lowWatermark
        self.maximumDatagramSize = maximumDatagramSize
    }
}

/// One received datagram.
public struct Datagram: Sendable, Hashable {
    /// The payload.
    public var bytes: [UInt8]
    /// Who sent it; a link-local IPv6 sender carries the scope of the interface it came in on,
    /// so a reply to this address leaves by that interface.
    public var source: DatagramAddress
    /// The address it was sent to (a multicast group, or one of ours), when the system says.
    public var destination: DatagramAddress?
    /// The index of the interface it arrived on, when the system says.
    public var interfaceIndex: UInt32?
}

/// A UDP socket bound to an IPv4 or IPv6 address: send to and receive from peers with their full
/// address, join and leave multicast groups per interface. Built on NIO's `DatagramBootstrap`.
///
/// The socket lives for the closure given to ``withSocket(boundTo:configuration:eventLoopGroup:_:)``
/// and is closed when it returns:
///
/// ```swift
/// let local = try DatagramAddress(host: "fe80::1%eth0", port: 9000)
/// try await DatagramSocket.withSocket(boundTo: local) { socket in
///     try await socket.send(Array("hello".utf8), to: DatagramAddress(host: "fe80::2%eth0", port: 9000))
///     for try await datagram in socket.inbound {
///         try await socket.send(datagram.bytes, to: datagram.source)  // echo, out of the right interface
///     }
/// }
/// ```
public struct DatagramSocket: Sendable {
    private let channel: any Channel
    /// Inbound datagrams, in arrival order, with backpressure: while nobody iterates, at most
    /// ``DatagramSocketConfiguration/highWatermark`` wait and the socket is not read (the system then
    /// drops what its buffer cannot hold, as UDP does). Iterate it from one task only.
    public let inbound: Inbound
    /// The address the socket is bound to (the port filled in when 0 was asked).
    public let localAddress: DatagramAddress

    /// Binds a socket to `address`, runs `body` with it, and closes it when `body` returns or throws.
    ///
    /// Binding to an IPv6 link-local address needs its scope (`fe80::1%eth0`).
    /// - Throws: ``DatagramError`` with `addressNotAvailable` (not an address of this machine or of
    ///   that interface), `addressInUse`, `permissionDenied`, `scopeRequired`, `noSuchInterface`.
    public static func withSocket<Result: Sendable>(
        boundTo address: DatagramAddress,
        configuration: DatagramSocketConfiguration = .init(),
        eventLoopGroup: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton,
        _ body: (DatagramSocket) async throws -> Result
    ) async throws -> Result {
        if address.isLinkLocal, address.family == .ipv6, address.scopeID == nil {
            throw DatagramError(.scopeRequired, "cannot bind to \(address.ipAddress): a link-local address needs its interface, e.g. \(address.ipAddress)%eth0")
        }
        if let interface = configuration.multicastInterface, !interface.flags.contains(.multicast) {
            throw DatagramError(.multicastUnsupported, "interface \(interface.name) cannot do multicast")
        }
        var bootstrap = DatagramBootstrap(group: eventLoopGroup)
            .channelOption(.socketOption(.so_reuseaddr), value: configuration.reuseAddress ? 1 : 0)
            .channelOption(.receivePacketInfo, value: true)
            .channelOption(.recvAllocator, value: FixedSizeRecvByteBufferAllocator(capacity: configuration.maximumDatagramSize))
        if address.family == .ipv6 {
            // IPv6 only: IPv4 traffic to the same port belongs to IPv4 sockets.
            bootstrap = bootstrap.channelOption(ChannelOptions.Types.SocketOption(level: .ipv6, name: .ipv6_v6only), value: 1)
        }
        #if canImport(Glibc) || canImport(Darwin)
        if configuration.reusePort {
            bootstrap = bootstrap.channelOption(ChannelOptions.Types.SocketOption(level: .socket, name: NIOBSDSocket.Option(rawValue: SO_REUSEPORT)), value: 1)
        }
        #endif
        let asyncChannel: NIOAsyncChannel<AddressedEnvelope<ByteBuffer>, AddressedEnvelope<ByteBuffer>>
        do {
            asyncChannel = try await bootstrap.bind(to: address.socketAddress) { channel in
                Self.applyMulticastOptions(configuration, family: address.family, channel: channel).flatMapThrowing {
                    try NIOAsyncChannel(
                        wrappingChannelSynchronously: channel,
                        configuration: .init(
                            backPressureStrategy: .init(lowWatermark: configuration.lowWatermark, highWatermark: configuration.highWatermark)
                        )
                    )
                }
            }
        } catch {
            throw DatagramError.from(error, operation: "bind to", subject: address.description)
        }
        var boundAddress = address
        if let local = asyncChannel.channel.localAddress, let bound = try? DatagramAddress(local) {
            // Keep the scope asked for, should the system not report it back.
            boundAddress = (try? DatagramAddress(bytes: bound.bytes, port: bound.port, scopeID: bound.scopeID ?? address.scopeID ?? 0)) ?? bound
        }
        return try await asyncChannel.executeThenClose { inbound, _ in
            let socket = DatagramSocket(channel: asyncChannel.channel, inbound: Inbound(base: inbound), localAddress: boundAddress)
            return try await body(socket)
        }
    }

    private init(channel: any Channel, inbound: Inbound, localAddress: DatagramAddress) {
        self.channel = channel
        self.inbound = inbound
        self.localAddress = localAddress
    }

    /// Sets the multicast options with their exact C types (`in_addr`, `u_char`, `int`).
    private static func applyMulticastOptions(
        _ configuration: DatagramSocketConfiguration,
        family: DatagramAddress.Family,
        channel: any Channel
    ) -> EventLoopFuture<Void> {
        guard let provider = channel as? any SocketOptionProvider else { return channel.eventLoop.makeSucceededVoidFuture() }
        let hops = max(0, min(255, configuration.multicastHops))
        let loop = configuration.multicastLoopback ? 1 : 0
        var steps: [EventLoopFuture<Void>] = []
        switch family {
        case .ipv4:
            steps.append(provider.setIPMulticastTTL(CUnsignedChar(hops)))
            steps.append(provider.setIPMulticastLoop(CUnsignedChar(loop)))
            if let interface = configuration.multicastInterface {
                guard let address = interface.addresses(.ipv4).first else {
                    return channel.eventLoop.makeFailedFuture(
                        DatagramError(.addressNotAvailable, "interface \(interface.name) has no IPv4 address to send IPv4 multicast from")
                    )
                }
                var inAddr = in_addr()
                withUnsafeMutableBytes(of: &inAddr) { $0.copyBytes(from: address.bytes) }
                steps.append(provider.setIPMulticastIF(inAddr))
            }
        case .ipv6:
            steps.append(provider.setIPv6MulticastHops(CInt(hops)))
            steps.append(provider.setIPv6MulticastLoop(CUnsignedInt(loop)))
            if let interface = configuration.multicastInterface {
                steps.append(provider.setIPv6MulticastIF(CUnsignedInt(interface.index)))
            }
        }
        return EventLoopFuture.andAllSucceed(steps, on: channel.eventLoop)
    }

    /// Sends one datagram to `destination` and waits until the system has taken it.
    ///
    /// - Throws: ``DatagramError``: `familyMismatch` (an IPv4 peer from an IPv6 socket or the reverse),
    ///   `scopeRequired` (a link-local IPv6 peer without its interface), `networkUnreachable`,
    ///   `permissionDenied`, `messageTooLarge`, `closed`.
    public func send(_ bytes: some Sequence<UInt8>, to destination: DatagramAddress) async throws {
        guard destination.family == self.localAddress.family else {
            throw DatagramError(
                .familyMismatch,
                "cannot send to \(destination): it is an \(destination.family) address and this socket is bound to \(self.localAddress.family) \(self.localAddress)"
            )
        }
        if destination.family == .ipv6, destination.scopeID == nil, destination.isLinkLocal {
            throw DatagramError(.scopeRequired, "cannot send to \(destination.ipAddress): a link-local address needs its interface, e.g. \(destination.ipAddress)%eth0")
        }
        let buffer = ByteBuffer(bytes: bytes)
        do {
            try await self.channel.writeAndFlush(AddressedEnvelope(remoteAddress: destination.socketAddress, data: buffer))
        } catch {
            throw DatagramError.from(error, operation: "send to", subject: destination.description)
        }
    }

    /// Joins the multicast `group` on `interface` (IPv4 and IPv6: the group's family must be the
    /// socket's, and the interface must have an address of that family for IPv4).
    ///
    /// - Throws: ``DatagramError``: `notMulticast`, `familyMismatch`, `multicastUnsupported` (the
    ///   interface has no multicast flag), `addressNotAvailable` (no IPv4 address on it), `noSuchInterface`.
    public func join(group: DatagramAddress, on interface: NetworkInterface) async throws {
        try await self.groupOperation(join: true, group: group, interface: interface)
    }

    /// Leaves a group joined with ``join(group:on:)``.
    public func leave(group: DatagramAddress, on interface: NetworkInterface) async throws {
        try await self.groupOperation(join: false, group: group, interface: interface)
    }

    private func groupOperation(join: Bool, group: DatagramAddress, interface: NetworkInterface) async throws {
        let verb = join ? "join" : "leave"
        guard group.isMulticast else { throw DatagramError(.notMulticast, "cannot \(verb) \(group.host): not a multicast address") }
        guard group.family == self.localAddress.family else {
            throw DatagramError(.familyMismatch, "cannot \(verb) \(group.family) group \(group.host) on an \(self.localAddress.family) socket")
        }
        guard interface.flags.contains(.multicast) else {
            throw DatagramError(.multicastUnsupported, "cannot \(verb) \(group.host) on \(interface.name): the interface does not support multicast")
        }
        guard let multicast = self.channel as? any MulticastChannel else {
            throw DatagramError(.multicastUnsupported, "this channel cannot do multicast")
        }
        let device: NIONetworkDevice
        do {
            let devices = try System.enumerateDevices().filter { $0.name == interface.name }
            let wanted: (NIONetworkDevice) -> Bool = { device in
                switch (device.address, group.family) {
                case (.v4?, .ipv4), (.v6?, .ipv6): return true
                default: return false
                }
            }
            guard let found = devices.first(where: wanted) ?? (group.family == .ipv6 ? devices.first : nil) else {
                if devices.isEmpty { throw DatagramError(.noSuchInterface, "cannot \(verb) \(group.host): there is no interface named \(interface.name)") }
                throw DatagramError(.addressNotAvailable, "cannot \(verb) \(group.host) on \(interface.name): the interface has no \(group.family) address")
            }
            device = found
        } catch let error as DatagramError {
            throw error
        } catch {
            throw DatagramError.from(error, operation: "list interfaces to \(verb)", subject: group.host)
        }
        let groupAddress = (try? DatagramAddress(bytes: group.bytes, port: 0))?.socketAddress ?? group.socketAddress
        do {
            if join {
                try await multicast.joinGroup(groupAddress, device: device).get()
            } else {
                try await multicast.leaveGroup(groupAddress, device: device).get()
            }
        } catch {
            throw DatagramError.from(error, operation: "\(verb) group", subject: "\(group.host) on \(interface.name)")
        }
    }

    /// Inbound datagrams of a socket. One iterator reads them; a second one made while the first
    /// exists throws ``DatagramError/Code/other`` on its first `next()` instead of stealing datagrams.
    public struct Inbound: AsyncSequence, Sendable {
        public typealias Element = Datagram
        let base: NIOAsyncChannelInboundStream<AddressedEnvelope<ByteBuffer>>
        let taken = NIOLockedValueBox(false)

        public struct AsyncIterator: AsyncIteratorProtocol {
            var base: NIOAsyncChannelInboundStream<AddressedEnvelope<ByteBuffer>>.AsyncIterator?

            public mutating func next() async throws -> Datagram? {
                guard self.base != nil else {
                    throw DatagramError(.other, "the socket's inbound datagrams are already being read by another iterator")
                }
                while let envelope = try await self.base?.next() {
                    guard let source = try? DatagramAddress(envelope.remoteAddress) else { continue }
                    let info = envelope.metadata?.packetInfo
                    return Datagram(
                        bytes: Array(envelope.data.readableBytesView),
                        source: source,
                        destination: info.flatMap { try? DatagramAddress($0.destinationAddress) },
                        interfaceIndex: info.map { UInt32(truncatingIfNeeded: $0.interfaceIndex) }
                    )
                }
                return nil
            }
        }

        public func makeAsyncIterator() -> AsyncIterator {
            let first = self.taken.withLockedValue { taken in
                defer { taken = true }
                return !taken
            }
            return AsyncIterator(base: first ? self.base.makeAsyncIterator() : nil)
        }
    }
}

extension MulticastChannel {
    fileprivate func joinGroup(_ group: SocketAddress, device: NIONetworkDevice) -> EventLoopFuture<Void> {
        let promise = self.eventLoop.makePromise(of: Void.self)
        self.joinGroup(group, device: device, promise: promise)
        return promise.futureResult
    }

    fileprivate func leaveGroup(_ group: SocketAddress, device: NIONetworkDevice) -> EventLoopFuture<Void> {
        let promise = self.eventLoop.makePromise(of: Void.self)
        self.leaveGroup(group, device: device, promise: promise)
        return promise.futureResult
    }
}
