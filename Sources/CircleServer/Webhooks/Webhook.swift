import CircleWire
import Crypto
import Foundation

/// What a webhook subscription is told of (docs/API.md, "Webhooks").
public enum WebhookEvent: String, Sendable, Hashable, Codable, CaseIterable, Comparable {
    /// A new post (a reply included).
    case post
    /// An edit of a post.
    case edit
    /// A post deleted.
    case delete
    /// A reaction added or taken back.
    case reaction
    /// A system entry: a member added, removed or left (the entry's `event` says which).
    case member
    /// For a subscription with a ``Webhook/bot``: a post or edit whose text mentions the bot, or a
    /// post in a direct message the bot is in. Such an entry is delivered once, as `mention`, in
    /// place of its own event.
    case mention

    /// The event a stored entry is, by its change.
    init(_ entry: CirclePost) {
        if entry.isSystem {
            self = .member
            return
        }
        switch entry.change {
        case nil: self = .post
        case .edit: self = .edit
        case .delete: self = .delete
        case .react, .unreact: self = .reaction
        }
    }

    public static func < (lhs: Self, rhs: Self) -> Bool {
        Self.allCases.firstIndex(of: lhs)! < Self.allCases.firstIndex(of: rhs)!
    }
}

/// Whether a subscription's deliveries go out.
public enum WebhookStatus: String, Sendable, Hashable, Codable {
    case active
    /// Switched off, by an admin or because a delivery failed for good (``Webhook/disabledReason``
    /// says which): its deliveries wait, in order, until it is enabled again.
    case disabled
}

/// An endpoint that is sent the entries of one circle or of all, signed per the Standard
/// Webhooks specification.
public struct Webhook: Sendable, Hashable {
    /// `wh_` and 16 random characters.
    public var id: String
    public var url: String
    /// `nil`: every circle.
    public var circle: String?
    public var events: Set<WebhookEvent>
    /// The signing secrets, newest first: one, or two while rotating (`whsec_` and base64).
    /// Kept as they are: the server must sign with them, so they cannot be stored hashed.
    public var secrets: [String]
    public var status: WebhookStatus
    public var disabledReason: String?
    /// A bot account: the endpoint's replies become its posts, and its own entries are not
    /// delivered to this subscription (a bot does not answer itself).
    public var bot: String?
    public var createdBy: String
    /// Milliseconds since 1970.
    public var createdAt: Int64

    public init(
        id: String,
        url: String,
        circle: String?,
        events: Set<WebhookEvent>,
        secrets: [String],
        status: WebhookStatus = .active,
        disabledReason: String? = nil,
        bot: String? = nil,
        createdBy: String,
        createdAt: Int64
    ) {
        self.id = id
        self.url = url
        self.circle = circle
        self.events = events
        self.secrets = secrets
        self.status = status
        self.disabledReason = disabledReason
        self.bot = bot
        self.createdBy = createdBy
        self.createdAt = createdAt
    }

    /// The event this subscription is told `entry` as, if any: `mention` when it asks for those
    /// and `addressesBot` says the entry is meant for its bot, else the entry's own event if it
    /// asks for that. Never the bot's own entries.
    func event(for entry: CirclePost, addressesBot: (String) -> Bool) -> WebhookEvent? {
        guard self.status == .active, self.circle.map({ BinaryText($0) == BinaryText(entry.circle) }) ?? true,
            self.bot.map({ BinaryText($0) != BinaryText(entry.author) }) ?? true
        else { return nil }
        if self.events.contains(.mention), let bot = self.bot, addressesBot(bot) { return .mention }
        let own = WebhookEvent(entry)
        return self.events.contains(own) ? own : nil
    }

    /// The events as stored: names joined by commas, in a fixed order.
    var eventList: String { self.events.sorted().map(\.rawValue).joined(separator: ",") }

    static func events(from list: String) -> Set<WebhookEvent> {
        Set(list.split(separator: ",").compactMap { WebhookEvent(rawValue: String($0)) })
    }
}

/// The life of one delivery.
public enum WebhookDeliveryStatus: String, Sendable, Hashable, Codable {
    /// Not yet delivered: waiting for its turn, its next attempt, or its endpoint to be enabled.
    case pending
    case delivered
    /// Given up (``WebhookRetryPolicy/giveUpAfter``): the endpoint was disabled; an admin may retry it.
    case failed
}

/// One entry to send to one endpoint: written in the same transaction as the entry.
public struct WebhookDelivery: Sendable, Hashable {
    /// The `webhook-id` header: `msg_` and 32 hex digits, derived from the webhook and the entry,
    /// so the same delivery has the same id on every attempt and every node.
    public var id: String
    public var webhook: String
    public var circle: String
    public var seq: Int64
    public var event: WebhookEvent
    public var status: WebhookDeliveryStatus
    public var attempts: Int
    /// Milliseconds since 1970: made (the entry's commit), next due, last tried, delivered.
    public var createdAt: Int64
    public var nextAttemptAt: Int64
    public var lastAttemptAt: Int64?
    /// The last attempt's HTTP status, or its error.
    public var lastStatus: Int?
    public var lastError: String?

