import Foundation

/// The actions a client can ask for (`action` in a request envelope).
public enum CircleAction: String, Sendable, CaseIterable, Codable {
    /// Subscribe to a circle, optionally replaying what was missed after `since`.
    case join
    /// Unsubscribe from a circle.
    case leave
    /// Store a post in a circle and fan it out.
    case post
    /// Read stored posts before or after a sequence number.
    case history
    /// Tell the circle this user is typing (not stored).
    case typing
    /// Keep the connection alive and measure the round trip, for clients that cannot send
    /// WebSocket pings (browsers). `circle` is not needed.
    case ping
    /// Replace the text of one's own post `target`.
    case edit
    /// Delete one's own post `target` (the owner of a private circle: any post there).
    case delete
    /// Add reaction `emoji` to post `target`.
    case react
    /// Take back one's reaction `emoji` from post `target`.
    case unreact
    /// Move the user's read marker in `circle` forward to `seq`.
    case read
    /// List the circles the user sees, with read markers and unread counts. `circle` is not needed.
    case circles
    /// Replace the connection's token with a fresh one (`token`) for the same user: its `exp`
    /// becomes the connection's expiry. `circle` is not needed.
    case auth
    /// Search the posts of every circle the user may read (`search` holds what to find).
    /// `circle` is not needed.
    case search

    /// The actions stored as entries of the circle's stream (each acked with its `seq`, and
    /// idempotent by request id like a post).
    public var isStored: Bool {
        switch self {
        case .post, .edit, .delete, .react, .unreact: return true
        case .join, .leave, .history, .typing, .ping, .read, .circles, .auth, .search: return false
        }
    }

    /// Whether the request must name a `circle` (every action but `ping`, `circles`, `auth`
    /// and `search`).
    public var needsCircle: Bool {
        self != .ping && self != .circles && self != .auth && self != .search
    }

    /// The change a stored action makes to an earlier post (`nil` for a post).
    public var change: CircleChange? {
        switch self {
        case .edit: return .edit
        case .delete: return .delete
        case .react: return .react
        case .unreact: return .unreact
        default: return nil
        }
    }
}

/// One request from a client: a JSON object in a text frame.
///
/// Every request names its `action` and carries an `id` the client chose; the reply echoes it.
/// For `post`, the `id` is also the idempotency key: re-sending a post with the same `id` to the
/// same circle returns the original ack and stores nothing new. Unknown fields are ignored.
public struct CircleRequest: Sendable, Hashable, Codable {
    public var action: CircleAction
    public var id: String
    public var circle: String
    /// `join`: replay every post with a sequence number above this one before going live.
    public var since: Int64?
    /// `post`: the text.
    public var text: String?
    /// `post`: an attachment reference (a media id once media uploads exist; stored as given).
    public var attachment: String?
    /// `history`: posts with a sequence number below this one (newest first page).
    public var before: Int64?
    /// `history`: posts with a sequence number above this one (oldest first page).
    public var after: Int64?
    /// `history`: page size (``HistoryPaging/limits``, default ``HistoryPaging/defaultLimit``).
    public var limit: Int?
    /// `join`: do not announce this connection to the circle (no `joined`/`left` for it), for
    /// one-shot clients such as `circle send`. Absent means `false`.
    public var quiet: Bool?
    /// `edit`, `delete`, `react`, `unreact`: the `seq` of the post to change.
    public var target: Int64?
    /// `react`, `unreact`: one emoji.
    public var emoji: String?
    /// `post`: the `seq` of the post this one answers.
    public var replyTo: Int64?
    /// `read`: the new read marker.
    public var seq: Int64?
    /// `auth`: the new access token (a JWT, at most ``CircleRequest/maxTokenBytes``).
    public var token: String?
    /// `search`: what to find (the fields of `GET /v1/search`).
    public var search: HTTPAPI.SearchRequest?

