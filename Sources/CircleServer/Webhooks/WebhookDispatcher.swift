import CircleHTTPClient
import CircleWire
import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOHTTP1

/// How webhooks are sent (docs/API.md, "Webhooks").
public struct WebhookSettings: Sendable, Hashable {
    /// One attempt: connect, send, and the whole answer.
    public var timeout: Duration
    /// The longest answer read; a longer one fails the attempt.
    public var maxReplyBytes: Int
    /// Deliveries in flight on one node, in all…
    public var maxInFlight: Int
    /// …and to one subscription.
    public var maxInFlightPerWebhook: Int
    /// How often a node looks for deliveries that are due when no commit of its own woke it
    /// (another node's entries, retries).
    public var pollInterval: Duration
    /// After a commit's wake-up, how long to wait for more before claiming.
    public var gatherDelay: Duration
    public var retry: WebhookRetryPolicy
    /// Delivered deliveries are kept this long for the admin's list, then deleted.
    public var keepDelivered: Duration
    /// Endpoints on loopback, private and link-local addresses (off by default; the server-wide
    /// `allowPrivateOutbound` allows them too).
    public var allowPrivateAddresses: Bool

    public init(
        timeout: Duration = .seconds(10),
        maxReplyBytes: Int = 64 * 1024,
        maxInFlight: Int = 32,
        maxInFlightPerWebhook: Int = 4,
        pollInterval: Duration = .seconds(1),
        gatherDelay: Duration = .milliseconds(10),
        retry: WebhookRetryPolicy = WebhookRetryPolicy(),
        keepDelivered: Duration = .seconds(7 * 24 * 3600),
        allowPrivateAddresses: Bool = false
    ) {
        self.timeout = timeout
        self.maxReplyBytes = maxReplyBytes
        self.maxInFlight = maxInFlight
        self.maxInFlightPerWebhook = maxInFlightPerWebhook
        self.pollInterval = pollInterval
        self.gatherDelay = gatherDelay
        self.retry = retry
        self.keepDelivered = keepDelivered
        self.allowPrivateAddresses = allowPrivateAddresses
    }

    /// Subscriptions one server may have.
    public static let maximumWebhooks = 100
    /// The longest endpoint URL.
    public static let maximumURLBytes = 2048
}

/// A wake-up for one waiter: ``ring()`` ends the current ``wait(upTo:)`` or, if none is
/// waiting, the next one at once.
final class Doorbell: Sendable {
    private struct State {
        var rung = false
        var waiter: CheckedContinuation<Void, Never>?
    }

    private let state = NIOLockedValueBox(State())

    func ring() {
        let waiter = self.state.withLockedValue { state -> CheckedContinuation<Void, Never>? in
            guard let waiter = state.waiter else {
                state.rung = true
                return nil
            }
            state.waiter = nil
            return waiter
        }
        waiter?.resume()
    }

    /// Returns when rung (now, or since the last wait), after `limit`, or when cancelled.
    func wait(upTo limit: Duration) async {
        let timer = Task {
            guard (try? await Task.sleep(for: limit)) != nil else { return }
            self.ring()
        }
        defer { timer.cancel() }
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let rung = self.state.withLockedValue { state -> Bool in
                    if state.rung {
                        state.rung = false
                        return true
                    }
                    state.waiter = continuation
                    return false
                }
                if rung { continuation.resume() }
            }
        } onCancel: {
            self.ring()
        }
    }
}

/// Sends the deliveries the commits record, on every node: each node leases the deliveries
/// that are due (``WebhookStore/claimDeliveries(node:now:lease:limit:perWebhook:excluding:)``),
/// sends each signed per Standard Webhooks, and records the attempt. A delivery leased by a node
/// that dies is sent by another once the lease ends, with the same `webhook-id`: at least once.
/// Never on the post path: a slow endpoint holds only its own deliveries.
final class WebhookDispatcher: Sendable {
    let store: any CircleStore
    /// `webhooks` and the post size limit are read as they are used: a reload applies to the
    /// next claim and attempt (the pool's size and the address policy stay as they started).
    private let configuration: LiveConfiguration
    var settings: WebhookSettings { self.configuration.current.webhooks }
    let node: String
    let logger: Logger
    /// Commits a bot's reply (the server's group commit).
    private let post: @Sendable (NewPost) async -> Result<PostOutcome, any Error>
    private let http: OutboundHTTP
    private let bell = Doorbell()
    /// A subscription was made or changed on this node: look again before the next poll.
    private let subscriptionsChanged = NIOLockedValueBox(true)

