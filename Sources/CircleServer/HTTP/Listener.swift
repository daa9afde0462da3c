import HummingbirdCore
import Logging
import NIOCore
import NIOPosix

/// The standalone server's listening socket: a NIO server channel Circle binds itself, so that
/// it can carry ``AcceptPauseHandler`` (Hummingbird's `Server` offers no hook on its server
/// channel), whose accepted connections go to a Hummingbird child channel's `setup` and
/// `handle`, as Hummingbird's own `Server` does.
struct Listener<ChildChannel: ServerChildChannel>: Sendable {
    let serverChannel: NIOAsyncChannel<ChildChannel.Value, Never>
    let childChannel: ChildChannel
    let logger: Logger

    var port: Int { self.serverChannel.channel.localAddress?.port ?? 0 }

    static func bind(
        host: String,
        port: Int,
        childChannel: ChildChannel,
        eventLoopGroup: any EventLoopGroup,
        onAcceptPause: @escaping @Sendable () -> Void,
        logger: Logger
    ) async throws -> Listener {
        let serverChannel = try await ServerBootstrap(group: eventLoopGroup)
            // Out of file descriptors (EMFILE), accept() fails at once and would be retried at
            // once, spinning a core; this pauses accepting for a moment instead.
            .serverChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(AcceptPauseHandler(pause: .milliseconds(250), onPause: onAcceptPause))
                }
            }
            .serverChannelOption(.backlog, value: 4096)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .bind(host: host, port: port) { channel in
                childChannel.setup(channel: channel, logger: logger)
            }
        return Listener(serverChannel: serverChannel, childChannel: childChannel, logger: logger)
    }

    /// Accepts until the server channel is closed; each connection runs in a child task of a
    /// discarding task group, and its errors stay its own. Returns when the last one has ended.
    func run() async {
        let childChannel = self.childChannel
        let logger = self.logger
        await withDiscardingTaskGroup { group in
            do {
                try await self.serverChannel.executeThenClose { inbound in
                    for try await connection in inbound {
                        group.addTask { await childChannel.handle(value: connection, logger: logger) }
                    }
                }
            } catch {
                logger.error("accepting connections failed", metadata: ["error": "\(error)"])
            }
        }
    }

    /// Stops accepting: the server channel closes and ``run()``'s loop ends.
    func close() async {
        try? await self.serverChannel.channel.close()
    }
}
