import CircleHTTPClient
import Crypto
import CircleWire
import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOHTTP1

/// How Web Push notifications are sent (docs/OPERATIONS.md, "Push notifications").
public struct PushSettings: Sendable, Hashable {
    /// The VAPID `sub` claim: how a push service reaches the operator, `mailto:` or `https:`.
    /// Push is off (no routes answer but the key's, which says so) while it is `nil`.
    public var contact: String?
    /// One attempt: connect, send, and the answer.
    public var timeout: Duration
    /// The `TTL` header: how long a push service keeps a push for a device that is offline.
    public var ttl: Duration
    /// Retries: the first after `first`, doubling up to `longest`; a push not delivered after
    /// `giveUpAfter` is dropped.
    public var retry: WebhookRetryPolicy
    /// How often a node looks for pushes that are due when no commit of its own woke it.
    public var pollInterval: Duration
    /// Pushes in flight on one node.
    public var maxInFlight: Int
    /// Endpoints on loopback, private and link-local addresses (tests; the server-wide
    /// `allowPrivateOutbound` allows them too).
    public var allowPrivateAddresses: Bool
    /// `http://` endpoints (tests with a local push service only).
    public var allowHTTP: Bool
    /// Pushes carry no text: only the circle, seq and kind (for operators who want no text to
    /// pass through push services).
    public var contentFree: Bool
    /// A push goes only to a person who has had no open connection (on any node) for longer
    /// than this (``PushPresence``); one who is connected, or was within it, is not pushed to.
    public var awayAfter: Duration
    /// How often a node refreshes the store's record of who is connected to it; a node silent
    /// for three of these counts as gone (its users as away since its last refresh).
    public var presenceInterval: Duration
    /// A device is pushed about one circle at most once per this (``PushBurst``): the pushes of
    /// a burst wait, and only the newest is sent. Zero: every push goes at once.
    public var burstInterval: Duration
    /// APNs, for Apple devices registered through the SDK (``APNsDevice``); `nil`: off.
    public var apns: APNsSettings?

    /// Whether any push service is configured: Web Push (a contact) or APNs.
    public var enabled: Bool { self.contact != nil || self.apns != nil }

    public init(
        contact: String? = nil,
        timeout: Duration = .seconds(10),
        ttl: Duration = .seconds(24 * 3600),
        retry: WebhookRetryPolicy = WebhookRetryPolicy(first: .seconds(5), longest: .seconds(600), jitter: 0.2, giveUpAfter: .seconds(3600)),
        pollInterval: Duration = .seconds(1),
        maxInFlight: Int = 32,
        allowPrivateAddresses: Bool = false,
        allowHTTP: Bool = false,
        contentFree: Bool = false,
        awayAfter: Duration = .seconds(30),
        presenceInterval: Duration = .seconds(10),
        burstInterval: Duration = .seconds(10)
    ) {
        self.contact = contact
        self.timeout = timeout
        self.ttl = ttl
        self.retry = retry
        self.pollInterval = pollInterval
        self.maxInFlight = maxInFlight
        self.allowPrivateAddresses = allowPrivateAddresses
        self.allowHTTP = allowHTTP
        self.contentFree = contentFree
        self.awayAfter = awayAfter
        self.presenceInterval = presenceInterval
        self.burstInterval = burstInterval
    }

    /// Why `contact` cannot be the VAPID `sub`, or `nil`.
    public static func contactProblem(_ contact: String) -> String? {
        let lower = contact.lowercased()
        guard (lower.hasPrefix("mailto:") && contact.utf8.count > 7) || (lower.hasPrefix("https://") && URL(string: contact) != nil),
            contact.utf8.count <= 256, !contact.unicodeScalars.contains(where: { $0.value < 0x20 || $0 == "\"" || $0 == "\\" })
        else { return "the push contact is a mailto: or https: URL (at most 256 bytes)" }
        return nil
    }

    /// The server key the VAPID key is kept under (``PushStore/serverKey(_:candidate:)``).
    static let vapidKeyName = "vapid-p256"
}

/// What a push's attempt comes to, decided from the push service's answer (RFC 8030 §6 and
/// §8.4; pure, tested without I/O).
enum PushAttempt {
    static func result(status: Int?, retryAfter: String?, push: PendingPush, now: Int64, policy: WebhookRetryPolicy, random: Double) -> PushResult {
        switch status {
        case .some(200..<300): return .delivered
        case .some(404), .some(410): return .gone
        case .some(429), .some(500...599), .none:
            if now - push.createdAt >= WebhookRetryPolicy.milliseconds(policy.giveUpAfter) { return .dropped }
            let backoff = Self.backoff(attempt: push.attempts + 1, policy: policy, random: random)
            // Retry-After in seconds (an HTTP date is read as no hint).
            let hinted = retryAfter.flatMap { Int64($0.trimmingCharacters(in: .whitespaces)) }.map { min(max($0, 0), 3600) * 1000 } ?? 0
            return .retry(at: now + max(backoff, hinted))
        default:
            // 400 (bad request), 401/403 (the VAPID key), 413 (too big): trying again would not help.
            return .dropped
        }
    }