    init(
        store: any CircleStore,
        configuration: LiveConfiguration,
        node: String,
        logger: Logger,
        post: @escaping @Sendable (NewPost) async -> Result<PostOutcome, any Error>
    ) {
        self.store = store
        self.post = post
        self.configuration = configuration
        let started = configuration.current
        let settings = started.webhooks
        self.node = node
        self.logger = logger
        self.http = OutboundHTTP(
            policy: OutboundAddressPolicy(allowsPrivate: started.allowPrivateOutbound || settings.allowPrivateAddresses),
            timeout: settings.timeout,
            maxBodyBytes: settings.maxReplyBytes,
            // An endpoint is sent to again and again: a connection for each delivery cost more
            // than the rest of its delivery.
            pool: HTTPConnectionPool(maxIdlePerTarget: settings.maxInFlightPerWebhook)
        )
    }

    /// Circles a commit of this node stored entries in since the loop last looked.
    private let wokenCircles = NIOLockedValueBox(Set<String>())

    /// Something may be due now: a commit of this node stored entries in `circles`.
    func wake(circles: [String]) {
        self.wokenCircles.withLockedValue { $0.formUnion(circles) }
        self.bell.ring()
    }

    /// A subscription was created, changed or deleted here, or a delivery retried.
    func webhooksChanged() {
        self.subscriptionsChanged.withLockedValue { $0 = true }
        self.bell.ring()
    }

    /// One subscription's deliveries of one circle: sent in order, one run at a time.
    struct Queue: Hashable, Sendable {
        var webhook: String
        var circle: String
    }

    /// Whether every queue that commits in `circles` may have added to is being sent by this
    /// node already: its run's end claims again (``run()``), and that claim takes what was added.
    static func alreadySending(_ circles: Set<String>, webhooks: some Collection<Webhook>, running: Set<Queue>) -> Bool {
        circles.allSatisfy { circle in
            webhooks.allSatisfy { webhook in
                webhook.status != .active || (webhook.circle.map { $0 != circle } ?? false)
                    || running.contains(Queue(webhook: webhook.id, circle: circle))
            }
        }
    }

    private enum Event: Sendable {
        case sent(Queue)
        case tick
    }

