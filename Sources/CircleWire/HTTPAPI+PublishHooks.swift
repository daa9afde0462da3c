/// The JSON shapes of publish hooks (docs/API.md, "Publish hooks").
extension HTTPAPI.Path {
    /// `PUT`, `GET`, `DELETE`: a circle's publish hook.
    public static func publishHook(_ circle: String) -> String { Pattern.publishHook.path(circle) }
}

extension HTTPAPI {
    /// `PUT /v1/circles/{name}/publish-hook`.
    public struct SetPublishHook: Codable, Sendable, Hashable {
        /// `https://…` (or `http://`); loopback and private addresses only where the server allows them.
        public var url: String
        /// How long a post waits for the hook's answer: 100…10000 ms; absent: 2000.
        public var timeoutMs: Int?
        /// What a post becomes when the hook does not answer in time, fails or answers something
        /// that is not a verdict: `refuse` (the default; the sender gets `hook_unavailable`) or `accept`.
        public var onFailure: String?
        /// `true`: a new signing secret, shown in the answer (a new hook always gets one).
        public var rotateSecret: Bool?
        public init(url: String, timeoutMs: Int? = nil, onFailure: String? = nil, rotateSecret: Bool? = nil) {
            self.url = url
            self.timeoutMs = timeoutMs
            self.onFailure = onFailure
            self.rotateSecret = rotateSecret
        }
    }

    /// A circle's publish hook as the API shows it; `secret` only in the answer that makes one.
    public struct PublishHookInfo: Codable, Sendable, Hashable {
        public var circle: String
        public var url: String
        public var timeoutMs: Int
        /// `refuse` or `accept`.
        public var onFailure: String
        public var createdBy: String
        public var createdAt: Int64
        public var secret: String?
        public init(circle: String, url: String, timeoutMs: Int, onFailure: String, createdBy: String, createdAt: Int64, secret: String? = nil) {
            self.circle = circle
            self.url = url
            self.timeoutMs = timeoutMs
            self.onFailure = onFailure
            self.createdBy = createdBy
            self.createdAt = createdAt
            self.secret = secret
        }
    }
}
