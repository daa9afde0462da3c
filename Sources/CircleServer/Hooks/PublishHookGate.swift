import CircleHTTPClient
import CircleWire
import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOHTTP1

/// Where posts and edits of circles with a publish hook wait for the hook's verdict before they
/// join the group commit (docs/API.md, "Publish hooks"), and where entries of read-only circles
/// are checked against their author (docs/API.md, "Moderation").
///
/// The check on the post path is one lookup under a lock (``needsCheck(_:)``): entries of
/// circles without a hook (and not read-only) go straight to the commit, never behind a hook. An entry that needs its hook
/// waits in a task of its own, outside the event loops and outside the commit batch; the
/// verdicts of one circle are released in the order the entries arrived, so a hook that answers
/// out of order does not reorder a circle's posts. A retried entry that is already stored is
/// answered from the store without calling the hook again.
///
/// The hooks and read-only circles are read from the store at start, at once after a change on this node, and every
/// `refreshInterval` (a change made on another node is seen within it).
final class PublishHookGate: Sendable {
    /// What becomes of an entry.
    enum Verdict: Sendable {
        /// Commit this entry (as sent, or with the hook's text).
        case commit(NewPost)
        /// Answer the sender with this, storing nothing.
        case answer(Result<PostOutcome, any Error>)
    }

    private struct Ticket {
        var id: UInt64
        var release: (@Sendable () -> Void)?
    }

    private struct State {
        var hooks: [String: PublishHook] = [:]
        var readOnly: Set<String> = []
        var loaded = false
        var waiting = 0
        var next: UInt64 = 0
        /// Per circle, the entries waiting, in arrival order.
        var queues: [String: [Ticket]] = [:]
    }

    private let store: any CircleStore
    private let metrics: ServerMetrics
    private let logger: Logger
    private let policy: OutboundAddressPolicy
    private let pool = HTTPConnectionPool(maxIdlePerTarget: 8)
    /// The post size limit, read for each answer (a reload applies at once).
    private let configuration: LiveConfiguration
    private let maxWaiting: Int
    private let refreshInterval: Duration
    private let state = NIOLockedValueBox(State())

    /// - Parameters:
    ///   - maxWaiting: Entries that may wait for hooks on this node at once; beyond it, an entry
    ///     is answered `unavailable` at once.
    init(
        store: any CircleStore,
        metrics: ServerMetrics,
        logger: Logger,
        allowPrivateOutbound: Bool,
        configuration: LiveConfiguration,
        maxWaiting: Int = 1024,
        refreshInterval: Duration = .seconds(1)
    ) {
        self.store = store
        self.metrics = metrics
        self.logger = logger
        self.policy = OutboundAddressPolicy(allowsPrivate: allowPrivateOutbound)
        self.configuration = configuration
        self.maxWaiting = maxWaiting
        self.refreshInterval = refreshInterval
    }

    /// Whether `post` must wait here: a post or an edit of a circle with a hook, an entry other
    /// than a delete in a read-only circle (or any of those, before the circles were first read).
    func needsCheck(_ post: NewPost) -> Bool {
        // A membership change is the server's own entry: no hook, and read-only does not stop it.
        guard post.event == nil else { return false }
        let hookable = post.change == nil || post.change == .edit
        let restricted = post.change != .delete && !post.byAPIKey
        guard hookable || restricted else { return false }
        return self.state.withLockedValue { state in
            !state.loaded || (hookable && state.hooks[post.circle] != nil) || (restricted && state.readOnly.contains(post.circle))
        }
    }

    /// Asks the hook of `post`'s circle; `perform` runs once with the verdict, after the
    /// verdicts of the entries of the circle that arrived before it.
    func check(_ post: NewPost, then perform: @escaping @Sendable (Verdict) -> Void) {
        let ticket = self.state.withLockedValue { state -> UInt64? in
            guard state.waiting < self.maxWaiting else { return nil }
            state.waiting += 1
            state.next += 1
            state.queues[post.circle, default: []].append(Ticket(id: state.next))
            return state.next
        }
        guard let ticket else {
            perform(.answer(.failure(StoreError(.unavailable, "too many posts are waiting for publish hooks"))))
            return
        }
        Task {
            let verdict = await self.decide(post)
            let ready = self.state.withLockedValue { state -> [@Sendable () -> Void] in
                state.waiting -= 1
                guard var queue = state.queues[post.circle], let index = queue.firstIndex(where: { $0.id == ticket }) else { return [] }
                queue[index].release = { perform(verdict) }
                var ready: [@Sendable () -> Void] = []
                while let first = queue.first, let release = first.release {
                    ready.append(release)
                    queue.removeFirst()
                }
                state.queues[post.circle] = queue.isEmpty ? nil : queue
                return ready
            }
            for release in ready { release() }
        }
    }

