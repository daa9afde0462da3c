import NIOCore

/// The wire form of ``CircleServerMessage``, written by hand.
///
/// The bytes are exactly those `JSONEncoder` makes with `[.sortedKeys, .withoutEscapingSlashes]`
/// from the `Codable` conformance (keys in UTF-8 order, optional fields left out when `nil`,
/// `"`, `\`, and control characters escaped as `JSONEncoder` escapes them, everything else
/// as is), without the intermediate values, the `Data` and the copy into a `String`; the tests
/// compare the two byte for byte.
extension CircleServerMessage {
    /// The JSON text of this message, as sent in a text frame.
    public func encodedJSON() -> String {
        var out = JSONTextWriter()
        self.writeJSON(to: &out)
        return String(buffer: out.buffer)
    }

    /// Appends the JSON text of this message to `buffer` (the bytes ``encodedJSON()`` returns).
    public func writeJSON(into buffer: inout ByteBuffer) {
        var out = JSONTextWriter(buffer: buffer)
        buffer = ByteBuffer()  // so that the writer holds the only reference and grows it in place
        self.writeJSON(to: &out)
        buffer = out.buffer
    }

    func writeJSON(to out: inout JSONTextWriter) {
        switch self {
        case .ack(let id, let seq, let time, let duplicate):
            out.open()
            if duplicate { out.field("duplicate", true) }
            out.field("id", id)
            if let seq { out.field("seq", seq) }
            if let time { out.field("time", time) }
            out.field("type", "ack")
            out.close()
        case .error(let id, let code, let message):
            out.open()
            out.field("code", code.rawValue)
            if let id { out.field("id", id) }
            out.field("message", message)
            out.field("type", "error")
            out.close()
        case .post(let post):
            out.open()
            post.writeFields(to: &out)
            out.field("type", "post")
            out.close()
        case .history(let id, let circle, let posts, let more, let lastSeq):
            out.open()
            out.field("circle", circle)
            out.field("id", id)
            if let lastSeq { out.field("lastSeq", lastSeq) }
            out.field("more", more)
            out.key("posts")
            out.raw("[")
            for (index, post) in posts.enumerated() {
                if index > 0 { out.raw(",") }
                out.open()
                post.writeFields(to: &out)
                out.close()
            }
            out.raw("]")
            out.field("type", "history")
            out.close()
        case .joined(let circle, let user):
            Self.writePresence("joined", circle: circle, user: user, to: &out)
        case .left(let circle, let user):
            Self.writePresence("left", circle: circle, user: user, to: &out)
        case .typing(let circle, let user):
            Self.writePresence("typing", circle: circle, user: user, to: &out)
        case .gap(let circle, let from, let to):
            out.open()
            out.field("circle", circle)
            out.field("from", from)
            out.field("to", to)
            out.field("type", "gap")
            out.close()
        case .read(let circle, let seq):
            out.open()
            out.field("circle", circle)
            out.field("seq", seq)
            out.field("type", "read")
            out.close()
        case .notify(let circle, let level):
            out.open()
            out.field("circle", circle)
            out.field("level", level.rawValue)
            out.field("type", "notify")
            out.close()
        case .circles(let id, let circles):
            out.open()
            out.key("circles")
            out.raw("[")
            for (index, circle) in circles.enumerated() {
                if index > 0 { out.raw(",") }
                circle.writeJSON(to: &out)
            }
            out.raw("]")
            out.field("id", id)
            out.field("type", "circles")
            out.close()
        case .search(let id, let results):
            out.open()
            out.key("hits")
            out.raw("[")
            for (index, hit) in results.hits.enumerated() {
                if index > 0 { out.raw(",") }
                out.open()
                out.field("author", hit.author)
                out.field("circle", hit.circle)
                out.field("seq", hit.seq)
                out.field("snippet", hit.snippet)
                out.field("time", hit.time)
                out.close()
            }
            out.raw("]")
            out.field("id", id)
            if let next = results.next { out.field("next", next) }
            out.field("type", "search")
            out.close()
        case .added(let circle):
            out.open()
            out.key("circle")
            circle.writeJSON(to: &out)
            out.field("type", "added")
            out.close()
        }
    }

    private static func writePresence(_ type: String, circle: String, user: String, to out: inout JSONTextWriter) {
        out.open()
        out.field("circle", circle)
        out.field("type", type)
        out.field("user", user)
        out.close()
    }
}

