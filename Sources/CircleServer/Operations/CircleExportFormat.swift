import CircleWire
import Foundation

/// The export format of one circle (docs/OPERATIONS.md, "Export and import of a circle"): a
/// directory with `circle.jsonl`, `media/<sha256>` and `manifest.json`.
///
/// `circle.jsonl` is JSON Lines: a header (line 1) with the format, its version, the circle and
/// how many lines of each kind follow; then the members, the media and the entries, in that
/// order, one JSON object a line with a `type`. Entries come in `seq` order, 1, 2, 3, … without
/// gaps (from the header's `firstSeq` when the circle's retention policy removed the first ones,
/// whose posts later changes and replies may still name), each as the store keeps it now (a deleted post is a tombstone; the text of the edits of
/// a deleted post is gone).
///
/// ``Reader`` checks a file line by line, as a value without I/O (the `circle-export` fuzz
/// target): every rule an import relies on, so that a file it accepts imports whole.
public enum CircleExportFormat {
    /// The header's `format`.
    public static let formatName = "circle-export"
    /// The header's `version` this build writes and reads.
    public static let version = 1
    /// The history's file in an export's directory.
    public static let historyName = "circle.jsonl"
    /// The media files' directory in an export's directory.
    public static let mediaName = "media"
    /// The manifest's name.
    public static let manifestName = "manifest.json"

    /// Limits a file must keep (each refused with its line).
    public enum Limits {
        /// Bytes of one line (a post's text is far less; a line holds one entry).
        public static let maxLineBytes = 1 << 20
        /// Members of one circle.
        public static let maxMembers = 1_000_000
        /// Entries of one circle.
        public static let maxEntries: Int64 = 100_000_000
        /// Media files of one circle.
        public static let maxMedia = 1_000_000
    }

    /// Line 1.
    public struct Header: Codable, Sendable, Hashable {
        /// `circle-export`.
        public var format: String
        /// 1.
        public var version: Int
        public var circle: String
        public var owner: String
        public var `private`: Bool
        /// Milliseconds since 1970.
        public var createdAt: Int64
        /// Read-only for its members (docs/API.md, "Moderation").
        public var readOnly: Bool
        /// Lines of each kind that follow, in this order.
        public var members: Int
        public var media: Int
        public var entries: Int64
        /// The `seq` of the first entry when the circle's retention policy removed the ones
        /// before it (absent: 1). A circle that kept none of its entries begins after its last.
        public var firstSeq: Int64?
        /// The Circle version that wrote it, and when (ms since 1970).
        public var circleVersion: String
        public var exportedAt: Int64

        /// The first entry's `seq`.
        public var first: Int64 { self.firstSeq ?? 1 }
        /// The last entry's `seq` (`first - 1` when there are none).
        public var last: Int64 { self.first - 1 + self.entries }

        public init(
            circle: String, owner: String, private: Bool, createdAt: Int64, readOnly: Bool, members: Int, media: Int, entries: Int64, firstSeq: Int64? = nil,
            circleVersion: String, exportedAt: Int64
        ) {
            self.format = CircleExportFormat.formatName
            self.version = CircleExportFormat.version
            self.circle = circle
            self.owner = owner
            self.private = `private`
            self.createdAt = createdAt
            self.readOnly = readOnly
            self.members = members
            self.media = media
            self.entries = entries
            self.firstSeq = firstSeq
            self.circleVersion = circleVersion
            self.exportedAt = exportedAt
        }
    }

    /// `{"type": "member", …}`: a member, with their read marker and notification level.
    public struct Member: Codable, Sendable, Hashable {
        public var type = "member"
        public var name: String
        /// Their read marker (0: none).
        public var readSeq: Int64
        /// Their notification level here; absent for the default.
        public var notify: NotificationLevel?

        public init(name: String, readSeq: Int64, notify: NotificationLevel?) {
            self.name = name
            self.readSeq = readSeq
            self.notify = notify
        }
    }

    /// `{"type": "media", …}`: a media file an entry has as its attachment; its bytes are
    /// `media/<id>` (and `id` is their SHA-256).
    public struct Media: Codable, Sendable, Hashable {
        public var type = "media"
        public var id: String
        public var size: Int64
        public var contentType: String
        public var createdAt: Int64

