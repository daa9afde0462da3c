/// The paths and JSON shapes of posting over HTTP (docs/API.md, "Posting over HTTP").
extension HTTPAPI.Path {
    /// `PATCH`, `DELETE`: one post of a circle.
    public static func message(_ seq: Int64, in circle: String) -> String { Pattern.message.path(circle, String(seq)) }
    /// `PUT`, `DELETE`: the caller's reaction `emoji` to a post.
    public static func reaction(_ emoji: String, to seq: Int64, in circle: String) -> String {
        Pattern.reaction.path(circle, String(seq), emoji)
    }
}

extension HTTPAPI {
    /// `POST /v1/circles/{name}/messages`.
    public struct NewMessage: Codable, Sendable, Hashable {
        public var text: String?
        /// The idempotency key (or the `Idempotency-Key` header): at most 128 bytes.
        public var id: String?
        /// A media id the author uploaded.
        public var attachment: String?
        /// The `seq` of the post this one answers.
        public var replyTo: Int64?
        /// Post as this user (API keys with `post_as_user`).
        public var `as`: String?
        public init(text: String?, id: String? = nil, attachment: String? = nil, replyTo: Int64? = nil, as user: String? = nil) {
            self.text = text
            self.id = id
            self.attachment = attachment
            self.replyTo = replyTo
            self.as = user
        }
    }

    /// `PATCH /v1/circles/{name}/messages/{seq}`.
    public struct EditMessage: Codable, Sendable, Hashable {
        public var text: String
        public var id: String?
        public var `as`: String?
        public init(text: String, id: String? = nil, as user: String? = nil) {
            self.text = text
            self.id = id
            self.as = user
        }
    }

    /// The answer to an entry written over HTTP: the WebSocket's ack. 201 when it was stored now,
    /// 200 with `duplicate` for a repeat of its id.
    public struct MessageAck: Codable, Sendable, Hashable {
        /// The idempotency key it was stored under (made by the server when none was given).
        public var id: String
        public var circle: String
        public var seq: Int64
        public var time: Int64
        public var author: String
        public var duplicate: Bool
        public init(id: String, circle: String, seq: Int64, time: Int64, author: String, duplicate: Bool) {
            self.id = id
            self.circle = circle
            self.seq = seq
            self.time = time
            self.author = author
            self.duplicate = duplicate
        }
    }
}