    /// Until cancelled.
    func run() async {
        var lastPrune = Int64(0)
        // The subscriptions, looked up once per poll interval (and when one changes here): with
        // none active, a commit's wake-up costs no query, and a claim's runs are sent with what
        // is known (a claim takes only the deliveries of subscriptions active at that moment; a
        // secret rotated on another node is seen within the interval, and its previous secret
        // stays valid meanwhile).
        var anyActive = false
        var known: [String: Webhook] = [:]
        var lastLook = Int64.min
        await withTaskGroup(of: Event.self) { group in
            // Queues being sent: how many per subscription, and which.
            var running: [String: Int] = [:]
            var runningQueues = Set<Queue>()
            var lastClaim = Int64.min
            group.addTask { .tick }
            while let event = await group.next() {
                if Task.isCancelled { break }
                switch event {
                case .sent(let queue):
                    running[queue.webhook, default: 1] -= 1
                    if running[queue.webhook] == 0 { running[queue.webhook] = nil }
                    runningQueues.remove(queue)
                case .tick:
                    let settings = self.settings
                    group.addTask { [bell] in
                        await bell.wait(upTo: settings.pollInterval)
                        // Commits come in bursts: a moment's wait gathers their deliveries into
                        // one claim, one run and one record.
                        try? await Task.sleep(for: settings.gatherDelay)
                        return .tick
                    }
                }
                let woken = self.wokenCircles.withLockedValue { circles in
                    defer { circles = [] }
                    return circles
                }
                let inFlight = running.values.reduce(0, +)
                guard inFlight < self.settings.maxInFlight else { continue }
                let now = Identity.now
                let changed = self.subscriptionsChanged.withLockedValue { changed in
                    defer { changed = false }
                    return changed
                }
                if changed || now - lastLook >= WebhookRetryPolicy.milliseconds(self.settings.pollInterval) {
                    lastLook = now
                    do {
                        let webhooks = try await self.store.webhooks()
                        known = Dictionary(webhooks.map { ($0.id, $0) }) { $1 }
                        anyActive = webhooks.contains { $0.status == .active }
                    } catch {
                        known = [:]
                        anyActive = true
                    }
                }
                guard anyActive else { continue }
                // Every active subscription is sending as many queues as it may: a claim would
                // find nothing for this node, and on SQLite its UPDATE would still take the write
                // lock from the commits (measured: postpath.py --webhooks held, docs/bench/postpath.md).
                let full = !known.isEmpty && known.values.allSatisfy { $0.status != .active || running[$0.id, default: 0] >= self.settings.maxInFlightPerWebhook }
                guard !full || changed else { continue }
                // A commit's wake-up for circles whose queues this node is sending: nothing it
                // added can go before those runs end (order per queue), so no claim until then,
                // or until the poll is due (retries, other nodes' entries). Measured: at one
                // writer with a held endpoint, every commit claimed in vain (docs/bench/postpath.md).
                let pollDue = lastClaim == .min || now - lastClaim >= WebhookRetryPolicy.milliseconds(self.settings.pollInterval)
                if case .tick = event, !changed, !pollDue, Self.alreadySending(woken, webhooks: known.values, running: runningQueues) { continue }
                lastClaim = now
                let claimed: [WebhookDelivery]
                do {
                    claimed = try await self.store.claimDeliveries(
                        node: self.node,
                        now: now,
                        lease: self.lease,
                        queues: self.settings.maxInFlight - inFlight,
                        perWebhook: self.settings.maxInFlightPerWebhook,
                        perQueue: Self.queueRun,
                        excluding: running.filter { $0.value >= self.settings.maxInFlightPerWebhook }.map(\.key)
                    )
                } catch {
                    self.logger.warning("could not claim webhook deliveries", metadata: ["error": "\(error)"])
                    continue
                }
                for queue in Self.queues(claimed) {
                    let id = queue[0].webhook
                    if known[id] == nil, let found = try? await self.store.webhook(id: id) {
                        // Made on another node since the last look.
                        known[id] = found
                    }
                    guard let webhook = known[id] else {
                        _ = try? await self.store.finishDeliveries(queue.map { ($0.id, nil) }, node: self.node, at: now)
                        continue
                    }
                    running[id, default: 0] += 1
                    let key = Queue(webhook: id, circle: queue[0].circle)
                    runningQueues.insert(key)
                    group.addTask {
                        await self.send(queue, to: webhook)
                        return .sent(key)
                    }
                }
                if now - lastPrune > 3_600_000 {
                    lastPrune = now
                    let before = now - WebhookRetryPolicy.milliseconds(self.settings.keepDelivered)
                    _ = try? await self.store.pruneDeliveries(deliveredBefore: before)
                }
            }
            group.cancelAll()
        }
        await self.http.pool?.closeAll()
    }

    /// Deliveries of one queue a claim leases: sent one after another, recorded together. A
    /// run amortizes the claim's and the record's transactions over many deliveries.
    static let queueRun = 32

    /// A lease outlasts an attempt, with room for recording it; a node that dies holds its
    /// deliveries this long. A run of attempts renews it as it goes.
    private var lease: Int64 { WebhookRetryPolicy.milliseconds(self.settings.timeout) + 10_000 }

    /// Splits claimed deliveries (sorted by subscription, circle and `seq`) into their queues.
    static func queues(_ deliveries: [WebhookDelivery]) -> [[WebhookDelivery]] {
        var queues: [[WebhookDelivery]] = []
        for delivery in deliveries {
            if let last = queues.last?.last, last.webhook == delivery.webhook, last.circle == delivery.circle {
                queues[queues.count - 1].append(delivery)
            } else {
                queues.append([delivery])
            }
        }
        return queues
    }

