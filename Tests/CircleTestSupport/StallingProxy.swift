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
    /// A byte budget for the next connection's server-to-client direction (see `stallNextConnection`).
    private let nextBudget = NIOLockedValueBox<Int?>(nil)
    public let port: Int

    public init(targetPort: Int) async throws {
        let stalled = self.stalled
        let live = self.live
        let nextBudget = self.nextBudget
        self.channel = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelOption(.autoRead, value: false)
            .childChannelInitializer { inbound in
                let id = ObjectIdentifier(inbound)
                let budget = nextBudget.withLockedValue { value in
                    defer { value = nil }
                    return value
                }
                live.withLockedValue { $0[id] = inbound }
                inbound.closeFuture.whenComplete { _ in live.withLockedValue { _ = $0.removeValue(forKey: id) } }
                return ClientBootstrap(group: inbound.eventLoop)
                    .connect(host: "127.0.0.1", port: targetPort)
                    .flatMap { outbound in
                        let toTarget = Forwarder(peer: outbound, id: id, stalled: stalled)
                        let toClient = Forwarder(peer: inbound, id: id, stalled: stalled, budget: budget)
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

    /// The next connection forwards `bytes` from the server to the client, then goes silent
    /// in both directions: a download cut off at a known point.
    public func stallNextConnection(afterBytes bytes: Int) {
        self.nextBudget.withLockedValue { $0 = bytes }
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
    /// Bytes still to forward before stalling; nil forwards without limit.
    let budget: NIOLockedValueBox<Int?>

    init(peer: any Channel, id: ObjectIdentifier, stalled: NIOLockedValueBox<Set<ObjectIdentifier>>, budget: Int? = nil) {
        self.peer = peer
        self.id = id
        self.stalled = stalled
        self.budget = NIOLockedValueBox(budget)
    }

    func channelActive(context: ChannelHandlerContext) {
        context.read()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard !self.stalled.withLockedValue({ $0.contains(self.id) }) else { return }
        var buffer = self.unwrapInboundIn(data)
        let allowed = self.budget.withLockedValue { budget -> Int? in
            guard let left = budget else { return nil }
            let taken = min(left, buffer.readableBytes)
            budget = left - taken
            return taken
        }
        if let allowed, allowed < buffer.readableBytes {
            if allowed > 0, let prefix = buffer.readSlice(length: allowed) { self.peer.writeAndFlush(prefix, promise: nil) }
            self.stalled.withLockedValue { _ = $0.insert(self.id) }
            return
        }
        self.peer.writeAndFlush(buffer, promise: nil)
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        context.read()
    }

    func channelInactive(context: ChannelHandlerContext) {
        // A stalled connection stays silent even when one side gives up.
        if !self.stalled.withLockedValue({ $0.contains(self.id) }) { self.peer.close(promise: nil) }
    }
}