    public init(
        action: CircleAction,
        id: String,
        circle: String,
        since: Int64? = nil,
        text: String? = nil,
        attachment: String? = nil,
        before: Int64? = nil,
        after: Int64? = nil,
        limit: Int? = nil,
        quiet: Bool? = nil,
        target: Int64? = nil,
        emoji: String? = nil,
        replyTo: Int64? = nil,
        seq: Int64? = nil,
        token: String? = nil,
        search: HTTPAPI.SearchRequest? = nil
    ) {
        self.action = action
        self.id = id
        self.circle = circle
        self.since = since
        self.text = text
        self.attachment = attachment
        self.before = before
        self.after = after
        self.limit = limit
        self.quiet = quiet
        self.target = target
        self.emoji = emoji
        self.replyTo = replyTo
        self.seq = seq
        self.token = token
        self.search = search
    }

    public static func join(_ circle: String, id: String, since: Int64? = nil, quiet: Bool? = nil) -> CircleRequest {
        CircleRequest(action: .join, id: id, circle: circle, since: since, quiet: quiet)
    }

    public static func leave(_ circle: String, id: String) -> CircleRequest {
        CircleRequest(action: .leave, id: id, circle: circle)
    }

    public static func post(_ text: String, to circle: String, id: String, attachment: String? = nil, replyTo: Int64? = nil) -> CircleRequest {
        CircleRequest(action: .post, id: id, circle: circle, text: text, attachment: attachment, replyTo: replyTo)
    }

    public static func edit(_ target: Int64, in circle: String, text: String, id: String) -> CircleRequest {
        CircleRequest(action: .edit, id: id, circle: circle, text: text, target: target)
    }

    public static func delete(_ target: Int64, in circle: String, id: String) -> CircleRequest {
        CircleRequest(action: .delete, id: id, circle: circle, target: target)
    }

    public static func react(_ emoji: String, to target: Int64, in circle: String, id: String) -> CircleRequest {
        CircleRequest(action: .react, id: id, circle: circle, target: target, emoji: emoji)
    }

    public static func unreact(_ emoji: String, from target: Int64, in circle: String, id: String) -> CircleRequest {
        CircleRequest(action: .unreact, id: id, circle: circle, target: target, emoji: emoji)
    }

    public static func read(_ circle: String, upTo seq: Int64, id: String) -> CircleRequest {
        CircleRequest(action: .read, id: id, circle: circle, seq: seq)
    }

    /// Renews the connection's token (see ``CircleAction/auth``).
    public static func auth(token: String, id: String) -> CircleRequest {
        CircleRequest(action: .auth, id: id, circle: "", token: token)
    }

    public static func circles(id: String) -> CircleRequest {
        CircleRequest(action: .circles, id: id, circle: "")
    }

    public static func history(of circle: String, id: String, before: Int64? = nil, after: Int64? = nil, limit: Int? = nil) -> CircleRequest {
        CircleRequest(action: .history, id: id, circle: circle, before: before, after: after, limit: limit)
    }

    /// Searches every circle the user may read (see ``CircleAction/search``).
    public static func search(_ search: HTTPAPI.SearchRequest, id: String) -> CircleRequest {
        CircleRequest(action: .search, id: id, circle: "", search: search)
    }

    public static func typing(in circle: String, id: String) -> CircleRequest {
        CircleRequest(action: .typing, id: id, circle: circle)
    }
}

extension CircleRequest {
    /// Why a frame is not a valid request, with the `id` when it could be read, so the error
    /// reply can still be matched to the request.
    public struct DecodingFailure: Error, Sendable, Hashable {
        public var id: String?
        public var code: CircleErrorCode
        public var message: String
    }

    /// Largest accepted request id, in bytes.
    public static let maxIDLength = 128

    /// Largest accepted `auth` token, in bytes.
    public static let maxTokenBytes = 16 * 1024

