import NIOConcurrencyHelpers
import NIOCore
import NIOPosix

/// A TCP proxy on loopback that can go silent: after `stall()`, the connections open at that
/// moment stop forwarding in both directions without FIN or RST — what a phone in a tunnel or a
/// dead NAT mapping looks like to the endpoints. New connections forward normally.
public final class StallingProxy: Sendable {
    private let channel: any Channel
    private let stalled = NIOLockedValueBox<Set<ObjectIdentifier>>([])
    private let live = NIOLockedValueBox<[ObjectIdentifier: any Channel]>([:])
    public let port: Int

    public init(targetPort: Int) async throws {
        let stalled = self.stalled
        let live = self.live
        self.channel = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelOption(.autoRead, value: false)
            .childChannelInitializer { inbound in
                let id = ObjectIdentifier(inbound)
                live.withLockedValue { $0[id] = inbound }
                inbound.closeFuture.whenComplete { _ in live.withLockedValue { _ = $0.removeValue(forKey: id) } }
                return ClientBootstrap(group: inbound.eventLoop)
                    .connect(host: "127.0.0.1", port: targetPort)
                    .flatMap { outbound in
                        let toTarget = Forwarder(peer: outbound, id: id, stalled: stalled)
                        let toClient = Forwarder(peer: inbound, id: id, stalled: stalled)
                        return inbound.pipeline.addHandler(toTarget).flatMap {
                            outbound.pipeline.addHandler(toClient)
                        }.map {
                            inbound.read()
                        }
                    }
            }
            .bind(host: "127.0.0.1", port: 0)
            .get()
        self.port = self.channel.localAddress?.port ?? 0
    }

    /// Silences every connection open now.
    public func stall() {
        let ids = self.live.withLockedValue { Set($0.keys) }
        self.stalled.withLockedValue { $0.formUnion(ids) }
    }

    public func shutdown() async {
        try? await self.channel.close()
        for channel in self.live.withLockedValue({ Array($0.values) }) { try? await channel.close() }
    }
}

private final class Forwarder: ChannelInboundHandler, Sendable {
    typealias InboundIn = ByteBuffer
    let peer: any Channel
    let id: ObjectIdentifier
    let stalled: NIOLockedValueBox<Set<ObjectIdentifier>>

    init(peer: any Channel, id: ObjectIdentifier, stalled: NIOLockedValueBox<Set<ObjectIdentifier>>) {
        self.peer = peer
        self.id = id
        self.stalled = stalled
    }

    func channelActive(context: ChannelHandlerContext) {
        context.read()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard !self.stalled.withLockedValue({ $0.contains(self.id) }) else { return }
        self.peer.writeAndFlush(self.unwrapInboundIn(data), promise: nil)
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        context.read()
    }

    func channelInactive(context: ChannelHandlerContext) {
        // A stalled connection stays silent even when one side gives up.
        if !self.stalled.withLockedValue({ $0.contains(self.id) }) { self.peer.close(promise: nil) }
    }
}