extension CirclePost {
    /// The post's fields in key order; the `post` event adds `type` after them (it sorts last).
    func writeFields(to out: inout JSONTextWriter) {
        if let attachment = self.attachment { out.field("attachment", attachment) }
        out.field("author", self.author)
        if let change = self.change { out.field("change", change.rawValue) }
        out.field("circle", self.circle)
        if self.deleted { out.field("deleted", true) }
        if let edited = self.edited { out.field("edited", edited) }
        if let emoji = self.emoji { out.field("emoji", emoji) }
        if let event = self.event { out.field("event", event.rawValue) }
        out.field("id", self.id)
        if let member = self.member { out.field("member", member) }
        if let mentions = self.mentions {
            out.key("mentions")
            out.raw("[")
            for (index, user) in mentions.enumerated() {
                if index > 0 { out.raw(",") }
                out.string(user)
            }
            out.raw("]")
        }
        if self.mentionsEveryone { out.field("mentionsEveryone", true) }
        if let reactions = self.reactions {
            out.key("reactions")
            out.raw("[")
            for (index, reaction) in reactions.enumerated() {
                if index > 0 { out.raw(",") }
                out.open()
                out.field("count", reaction.count)
                out.field("emoji", reaction.emoji)
                out.field("me", reaction.me)
                out.key("users")
                out.raw("[")
                for (userIndex, user) in reaction.users.enumerated() {
                    if userIndex > 0 { out.raw(",") }
                    out.string(user)
                }
                out.raw("]")
                out.close()
            }
            out.raw("]")
        }
        if let replyTo = self.replyTo { out.field("replyTo", replyTo) }
        out.field("seq", self.seq)
        if let target = self.target { out.field("target", target) }
        if let text = self.text { out.field("text", text) }
        out.field("time", self.time)
    }
}

extension CircleSummary {
    func writeJSON(to out: inout JSONTextWriter) {
        out.open()
        out.field("createdAt", self.createdAt)
        if let direct = self.direct {
            out.key("direct")
            out.raw("[")
            for (index, user) in direct.enumerated() {
                if index > 0 { out.raw(",") }
                out.string(user)
            }
            out.raw("]")
        }
        out.field("lastSeq", self.lastSeq)
        out.field("mentions", self.mentions)
        out.field("name", self.name)
        out.field("notify", self.notify.rawValue)
        out.field("owner", self.owner)
        out.field("private", self.private)
        out.field("readOnly", self.readOnly)
        out.field("readSeq", self.readSeq)
        out.field("systemEntries", self.systemEntries)
        out.field("unread", self.unread)
        out.close()
    }
}

/// Appends JSON to a `ByteBuffer`: objects opened and closed by the caller, fields written in
/// the order given (the caller sorts them), strings escaped. A buffer rather than a `String`:
/// the server sends the bytes as they are, in a frame whose header goes in front of them, so
/// no copy into a `String` and back is made (docs/bench/postpath.md).
struct JSONTextWriter {
    private(set) var buffer: ByteBuffer
    /// Whether the innermost open object has a field yet (a comma goes before the next one).
    private var hasField = false

    init() {
        self.buffer = ByteBuffer()
        self.buffer.reserveCapacity(minimumWritableBytes: 160)
    }

    /// Writes after what `buffer` holds. Its storage should have no other owner, else the first
    /// write copies it.
    init(buffer: ByteBuffer) {
        self.buffer = buffer
    }

    mutating func raw(_ literal: StaticString) {
        self.buffer.writeStaticString(literal)
    }

    private mutating func byte(_ byte: UInt8) {
        self.buffer.writeInteger(byte)
    }

    mutating func open() {
        self.byte(UInt8(ascii: "{"))
        self.hasField = false
    }

    mutating func close() {
        self.byte(UInt8(ascii: "}"))
        // An object is itself a value: what follows it in its container needs a comma.
        self.hasField = true
    }

    mutating func key(_ name: StaticString) {
        if self.hasField { self.byte(UInt8(ascii: ",")) }
        self.hasField = true
        self.byte(UInt8(ascii: "\""))
        self.raw(name)
        self.raw("\":")
    }

    mutating func field(_ name: StaticString, _ value: String) {
        self.key(name)
        self.string(value)
    }

    mutating func field(_ name: StaticString, _ value: Int64) {
        self.key(name)
        self.buffer.writeString(String(value))
    }

    mutating func field(_ name: StaticString, _ value: Bool) {
        self.key(name)
        self.raw(value ? "true" : "false")
    }

    /// A quoted string, escaped as `JSONEncoder` escapes: `\"`, `\\`, `\b`, `\f`, `\n`, `\r`,
    /// `\t`, other bytes below 0x20 as `\u00xx` (lowercase hex); `/` and everything else as is.
    mutating func string(_ value: String) {
        self.byte(UInt8(ascii: "\""))
        var value = value
        value.withUTF8 { bytes in
            var start = 0
            for index in bytes.indices {
                let byte = bytes[index]
                guard byte < 0x20 || byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\") else { continue }
                if start < index {
                    self.buffer.writeBytes(UnsafeRawBufferPointer(rebasing: UnsafeRawBufferPointer(bytes)[start..<index]))
                }
                start = index + 1
                switch byte {
                case UInt8(ascii: "\""): self.raw("\\\"")
                case UInt8(ascii: "\\"): self.raw("\\\\")
                case 0x08: self.raw("\\b")
                case 0x0C: self.raw("\\f")
                case 0x0A: self.raw("\\n")
                case 0x0D: self.raw("\\r")
                case 0x09: self.raw("\\t")
                default:
                    let hex: StaticString = "0123456789abcdef"
                    self.raw("\\u00")
                    hex.withUTF8Buffer { digits in
                        self.byte(digits[Int(byte >> 4)])
                        self.byte(digits[Int(byte & 0x0F)])
                    }
                }
            }
            if start < bytes.count {
                self.buffer.writeBytes(UnsafeRawBufferPointer(rebasing: UnsafeRawBufferPointer(bytes)[start...]))
            }
        }
        self.byte(UInt8(ascii: "\""))
    }
}
