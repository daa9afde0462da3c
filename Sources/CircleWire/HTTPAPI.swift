import Foundation

/// The JSON bodies and paths of Circle's HTTP API (docs/API.md, docs/openapi.yaml), declared once
/// for the server that writes them and the SDK and CLI that read them.
public enum HTTPAPI {
    // MARK: - Paths

    /// The paths a client asks for; the server's router registers the same constants, and the
    /// ``Pattern``s behind the functions (HTTPAPI+Patterns.swift).
    public enum Path {
        public static let health = "/healthz"
        public static let metrics = "/metrics"
        public static let config = "/v1/config"
        public static let developmentToken = "/v1/dev/token"
        public static let webSocket = "/v1/ws"
        public static let echo = "/v1/echo"
        public static let circles = "/v1/circles"
        public static let directMessages = "/v1/dms"
        public static let media = "/v1/media"
        public static let uploads = "/v1/media/uploads"

        public static func circle(_ name: String) -> String { Pattern.circle.path(name) }
        public static func messages(_ circle: String) -> String { Pattern.messages.path(circle) }
        public static func notify(_ circle: String) -> String { Pattern.notify.path(circle) }
        public static func retention(_ circle: String) -> String { Pattern.retention.path(circle) }
        public static func members(_ circle: String) -> String { Pattern.members.path(circle) }
        public static func systemEntries(_ circle: String) -> String { Pattern.systemEntries.path(circle) }
        public static func member(_ user: String, of circle: String) -> String { Pattern.member.path(circle, user) }
        public static func mediaItem(_ id: String) -> String { Pattern.mediaItem.path(id) }
        public static func upload(_ id: String) -> String { Pattern.upload.path(id) }

        /// Escapes one path segment (circle and user names are plain ASCII, but a user may type anything).
        static func escaped(_ segment: String) -> String {
            segment.addingPercentEncoding(withAllowedCharacters: segmentCharacters) ?? segment
        }

        private static let segmentCharacters: CharacterSet = {
            var set = CharacterSet.alphanumerics
            set.insert(charactersIn: "-._~@")
            return set
        }()
    }

    // MARK: - Bodies

    /// The body of every HTTP error: `{"error": {"code": "...", "message": "..."}}`.
    public struct ErrorBody: Codable, Sendable, Hashable {
        public struct Detail: Codable, Sendable, Hashable {
            public var code: CircleErrorCode
            public var message: String
            public init(code: CircleErrorCode, message: String) {
                self.code = code
                self.message = message
            }
        }
        public var error: Detail
        public init(code: CircleErrorCode, message: String) { self.error = Detail(code: code, message: message) }
    }

    /// `GET /healthz`.
    public struct Health: Codable, Sendable, Hashable {
        /// `ok`, or `shutting_down` once graceful shutdown has begun.
        public var status: String
        /// Open WebSocket sessions on this node.
        public var connections: Int
        public init(status: String, connections: Int) {
            self.status = status
            self.connections = connections
        }
    }

    /// `GET /v1/config`: what a page needs before it has a token.
    public struct ServerConfig: Codable, Sendable, Hashable {
        public var developmentTokens: Bool
        public var subprotocol: String
        public init(developmentTokens: Bool, subprotocol: String) {
            self.developmentTokens = developmentTokens
            self.subprotocol = subprotocol
        }
    }

    /// `GET /v1/dev/token?user=` (servers started with `--dev` only).
    public struct DevelopmentToken: Codable, Sendable, Hashable {
        public var token: String
        public var user: String
        public init(token: String, user: String) {
            self.token = token
            self.user = user
        }
    }

    /// One circle, as listed and created: ``CircleSummary`` (the same JSON as the WebSocket
    /// `circles` reply).
    public typealias Circle = CircleSummary

    /// `GET /v1/circles`.
    public struct CircleList: Codable, Sendable, Hashable {
        public var circles: [Circle]
        public init(circles: [Circle]) { self.circles = circles }
    }

    /// `POST /v1/circles`.
    public struct CreateCircle: Codable, Sendable, Hashable {
        public var name: String
        public var `private`: Bool?
        public init(name: String, private: Bool? = nil) {
            self.name = name
            self.private = `private`
        }
    }

    /// `POST /v1/dms`: the people to talk with (you are added); 2 to 9 people in all.
    public struct StartDirectMessage: Codable, Sendable, Hashable {
        public var members: [String]
        public init(members: [String]) { self.members = members }
    }

    /// `PUT /v1/circles/{name}/notify`: `all`, `mentions` or `none`; `null` for the default.
    public struct NotificationSetting: Codable, Sendable, Hashable {
        public var level: NotificationLevel?
        public init(level: NotificationLevel?) { self.level = level }
    }

    /// `GET` and `PUT /v1/circles/{name}/retention`: entries older than `days`, and beyond the
    /// newest `keep`, are removed in the background; `null` (or absent) for no such limit, both
    /// for none (docs/OPERATIONS.md, "Retention"). Answers carry both keys, `null` included.
    public struct RetentionSetting: Codable, Sendable, Hashable {
        public var days: Int64?
        public var keep: Int64?
        public init(days: Int64?, keep: Int64?) {
            self.days = days
            self.keep = keep
        }

