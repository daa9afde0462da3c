import CircleWire
import Foundation
import HTTPTypes
import Hummingbird

/// `GET /v1/search` (docs/API.md, "Search"), behind ``TokenAuthMiddleware``; an API key with
/// `read` searches what its bot may read.
struct SearchRoutes: Sendable {
    let search: SearchAnswer

    func add<Context: CircleRequestContext>(authenticated router: some RouterMethods<Context>) {
        router.get(RouterPath(HTTPAPI.Path.search)) { request, context in
            let reader = try context.requirePrincipal(.read).name
            let parameters = try Self.parameters(request.uri.query)
            let asked = try Self.searchRequest(parameters)
            do {
                return Response.json(.ok, try await self.search.answer(asked, reader: reader))
            } catch let refusal as SearchRefusal {
                throw Self.apiError(refusal)
            }
        }
    }

    /// The query string's parameters, decoded as a form does (`+` is a space, then `%XX`).
    static func parameters(_ query: String?) throws(APIError) -> [String: String] {
        var parameters: [String: String] = [:]
        for pair in (query ?? "").split(separator: "&", omittingEmptySubsequences: true) {
            let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            guard let name = Self.formDecoded(parts[0]), let value = Self.formDecoded(parts.count > 1 ? parts[1] : "") else {
                throw APIError(.badRequest, .badRequest, "the query string is not percent-encoded UTF-8")
            }
            guard parameters[name] == nil else {
                throw APIError(.badRequest, .badRequest, "give \(name) once")
            }
            parameters[name] = value
        }
        return parameters
    }

    private static func formDecoded(_ text: Substring) -> String? {
        text.replacingOccurrences(of: "+", with: " ").removingPercentEncoding
    }

    /// The search the parameters ask for (`q` required; `limit` a number; the rest as given).
    static func searchRequest(_ parameters: [String: String]) throws(APIError) -> HTTPAPI.SearchRequest {
        guard let q = parameters["q"] else {
            throw APIError(.badRequest, .badRequest, "give the search as ?q=… (docs/API.md, \"Search\")")
        }
        var limit: Int?
        if let text = parameters["limit"] {
            guard let value = Int(text) else {
                throw APIError(.badRequest, .badRequest, "limit is between 1 and \(HTTPAPI.SearchRequest.maxLimit)")
            }
            limit = value
        }
        return HTTPAPI.SearchRequest(
            q: q,
            circle: parameters["circle"],
            from: parameters["from"],
            before: parameters["before"],
            after: parameters["after"],
            order: parameters["order"],
            limit: limit,
            cursor: parameters["cursor"]
        )
    }

    /// The HTTP answer to a refused search: 400 for what the request says, 403/404 for a circle
    /// it names, 422 for a search stopped at its time bound, 503 (with `Retry-After`) when the
    /// store could not answer or is still indexing the posts of an upgraded database.
    static func apiError(_ refusal: SearchRefusal) -> APIError {
        switch refusal.code {
        case .notFound: return APIError(.notFound, refusal.code, refusal.message)
        case .forbidden: return APIError(.forbidden, refusal.code, refusal.message)
        case .searchTimedOut: return APIError(.unprocessableContent, refusal.code, refusal.message)
        case .unavailable: return APIError(.serviceUnavailable, refusal.code, refusal.message, headers: [.retryAfter: "1"])
        case .stillIndexing: return APIError(.serviceUnavailable, refusal.code, refusal.message, headers: [.retryAfter: "5"])
        default: return APIError(.badRequest, refusal.code, refusal.message)
        }
    }
}
