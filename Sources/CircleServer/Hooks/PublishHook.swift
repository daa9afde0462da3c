import CircleWire
import Crypto
import Foundation

/// A circle's publish hook (docs/API.md, "Publish hooks"): before a post or an edit of the circle
/// is committed, the server sends it to `url`, signed per Standard Webhooks with `secret`; the
/// answer accepts it, refuses it with a reason, or replaces its text.
public struct PublishHook: Sendable, Hashable {
    /// What a post becomes when the hook cannot decide it: no answer within ``timeout``, a
    /// failed exchange, a status other than `2xx`, or an answer that is not a verdict.
    public enum FailurePolicy: String, Sendable, Hashable, CaseIterable {
        /// Nothing is stored; the sender gets `hook_unavailable` (and may retry with the same id).
        case refuse
        /// The post is stored as sent.
        case accept
    }

    public var circle: String
    public var url: String
    /// `whsec_` and base64: kept as it is (the server signs with it).
    public var secret: String
    /// Milliseconds a post waits for the answer: ``timeoutRange``.
    public var timeoutMilliseconds: Int
    public var onFailure: FailurePolicy
    public var createdBy: String
    /// Milliseconds since 1970.
    public var createdAt: Int64

    public init(
        circle: String,
        url: String,
        secret: String,
        timeoutMilliseconds: Int = PublishHook.defaultTimeoutMilliseconds,
        onFailure: FailurePolicy = .refuse,
        createdBy: String,
        createdAt: Int64
    ) {
        self.circle = circle
        self.url = url
        self.secret = secret
        self.timeoutMilliseconds = timeoutMilliseconds
        self.onFailure = onFailure
        self.createdBy = createdBy
        self.createdAt = createdAt
    }

    /// 2 s unless the hook says otherwise.
    public static let defaultTimeoutMilliseconds = 2000
    /// The deadlines one may set.
    public static let timeoutRange = 100...10_000
    /// The longest answer read; a longer one is a failure (the policy decides).
    public static let maxReplyBytes = 64 * 1024
    /// The longest reason a refusal carries to the sender (a longer one is cut at a character).
    public static let maxReasonBytes = 500

    /// The `webhook-id` of the call for one entry: `pub_` and 32 hex digits of its idempotency
    /// key, so a retried post that reaches the hook again (it was not committed) has the same id.
    static func callID(circle: String, author: String, clientID: String, change: CircleChange?) -> String {
        let digest = SHA256.hash(data: Data("\(circle)\u{0}\(author)\u{0}\(clientID)\u{0}\(change?.rawValue ?? "post")".utf8))
        return "pub_" + hexString(digest.prefix(16))
    }
}

/// What a store keeps of publish hooks: one per circle at most.
public protocol PublishHookStore: Sendable {
    /// Creates or replaces the hook of `hook.circle`.
    func setPublishHook(_ hook: PublishHook) async throws
    /// Every hook, by circle.
    func publishHooks() async throws -> [PublishHook]
    /// Removes a circle's hook; `false` when it has none.
    func deletePublishHook(circle: String) async throws -> Bool
    /// The entry stored with an idempotency key, if any (a retried post already committed is
    /// answered from it without asking the hook again).
    func storedEntry(circle: String, author: String, clientID: String) async throws -> CirclePost?
}

/// The body of a publish hook call (docs/API.md, "Publish hooks"): `{"type": "publish",
/// "timestamp", "data"}` as Standard Webhooks suggests, `data` being the entry on its way.
enum PublishHookPayload {
    private struct Body: Encodable {
        var type: String
        var timestamp: String
        var data: Content
    }

    private struct Content: Encodable {
        var circle: String
        var author: String
        var id: String
        /// `post` or `edit`.
        var kind: String
        var text: String?
        var attachment: String?
        var replyTo: Int64?
        /// An edit: the post it changes.
        var target: Int64?
    }

    static func body(_ post: NewPost, at time: Int64) -> [UInt8] {
        let content = Content(
            circle: post.circle, author: post.author, id: post.clientID, kind: post.change == .edit ? "edit" : "post", text: post.text,
            attachment: post.attachment, replyTo: post.replyTo, target: post.target
        )
        return Array(HTTPAPI.encode(Body(type: "publish", timestamp: WebhookPayload.rfc3339(milliseconds: time), data: content)))
    }
}
