import Logging
import NIOCore
import NIOConcurrencyHelpers

/// What every connection of one server shares.
final class ServerServices: Sendable {
    let configuration: CircleServerConfiguration
    let store: any CircleStore
    let hub: Hub
    let committer: PostCommitter
    let metrics: ServerMetrics
    let authority: TokenAuthority
    let logger: Logger
    let admission: ConnectionAdmission
    private let connectionsPerUser = NIOLockedValueBox([String: Int]())
    private let acceptingConnections = NIOLockedValueBox(true)
    private let openChannels = NIOLockedValueBox([ObjectIdentifier: any Channel]())

    init(configuration: CircleServerConfiguration, store: any CircleStore, authority: TokenAuthority, logger: Logger) {
        self.configuration = configuration
        self.store = store
        self.hub = Hub()
        self.metrics = ServerMetrics()
        self.authority = authority
        self.logger = logger
        self.admission = ConnectionAdmission(
            maxTotal: configuration.limits.effectiveMaxPendingConnections,
            maxPerAddress: configuration.limits.maxPendingConnectionsPerAddress
        )
        self.committer = PostCommitter(store: store, hub: self.hub, metrics: self.metrics, logger: logger)
    }

    /// Reserves a connection slot for `user`; `false` when the user has the maximum open.
    func reserveConnection(for user: String) -> Bool {
        let limit = self.configuration.limits.maxConnectionsPerUser
        return self.connectionsPerUser.withLockedValue { counts in
            guard counts[user, default: 0] < limit else { return false }
            counts[user, default: 0] += 1
            return true
        }
    }

    func releaseConnection(for user: String) {
        self.connectionsPerUser.withLockedValue { counts in
            counts[user, default: 1] -= 1
            if counts[user] == 0 { counts[user] = nil }
        }
    }

    /// Tracks every accepted connection (HTTP keep-alive ones too) so shutdown can close them.
    func track(_ channel: any Channel) {
        let id = ObjectIdentifier(channel)
        self.openChannels.withLockedValue { $0[id] = channel }
        channel.closeFuture.whenComplete { _ in
            self.openChannels.withLockedValue { _ = $0.removeValue(forKey: id) }
        }
    }

    /// Closes whatever is still open (idle HTTP keep-alive connections, WebSockets that did not
    /// finish their close handshake in time).
    func closeAllChannels() {
        for channel in self.openChannels.withLockedValue({ Array($0.values) }) {
            channel.close(promise: nil)
        }
    }

    var openChannelCount: Int { self.openChannels.withLockedValue { $0.count } }

    var isAccepting: Bool { self.acceptingConnections.withLockedValue { $0 } }

    func stopAccepting() {
        self.acceptingConnections.withLockedValue { $0 = false }
    }
}