    /// Sends one queue's run in order; the first failure ends the run (the rest is released,
    /// untried, so the order holds); then records every attempt in one transaction.
    func send(_ queue: [WebhookDelivery], to webhook: Webhook) async {
        var results: [(id: String, result: DeliveryResult?)] = []
        var entries: [Int64: CirclePost] = [:]
        do {
            // One read for a run of close entries, else one each (a subscription to rare events).
            if let first = queue.first, let last = queue.last, last.seq - first.seq < 256 {
                for post in try await self.store.posts(in: first.circle, after: first.seq - 1, limit: Int(last.seq - first.seq + 1)) {
                    entries[post.seq] = post
                }
            } else {
                for delivery in queue {
                    if let post = try await self.store.posts(in: delivery.circle, after: delivery.seq - 1, limit: 1).first, post.seq == delivery.seq {
                        entries[post.seq] = post
                    }
                }
            }
        } catch {
            self.logger.warning("could not read the entries of webhook deliveries; released", metadata: ["error": "\(error)"])
            _ = try? await self.store.finishDeliveries(queue.map { ($0.id, nil) }, node: self.node, at: Identity.now)
            return
        }
        var leaseEnd = Identity.now + self.lease
        var stopped = false
        for (index, delivery) in queue.enumerated() {
            if stopped || Task.isCancelled {
                results.append((delivery.id, nil))
                continue
            }
            // Renew before an attempt that could outlast the lease.
            let now = Identity.now
            if leaseEnd - now < WebhookRetryPolicy.milliseconds(self.settings.timeout) + 5_000 {
                leaseEnd = now + self.lease
                try? await self.store.renewLeases(queue[index...].map(\.id), node: self.node, until: leaseEnd)
            }
            let result = await self.attempt(delivery, entry: entries[delivery.seq], to: webhook)
            results.append((delivery.id, result))
            if case .delivered = result { continue }
            stopped = true
            if case .failed(_, _, let reason) = result {
                self.logger.warning("a webhook is disabled", metadata: ["circle.webhook": "\(webhook.id)", "circle.reason": "\(reason)"])
            }
        }
        do {
            let recorded = try await self.store.finishDeliveries(results, node: self.node, at: Identity.now)
            let tried = results.filter { $0.result != nil }.count
            if recorded < tried {
                self.logger.info("webhook delivery leases passed to another node before they were recorded", metadata: ["circle.webhook": "\(webhook.id)"])
            }
        } catch {
            // The leases end and the deliveries go again (receivers deduplicate by webhook-id).
            self.logger.warning("could not record webhook deliveries", metadata: ["circle.webhook": "\(webhook.id)", "error": "\(error)"])
        }
    }

    private func attempt(_ delivery: WebhookDelivery, entry: CirclePost?, to webhook: Webhook) async -> DeliveryResult {
        let now = Identity.now
        let body = WebhookPayload.body(event: delivery.event, entry: entry, circle: delivery.circle, seq: delivery.seq, at: now)
        let timestamp = now / 1000
        var headers = HTTPHeaders()
        headers.add(name: "Content-Type", value: "application/json")
        headers.add(name: "User-Agent", value: "Circle-Webhooks/\(CircleVersion.current)")
        headers.add(name: "webhook-id", value: delivery.id)
        headers.add(name: "webhook-timestamp", value: "\(timestamp)")
        headers.add(name: "webhook-signature", value: WebhookSignature.sign(id: delivery.id, timestamp: timestamp, body: body, secrets: webhook.secrets))
        do {
            var http = self.http
            http.timeout = self.settings.timeout
            let response = try await http.post(webhook.url, headers: headers, body: body)
            if (200..<300).contains(response.status) {
                if let bot = webhook.bot {
                    await self.answer(response, of: delivery, as: bot)
                }
                return .delivered(status: response.status)
            }
            return self.failure(delivery, status: response.status, error: "the endpoint answered \(response.status)")
        } catch {
            return self.failure(delivery, status: nil, error: error.message)
        }
    }