        public init(id: String, size: Int64, contentType: String, createdAt: Int64) {
            self.id = id
            self.size = size
            self.contentType = contentType
            self.createdAt = createdAt
        }
    }

    /// `{"type": "entry", …}`: one entry as the store keeps it (the fields of ``CirclePost``
    /// without `circle` and `reactions`, which follow from the entries).
    public struct Entry: Codable, Sendable, Hashable {
        public var type = "entry"
        public var seq: Int64
        public var author: String
        /// The author's client's request id (the idempotency key).
        public var id: String
        /// Commit time, ms since 1970.
        public var time: Int64
        public var text: String?
        public var attachment: String?
        public var change: CircleChange?
        public var target: Int64?
        public var emoji: String?
        public var replyTo: Int64?
        public var edited: Int64?
        public var deleted: Bool
        public var mentionsEveryone: Bool
        /// A system entry: the membership change it records, and its member.
        public var event: CircleSystemEvent?
        public var member: String?

        public init(_ post: CirclePost) {
            self.event = post.event
            self.member = post.member
            self.seq = post.seq
            self.author = post.author
            self.id = post.id
            self.time = post.time
            self.text = post.text
            self.attachment = post.attachment
            self.change = post.change
            self.target = post.target
            self.emoji = post.emoji
            self.replyTo = post.replyTo
            self.edited = post.edited
            self.deleted = post.deleted
            self.mentionsEveryone = post.mentionsEveryone
        }

        /// The entry to commit into `circle` to make it again.
        public func newPost(in circle: String) -> NewPost {
            NewPost(
                circle: circle,
                author: self.author,
                clientID: self.id,
                // An edit of a post deleted since has lost its text; the delete that follows clears it anyway.
                text: self.change == .edit ? (self.text ?? "") : self.text,
                attachment: self.change == nil ? self.attachment : nil,
                time: self.time,
                change: self.change,
                target: self.target,
                emoji: self.emoji,
                replyTo: self.replyTo,
                // The entry was allowed when it was made: a delete by the owner or a moderator too.
                moderated: self.change == .delete,
                byAPIKey: true,
                mayMentionEveryone: self.mentionsEveryone,
                event: self.event,
                member: self.member,
                // The members are imported as they are at the end; the entry is only the record.
                recordOnly: self.event != nil,
                // Long past: no webhook deliveries, no pushes.
                restored: true
            )
        }
    }

    /// One checked line.
    public enum Item: Sendable, Hashable {
        case header(Header)
        case member(Member)
        case media(Media)
        case entry(Entry)
    }

    /// A line that breaks the format: the line's number (from 1) and what is wrong.
    public struct LineError: Error, Sendable, Hashable, CustomStringConvertible {
        public var line: Int
        public var reason: String
        public var description: String { "\(CircleExportFormat.historyName) line \(self.line): \(self.reason)" }
    }

    /// Checks `circle.jsonl` line by line: feed each line to ``read(_:)``, then call
    /// ``finish()``. Keeps one byte per entry (what it is) and the media ids.
    public struct Reader: Sendable {
        public private(set) var header: Header?
        public private(set) var line = 0
        private var membersRead = 0
        private var mediaIDs = Set<String>()
        private var memberNames = Set<String>()
        private var entriesRead: Int64 = 0
        /// Per entry (index seq - first): 0 a change, 1 a post, 2 a deleted post.
        private var kinds = [UInt8]()
        /// The authors of the entries (and the owner and members): accounts the target needs.
        public private(set) var people = Set<String>()

        public init() {}

        private struct Tag: Decodable { var type: String? }

