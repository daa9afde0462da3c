import CircleWire
import Logging
import NIOConcurrencyHelpers
import NIOCore

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
    private let channels = ChannelRegistry()

    init(configuration: CircleServerConfiguration, store: any CircleStore, authority: TokenAuthority, logger: Logger) {
        self.configuration = configuration
        self.store = store
        self.hub = Hub()
        let metrics = ServerMetrics()
        self.metrics = metrics
        self.authority = authority
        self.logger = logger
        self.admission = ConnectionAdmission(
            maxTotal: configuration.limits.effectiveMaxPendingConnections,
            maxPerAddress: configuration.limits.maxPendingConnectionsPerAddress
        )
        self.committer = PostCommitter(store: store, hub: self.hub, metrics: metrics, logger: logger)
    }

    /// The one token check, for the HTTP routes (``TokenAuthMiddleware``) and the WebSocket
    /// upgrade alike: a missing, malformed, forged or expired token is a 401 with its code.
    func authenticate(token: String?, address: String? = nil) async throws(APIError) -> AuthenticatedUser {
        guard let token else {
            self.metrics.error(CircleErrorCode.unauthorized.rawValue)
            throw APIError.missingToken
        }
        do throws(TokenError) {
            return try await self.authority.verify(token)
        } catch {
            self.metrics.error(error.code.rawValue)
            self.logger.info(
                "refused a token",
                metadata: ["circle.code": "\(error.code.rawValue)", "circle.reason": "\(error.message)", "circle.address": "\(address ?? "-")"]
            )
            throw APIError(.unauthorized, error.code, error.message)
        }
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
        self.channels.add(channel)
    }

    /// Closes whatever is still open (idle HTTP keep-alive connections, WebSockets that did not
    /// finish their close handshake in time).
    func closeAllChannels() {
        for channel in self.channels.all() {
            channel.close(promise: nil)
        }
    }

    /// Marks an upgraded connection, which graceful shutdown lets finish its close handshake.
    func markWebSocket(_ channel: any Channel) {
        self.channels.markWebSocket(channel)
    }

    /// Returns once `condition` holds, or at `deadline`.
    func wait(until condition: ChannelRegistry.Condition, deadline: ContinuousClock.Instant) async {
        await self.channels.wait(until: condition, deadline: deadline)
    }

    var isAccepting: Bool { self.acceptingConnections.withLockedValue { $0 } }

    func stopAccepting() {
        self.acceptingConnections.withLockedValue { $0 = false }
    }
}

/// The open connections, with waiters for "no WebSocket left" and "none left" (graceful
/// shutdown waits on these events).
final class ChannelRegistry: Sendable {
    enum Condition: Sendable {
        case noWebSockets
        case noChannels
    }

    private struct Waiter {
        var condition: Condition
        var continuation: CheckedContinuation<Void, Never>
    }

    private struct State {
        var channels: [ObjectIdentifier: any Channel] = [:]
        var webSockets: Set<ObjectIdentifier> = []
        var waiters: [Int: Waiter] = [:]
        /// Waits whose deadline came before they were registered.
        var expired: Set<Int> = []
        var nextWaiter = 0

        func holds(_ condition: Condition) -> Bool {
            switch condition {
            case .noWebSockets: return self.webSockets.isEmpty
            case .noChannels: return self.channels.isEmpty
            }
        }
    }

    private let state = NIOLockedValueBox(State())

    func add(_ channel: any Channel) {
        let id = ObjectIdentifier(channel)
        self.state.withLockedValue { $0.channels[id] = channel }
        channel.closeFuture.whenComplete { _ in
            let ready = self.state.withLockedValue { state -> [CheckedContinuation<Void, Never>] in
                state.channels.removeValue(forKey: id)
                state.webSockets.remove(id)
                let done = state.waiters.filter { state.holds($0.value.condition) }
                for key in done.keys { state.waiters.removeValue(forKey: key) }
                return done.values.map(\.continuation)
            }
            for waiter in ready { waiter.resume() }
        }
    }

    /// The channel is a WebSocket now (it ends with a close handshake of its own).
    func markWebSocket(_ channel: any Channel) {
        let id = ObjectIdentifier(channel)
        self.state.withLockedValue { state in
            if state.channels[id] != nil { state.webSockets.insert(id) }
        }
    }

    func all() -> [any Channel] { self.state.withLockedValue { Array($0.channels.values) } }

    /// Returns once `condition` holds, or at `deadline`.
    func wait(until condition: Condition, deadline: ContinuousClock.Instant) async {
        let id = self.state.withLockedValue { state -> Int in
            state.nextWaiter += 1
            return state.nextWaiter
        }
        await withTaskGroup(of: Void.self) { group in
            group.addTask {
                await withCheckedContinuation { continuation in
                    let done = self.state.withLockedValue { state -> Bool in
                        if state.holds(condition) || state.expired.remove(id) != nil { return true }
                        state.waiters[id] = Waiter(condition: condition, continuation: continuation)
                        return false
                    }
                    if done { continuation.resume() }
                }
            }
            group.addTask {
                try? await Task.sleep(until: deadline, clock: .continuous)
                let waiter = self.state.withLockedValue { state -> Waiter? in
                    if let waiter = state.waiters.removeValue(forKey: id) { return waiter }
                    state.expired.insert(id)
                    return nil
                }
                waiter?.continuation.resume()
            }
            await group.next()
            group.cancelAll()
        }
        self.state.withLockedValue { _ = $0.expired.remove(id) }
    }
}