    /// Reads the hooks again (after a change on this node, and periodically).
    func reload() async {
        do {
            let hooks = try await self.store.publishHooks()
            let readOnly = try await self.store.readOnlyCircles()
            self.state.withLockedValue { state in
                state.hooks = Dictionary(hooks.map { ($0.circle, $0) }) { $1 }
                state.readOnly = Set(readOnly)
                state.loaded = true
            }
        } catch where !Task.isCancelled {
            self.logger.warning("could not read the publish hooks and read-only circles", metadata: ["error": "\(error)"])
        } catch {
            // The server is stopping.
        }
    }

    /// Until cancelled: reads the hooks every `refreshInterval`.
    func run() async {
        while !Task.isCancelled {
            await self.reload()
            try? await Task.sleep(for: self.refreshInterval)
        }
        await self.pool.closeAll()
    }

    private func decide(_ post: NewPost) async -> Verdict {
        if !self.state.withLockedValue({ $0.loaded }) { await self.reload() }
        let (loaded, found, readOnly) = self.state.withLockedValue { ($0.loaded, $0.hooks[post.circle], $0.readOnly.contains(post.circle)) }
        guard loaded else { return .answer(.failure(StoreError(.unavailable, "the publish hooks cannot be read"))) }
        let hook = post.change == nil || post.change == .edit ? found : nil
        let restricted = readOnly && post.change != .delete && !post.byAPIKey
        guard hook != nil || restricted else { return .commit(post) }
        do {
            // A retry of an entry already stored gets its ack, as the commit would answer it.
            if let stored = try await self.store.storedEntry(circle: post.circle, author: post.author, clientID: post.clientID) {
                return .answer(.success(.duplicate(stored)))
            }
            if restricted, try await !self.writesReadOnly(post) {
                return .answer(.success(.rejected(.readOnly, "\(post.circle) is read-only: only its owner, admins and apps write there")))
            }
        } catch {
            return .answer(.failure(error))
        }
        guard let hook else { return .commit(post) }
        let started = ContinuousClock.now
        let reply = await self.call(hook, post)
        self.metrics.publishHookLatency.recordNanoseconds(started.elapsedNanoseconds)
        switch reply {
        case .success(.accept):
            return .commit(post)
        case .success(.replace(let text)):
            var replaced = post
            replaced.text = text
            return .commit(replaced)
        case .success(.refuse(let reason)):
            return .answer(.success(.rejected(.refusedByHook, reason.isEmpty ? "the circle's publish hook refused it" : reason)))
        case .failure(let why):
            self.logger.info(
                "a publish hook did not decide",
                metadata: ["circle.circle": "\(post.circle)", "circle.reason": "\(why)", "circle.policy": "\(hook.onFailure.rawValue)"]
            )
            switch hook.onFailure {
            case .accept:
                return .commit(post)
            case .refuse:
                return .answer(.success(.rejected(.hookUnavailable, "the circle's publish hook did not decide (\(why)); retry with the same id")))
            }
        }
    }

    /// Whether the author of `post` writes in a read-only circle: its owner, an admin or a bot.
    private func writesReadOnly(_ post: NewPost) async throws -> Bool {
        if let circle = try await self.store.circle(named: post.circle), circle.owner == post.author { return true }
        guard let account = try await self.store.account(named: post.author), account.status == .active else { return false }
        return account.role == .admin || account.role == .bot
    }

    /// One call: the entry, signed, within the hook's deadline.
    private func call(_ hook: PublishHook, _ post: NewPost) async -> Result<PublishHookReply, PublishHookFailure> {
        let now = Identity.now
        let body = PublishHookPayload.body(post, at: now)
        let id = PublishHook.callID(circle: post.circle, author: post.author, clientID: post.clientID, change: post.change)
        let timestamp = now / 1000
        var headers = HTTPHeaders()
        headers.add(name: "Content-Type", value: "application/json")
        headers.add(name: "User-Agent", value: "Circle-Hooks/\(CircleVersion.current)")
        headers.add(name: "webhook-id", value: id)
        headers.add(name: "webhook-timestamp", value: "\(timestamp)")
        headers.add(name: "webhook-signature", value: WebhookSignature.sign(id: id, timestamp: timestamp, body: body, secrets: [hook.secret]))
        let http = OutboundHTTP(policy: self.policy, timeout: .milliseconds(hook.timeoutMilliseconds), maxBodyBytes: PublishHook.maxReplyBytes, pool: self.pool)
        do {
            let response = try await http.post(hook.url, headers: headers, body: body)
            return PublishHookReply.parse(
                status: response.status, contentType: response.headers.first(name: "Content-Type"), body: response.body, maxTextBytes: self.configuration.current.limits.maxPostBytes
            ).mapError { PublishHookFailure(message: $0.description) }
        } catch {
            return .failure(PublishHookFailure(message: String(error.message.prefix(300))))
        }
    }
}

/// Why a hook did not decide, as the sender and the log see it.
struct PublishHookFailure: Error, CustomStringConvertible {
    var message: String
    var description: String { self.message }
}
