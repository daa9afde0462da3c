import CircleWire
import HTTPTypes
import Hummingbird
import HummingbirdCore
import NIOCore

/// An HTTP answer carrying Circle's JSON error body, `{"error": {"code": "...", "message": "..."}}`
/// (docs/API.md). Route handlers and middleware throw it; ``CircleErrorMiddleware`` turns it, and
/// every other error, into the response.
struct APIError: Error, HTTPResponseError, Sendable {
    var status: HTTPResponse.Status
    var code: CircleErrorCode
    var message: String
    /// Headers besides the body's (`Allow`, `Upload-Offset`, `Content-Range`, …).
    var headers: HTTPFields

    init(_ status: HTTPResponse.Status, _ code: CircleErrorCode, _ message: String, headers: HTTPFields = [:]) {
        self.status = status
        self.code = code
        self.message = message
        self.headers = headers
    }

    func response(from request: Request, context: some RequestContext) throws -> Response {
        self.response
    }

    var response: Response {
        var response = Response.json(self.status, HTTPAPI.ErrorBody(code: self.code, message: self.message))
        response.headers.append(contentsOf: self.headers)
        return response
    }

    static let missingToken = APIError(.unauthorized, .unauthorized, "send a token as \"Authorization: Bearer …\" or ?token=")
}

extension Response {
    /// A JSON body encoded the one way the API encodes (`HTTPAPI.encode`: sorted keys).
    static func json(_ status: HTTPResponse.Status, _ value: some Encodable, headers: HTTPFields = [:]) -> Response {
        var fields = headers
        fields[.contentType] = "application/json"
        return Response(status: status, headers: fields, body: .init(byteBuffer: ByteBuffer(bytes: HTTPAPI.encode(value))))
    }
}

extension ByteBuffer {
    /// A route's JSON body as `type`, read by the strict parser of ``HTTPAPI/decodeBody(_:from:)``;
    /// a body it cannot use is a 400 that says what was wrong with it, then what to send
    /// (`example`).
    func decodeJSON<Value: Decodable>(_ type: Value.Type, send example: String) throws(APIError) -> Value {
        do {
            return try HTTPAPI.decodeBody(type, from: self.readableBytesView)
        } catch {
            throw APIError(.badRequest, .badRequest, "\(error.message); send \(example)")
        }
    }
}

extension Request {
    /// The bearer token from `Authorization`, or the `token` query parameter (browsers cannot set
    /// headers on a WebSocket upgrade).
    var circleToken: String? {
        bearerToken(authorization: self.headers[.authorization], uri: self.uri)
    }

    /// What ``Identity/authenticate(_:)`` needs of this request.
    func credentials(address: String?) -> CredentialsInput {
        CredentialsInput(
            bearer: self.circleToken,
            cookieHeader: self.headers[values: .cookie].joined(separator: "; "),
            origin: self.headers[.origin],
            host: self.head.authority,
            changesState: ![.get, .head, .options].contains(self.method),
            csrfHeader: self.headers[HTTPField.Name("X-Circle-CSRF")!],
            isUpgrade: false,
            address: address
        )
    }

    /// The whole body for a JSON route: at most 1 MiB (413 beyond).
    mutating func jsonBody() async throws -> ByteBuffer {
        var collected = ByteBuffer()
        for try await var chunk in self.body {
            guard collected.readableBytes + chunk.readableBytes <= Self.maxJSONBody else {
                throw APIError(.contentTooLarge, .tooLarge, "bodies are limited to 1 MiB")
            }
            collected.writeBuffer(&chunk)
        }
        self.body = .init(buffer: collected)
        return collected
    }

    static let maxJSONBody = 1024 * 1024
}

/// A request's token: `Authorization: Bearer …`, or the `token` query parameter (browsers cannot
/// set headers on a WebSocket upgrade). The HTTP routes and the upgrade both read it here.
func bearerToken(authorization: String?, uri: URI) -> String? {
    if let header = authorization {
        let parts = header.split(separator: " ", maxSplits: 1)
        if parts.count == 2, parts[0].lowercased() == "bearer" { return String(parts[1]) }
    }
    return uri.queryParameters.get("token")
}

extension APIError {
    /// The HTTP answer of a circle that may not be seen: 404 `not_found` or 403 `forbidden`.
    init(_ refusal: CircleVisibility.Refusal) {
        self.init(refusal.code == .notFound ? .notFound : .forbidden, refusal.code, refusal.message)
    }
}