    static func backoff(attempt: Int, policy: WebhookRetryPolicy, random: Double) -> Int64 {
        let base = Double(WebhookRetryPolicy.milliseconds(policy.first)) * pow(2, Double(min(max(attempt - 1, 0), 30)))
        let capped = min(base, Double(WebhookRetryPolicy.milliseconds(policy.longest)))
        return max(1, Int64(capped * (1 + policy.jitter * (2 * random - 1))))
    }
}

/// The JSON a push carries, encrypted (docs/API.md, "Push notifications"): small enough that
/// with encryption it stays within the 4096 bytes push services take.
struct PushPayload: Codable, Sendable, Equatable {
    var kind: String
    var circle: String
    var seq: Int64
    var author: String?
    var text: String?
    /// The circle is a direct message.
    var direct: Bool?

    /// The longest `text`, in bytes (cut at a character boundary, with `…`).
    static let maxTextBytes = 200
    /// The plaintext's bound: with encryption's header and tag (``WebPushEncryption/overhead``) within 4096 bytes.
    static let maxBytes = 3000

    static func body(_ push: PendingPush, entry: CirclePost?, direct: Bool, contentFree: Bool) -> [UInt8] {
        var payload = PushPayload(kind: push.kind.rawValue, circle: push.circle, seq: push.seq, author: nil, text: nil, direct: direct ? true : nil)
        if !contentFree, let entry {
            payload.author = String(entry.author.prefix(64))
            payload.text = entry.text.map { Self.truncate($0, bytes: Self.maxTextBytes) }
        }
        var bytes = Array(HTTPAPI.encode(payload))
        if bytes.count > Self.maxBytes {
            // Only a circle name near its limit gets here: drop the text, then the author.
            payload.text = nil
            payload.author = nil
            bytes = Array(HTTPAPI.encode(payload))
        }
        return bytes
    }

    static func truncate(_ text: String, bytes: Int) -> String {
        guard text.utf8.count > bytes else { return text }
        var result = ""
        var used = 0
        for character in text {
            let size = character.utf8.count
            guard used + size <= bytes - 3 else { break }
            result.append(character)
            used += size
        }
        return result + "…"
    }
}

/// Sends the pushes the commits queue, on every node: leases the due ones
/// (``PushStore/claimPushes(node:now:lease:limit:)``), encrypts each to its subscription
/// (RFC 8291), signs the request with the server's VAPID key (RFC 8292), and records the
/// answer: delivered and dropped pushes go, a subscription the push service no longer knows
/// (404, 410) goes, 429 and 5xx retry with backoff (at least `Retry-After`). A node that dies
/// holding a lease leaves its pushes to another once the lease ends. Never on the post path.
final class PushDispatcher: Sendable {
    let store: any CircleStore
    let settings: PushSettings
    let node: String
    let logger: Logger
    let keys: VAPIDKeys
    let metrics: ServerMetrics
    private let presence: PushPresence
    private let http: OutboundHTTP
    private let bell = Doorbell()
    private let vapidHeaders = NIOLockedValueBox(VAPIDHeaderCache())

    init(store: any CircleStore, settings: PushSettings, allowPrivateOutbound: Bool, node: String, metrics: ServerMetrics, logger: Logger) {
        self.store = store
        self.settings = settings
        self.metrics = metrics
        self.presence = PushPresence(settings)
        self.keys = VAPIDKeys(store: store)
        self.node = node
        self.logger = logger
        self.http = OutboundHTTP(
            policy: OutboundAddressPolicy(allowsPrivate: allowPrivateOutbound || settings.allowPrivateAddresses),
            timeout: settings.timeout,
            maxBodyBytes: 4096,
            // As many as are sent at once: a push service is one origin, and with fewer kept
            // every round of a fan-out opened the rest anew.
            pool: HTTPConnectionPool(maxIdlePerTarget: settings.maxInFlight)
        )
    }

    /// Something may be due now (a commit of this node stored entries).
    func wake() { self.bell.ring() }

    /// A lease outlasts an attempt with room to record it.
    private var lease: Int64 { WebhookRetryPolicy.milliseconds(self.settings.timeout) + 10_000 }

