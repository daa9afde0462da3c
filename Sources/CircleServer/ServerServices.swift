import CircleWire
import Logging
import NIOConcurrencyHelpers
import NIOCore

/// What every connection of one server shares.
final class ServerServices: Sendable {
    /// The configuration as it is now: what is read at use time (through this property) follows a
    /// ``reload(_:)``; what the services below copied when they were made does not.
    var configuration: CircleServerConfiguration { self.live.current }
    let live: LiveConfiguration
    let store: any CircleStore
    let hub: Hub
    let committer: PostCommitter
    let metrics: ServerMetrics
    let verifier: TokenVerifier
    var authority: TokenAuthority { self.verifier.authority }
    let identity: Identity
    let webhooks: WebhookDispatcher
    /// Sends the push outbox (``PushDispatcher``).
    let push: PushDispatcher
    /// Tells the store who is connected to this node, for the push's away rule (``PresenceRecorder``).
    let presence: PresenceRecorder
    /// Circles' publish hooks, asked before their posts are committed.
    let publishHooks: PublishHookGate
    let logger: Logger
    let admission: ConnectionAdmission
    /// Entries written over HTTP, per author (``MessageRoutes``).
    let httpWrites: AuthorRateLimiter
    private let connectionsPerUser = NIOLockedValueBox([String: Int]())
    private let acceptingConnections = NIOLockedValueBox(true)
    private let channels: ChannelRegistry

    init(configuration: CircleServerConfiguration, store: any CircleStore, authority: TokenAuthority, logger: Logger) {
        let live = LiveConfiguration(configuration)
        self.live = live
        self.store = store
        self.hub = Hub()
        let metrics = ServerMetrics()
        self.metrics = metrics
        let verifier = TokenVerifier(
            authority: authority,
            issuers: configuration.tokenIssuers,
            settings: configuration.jwks,
            allowPrivateOutbound: configuration.allowPrivateOutbound,
            logger: logger
        )
        self.verifier = verifier
        self.identity = Identity(
            store: store,
            configuration: configuration.identity,
            verifier: verifier,
            servesTLS: configuration.tls != nil,
            logger: logger
        )
        self.logger = logger
        self.admission = ConnectionAdmission(
            maxTotal: configuration.limits.effectiveMaxPendingConnections,
            maxPerAddress: configuration.limits.maxPendingConnectionsPerAddress
        )
        self.httpWrites = AuthorRateLimiter(configuration: live)
        let committerBox = NIOLockedValueBox<PostCommitter?>(nil)
        let webhooks = WebhookDispatcher(
            store: store,
            configuration: live,
            node: self.hub.link.node,
            logger: logger
        ) { post in
            guard let committer = committerBox.withLockedValue({ $0 }) else { return .failure(StoreError(.unavailable, "the server is starting")) }
            return await withCheckedContinuation { continuation in
                committer.submit(post) { continuation.resume(returning: $0) }
            }
        }
        self.webhooks = webhooks
        let hooks = PublishHookGate(
            store: store,
            metrics: metrics,
            logger: logger,
            allowPrivateOutbound: configuration.allowPrivateOutbound || configuration.webhooks.allowPrivateAddresses,
            configuration: live,
            refreshInterval: configuration.webhooks.pollInterval
        )
        self.publishHooks = hooks
        let push = PushDispatcher(
            store: store,
            settings: configuration.push,
            allowPrivateOutbound: configuration.allowPrivateOutbound,
            node: self.hub.link.node,
            metrics: metrics,
            logger: logger
        )
        self.presence = PresenceRecorder(store: store, settings: configuration.push, node: self.hub.link.node, metrics: metrics, logger: logger)
        self.push = push
        let committer = PostCommitter(
            store: store, hub: self.hub, metrics: metrics, logger: logger, hooks: hooks, tracer: configuration.tracer,
            committed: { stored in
                webhooks.wake(circles: stored.map(\.circle))
                push.wake()
            }
        )
        self.committer = committer
        committerBox.withLockedValue { $0 = committer }
        // Another node ended all of a user's connections: the account may be disabled now.
        self.hub.observeAccounts { [identity, store] user in
            Task {
                if let account = try? await store.account(named: user) { identity.accountChanged(account) }
            }
        }
        self.channels = ChannelRegistry(admission: self.admission)
    }

    /// The one credential check, for the HTTP routes (``TokenAuthMiddleware``) and the WebSocket
    /// upgrade alike (``Identity/authenticate(_:)``): a missing, malformed, forged or expired
    /// credential is a 401 with its code; a disabled account a 403.
    func authenticate(_ input: CredentialsInput) async throws(APIError) -> AuthenticatedUser {
        do throws(APIError) {
            return try await self.identity.authenticate(input)
        } catch {
            self.metrics.error(error.code.rawValue)
            self.logger.info(
                "refused a token",
                metadata: ["circle.code": "\(error.code.rawValue)", "circle.reason": "\(error.message)", "circle.address": "\(input.address ?? "-")"]
            )
            throw error
        }
    }

