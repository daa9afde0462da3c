/// The JSON shapes of webhooks (docs/API.md, "Webhooks").
extension HTTPAPI.Path {
    public static let adminWebhooks = "/v1/admin/webhooks"

    public static func adminWebhook(_ id: String) -> String { Pattern.adminWebhook.path(id) }
    public static func adminWebhookDeliveries(_ id: String) -> String { Pattern.adminWebhookDeliveries.path(id) }
    public static func adminWebhookRotate(_ id: String) -> String { Pattern.adminWebhookRotate.path(id) }
    public static func adminWebhookRetry(_ id: String, delivery: String) -> String { Pattern.adminWebhookRetry.path(id, delivery) }
}

extension HTTPAPI {
    /// `POST /v1/admin/webhooks`.
    public struct CreateWebhook: Codable, Sendable, Hashable {
        /// `https://…` (or `http://`); loopback and private addresses only where the server allows them.
        public var url: String
        /// One circle; absent: every circle.
        public var circle: String?
        /// Of `post`, `edit`, `delete`, `reaction`; absent: all of them.
        public var events: [String]?
        /// A bot account (role `bot`): the endpoint's JSON replies become its posts.
        public var bot: String?
        public init(url: String, circle: String? = nil, events: [String]? = nil, bot: String? = nil) {
            self.url = url
            self.circle = circle
            self.events = events
            self.bot = bot
        }
    }

    /// A subscription as the admin API shows it. `secret` only in the answers that make one
    /// (creating, rotating): it is shown once.
    public struct WebhookInfo: Codable, Sendable, Hashable {
        public var id: String
        public var url: String
        public var circle: String?
        public var events: [String]
        /// `active` or `disabled`.
        public var status: String
        /// Why it is disabled (by an admin, or a delivery that failed for good).
        public var disabledReason: String?
        /// The bot whose posts the endpoint's replies become.
        public var bot: String?
        public var createdBy: String
        public var createdAt: Int64
        /// Signing secrets in use: 1, or 2 while rotating.
        public var secrets: Int
        /// Deliveries by status: `pending`, `delivered`, `failed`.
        public var deliveries: [String: Int]
        public var secret: String?
        public init(
            id: String, url: String, circle: String?, events: [String], status: String, disabledReason: String?, bot: String? = nil, createdBy: String,
            createdAt: Int64, secrets: Int, deliveries: [String: Int], secret: String? = nil
        ) {
            self.id = id
            self.url = url
            self.circle = circle
            self.events = events
            self.status = status
            self.disabledReason = disabledReason
            self.bot = bot
            self.createdBy = createdBy
            self.createdAt = createdAt
            self.secrets = secrets
            self.deliveries = deliveries
            self.secret = secret
        }
    }

    public struct WebhookList: Codable, Sendable, Hashable {
        public var webhooks: [WebhookInfo]
        public init(webhooks: [WebhookInfo]) { self.webhooks = webhooks }
    }

    /// `PATCH /v1/admin/webhooks/{id}`.
    public struct UpdateWebhook: Codable, Sendable, Hashable {
        /// `true` enables (a disabled subscription's waiting deliveries go out, in order); `false` disables.
        public var enabled: Bool
        public init(enabled: Bool) { self.enabled = enabled }
    }

    /// `POST /v1/admin/webhooks/{id}/rotate`.
    public struct RotateWebhookSecret: Codable, Sendable, Hashable {
        /// Keep signing with the previous secret too (default `true`), so receivers can switch;
        /// `false` drops it. At most two secrets are kept: rotating again drops the oldest.
        public var keepPrevious: Bool?
        public init(keepPrevious: Bool? = nil) { self.keepPrevious = keepPrevious }
    }

    public struct WebhookDeliveryInfo: Codable, Sendable, Hashable {
        /// The `webhook-id` the endpoint receives.
        public var id: String
        public var circle: String
        public var seq: Int64
        public var event: String
        /// `pending`, `delivered` or `failed`.
        public var status: String
        public var attempts: Int
        public var createdAt: Int64
        public var nextAttemptAt: Int64?
        public var lastAttemptAt: Int64?
        public var lastStatus: Int?
        public var lastError: String?
        public init(
            id: String, circle: String, seq: Int64, event: String, status: String, attempts: Int, createdAt: Int64, nextAttemptAt: Int64?,
            lastAttemptAt: Int64?, lastStatus: Int?, lastError: String?
        ) {
            self.id = id
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
    }

    public struct WebhookDeliveryList: Codable, Sendable, Hashable {
        public var deliveries: [WebhookDeliveryInfo]
        public init(deliveries: [WebhookDeliveryInfo]) { self.deliveries = deliveries }
    }
}