    /// Until cancelled (also with push off: the server's background work ends when any part returns).
    func run() async {
        guard self.settings.enabled else {
            while !Task.isCancelled { try? await Task.sleep(for: .seconds(3600)) }
            return
        }
        var apns: APNsSender?
        if let settings = self.settings.apns {
            do {
                apns = try await APNsSender(settings: settings, push: self.settings, logger: self.logger)
            } catch {
                // Checked at start (``APNsSettings/problem(_:)``): a key that passed cannot fail here.
                self.logger.error("APNs is off: its key could not be used", metadata: ["error": "\(error)"])
            }
        }
        var webPush: (key: VAPIDKey, contact: String)?
        while !Task.isCancelled {
            if let contact = self.settings.contact, webPush == nil {
                do {
                    webPush = (try await self.keys.key(), contact)
                } catch {
                    self.logger.warning("could not read the VAPID key", metadata: ["error": "\(error)"])
                    await self.bell.wait(upTo: self.settings.pollInterval)
                    continue
                }
            }
            let claimed: [PendingPush]
            do {
                claimed = try await self.store.claimPushes(node: self.node, now: Identity.now, lease: self.lease, limit: self.settings.maxInFlight)
            } catch {
                if Task.isCancelled { break }  // shutting down: not worth a warning
                self.logger.warning("could not claim pushes", metadata: ["error": "\(error)"])
                claimed = []
            }
            if claimed.isEmpty {
                await self.bell.wait(upTo: self.settings.pollInterval)
                continue
            }
            // The away rule, now rather than at commit: whoever is connected (or was, within
            // awayAfter) gets no push; without the marks, the pushes wait for the next claim.
            let marks: [String: [ConnectionMark]]
            do {
                marks = try await self.store.connectionMarks(users: claimed.map(\.subscription.user))
            } catch {
                if Task.isCancelled { break }
                self.logger.warning("could not read who is connected", metadata: ["error": "\(error)"])
                try? await self.store.finishPushes(claimed.map { ($0, .released) }, node: self.node)
                await self.bell.wait(upTo: self.settings.pollInterval)
                continue
            }
            let now = Identity.now
            let (present, away) = self.presence.partition(claimed, marks: marks, now: now)
            if !present.isEmpty { self.metrics.pushesSkipped.increment(by: Int64(present.count)) }
            var results: [(push: PendingPush, result: PushResult)] = present.map { ($0, .present) }
            // A burst: one push per device and circle per burstInterval, the newest.
            let burst = PushBurst(interval: WebhookRetryPolicy.milliseconds(self.settings.burstInterval))
            var due = away
            if burst.interval > 0 && !away.isEmpty {
                do {
                    let plan = burst.plan(away, lastSent: try await self.store.lastPushesSent(away.map(PushBurstKey.init)), now: now)
                    results += plan.folded.map { ($0, .folded) } + plan.deferred.map { ($0.push, .deferred(until: $0.until)) }
                    due = plan.send
                } catch {
                    // Without the record, everything goes now (a burst is then not gathered).
                    self.logger.warning("could not read when devices were last pushed to", metadata: ["error": "\(error)"])
                }
            }
            let sending = due
            // Read once per entry and circle, not per push: a fan-out claims many pushes of one post.
            let entries = await self.entries(of: sending)
            results += await withTaskGroup(of: (PendingPush, PushResult).self) { group in
                for push in sending {
                    let (entry, direct) = entries[PushEntryKey(circle: push.circle, seq: push.seq)] ?? (nil, false)
                    group.addTask { [webPush, apns] in
                        (push, await self.send(push, entry: entry, direct: direct, webPush: webPush, apns: apns))
                    }
                }
                var results: [(push: PendingPush, result: PushResult)] = []
                for await result in group { results.append(result) }
                return results
            }
            for (_, result) in results { self.metrics.push(result) }
            do {
                try await self.store.finishPushes(results, node: self.node)
                let sent = results.filter { $0.result == .delivered }.map { PushBurstKey($0.push) }
                if burst.interval > 0 && !sent.isEmpty {
                    let at = Identity.now
                    try await self.store.recordPushesSent(sent, at: at, forgetBefore: at - burst.interval)
                }
            } catch {
                // The leases end and the pushes go again.
                self.logger.warning("could not record pushes", metadata: ["error": "\(error)"])
            }
        }
        await self.http.pool?.closeAll()
        await apns?.shutdown()
    }

    private struct PushEntryKey: Hashable {
        var circle: String
        var seq: Int64
    }