    /// Replaces the configuration read at use time, after checking it (``CircleServer/reload(_:)``).
    func reload(_ change: (inout CircleServerConfiguration) -> Void) throws {
        try self.live.reload(change)
    }

    /// Reserves a connection slot for `user`; `false` when the user has the maximum open.
    func reserveConnection(for user: String) -> Bool {
        let limit = self.configuration.limits.maxConnectionsPerUser
        // The recorder hears each count under this lock, so a later count never overtakes an earlier.
        return self.connectionsPerUser.withLockedValue { counts in
            guard counts[user, default: 0] < limit else { return false }
            counts[user, default: 0] += 1
            self.presence.changed(user, connections: counts[user, default: 0])
            return true
        }
    }

    func releaseConnection(for user: String) {
        self.connectionsPerUser.withLockedValue { counts in
            counts[user, default: 1] -= 1
            self.presence.changed(user, connections: counts[user, default: 0])
            if counts[user] == 0 { counts[user] = nil }
        }
    }

    /// Tracks every accepted connection (HTTP keep-alive ones too) so shutdown can close them;
    /// holds its admission ticket until it closes or becomes a WebSocket.
    func track(_ channel: any Channel, admitted ticket: ConnectionAdmission.Ticket) {
        self.channels.add(channel, ticket: ticket)
    }

    /// Closes whatever is still open (idle HTTP keep-alive connections, WebSockets that did not
    /// finish their close handshake in time).
    func closeAllChannels() {
        for channel in self.channels.all() {
            channel.close(promise: nil)
        }
    }

    /// Marks an upgraded connection, which graceful shutdown lets finish its close handshake,
    /// and releases its admission ticket (a WebSocket is bounded per user from here on).
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

    /// One open connection. Its admission ticket lives here rather than in a holder object
    /// with a close callback of its own: an idle connection costs a few allocations less
    /// (benchmarks/idle.py).
    private struct Entry {
        var channel: any Channel
        var ticket: ConnectionAdmission.Ticket?
        var isWebSocket = false
    }

    private struct State {
        var channels: [ObjectIdentifier: Entry] = [:]
        var webSocketCount = 0
        var waiters: [Int: Waiter] = [:]
        /// Waits whose deadline came before they were registered.
        var expired: Set<Int> = []
        var nextWaiter = 0

        func holds(_ condition: Condition) -> Bool {
            switch condition {
            case .noWebSockets: return self.webSocketCount == 0
            case .noChannels: return self.channels.isEmpty
            }
        }
    }

    private let state = NIOLockedValueBox(State())
    private let admission: ConnectionAdmission

    init(admission: ConnectionAdmission) {
        self.admission = admission
    }

    func add(_ channel: any Channel, ticket: ConnectionAdmission.Ticket) {
        let id = ObjectIdentifier(channel)
        self.state.withLockedValue { $0.channels[id] = Entry(channel: channel, ticket: ticket) }
        channel.closeFuture.whenComplete { _ in
            let (ticket, ready) = self.state.withLockedValue { state -> (ConnectionAdmission.Ticket?, [CheckedContinuation<Void, Never>]) in
                let entry = state.channels.removeValue(forKey: id)
                if entry?.isWebSocket == true { state.webSocketCount -= 1 }
                let done = state.waiters.filter { state.holds($0.value.condition) }
                for key in done.keys { state.waiters.removeValue(forKey: key) }
                return (entry?.ticket, done.values.map(\.continuation))
            }
            if let ticket { self.admission.release(ticket) }
            for waiter in ready { waiter.resume() }
        }
    }

    /// The channel is a WebSocket now: it ends with a close handshake of its own, and its
    /// admission ticket is released.
    func markWebSocket(_ channel: any Channel) {
        let id = ObjectIdentifier(channel)
        let ticket = self.state.withLockedValue { state -> ConnectionAdmission.Ticket? in
            guard var entry = state.channels[id] else { return nil }
            let ticket = entry.ticket
            entry.ticket = nil
            if !entry.isWebSocket {
                entry.isWebSocket = true
                state.webSocketCount += 1
            }
            state.channels[id] = entry
            return ticket
        }
        if let ticket { self.admission.release(ticket) }
    }

    func all() -> [any Channel] { self.state.withLockedValue { $0.channels.values.map(\.channel) } }

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
