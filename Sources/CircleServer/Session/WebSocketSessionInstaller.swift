import CircleSocket
import NIOCore
import NIOHTTP1

/// The one place where an upgraded WebSocket channel gets its session: the HTTP layer calls this
/// after the `101`, with the handshake's head and the user its token named (nil for `/v1/echo`).
enum WebSocketSessionInstaller {
    /// What a successful upgrade leads to.
    enum Endpoint: Sendable {
        /// `/v1/ws` for an authenticated user.
        case chat(AuthenticatedUser)
        /// `/v1/echo` (only with `--echo`): every message sent back.
        case echo
    }

    /// Adds the session's handlers to an upgraded channel's pipeline.
    static func install(
        on sync: ChannelPipeline.SynchronousOperations,
        endpoint: Endpoint,
        extensionOffers: [String],
        services: ServerServices
    ) throws {
        let parameters = PerMessageDeflateNegotiation.respond(toOffers: extensionOffers)
        switch endpoint {
        case .echo:
            let deflate = try parameters.map {
                try PerMessageDeflate(parameters: $0, isClient: false, compressionLevel: 6, minimumCompressedSize: services.configuration.compressionMinimumBytes)
            }
            try sync.addHandler(EchoHandler(maxMessageSize: WebSocketConfiguration.defaultMaxMessageSize, deflate: deflate))
        case .chat(let user):
            do {
                let deflate = try services.configuration.compression
                    ? parameters.map {
                        try PerMessageDeflate(parameters: $0, isClient: false, compressionLevel: 6, minimumCompressedSize: services.configuration.compressionMinimumBytes)
                    }
                    : nil
                try sync.addHandler(SessionHandler(services: services, user: user, deflate: deflate, logger: services.logger))
            } catch {
                // The session never started, so it will not release the slot reserved for it.
                services.releaseConnection(for: user.name)
                throw error
            }
        }
    }
}
