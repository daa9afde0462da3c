import CircleDiscovery
import Logging

extension CircleClientConfiguration {
    /// A configuration for a server found by discovery: one server URL per address of the server
    /// (IPv4 first, link-local IPv6 with its interface), tried in turn, with `ws://` or `wss://` and
    /// the WebSocket path from the server's TXT record.
    ///
    /// ```swift
    /// let found = try await ServiceBrowser.discover(type: CircleService.type, timeout: .seconds(3), firstOnly: true)
    /// if let server = found.first {
    ///     let client = try await CircleClient(configuration: .init(discovered: server, tokenProvider: { token }))
    /// }
    /// ```
    /// - Parameters:
    ///   - service: a server from ``ServiceBrowser``.
    ///   - tokenProvider: as in ``init(servers:tokenProvider:reconnect:heartbeat:requestTimeout:postTimeout:failFast:stateFile:socket:transfers:logger:)``.
    /// - Throws: ``DatagramError`` with `addressNotAvailable` when the service has no address.
    public init(
        discovered service: DiscoveredService,
        tokenProvider: @escaping @Sendable () async throws -> String,
        logger: Logger = Logger(label: "circle.client")
    ) throws {
        let urls = service.webSocketURLs
        guard !urls.isEmpty else {
            throw DatagramError(.addressNotAvailable, "\"\(service.name)\" was found without any address")
        }
        self.init(servers: urls, tokenProvider: tokenProvider, logger: logger)
    }
}