    public init(
        id: String,
        webhook: String,
        circle: String,
        seq: Int64,
        event: WebhookEvent,
        status: WebhookDeliveryStatus = .pending,
        attempts: Int = 0,
        createdAt: Int64,
        nextAttemptAt: Int64,
        lastAttemptAt: Int64? = nil,
        lastStatus: Int? = nil,
        lastError: String? = nil
    ) {
        self.id = id
        self.webhook = webhook
        self.circle = circle
        self.seq = seq
        self.event = event
        self.status = status
        self.attempts = attempts
        self.createdAt = createdAt
        self.nextAttemptAt = nextAttemptAt
        self.lastAttemptAt = lastAttemptAt
        self.lastStatus = lastStatus
        self.lastError = lastError
    }

    /// `msg_`, then the entry's time (milliseconds) in 12 hex digits, the queue (the
    /// subscription and the circle) in 16 and the `seq` in 16: the same for an entry and a
    /// subscription wherever it is made. Ids follow the entries' time, so a commit's deliveries
    /// are appended to the primary key's index: with the queue first, a commit wrote one page
    /// of the index for each queue it touched (16 circles posted in: about 8 pages).
    static func id(webhook: String, circle: String, seq: Int64, time: Int64) -> String {
        let queue = SHA256.hash(data: Data("\(webhook)\u{0}\(circle)".utf8))
        func digits(_ value: Int64, bytes: Int) -> String {
            let number = UInt64(bitPattern: value)
            return hexString((0..<bytes).map { UInt8(truncatingIfNeeded: number >> (8 * (bytes - 1 - $0))) })
        }
        return "msg_" + digits(time, bytes: 6) + hexString(queue.prefix(8)) + digits(seq, bytes: 8)
    }
}

/// A delivery claimed by a node, with what it needs to send it.
public struct ClaimedDelivery: Sendable {
    public var delivery: WebhookDelivery
    public var webhook: Webhook
    /// The entry as it is now (an edit or a delete since shows).
    public var entry: CirclePost?
}

/// How an attempt ended.
public enum DeliveryResult: Sendable, Hashable {
    case delivered(status: Int)
    /// Try again at `retryAt` (milliseconds since 1970).
    case retry(status: Int?, error: String, retryAt: Int64)
    /// Given up: the delivery is `failed` and its endpoint disabled with `reason`.
    case failed(status: Int?, error: String, reason: String)
}

/// What an attempt writes to its delivery: the same on both stores.
struct DeliveryAttempt: Hashable {
    var status: WebhookDeliveryStatus
    var httpStatus: Int?
    var error: String?
    /// The next attempt's time (for a delivery that stays pending).
    var next: Int64
    /// Set when the attempt gives up: the subscription is disabled with this reason.
    var disables: String?

    init(_ result: DeliveryResult, at now: Int64) {
        switch result {
        case .delivered(let code): (self.status, self.httpStatus, self.error, self.next, self.disables) = (.delivered, code, nil, now, nil)
        case .retry(let code, let message, let retryAt): (self.status, self.httpStatus, self.error, self.next, self.disables) = (.pending, code, message, retryAt, nil)
        case .failed(let code, let message, let reason): (self.status, self.httpStatus, self.error, self.next, self.disables) = (.failed, code, message, now, reason)
        }
    }
}

/// How a run's results are recorded: the released deliveries (untried), and the tried ones
/// grouped by what is recorded for them (a run's deliveries mostly share one: delivered, 2xx),
/// one statement for each group.
struct DeliveryRecord {
    var released: [String] = []
    var attempts: [(attempt: DeliveryAttempt, ids: [String])] = []

    init(_ results: [(id: String, result: DeliveryResult?)], at now: Int64) {
        var index: [DeliveryAttempt: Int] = [:]
        for (id, result) in results {
            guard let result else {
                self.released.append(id)
                continue
            }
            let attempt = DeliveryAttempt(result, at: now)
            if let at = index[attempt] {
                self.attempts[at].ids.append(id)
            } else {
                index[attempt] = self.attempts.count
                self.attempts.append((attempt, [id]))
            }
        }
    }

    /// Statements the record takes (one needs no transaction of its own).
    var statements: Int { (self.released.isEmpty ? 0 : 1) + self.attempts.count + self.attempts.filter { $0.attempt.disables != nil }.count }
}

/// An entry and a user it mentions.
private struct MentionedKey: Hashable {
    var circle: BinaryText
    var seq: Int64
    var user: BinaryText
}