    /// Decodes and validates a request, turning every problem into a ``DecodingFailure`` with a
    /// documented code: `bad_request` for malformed JSON (duplicate keys included), missing
    /// fields or wrong types, and `unknown_action` for an action this server does not know.
    ///
    /// The frame is parsed once, by ``JSONParser``; the checks and the request read the same
    /// values.
    public static func decode(_ bytes: some Collection<UInt8>) -> Result<CircleRequest, DecodingFailure> {
        let object: JSONValue
        switch JSONParser.parse(bytes) {
        case .success(let value):
            object = value
        case .failure(let error):
            if let key = error.duplicateKey {
                return .failure(.init(id: nil, code: .badRequest, message: "the key \"\(key)\" appears twice"))
            }
            return .failure(.init(id: nil, code: .badRequest, message: "the frame is not valid JSON"))
        }
        guard case .object = object else {
            return .failure(.init(id: nil, code: .badRequest, message: "a request must be a JSON object"))
        }
        guard case .string(let id)? = object["id"], !id.isEmpty, id.utf8.count <= maxIDLength else {
            return .failure(.init(id: nil, code: .badRequest, message: "\"id\" must be a non-empty string of at most \(maxIDLength) bytes"))
        }
        guard case .string(let actionName)? = object["action"] else {
            return .failure(.init(id: id, code: .badRequest, message: "\"action\" must be a string"))
        }
        guard let action = CircleAction(rawValue: actionName) else {
            return .failure(
                .init(id: id, code: .unknownAction, message: "unknown action \"\(actionName)\"; known: \(CircleAction.allCases.map(\.rawValue).joined(separator: ", "))")
            )
        }
        // Every known field is read, and so type-checked, whatever the action uses.
        var fields = FieldReader(object: object)
        let circle = action.needsCircle ? fields.requiredString("circle") : fields.optionalString("circle")
        var request = CircleRequest(
            action: action,
            id: id,
            circle: circle ?? "",
            since: fields.optionalInteger("since"),
            text: fields.optionalString("text"),
            attachment: fields.optionalString("attachment"),
            before: fields.optionalInteger("before"),
            after: fields.optionalInteger("after"),
            limit: fields.optionalInteger("limit").flatMap { Int(exactly: $0) },
            quiet: fields.optionalBool("quiet"),
            target: fields.optionalInteger("target"),
            emoji: fields.optionalString("emoji"),
            replyTo: fields.optionalInteger("replyTo"),
            seq: fields.optionalInteger("seq"),
            token: fields.optionalString("token"),
            search: fields.optionalSearch("search")
        )
        if let problem = fields.problem {
            return .failure(.init(id: id, code: .badRequest, message: problem))
        }
        if let problem = request.validationProblem {
            return .failure(.init(id: id, code: problem.code, message: problem.message))
        }
        // Stored and compared in one form, so that look-alikes are one reaction.
        request.emoji = request.emoji.map { CircleEmoji.normalized($0) ?? $0 }
        return .success(request)
    }

    /// Reads typed fields of a request object, remembering the first problem in the order the
    /// fields are read (`circle`, then the optional fields).
    private struct FieldReader {
        let object: JSONValue
        var problem: String?

        private mutating func note(_ problem: String) {
            if self.problem == nil { self.problem = problem }
        }

        mutating func requiredString(_ key: String) -> String? {
            switch self.object[key] {
            case nil: self.note("\"\(key)\" is missing")
            case .null?: self.note("\"\(key)\" must not be null")
            case .string(let value)?: return value
            case let other?: self.note("\"\(key)\" must be a string, not \(other.kind)")
            }
            return nil
        }

        mutating func optionalString(_ key: String) -> String? {
            switch self.object[key] {
            case nil, .null?: return nil
            case .string(let value)?: return value
            case let other?:
                self.note("\"\(key)\" must be a string, not \(other.kind)")
                return nil
            }
        }

        mutating func optionalBool(_ key: String) -> Bool? {
            switch self.object[key] {
            case nil, .null?: return nil
            case .bool(let value)?: return value
            case let other?:
                self.note("\"\(key)\" must be true or false, not \(other.kind)")
                return nil
            }
        }

        /// The `search` object: the fields of ``HTTPAPI/SearchRequest``, type-checked.
        mutating func optionalSearch(_ key: String) -> HTTPAPI.SearchRequest? {
            switch self.object[key] {
            case nil, .null?: return nil
            case .object?:
                guard let value = self.object[key] else { return nil }
                do {
                    return try JSONValueDecoding.decode(HTTPAPI.SearchRequest.self, from: value)
                } catch let error as DecodingError {
                    switch error {
                    case .typeMismatch(_, let context), .valueNotFound(_, let context), .keyNotFound(_, let context), .dataCorrupted(let context):
                        self.note("\"\(key)\": \(context.debugDescription)")
                    @unknown default:
                        self.note("\"\(key)\" does not have the expected fields")
                    }
                } catch {
                    self.note("\"\(key)\" does not have the expected fields")
                }
                return nil
            case let other?:
                self.note("\"\(key)\" must be an object, not \(other.kind)")
                return nil
            }
        }