    /// A bot's reply becomes its post in the delivery's circle, with the delivery's id as the
    /// post's id: a delivery sent twice is answered once. The bot must be an active bot account
    /// that may post there (a member, for a private circle). A reply that cannot be posted is
    /// logged; the delivery has succeeded all the same.
    private func answer(_ response: OutboundHTTP.Response, of delivery: WebhookDelivery, as bot: String) async {
        let metadata: Logger.Metadata = ["circle.delivery": "\(delivery.id)", "circle.bot": "\(bot)"]
        guard let parsed = WebhookReply.parse(status: response.status, contentType: response.headers.first(name: "Content-Type"), body: response.body, maxTextBytes: self.configuration.current.limits.maxPostBytes)
        else { return }
        let reply: WebhookReply
        switch parsed {
        case .success(let value): reply = value
        case .failure(let problem):
            self.logger.info("a bot's reply was not posted", metadata: metadata.merging(["circle.reason": "\(problem)"]) { $1 })
            return
        }
        do {
            guard let account = try await self.store.account(named: bot), account.role == .bot, account.status == .active else {
                self.logger.info("a bot's reply was not posted", metadata: metadata.merging(["circle.reason": "not an active bot account"]) { $1 })
                return
            }
            guard let circle = try await self.store.circle(named: delivery.circle) else { return }
            if circle.isPrivate, try await !self.store.isMember(bot, of: delivery.circle) {
                self.logger.info("a bot's reply was not posted", metadata: metadata.merging(["circle.reason": "the bot is not a member of the private circle"]) { $1 })
                return
            }
        } catch {
            self.logger.warning("a bot's reply was not posted", metadata: metadata.merging(["error": "\(error)"]) { $1 })
            return
        }
        let post = NewPost(circle: delivery.circle, author: bot, clientID: delivery.id, text: reply.text, attachment: nil, time: Identity.now)
        switch await self.post(post) {
        case .success(.stored), .success(.duplicate): break
        case .success(let other):
            self.logger.info("a bot's reply was refused", metadata: metadata.merging(["circle.reason": "\(other)"]) { $1 })
        case .failure(let error):
            self.logger.warning("a bot's reply was not posted", metadata: metadata.merging(["error": "\(error)"]) { $1 })
        }
    }

    private func failure(_ delivery: WebhookDelivery, status: Int?, error: String) -> DeliveryResult {
        self.settings.retry.afterFailure(delivery, attempt: delivery.attempts + 1, now: Identity.now, status: status, error: String(error.prefix(500)), random: Double.random(in: 0..<1))
    }
}

/// The body of a delivery (docs/API.md, "Webhooks"): `{"type", "timestamp", "data"}` as
/// Standard Webhooks suggests, `data` being the entry as it is when sent.
enum WebhookPayload {
    private struct Body: Encodable {
        var type: String
        var timestamp: String
        var data: Content
    }

    private struct Content: Encodable {
        var circle: String
        var seq: Int64
        /// `nil` only if the entry cannot be read (its circle was deleted).
        var entry: CirclePost?
    }

    /// `2026-11-27T09:30:00.123Z`. Written by hand: a Foundation date formatter goes through ICU,
    /// which showed in a profile of the delivery path.
    static func rfc3339(milliseconds time: Int64) -> String {
        var seconds = time_t(time / 1000)
        var parts = tm()
        gmtime_r(&seconds, &parts)
        func two(_ value: Int32) -> String { value < 10 ? "0\(value)" : "\(value)" }
        let millis = Int(time % 1000)
        let fraction = millis < 10 ? "00\(millis)" : millis < 100 ? "0\(millis)" : "\(millis)"
        return "\(parts.tm_year + 1900)-\(two(parts.tm_mon + 1))-\(two(parts.tm_mday))T\(two(parts.tm_hour)):\(two(parts.tm_min)):\(two(parts.tm_sec)).\(fraction)Z"
    }

    static func body(event: WebhookEvent, entry: CirclePost?, circle: String, seq: Int64, at time: Int64) -> [UInt8] {
        let timestamp = Self.rfc3339(milliseconds: time)
        return Array(HTTPAPI.encode(Body(type: event.rawValue, timestamp: timestamp, data: Content(circle: circle, seq: seq, entry: entry))))
    }
}
