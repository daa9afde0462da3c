import Logging
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
    private let connectionsPerUser = NIOLockedValueBox([String: Int]())
    private let acceptingConnections = NIOLockedValueBox(true)

    init(configuration: CircleServerConfiguration, store: any CircleStore, authority: TokenAuthority, logger: Logger) {
        self.configuration = configuration
        self.store = store
        self.hub = Hub()
        self.metrics = ServerMetrics()
        self.authority = authority
        self.logger = logger
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

    var isAccepting: Bool { self.acceptingConnections.withLockedValue { $0 } }

    func stopAccepting() {
        self.acceptingConnections.withLockedValue { $0 = false }
    }
}
