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
    /// `history`: page size (1...200, default 50).
    public var limit: Int?
    /// `join`: do not announce this connection to the circle (no `joined`/`left` for it), for
    /// one-shot clients such as `circle send`. Absent means `false`.
    public var quiet: Bool?

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
        quiet: Bool? = nil
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
    }

    public static func join(_ circle: String, id: String, since: Int64? = nil, quiet: Bool? = nil) -> CircleRequest {
        CircleRequest(action: .join, id: id, circle: circle, since: since, quiet: quiet)
    }

    public static func leave(_ circle: String, id: String) -> CircleRequest {
        CircleRequest(action: .leave, id: id, circle: circle)
    }

    public static func post(_ text: String, to circle: String, id: String, attachment: String? = nil) -> CircleRequest {
        CircleRequest(action: .post, id: id, circle: circle, text: text, attachment: attachment)
    }

    public static func history(of circle: String, id: String, before: Int64? = nil, after: Int64? = nil, limit: Int? = nil) -> CircleRequest {
        CircleRequest(action: .history, id: id, circle: circle, before: before, after: after, limit: limit)
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

    /// Decodes and validates a request, turning every problem into a ``DecodingFailure`` with a
    /// documented code: `bad_request` for malformed JSON, missing fields or wrong types, and
    /// `unknown_action` for an action this server does not know.
    public static func decode(_ bytes: some Collection<UInt8>) -> Result<CircleRequest, DecodingFailure> {
        let data = Data(bytes)
        let object: [String: Any]
        do {
            guard let parsed = try JSONSerialization.jsonObject(with: data) as? [String: Any] else {
                return .failure(.init(id: nil, code: .badRequest, message: "a request must be a JSON object"))
            }
            object = parsed
        } catch {
            return .failure(.init(id: nil, code: .badRequest, message: "the frame is not valid JSON"))
        }
        let id = object["id"] as? String
        guard let id, !id.isEmpty, id.utf8.count <= maxIDLength else {
            return .failure(.init(id: nil, code: .badRequest, message: "\"id\" must be a non-empty string of at most \(maxIDLength) bytes"))
        }
        guard let actionName = object["action"] as? String else {
            return .failure(.init(id: id, code: .badRequest, message: "\"action\" must be a string"))
        }
        guard CircleAction(rawValue: actionName) != nil else {
            return .failure(
                .init(id: id, code: .unknownAction, message: "unknown action \"\(actionName)\"; known: \(CircleAction.allCases.map(\.rawValue).joined(separator: ", "))")
            )
        }
        if actionName == CircleAction.ping.rawValue {
            return .success(CircleRequest(action: .ping, id: id, circle: object["circle"] as? String ?? ""))
        }
        do {
            let request = try JSONDecoder().decode(CircleRequest.self, from: data)
            if let problem = request.validationProblem {
                return .failure(.init(id: id, code: .badRequest, message: problem))
            }
            return .success(request)
        } catch let DecodingError.keyNotFound(key, _) {
            return .failure(.init(id: id, code: .badRequest, message: "\"\(key.stringValue)\" is missing"))
        } catch let DecodingError.typeMismatch(_, context) {
            return .failure(.init(id: id, code: .badRequest, message: "\"\(context.codingPath.map(\.stringValue).joined(separator: "."))\" has the wrong type"))
        } catch let DecodingError.valueNotFound(_, context) {
            return .failure(.init(id: id, code: .badRequest, message: "\"\(context.codingPath.map(\.stringValue).joined(separator: "."))\" must not be null"))
        } catch {
            return .failure(.init(id: id, code: .badRequest, message: "the request could not be read"))
        }
    }

    /// A sentence describing what is wrong with the fields for this action, or `nil`.
    public var validationProblem: String? {
        if self.action == .ping { return nil }
        if self.circle.isEmpty { return "\"circle\" must not be empty" }
        switch self.action {
        case .post:
            if self.text == nil && self.attachment == nil { return "a post needs \"text\" or \"attachment\"" }
        case .history:
            if let limit, !(1...200).contains(limit) { return "\"limit\" must be between 1 and 200" }
            if self.before != nil && self.after != nil { return "give \"before\" or \"after\", not both" }
            if (self.before ?? 0) < 0 || (self.after ?? 0) < 0 { return "\"before\" and \"after\" must not be negative" }
        case .join:
            if let since, since < 0 { return "\"since\" must not be negative" }
        case .leave, .typing, .ping:
            break
        }
        return nil
    }
}
