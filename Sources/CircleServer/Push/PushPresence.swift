import Foundation
import Logging
import NIOConcurrencyHelpers

/// What the store knows of one user's connections on one node (table `user_connections`):
/// how many were open when the node last wrote, and when that was.
public struct ConnectionMark: Sendable, Hashable {
    /// The node that wrote the mark.
    public var node: String
    /// The user's open connections there (0: the last one closed at `seenAt`).
    public var connections: Int
    /// When the node last wrote the mark: at a connection's open or close, and every
    /// ``PushSettings/presenceInterval`` while the user has one open there.
    public var seenAt: Int64

    public init(node: String, connections: Int, seenAt: Int64) {
        self.node = node
        self.connections = connections
        self.seenAt = seenAt
    }
}

/// The away rule (docs/API.md, "Push notifications"), decided when a push is claimed, not
/// when its entry is committed (someone may leave in between): a push goes only to a person
/// who has had no open connection, on any node, for longer than `awayAfter`. Pure, tested
/// without I/O.
///
/// A node refreshes the marks of its connected users every `interval`; a mark that says
/// "connected" but was not refreshed for `3 × interval` is from a node that died: its user is
/// taken as last connected at the mark's time.
struct PushPresence: Sendable, Hashable {
    /// ``PushSettings/awayAfter``, in milliseconds.
    var awayAfter: Int64
    /// ``PushSettings/presenceInterval``, in milliseconds.
    var interval: Int64

    init(awayAfter: Int64, interval: Int64) {
        self.awayAfter = max(0, awayAfter)
        self.interval = max(1, interval)
    }

    init(_ settings: PushSettings) {
        self.init(awayAfter: WebhookRetryPolicy.milliseconds(settings.awayAfter), interval: WebhookRetryPolicy.milliseconds(settings.presenceInterval))
    }

    /// A mark with connections older than this is a dead node's.
    var staleAfter: Int64 { 3 * self.interval }

    /// When the user last had a connection open according to `mark` (`now` while they do).
    func lastConnected(_ mark: ConnectionMark, now: Int64) -> Int64 {
        if mark.connections > 0 && now - mark.seenAt <= self.staleAfter { return now }
        return mark.seenAt
    }

    /// Whether a push may go to the user whose marks (every node's) these are: no marks at all
    /// (never connected, or long ago) is away.
    func isAway(_ marks: [ConnectionMark], now: Int64) -> Bool {
        marks.allSatisfy { now - self.lastConnected($0, now: now) > self.awayAfter }
    }

    /// Claimed pushes split by their recipients' marks: those not to send (`present`) and those to send (`away`), in order.
    func partition(_ pushes: [PendingPush], marks: [String: [ConnectionMark]], now: Int64) -> (present: [PendingPush], away: [PendingPush]) {
        var present: [PendingPush] = []
        var away: [PendingPush] = []
        for push in pushes {
            if self.isAway(marks[push.subscription.user] ?? [], now: now) { away.append(push) } else { present.append(push) }
        }
        return (present, away)
    }

    /// Marks older than this say nothing any more (every user they name is away by either
    /// rule) and may go.
    func forgetBefore(now: Int64) -> Int64 {
        now - max(self.awayAfter, self.staleAfter) - self.interval
    }
}

/// Keeps this node's marks in the store (``PushStore/markConnections(node:counts:now:)``): the
/// sessions report each user's count of open connections when it changes
/// (``ServerServices/reserveConnection(for:)``, ``ServerServices/releaseConnection(for:)``),
/// which `run()` writes at once, coalesced; every ``PushSettings/presenceInterval`` it
/// refreshes the marks of the users still connected and forgets old marks. Never on a
/// connection's path: a store that is slow delays only the marks.
final class PresenceRecorder: Sendable {
    private let store: any CircleStore
    private let node: String
    private let presence: PushPresence
    private let logger: Logger
    private let metrics: ServerMetrics
    private let enabled: Bool
    /// Counts changed since the last write, by user.
    private let pending = NIOLockedValueBox([String: Int]())
    private let bell = Doorbell()

    init(store: any CircleStore, settings: PushSettings, node: String, metrics: ServerMetrics, logger: Logger) {
        self.store = store
        self.metrics = metrics
        self.node = node
        self.presence = PushPresence(settings)
        self.logger = logger
        self.enabled = settings.enabled
    }

    /// `user` has `connections` open on this node now.
    func changed(_ user: String, connections: Int) {
        guard self.enabled else { return }
        self.pending.withLockedValue { $0[user] = connections }
        self.bell.ring()
    }

    /// Until cancelled (with push off it only waits: no one reads the marks).
    func run() async {
        guard self.enabled else {
            while !Task.isCancelled { try? await Task.sleep(for: .seconds(3600)) }
            return
        }
        let clock = ContinuousClock()
        var nextRefresh = clock.now
        while !Task.isCancelled {
            let counts = self.pending.withLockedValue { pending in
                defer { pending = [:] }
                return pending
            }
            if !counts.isEmpty {
                do {
                    try await self.store.markConnections(node: self.node, counts: counts, now: Identity.now)
                    self.metrics.connectionMarks.increment(by: Int64(counts.count))
                } catch {
                    if Task.isCancelled { break }
                    self.logger.warning("could not record connections for push", metadata: ["error": "\(error)"])
                    // Written with the next change or refresh.
                    self.pending.withLockedValue { pending in pending.merge(counts) { newer, _ in newer } }
                }
            }
            if clock.now >= nextRefresh {
                let now = Identity.now
                do {
                    try await self.store.refreshConnections(node: self.node, now: now, forgetBefore: self.presence.forgetBefore(now: now))
                } catch {
                    if Task.isCancelled { break }
                    self.logger.warning("could not refresh connections for push", metadata: ["error": "\(error)"])
                }
                nextRefresh = clock.now.advanced(by: .milliseconds(self.presence.interval))
            }
            await self.bell.wait(upTo: max(.milliseconds(1), clock.now.duration(to: nextRefresh)))
        }
    }
}
