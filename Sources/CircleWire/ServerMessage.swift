import Foundation

/// The subprotocol name for this protocol version.
public let circleSubprotocol = "circle.v1"

/// A stored post as clients see it.
public struct CirclePost: Sendable, Hashable, Codable {
    public var circle: String
    /// Position in the circle: 1, 2, 3, … with no gaps.
    public var seq: Int64
    public var author: String
    public var text: String?
    public var attachment: String?
    /// Commit time, milliseconds since 1970 (UTC).
    public var time: Int64
    /// The request id the author's client gave the post (its idempotency key).
    public var id: String

    public init(circle: String, seq: Int64, author: String, text: String?, attachment: String?, time: Int64, id: String) {
        self.circle = circle
        self.seq = seq
        self.author = author
        self.text = text
        self.attachment = attachment
        self.time = time
        self.id = id
    }
}

/// Everything a server sends: replies to requests and events of joined circles.
/// On the wire each is a JSON object whose `type` names the case.
public enum CircleServerMessage: Sendable, Hashable {
    /// A request succeeded. For `post`: the post's `seq` and commit `time` (`duplicate` when the
    /// id was already stored and this is the original ack). For `join`: `seq` is the circle's
    /// newest sequence number when the subscription began; replayed posts follow up to it.
    case ack(id: String, seq: Int64?, time: Int64?, duplicate: Bool)
    /// A request failed; `code` is one of ``CircleErrorCode``.
    case error(id: String?, code: CircleErrorCode, message: String)
    /// A post in a joined circle (replayed or live), in sequence order.
    case post(CirclePost)
    /// A page of stored posts, answering `history`; `more` tells whether further pages exist.
    case history(id: String, circle: String, posts: [CirclePost], more: Bool)
    /// Someone joined the circle.
    case joined(circle: String, user: String)
    /// Someone left the circle (or disconnected).
    case left(circle: String, user: String)
    /// Someone is typing.
    case typing(circle: String, user: String)
    /// Posts `from...to` cannot be replayed (no longer stored); the client should tell its user.
    case gap(circle: String, from: Int64, to: Int64)
}

extension CircleServerMessage: Codable {
    private enum Kind: String, Codable {
        case ack, error, post, history, joined, left, typing, gap
    }

    private enum Keys: String, CodingKey {
        case type, id, seq, time, duplicate, code, message, circle, user, posts, more, from, to
        case author, text, attachment
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: Keys.self)
        switch try container.decode(Kind.self, forKey: .type) {
        case .ack:
            self = .ack(
                id: try container.decode(String.self, forKey: .id),
                seq: try container.decodeIfPresent(Int64.self, forKey: .seq),
                time: try container.decodeIfPresent(Int64.self, forKey: .time),
                duplicate: try container.decodeIfPresent(Bool.self, forKey: .duplicate) ?? false
            )
        case .error:
            self = .error(
                id: try container.decodeIfPresent(String.self, forKey: .id),
                code: try container.decode(CircleErrorCode.self, forKey: .code),
                message: try container.decodeIfPresent(String.self, forKey: .message) ?? ""
            )
        case .post:
            self = .post(try CirclePost(from: decoder))
        case .history:
            self = .history(
                id: try container.decode(String.self, forKey: .id),
                circle: try container.decode(String.self, forKey: .circle),
                posts: try container.decode([CirclePost].self, forKey: .posts),
                more: try container.decode(Bool.self, forKey: .more)
            )
        case .joined:
            self = .joined(circle: try container.decode(String.self, forKey: .circle), user: try container.decode(String.self, forKey: .user))
        case .left:
            self = .left(circle: try container.decode(String.self, forKey: .circle), user: try container.decode(String.self, forKey: .user))
        case .typing:
            self = .typing(circle: try container.decode(String.self, forKey: .circle), user: try container.decode(String.self, forKey: .user))
        case .gap:
            self = .gap(
                circle: try container.decode(String.self, forKey: .circle),
                from: try container.decode(Int64.self, forKey: .from),
                to: try container.decode(Int64.self, forKey: .to)
            )
        }
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: Keys.self)
        switch self {
        case .ack(let id, let seq, let time, let duplicate):
            try container.encode(Kind.ack, forKey: .type)
            try container.encode(id, forKey: .id)
            try container.encodeIfPresent(seq, forKey: .seq)
            try container.encodeIfPresent(time, forKey: .time)
            if duplicate { try container.encode(true, forKey: .duplicate) }
        case .error(let id, let code, let message):
            try container.encode(Kind.error, forKey: .type)
            try container.encodeIfPresent(id, forKey: .id)
            try container.encode(code, forKey: .code)
            try container.encode(message, forKey: .message)
        case .post(let post):
            try container.encode(Kind.post, forKey: .type)
            try post.encode(to: encoder)
        case .history(let id, let circle, let posts, let more):
            try container.encode(Kind.history, forKey: .type)
            try container.encode(id, forKey: .id)
            try container.encode(circle, forKey: .circle)
            try container.encode(posts, forKey: .posts)
            try container.encode(more, forKey: .more)
        case .joined(let circle, let user):
            try container.encode(Kind.joined, forKey: .type)
            try container.encode(circle, forKey: .circle)
            try container.encode(user, forKey: .user)
        case .left(let circle, let user):
            try container.encode(Kind.left, forKey: .type)
            try container.encode(circle, forKey: .circle)
            try container.encode(user, forKey: .user)
        case .typing(let circle, let user):
            try container.encode(Kind.typing, forKey: .type)
            try container.encode(circle, forKey: .circle)
            try container.encode(user, forKey: .user)
        case .gap(let circle, let from, let to):
            try container.encode(Kind.gap, forKey: .type)
            try container.encode(circle, forKey: .circle)
            try container.encode(from, forKey: .from)
            try container.encode(to, forKey: .to)
        }
    }

    /// The JSON text of this message the way `JSONEncoder` writes it (sorted keys, slashes as
    /// is): the reference ``encodedJSON()`` is tested against.
    package func encodedJSONWithEncoder() -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        // Encoding these value types cannot fail.
        let data = (try? encoder.encode(self)) ?? Data("{}".utf8)
        return String(decoding: data, as: UTF8.self)
    }

    /// Decodes a server message from a text frame.
    public static func decode(_ text: String) throws -> CircleServerMessage {
        try JSONDecoder().decode(CircleServerMessage.self, from: Data(text.utf8))
    }
}
