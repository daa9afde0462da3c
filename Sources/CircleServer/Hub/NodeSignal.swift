import CircleWire
import Foundation

/// What one node tells the others that share its store (``SharedCircleStore``). Signals are
/// best effort: the store stays the truth (a lost ``posts`` signal is made good by the poll,
/// a lost ``revoke`` by the store's revocation log); typing and presence are ephemeral anyway.
struct NodeSignal: Sendable, Hashable, Codable {
    enum Kind: Sendable, Hashable {
        /// Posts of `circle` with seqs `first...last` were stored through the sending node;
        /// `posts` carries them when they fit in one signal (else the receiver reads them).
        case posts(circle: String, first: Int64, last: Int64, posts: [CirclePost]?)
        /// An ephemeral event (`typing`, `joined`, `left`), already encoded as its JSON text,
        /// for the circle's subscribers; with `limit`, only where the circle has at most that
        /// many subscribers on the receiving node.
        case ephemeral(circle: String, json: String, limit: Int?)
        /// `user` lost access to `circle`: their connections leave it.
        case revoke(circle: String, user: String)
        /// An event for every connection of `user` (a read marker moved), as its JSON text.
        case user(user: String, json: String)
        /// The connections of `user` that signed in with `session` (all of them for `nil`) end.
        case end(user: String, session: String?)
    }

    /// The sending node, so that it can ignore its own signals.
    var node: String
    var kind: Kind

    /// The largest signal sent: PostgreSQL's `NOTIFY` takes payloads shorter than 8000 bytes.
    static let maximumSize = 7900

    // A compact JSON shape: { "n": node, "k": "p"|"e"|"r"|"u", "c": circle, ... }.
    private enum CodingKeys: String, CodingKey {
        case node = "n", kind = "k", circle = "c", first = "f", last = "l", posts = "p", json = "j", limit = "m", user = "u", session = "s"
    }

    init(node: String, kind: Kind) {
        self.node = node
        self.kind = kind
    }

    init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        self.node = try container.decode(String.self, forKey: .node)
        let kind = try container.decode(String.self, forKey: .kind)
        if kind == "u" {
            self.kind = .user(user: try container.decode(String.self, forKey: .user), json: try container.decode(String.self, forKey: .json))
            return
        }
        if kind == "x" {
            self.kind = .end(user: try container.decode(String.self, forKey: .user), session: try container.decodeIfPresent(String.self, forKey: .session))
            return
        }
        let circle = try container.decode(String.self, forKey: .circle)
        switch kind {
        case "p":
            self.kind = .posts(
                circle: circle,
                first: try container.decode(Int64.self, forKey: .first),
                last: try container.decode(Int64.self, forKey: .last),
                posts: try container.decodeIfPresent([CirclePost].self, forKey: .posts)
            )
        case "e":
            self.kind = .ephemeral(
                circle: circle,
                json: try container.decode(String.self, forKey: .json),
                limit: try container.decodeIfPresent(Int.self, forKey: .limit)
            )
        case "r":
            self.kind = .revoke(circle: circle, user: try container.decode(String.self, forKey: .user))
        case let other:
            throw DecodingError.dataCorruptedError(forKey: .kind, in: container, debugDescription: "unknown signal kind \(other)")
        }
    }

    func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(self.node, forKey: .node)
        try Self.encode(self.kind, into: &container)
    }

    /// The fields of `kind`, for ``encode(to:)`` and for ``encoded()`` (which writes the node itself).
    private static func encode(_ kind: Kind, into container: inout KeyedEncodingContainer<CodingKeys>) throws {
        switch kind {
        case .posts(let circle, let first, let last, let posts):
            try container.encode("p", forKey: .kind)
            try container.encode(circle, forKey: .circle)
            try container.encode(first, forKey: .first)
            try container.encode(last, forKey: .last)
            try container.encodeIfPresent(posts, forKey: .posts)
        case .ephemeral(let circle, let json, let limit):
            try container.encode("e", forKey: .kind)
            try container.encode(circle, forKey: .circle)
            try container.encode(json, forKey: .json)
            try container.encodeIfPresent(limit, forKey: .limit)
        case .user(let user, let json):
            try container.encode("u", forKey: .kind)
            try container.encode(user, forKey: .user)
            try container.encode(json, forKey: .json)
        case .revoke(let circle, let user):
            try container.encode("r", forKey: .kind)
            try container.encode(circle, forKey: .circle)
            try container.encode(user, forKey: .user)
        case .end(let user, let session):
            try container.encode("x", forKey: .kind)
            try container.encode(user, forKey: .user)
            try container.encodeIfPresent(session, forKey: .session)
        }
    }

    /// The signal's fields without the node, as one JSON object.
    private struct Fields: Encodable {
        var kind: Kind

        func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: CodingKeys.self)
            try NodeSignal.encode(self.kind, into: &container)
        }
    }

    /// The signal as the text of one notification, or `nil` when it is too large to send (a
    /// posts signal then goes without its posts). The text begins with ``prefix(of:)`` of its
    /// node, so that the node can tell its own signals, which PostgreSQL sends back to it as
    /// well, without decoding them (decoding them was a visible share of a lone node's CPU with
    /// 16 writers: `perf`; docs/bench/nodes.md).
    func encoded() -> String? {
        guard let prefix = Self.prefix(of: self.node),
              let fields = try? JSONEncoder().encode(Fields(kind: self.kind)),
              fields.first == UInt8(ascii: "{"), fields.count > 2,
              prefix.utf8.count + fields.count - 1 <= Self.maximumSize
        else {
            if case .posts(let circle, let first, let last, .some) = self.kind {
                return NodeSignal(node: self.node, kind: .posts(circle: circle, first: first, last: last, posts: nil)).encoded()
            }
            return nil
        }
        return prefix + String(decoding: fields.dropFirst(), as: UTF8.self)
    }

    /// How the texts of `node`'s signals begin: `{"n":"<node>",`.
    static func prefix(of node: String) -> String? {
        guard let name = try? JSONEncoder().encode(node) else { return nil }
        return #"{"n":"# + String(decoding: name, as: UTF8.self) + ","
    }

    /// A received notification's text, or `nil` when it is not a signal of this version.
    init?(notification: String) {
        guard let signal = try? JSONDecoder().decode(NodeSignal.self, from: Data(notification.utf8)) else { return nil }
        self = signal
    }
}
