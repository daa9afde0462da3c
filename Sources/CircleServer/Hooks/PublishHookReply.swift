import CircleWire
import Foundation

/// What a publish hook answers (docs/API.md, "Publish hooks"): a `2xx` with
/// `Content-Type: application/json` and one of
/// - `{"action": "accept"}`: the entry is committed as sent;
/// - `{"action": "refuse", "reason": "…"}`: nothing is stored, the sender gets
///   `refused_by_hook` with the reason (optional; cut to ``PublishHook/maxReasonBytes``);
/// - `{"action": "replace", "text": "…"}`: the entry is committed with this text instead.
///
/// Anything else is a ``Problem``, and the hook's ``PublishHook/FailurePolicy`` decides. A fuzz
/// target (`publish-hook-reply`).
package enum PublishHookReply: Sendable, Hashable {
    case accept
    case refuse(reason: String)
    case replace(text: String)

    /// Why an answer is not a verdict.
    package enum Problem: Error, Sendable, Hashable, CustomStringConvertible {
        case status(Int)
        case notJSONType(String?)
        case notJSON(String)
        case notAnObject
        case noAction
        case unknownAction(String)
        case noText
        case emptyText
        case tooLong(limit: Int)
        case controlCharacters
        case badReason

        package var description: String {
            switch self {
            case .status(let status): "the hook answered \(status)"
            case .notJSONType(let type): "the hook's answer is not application/json (\(type.map { String($0.prefix(60)) } ?? "no Content-Type"))"
            case .notJSON(let why): "the hook's answer is not JSON: \(why)"
            case .notAnObject: "the hook's answer is not a JSON object"
            case .noAction: "the hook's answer has no \"action\" string"
            case .unknownAction(let action): "the hook's action \"\(action.prefix(40))\" is not accept, refuse or replace"
            case .noText: "the hook's replace has no \"text\" string"
            case .emptyText: "the hook's replacement text is empty"
            case .tooLong(let limit): "the hook's replacement text is over \(limit) bytes"
            case .controlCharacters: "the hook's replacement text has control characters other than tab and newline"
            case .badReason: "the hook's \"reason\" is not a string"
            }
        }
    }

    /// Reads an answer.
    /// - Parameter maxTextBytes: The server's post limit (`--max-post-bytes`).
    package static func parse(status: Int, contentType: String?, body: [UInt8], maxTextBytes: Int) -> Result<PublishHookReply, Problem> {
        guard (200..<300).contains(status) else { return .failure(.status(status)) }
        guard let type = contentType?.split(separator: ";").first?.trimmingCharacters(in: .whitespaces).lowercased(), type == "application/json"
        else { return .failure(.notJSONType(contentType)) }
        let value: JSONValue
        switch JSONParser.parse(body) {
        case .success(let parsed): value = parsed
        case .failure(let error): return .failure(.notJSON("\(error)"))
        }
        guard case .object = value else { return .failure(.notAnObject) }
        guard case .string(let action)? = value["action"] else { return .failure(.noAction) }
        switch action {
        case "accept":
            return .success(.accept)
        case "refuse":
            switch value["reason"] {
            case nil, .null?:
                return .success(.refuse(reason: ""))
            case .string(let reason)?:
                return .success(.refuse(reason: Self.cleanReason(reason)))
            default:
                return .failure(.badReason)
            }
        case "replace":
            guard case .string(let text)? = value["text"] else { return .failure(.noText) }
            guard !text.trimmingCharacters(in: .whitespacesAndNewlines).isEmpty else { return .failure(.emptyText) }
            guard text.utf8.count <= maxTextBytes else { return .failure(.tooLong(limit: maxTextBytes)) }
            guard !text.unicodeScalars.contains(where: Self.isForbidden) else { return .failure(.controlCharacters) }
            return .success(.replace(text: text))
        default:
            return .failure(.unknownAction(action))
        }
    }

    private static func isForbidden(_ scalar: Unicode.Scalar) -> Bool {
        scalar.properties.generalCategory == .control && scalar != "\n" && scalar != "\t"
    }

    /// A reason as the sender sees it: control characters made spaces, at most
    /// ``PublishHook/maxReasonBytes`` bytes, cut at a character.
    static func cleanReason(_ reason: String) -> String {
        var kept = String.UnicodeScalarView()
        var bytes = 0
        for scalar in reason.unicodeScalars {
            let clean: Unicode.Scalar = scalar.properties.generalCategory == .control ? " " : scalar
            let size = String(clean).utf8.count
            guard bytes + size <= PublishHook.maxReasonBytes else { break }
            bytes += size
            kept.append(clean)
        }
        return String(kept).trimmingCharacters(in: .whitespaces)
    }
}