    /// The entries `pushes` report (`nil` when it is gone), and whether each one's circle is a
    /// direct message: what their payloads say.
    private func entries(of pushes: [PendingPush]) async -> [PushEntryKey: (entry: CirclePost?, direct: Bool)] {
        var direct: [String: Bool] = [:]
        var entries: [PushEntryKey: (entry: CirclePost?, direct: Bool)] = [:]
        for push in pushes {
            let key = PushEntryKey(circle: push.circle, seq: push.seq)
            guard entries[key] == nil else { continue }
            if direct[push.circle] == nil {
                direct[push.circle] = (try? await self.store.circle(named: push.circle))?.direct != nil
            }
            let entry = try? await self.store.posts(in: push.circle, after: push.seq - 1, limit: 1).first
            entries[key] = (entry?.seq == push.seq ? entry : nil, direct[push.circle] ?? false)
        }
        return entries
    }

    /// One attempt of one push, by the service its subscription belongs to: an APNs device or a
    /// Web Push endpoint. One whose service is off is dropped (its operator turned it off).
    private func send(_ push: PendingPush, entry: CirclePost?, direct: Bool, webPush: (key: VAPIDKey, contact: String)?, apns: APNsSender?) async -> PushResult {
        if let device = APNsDevice(endpoint: push.subscription.endpoint) {
            guard let apns else { return .dropped }
            return await apns.send(push, device: device, entry: entry, direct: direct)
        }
        guard let webPush else { return .dropped }
        return await self.send(push, entry: entry, direct: direct, key: webPush.key, contact: webPush.contact)
    }

    /// One attempt of one Web Push, about `entry` (`nil`: gone) in a direct message or not.
    func send(_ push: PendingPush, entry: CirclePost?, direct: Bool, key: VAPIDKey, contact: String) async -> PushResult {
        if Task.isCancelled { return .released }
        let plaintext = PushPayload.body(push, entry: entry, direct: direct, contentFree: self.settings.contentFree)
        guard let subscriberKey = Base64URL.decode(push.subscription.p256dh), let auth = Base64URL.decode(push.subscription.auth),
            let body = try? WebPushEncryption.encrypt(plaintext, subscriberKey: subscriberKey, authSecret: auth),
            let audience = PushSubscription.origin(of: push.subscription.endpoint)
        else {
            // Checked when subscribed: only a store edited by hand gets here.
            return .gone
        }
        let now = Identity.now
        var headers = HTTPHeaders()
        headers.add(name: "Content-Type", value: "application/octet-stream")
        headers.add(name: "Content-Encoding", value: "aes128gcm")
        headers.add(name: "TTL", value: "\(self.settings.ttl.components.seconds)")
        headers.add(name: "Urgency", value: "high")
        headers.add(name: "Topic", value: PushTopic.topic(circle: push.circle))
        headers.add(name: "User-Agent", value: "Circle-Push/\(CircleVersion.current)")
        let authorization = self.vapidHeaders.withLockedValue {
            $0.header(audience: audience, subject: contact, now: now / 1000) { key.authorization(audience: audience, subject: contact, expires: $0) }
        }
        headers.add(name: "Authorization", value: authorization)
        do {
            let response = try await self.http.post(push.subscription.endpoint, headers: headers, body: body)
            let result = PushAttempt.result(
                status: response.status, retryAfter: response.headers.first(name: "Retry-After"), push: push, now: Identity.now,
                policy: self.settings.retry, random: Double.random(in: 0..<1)
            )
            if case .dropped = result {
                self.logger.info("a push service refused a push", metadata: ["circle.status": "\(response.status)", "circle.user": "\(push.subscription.user)"])
            }
            return result
        } catch {
            return PushAttempt.result(status: nil, retryAfter: nil, push: push, now: Identity.now, policy: self.settings.retry, random: Double.random(in: 0..<1))
        }
    }
}

/// The `Topic` header (RFC 8030 §5.4): at most 32 base64url characters; one per circle, so a
/// device that was offline shows the newest push of a circle rather than each.
enum PushTopic {
    static func topic(circle: String) -> String {
        String(Base64URL.encode(Array(SHA256.hash(data: Array(circle.utf8))).prefix(24)).prefix(32))
    }
}

/// The server's VAPID key, read from the store once (made there by the first node that asks).
final class VAPIDKeys: Sendable {
    private let store: any CircleStore
    private let cached = NIOLockedValueBox<VAPIDKey?>(nil)

    init(store: any CircleStore) {
        self.store = store
    }

    func key() async throws -> VAPIDKey {
        if let key = self.cached.withLockedValue({ $0 }) { return key }
        let stored = try await self.store.serverKey(PushSettings.vapidKeyName, candidate: VAPIDKey().stored)
        guard let key = VAPIDKey(stored: stored) else {
            throw StoreError(.unavailable, "the stored VAPID key (server_keys \"\(PushSettings.vapidKeyName)\") is not a P-256 private key")
        }
        self.cached.withLockedValue { $0 = key }
        return key
    }
}