extension CommitPlan {
    /// The webhook deliveries of the batch: one for each entry it stores and each active
    /// subscription that wants it, in the order of the entries. Both stores write them in the
    /// batch's transaction, so a stored entry always has its deliveries.
    func webhookDeliveries(_ webhooks: [Webhook], now: Int64) -> [WebhookDelivery] {
        guard !webhooks.isEmpty else { return [] }
        // Who each entry mentions (resolved as the mentions table has them) and who is in its
        // circle when that is a direct message: what makes it a `mention` for a bot.
        var mentioned = Set<MentionedKey>()
        for mention in self.mentionWrites {
            mentioned.insert(MentionedKey(circle: BinaryText(mention.circle), seq: mention.seq, user: BinaryText(mention.user)))
        }
        var deliveries: [WebhookDelivery] = []
        for entry in self.inserts where !self.restored.contains(EntryKey(entry)) {
            let direct = entry.isPost ? self.directMembers[BinaryText(entry.circle)] : nil
            func addressesBot(_ bot: String) -> Bool {
                mentioned.contains(MentionedKey(circle: BinaryText(entry.circle), seq: entry.seq, user: BinaryText(bot)))
                    || (direct?.contains { BinaryText($0) == BinaryText(bot) } ?? false)
            }
            for webhook in webhooks {
                guard let event = webhook.event(for: entry, addressesBot: addressesBot) else { continue }
                deliveries.append(
                    WebhookDelivery(
                        id: WebhookDelivery.id(webhook: webhook.id, circle: entry.circle, seq: entry.seq, time: entry.time),
                        webhook: webhook.id,
                        circle: entry.circle,
                        seq: entry.seq,
                        event: event,
                        createdAt: entry.time,
                        nextAttemptAt: now
                    )
                )
            }
        }
        return deliveries
    }
}

/// Standard Webhooks signatures (https://www.standardwebhooks.com): HMAC-SHA256 over
/// `id.timestamp.body` with each secret's key, as `v1,` and base64, separated by spaces.
enum WebhookSignature {
    static let secretPrefix = "whsec_"

    /// A new secret: `whsec_` and 32 random bytes in base64.
    static func newSecret() -> String {
        var generator = SystemRandomNumberGenerator()
        return Self.secretPrefix + Data((0..<32).map { _ in UInt8.random(in: 0...255, using: &generator) }).base64EncodedString()
    }

    /// The key of a secret (`whsec_` optional), or `nil` if it is not base64 of 24 to 64 bytes.
    static func key(_ secret: String) -> SymmetricKey? {
        let encoded = secret.hasPrefix(Self.secretPrefix) ? String(secret.dropFirst(Self.secretPrefix.count)) : secret
        guard let bytes = Data(base64Encoded: encoded), (24...64).contains(bytes.count) else { return nil }
        return SymmetricKey(data: bytes)
    }

    /// The `webhook-signature` header's value.
    static func sign(id: String, timestamp: Int64, body: [UInt8], secrets: [String]) -> String {
        var signed = Array("\(id).\(timestamp).".utf8)
        signed += body
        return secrets.compactMap(Self.key).map { key in
            "v1," + Data(HMAC<SHA256>.authenticationCode(for: signed, using: key)).base64EncodedString()
        }.joined(separator: " ")
    }
}

/// When a failed delivery is tried again: a value, tested without I/O.
///
/// After attempt n fails, the next waits `first` × 2^(n−1), at most `longest`, each spread by
/// up to ±`jitter` so that deliveries failing together do not come back together. Once a
/// delivery is older than `giveUpAfter`, a failure ends it: it is marked `failed` and its
/// endpoint disabled.
public struct WebhookRetryPolicy: Sendable, Hashable {
    public var first: Duration
    public var longest: Duration
    public var jitter: Double
    public var giveUpAfter: Duration

    public init(first: Duration = .seconds(5), longest: Duration = .seconds(3600), jitter: Double = 0.2, giveUpAfter: Duration = .seconds(24 * 3600)) {
        self.first = first
        self.longest = longest
        self.jitter = jitter
        self.giveUpAfter = giveUpAfter
    }

    /// What becomes of a delivery whose attempt number `attempt` (1 for the first) failed at `now`.
    /// - Parameter random: A number in 0..<1 (the jitter).
    func afterFailure(_ delivery: WebhookDelivery, attempt: Int, now: Int64, status: Int?, error: String, random: Double) -> DeliveryResult {
        if now - delivery.createdAt >= Self.milliseconds(self.giveUpAfter) {
            let hours = Self.milliseconds(self.giveUpAfter) / 3_600_000
            return .failed(status: status, error: error, reason: "delivery \(delivery.id) failed for \(hours) h; the last attempt: \(error)")
        }
        let base = Double(Self.milliseconds(self.first)) * pow(2, Double(min(max(attempt - 1, 0), 30)))
        let capped = min(base, Double(Self.milliseconds(self.longest)))
        let spread = capped * (1 + self.jitter * (2 * random - 1))
        return .retry(status: status, error: error, retryAt: now + max(1, Int64(spread)))
    }

    static func milliseconds(_ duration: Duration) -> Int64 {
        duration.components.seconds * 1000 + duration.components.attoseconds / 1_000_000_000_000_000
    }
}