        /// An integer field; numbers with a fraction or out of the 64-bit range are refused.
        mutating func optionalInteger(_ key: String) -> Int64? {
            switch self.object[key] {
            case nil, .null?: return nil
            case .number?:
                guard let value = self.object[key]?.int64 else {
                    self.note("\"\(key)\" must be a whole number within 64 bits")
                    return nil
                }
                return value
            case let other?:
                self.note("\"\(key)\" must be an integer, not \(other.kind)")
                return nil
            }
        }
    }

    /// What is wrong with the fields for this action, or `nil`: `invalid_emoji` for an
    /// `emoji` that is not one, `bad_request` for everything else.
    public var validationProblem: (code: CircleErrorCode, message: String)? {
        if let message = self.fieldProblem {
            return (.badRequest, message)
        }
        if self.action == .react || self.action == .unreact, let emoji, !Self.isEmoji(emoji) {
            return (.invalidEmoji, "\"emoji\" must be one emoji")
        }
        return nil
    }

    /// A sentence describing a missing or out-of-range field for this action, or `nil`.
    private var fieldProblem: String? {
        if self.action == .auth {
            guard let token, !token.isEmpty else { return "\"auth\" needs a non-empty \"token\"" }
            if token.utf8.count > Self.maxTokenBytes { return "\"token\" must be at most \(Self.maxTokenBytes) bytes" }
            return nil
        }
        if self.action == .search {
            return self.search == nil ? "\"search\" needs a \"search\" object with \"q\"" : nil
        }
        guard self.action.needsCircle else { return nil }
        if self.circle.isEmpty { return "\"circle\" must not be empty" }
        switch self.action {
        case .post:
            if self.text == nil && self.attachment == nil { return "a post needs \"text\" or \"attachment\"" }
            if let replyTo, replyTo < 1 { return "\"replyTo\" must be a seq (1 or more)" }
        case .edit, .delete, .react, .unreact:
            guard let target else { return "\"\(self.action.rawValue)\" needs \"target\", the seq of a post" }
            if target < 1 { return "\"target\" must be a seq (1 or more)" }
            if self.action == .edit && (self.text ?? "").isEmpty { return "an edit needs a non-empty \"text\"" }
            if (self.action == .react || self.action == .unreact) && self.emoji == nil {
                return "\"\(self.action.rawValue)\" needs \"emoji\""
            }
        case .read:
            guard let seq else { return "\"read\" needs \"seq\"" }
            if seq < 0 { return "\"seq\" must not be negative" }
        case .history:
            if let limit, let problem = HistoryPaging.problem(limit: limit) { return "\"limit\" \(problem)" }
            if self.before != nil && self.after != nil { return "give \"before\" or \"after\", not both" }
            if (self.before ?? 0) < 0 || (self.after ?? 0) < 0 { return "\"before\" and \"after\" must not be negative" }
        case .join:
            if let since, since < 0 { return "\"since\" must not be negative" }
        case .leave, .typing, .ping, .circles, .auth, .search:
            break
        }
        return nil
    }

    /// Largest accepted emoji, in UTF-8 bytes (family and flag sequences included).
    public static let maxEmojiBytes = CircleEmoji.maxBytes

    /// Whether `text` is exactly one emoji (``CircleEmoji/normalized(_:)`` says which).
    public static func isEmoji(_ text: String) -> Bool {
        CircleEmoji.normalized(text) != nil
    }
}

/// History paging, the same for the WebSocket's `history`, `GET /v1/circles/{name}/messages`,
/// the SDK and the CLI: pages of 1 to 200 posts, 50 when not given.
public enum HistoryPaging {
    public static let limits = 1...200
    public static let defaultLimit = 50

    /// What is wrong with a page size, after its name (`"limit" must be …`); `nil` when it is good.
    public static func problem(limit: Int) -> String? {
        Self.limits.contains(limit) ? nil : "must be between \(Self.limits.lowerBound) and \(Self.limits.upperBound)"
    }
}