        /// Checks the next line (without its newline).
        public mutating func read(_ bytes: some Collection<UInt8>) throws(LineError) -> Item {
            self.line += 1
            guard bytes.count <= Limits.maxLineBytes else { throw self.error("longer than \(Limits.maxLineBytes) bytes") }
            let data = Data(bytes)
            guard let header = self.header else {
                let header: Header
                do {
                    header = try JSONDecoder().decode(Header.self, from: data)
                } catch {
                    if let format = try? JSONDecoder().decode(FormatOnly.self, from: data), format.format == CircleExportFormat.formatName, format.version != CircleExportFormat.version {
                        throw self.error("format version \(format.version) is not one this server reads (it reads \(CircleExportFormat.version))")
                    }
                    throw self.error("not a circle-export header: \(Self.describe(error))")
                }
                try self.check(header)
                self.header = header
                self.people.insert(header.owner)
                return .header(header)
            }
            let tag: Tag
            do { tag = try JSONDecoder().decode(Tag.self, from: data) } catch { throw self.error("bad JSON: \(Self.describe(error))") }
            let expected =
                self.membersRead < header.members ? "member" : self.mediaIDs.count < header.media ? "media" : self.entriesRead < header.entries ? "entry" : nil
            guard let expected else { throw self.error("a line after the \(header.entries) entries the header announces") }
            guard tag.type == expected else { throw self.error("a \"\(expected)\" line was expected here, not \"\((tag.type ?? "").prefix(32))\"") }
            do {
                switch expected {
                case "member":
                    let member = try JSONDecoder().decode(Member.self, from: data)
                    try self.check(member, header)
                    return .member(member)
                case "media":
                    let media = try JSONDecoder().decode(Media.self, from: data)
                    try self.check(media)
                    return .media(media)
                default:
                    let entry = try JSONDecoder().decode(Entry.self, from: data)
                    try self.check(entry)
                    return .entry(entry)
                }
            } catch let error as LineError {
                throw error
            } catch {
                throw self.error("bad \(expected): \(Self.describe(error))")
            }
        }

        /// After the last line: every line the header announces was there.
        public func finish() throws(LineError) {
            guard let header = self.header else { throw LineError(line: max(self.line, 1), reason: "the file is empty") }
            guard self.membersRead == header.members, self.mediaIDs.count == header.media, self.entriesRead == header.entries else {
                throw LineError(
                    line: self.line,
                    reason:
                        "the file ends early: the header announces \(header.members) members, \(header.media) media and \(header.entries) entries; there are \(self.membersRead), \(self.mediaIDs.count) and \(self.entriesRead)"
                )
            }
        }

        /// The media ids the file lists.
        public var media: Set<String> { self.mediaIDs }

        private struct FormatOnly: Decodable {
            var format: String
            var version: Int
        }

        private func error(_ reason: String) -> LineError { LineError(line: self.line, reason: reason) }

        private static func describe(_ error: any Error) -> String {
            switch error {
            case DecodingError.keyNotFound(let key, _): "no \"\(key.stringValue)\""
            case DecodingError.typeMismatch(_, let context), DecodingError.valueNotFound(_, let context):
                "wrong type at \"\(context.codingPath.map(\.stringValue).joined(separator: "."))\""
            case DecodingError.dataCorrupted(let context):
                context.codingPath.isEmpty ? "not JSON" : "bad value at \"\(context.codingPath.map(\.stringValue).joined(separator: "."))\""
            default: "not JSON"
            }
        }

        private func check(_ header: Header) throws(LineError) {
            guard header.format == CircleExportFormat.formatName else { throw self.error("format is \"\(header.format.prefix(32))\", not \"\(CircleExportFormat.formatName)\"") }
            guard header.version == CircleExportFormat.version else {
                throw self.error("format version \(header.version) is not one this server reads (it reads \(CircleExportFormat.version))")
            }
            guard CircleRoutes.isValidCircleName(header.circle) else { throw self.error("\"\(header.circle.prefix(64))\" is not a valid circle name") }
            guard TokenAuthority.isValidUserName(header.owner) else { throw self.error("owner \"\(header.owner.prefix(64))\" is not a valid user name") }
            guard (0...Limits.maxMembers).contains(header.members), (0...Limits.maxMedia).contains(header.media), (0...Limits.maxEntries).contains(header.entries) else {
                throw self.error("the counts are out of range (members up to \(Limits.maxMembers), media \(Limits.maxMedia), entries \(Limits.maxEntries))")
            }
            // Entries are numbered up to Int64.max like any circle's: first + entries - 1 must fit.
            guard (1...(Int64.max - Limits.maxEntries)).contains(header.first) else {
                throw self.error("firstSeq \(header.first) is out of range (1 to \(Int64.max - Limits.maxEntries))")
            }
        }

