import CircleWire
import Foundation

/// What a bot's endpoint answers to a delivery (docs/API.md, "Bots that answer"): a `2xx` with
/// `Content-Type: application/json` and `{"text": "…"}` becomes the bot's post in the circle of
/// the entry delivered. Anything else in a `2xx` is no reply. A fuzz target (`webhook-reply`).
package struct WebhookReply: Sendable, Hashable {
    package var text: String

    /// Why an answer that looked like a reply is not one (the delivery itself still succeeded).
    package enum Problem: Error, Sendable, Hashable, CustomStringConvertible {
        case notJSON(String)
        case notAnObject
        case noText
        case emptyText
        case tooLong(limit: Int)
        case controlCharacters

        package var description: String {
            switch self {
            case .notJSON(let why): "the reply is not JSON: \(why)"
            case .notAnObject: "the reply is not a JSON object"
            case .noText: "the reply has no \"text\" string"
            case .emptyText: "the reply's text is empty"
            case .tooLong(let limit): "the reply's text is over \(limit) bytes"
            case .controlCharacters: "the reply's text has control characters other than tab and newline"
            }
        }
    }

    /// Reads an answer: `nil` when it is not meant as a reply (not `2xx`, not JSON by its
    /// `Content-Type`, or an empty body); a ``Problem`` when a JSON body is not a good one.
    /// - Parameter maxTextBytes: The server's post limit (`--max-post-bytes`).
    package static func parse(status: Int, contentType: String?, body: [UInt8], maxTextBytes: Int) -> Result<WebhookReply, Problem>? {
        guard (200..<300).contains(status), !body.isEmpty else { return nil }
        guard let type = contentType?.split(separator: ";").first?.trimmingCharacters(in: .whitespaces).lowercased(),
            type == "application/json"
        else { return nil }
        let value: JSONValue
        switch JSONParser.parse(body) {
        case .success(let parsed): value = parsed
        case .failure(let error): return .failure(.notJSON("\(error)"))
        }
        guard case .object = value else { return .failure(.notAnObject) }
        guard case .string(let text)? = value["text"] else { return .failure(.noText) }
        guard !text.trimmingCharacters(in: .whitespacesAndNewlines).isEmpty else { return .failure(.emptyText) }
        guard text.utf8.count <= maxTextBytes else { return .failure(.tooLong(limit: maxTextBytes)) }
        guard !text.unicodeScalars.contains(where: { $0.properties.generalCategory == .control && $0 != "\n" && $0 != "\t" }) else {
            return .failure(.controlCharacters)
        }
        return .success(WebhookReply(text: text))
    }
}