        private enum CodingKeys: String, CodingKey { case days, keep }

        public func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: CodingKeys.self)
            try container.encode(self.days, forKey: .days)
            try container.encode(self.keep, forKey: .keep)
        }
    }

    /// `POST /v1/circles/{name}/members`.
    public struct AddMember: Codable, Sendable, Hashable {
        public var user: String
        public init(user: String) { self.user = user }
    }

    /// The members of a circle, answered by every members route.
    public struct MemberList: Codable, Sendable, Hashable {
        public var members: [String]
        public init(members: [String]) { self.members = members }
    }

    /// `GET /v1/circles/{name}/messages`: oldest first; `more` says whether the page was cut short;
    /// `lastSeq` is the circle's newest entry `seq` when the page was read (the posts show every
    /// entry up to it), as in the `history` reply.
    public struct MessagePage: Codable, Sendable, Hashable {
        public var posts: [CirclePost]
        public var more: Bool
        public var lastSeq: Int64?
        public init(posts: [CirclePost], more: Bool, lastSeq: Int64? = nil) {
            self.posts = posts
            self.more = more
            self.lastSeq = lastSeq
        }
    }

    /// A stored photo: answered by `POST /v1/media` and by the upload that completes one.
    public struct Media: Codable, Sendable, Hashable {
        /// The attachment id a post names.
        public var id: String
        public var size: Int64
        public var contentType: String
        /// The path to download it from (`/v1/media/{id}`).
        public var url: String
        public init(id: String, size: Int64, contentType: String, url: String) {
            self.id = id
            self.size = size
            self.contentType = contentType
            self.url = url
        }
    }

    /// `POST /v1/media/uploads`: a resumable upload of a declared length and type.
    public struct CreateUpload: Codable, Sendable, Hashable {
        public var length: Int64
        public var contentType: String
        public init(length: Int64, contentType: String) {
            self.length = length
            self.contentType = contentType
        }
    }

    /// A resumable upload's state; `media` is set once every byte has arrived.
    public struct Upload: Codable, Sendable, Hashable {
        public var upload: String
        public var offset: Int64
        public var length: Int64
        public var contentType: String
        public var media: String?
        public init(upload: String, offset: Int64, length: Int64, contentType: String, media: String? = nil) {
            self.upload = upload
            self.offset = offset
            self.length = length
            self.contentType = contentType
            self.media = media
        }
    }

    // MARK: - Coding

    /// The server's JSON form: keys sorted, slashes unescaped.
    public static func encode(_ value: some Encodable) -> Data {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        // Every type above encodes without throwing; an empty object keeps the reply well formed.
        return (try? encoder.encode(value)) ?? Data("{}".utf8)
    }

    /// Why a JSON body was refused: a sentence a person can act on, such as
    /// `the key "name" appears twice` or `"private" must be true or false, not a string`.
    public struct BodyError: Error, Sendable, Hashable, CustomStringConvertible {
        public var message: String

        public init(_ message: String) {
            self.message = message
        }

        public var description: String { self.message }
    }

    /// Decodes a JSON body with the rules of WebSocket requests (PROTOCOL.md §2): one strict
    /// parse by ``JSONParser`` — UTF-8, RFC 8259, no key twice in an object, at most
    /// ``JSONParser/maxDepth`` levels — then the fields read from the parsed value. Sizes are
    /// bounded before this, by whoever reads the body.
    ///
    /// - Parameters:
    ///   - type: The body's type.
    ///   - data: The body's bytes.
    /// - Returns: The decoded body.
    /// - Throws: ``BodyError``, whose message says what is wrong.
    public static func decodeBody<Value: Decodable>(_ type: Value.Type, from data: some Sequence<UInt8>) throws(BodyError) -> Value {
        let value: JSONValue
        switch JSONParser.parse(Array(data)) {
        case .success(let parsed):
            value = parsed
        case .failure(let error):
            if let key = error.duplicateKey {
                throw BodyError("the key \"\(key)\" appears twice")
            }
            throw BodyError("the body is not valid JSON: \(error)")
        }
        do {
            return try JSONValueDecoding.decode(type, from: value)
        } catch let error as DecodingError {
            switch error {
            case .typeMismatch(_, let context), .valueNotFound(_, let context), .keyNotFound(_, let context), .dataCorrupted(let context):
                throw BodyError(context.debugDescription)
            @unknown default:
                throw BodyError("the body does not have the expected fields")
            }
        } catch {
            throw BodyError("the body does not have the expected fields: \(error)")
        }
    }

    /// Decodes a body as ``decodeBody(_:from:)`` does, or nil when it is refused.
    public static func decode<Value: Decodable>(_ type: Value.Type, from data: some Sequence<UInt8>) -> Value? {
        try? Self.decodeBody(type, from: data)
    }
}