        private mutating func check(_ member: Member, _ header: Header) throws(LineError) {
            guard member.type == "member", TokenAuthority.isValidUserName(member.name) else { throw self.error("\"\(member.name.prefix(64))\" is not a valid user name") }
            guard self.memberNames.insert(member.name).inserted else { throw self.error("member \"\(member.name)\" twice") }
            guard (0...header.last).contains(member.readSeq) else { throw self.error("readSeq \(member.readSeq) is outside 0…\(header.last)") }
            self.membersRead += 1
            self.people.insert(member.name)
        }

        private mutating func check(_ media: Media) throws(LineError) {
            guard media.id.utf8.count == 64, media.id.utf8.allSatisfy({ ($0 >= 0x30 && $0 <= 0x39) || ($0 >= 0x61 && $0 <= 0x66) }) else {
                throw self.error("media id \"\(media.id.prefix(64))\" is not 64 lower-case hex digits")
            }
            guard MediaType.accepted.contains(media.contentType) else { throw self.error("content type \"\(media.contentType.prefix(64))\" is not accepted") }
            guard media.size >= 0 else { throw self.error("a negative size") }
            guard self.mediaIDs.insert(media.id).inserted else { throw self.error("media \(media.id) twice") }
        }

        private mutating func check(_ entry: Entry) throws(LineError) {
            let first = self.header?.first ?? 1
            let expected = first + self.entriesRead
            guard entry.seq == expected else { throw self.error("seq \(entry.seq) out of order: \(expected) was expected") }
            guard TokenAuthority.isValidUserName(entry.author) else { throw self.error("author \"\(entry.author.prefix(64))\" is not a valid user name") }
            guard !entry.id.isEmpty, entry.id.utf8.count <= 128 else { throw self.error("an entry id of 1 to 128 bytes was expected") }
            if let attachment = entry.attachment, !self.mediaIDs.contains(attachment) {
                throw self.error("attachment \(attachment.prefix(64)) is not among the media lines")
            }
            /// The index in `kinds` of the earlier post `seq`; `nil` for one the circle's retention
            /// policy removed (before the first entry), which nothing here can check.
            func post(_ seq: Int64?, _ what: String) throws(LineError) -> Int? {
                guard let seq, seq >= 1, seq < expected else { throw self.error("\(what) is not an earlier post") }
                guard seq >= first else { return nil }
                guard self.kinds[Int(seq - first)] != 0 else { throw self.error("\(what) is not an earlier post") }
                return Int(seq - first)
            }
            if let replyTo = entry.replyTo { _ = try post(replyTo, "replyTo \(replyTo)") }
            if let event = entry.event {
                guard let member = entry.member, TokenAuthority.isValidUserName(member) else {
                    throw self.error("\(event.rawValue) without a valid member")
                }
                guard entry.change == nil, entry.target == nil, entry.emoji == nil, entry.replyTo == nil, entry.text == nil, entry.attachment == nil else {
                    throw self.error("a system entry with a change, target, emoji, reply, text or attachment")
                }
                self.kinds.append(0)  // not a post: nothing may target it
            } else if let change = entry.change {
                let target = try post(entry.target, "target \(entry.target.map(String.init) ?? "(none)")")
                if let target, self.kinds[target] != 1 { throw self.error("\(change.rawValue) of post \(Int64(target) + first), deleted before") }
                switch change {
                case .react, .unreact:
                    guard let emoji = entry.emoji, !emoji.isEmpty, emoji.utf8.count <= 64 else { throw self.error("\(change.rawValue) without an emoji") }
                case .delete:
                    if let target { self.kinds[target] = 2 }
                case .edit:
                    break
                }
                self.kinds.append(0)
            } else {
                guard entry.target == nil, entry.emoji == nil else { throw self.error("a post with a target or an emoji") }
                self.kinds.append(1)
            }
            self.entriesRead += 1
            self.people.insert(entry.author)
        }
    }
}
