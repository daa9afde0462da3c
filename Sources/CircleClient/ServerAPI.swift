import CircleHTTPClient
import CircleWire
import Foundation
import NIOHTTP1

/// The calls of Circle's HTTP API (docs/API.md), over the shared ``HTTPClient``, with the bodies
/// of ``HTTPAPI``. Every failure is a ``CircleClientError``: the server's own `code` and
/// `message` (with the HTTP status) when it answered, `not_connected`, `tls_failed` or
/// `timed_out` when it did not; an error of the token provider is passed on unchanged.
struct ServerAPI: Sendable {
    let target: HTTPTarget
    /// Put before every path: where the server is mounted (empty at the root).
    let prefix: String
    let http: HTTPClient
    let tokenProvider: (@Sendable () async throws -> String)?

    init(target: HTTPTarget, prefix: String, http: HTTPClient, tokenProvider: (@Sendable () async throws -> String)?) {
        self.target = target
        self.prefix = prefix
        self.http = http
        self.tokenProvider = tokenProvider
    }

    /// Sends a request and decodes a 2xx answer as `Answer`. A 401 is tried once more with a
    /// fresh token (the provider is asked on every call).
    func call<Answer: Decodable>(_ method: HTTPMethod, _ uri: String, as answer: Answer.Type) async throws -> Answer {
        try await self.call(method, uri, body: Optional<HTTPAPI.AddMember>.none, as: answer)
    }

    /// Sends a request with a JSON body; see ``call(_:_:as:)``.
    func call<Body: Encodable, Answer: Decodable>(
        _ method: HTTPMethod,
        _ uri: String,
        body: Body?,
        as: Answer.Type
    ) async throws -> Answer {
        var attempt = 0
        while true {
            attempt += 1
            var headers = HTTPHeaders()
            if let tokenProvider = self.tokenProvider {
                // What the provider throws is passed on as it is: it is the app's own error.
                headers.add(name: "Authorization", value: "Bearer \(try await tokenProvider())")
            }
            var bytes: [UInt8]?
            if let body {
                headers.add(name: "Content-Type", value: "application/json")
                bytes = Array(HTTPAPI.encode(body))
            }
            let response = try await self.send(method, uri, headers: headers, body: bytes)
            if response.status == 401, attempt == 1, self.tokenProvider != nil { continue }
            guard (200..<300).contains(response.status) else {
                throw Self.refusal(response.head.status, body: response.body)
            }
            if response.status == 204, let nothing = NoContent() as? Answer { return nothing }
            guard let answer = HTTPAPI.decode(Answer.self, from: response.body) else {
                throw CircleClientError(
                    .httpError,
                    "the answer to \(method.rawValue) \(uri) is not the JSON the API documents",
                    httpStatus: response.status
                )
            }
            return answer
        }
    }

    /// The answer of a call that answers 204.
    struct NoContent: Decodable, Sendable {}

    private func send(_ method: HTTPMethod, _ uri: String, headers: HTTPHeaders, body: [UInt8]?) async throws(CircleClientError) -> HTTPClient.Response {
        do {
            return try await self.http.exchange(method, target: self.target, uri: self.prefix + uri, headers: headers, body: body.map { .bytes($0) } ?? .none)
        } catch {
            throw Self.clientError(error.error, address: self.target.address, unreachable: error.unreachable)
        }
    }

    /// The error for a refusal (of an API call or a transfer): the server's code and message
    /// when the body is an API error body, else `http_error` with the status and the body's start.
    static func refusal(_ status: HTTPResponseStatus, body: [UInt8]) -> CircleClientError {
        if let detail = HTTPAPI.decode(HTTPAPI.ErrorBody.self, from: body)?.error {
            return CircleClientError(.server(detail.code), detail.message, httpStatus: Int(status.code))
        }
        let text = String(decoding: body.prefix(500), as: UTF8.self)
        return CircleClientError(
            .httpError,
            "HTTP \(status.code) \(status.reasonPhrase)" + (text.isEmpty ? "" : ": \(text)"),
            httpStatus: Int(status.code)
        )
    }

    /// The error for a request that got no answer.
    static func clientError(_ error: any Error, address: String, unreachable: Bool) -> CircleClientError {
        guard let error = error as? HTTPClientError else {
            return CircleClientError(.notConnected, "the request to \(address) failed: \(error)")
        }
        switch error.code {
        case .tlsFailed, .pinMismatch:
            return CircleClientError(.tlsFailed, "\(error)")
        case .idleTimeout:
            return CircleClientError(.timedOut, "\(address) did not answer in time: \(error.message)")
        case .invalidURL:
            return CircleClientError(.badRequest, error.message)
        default:
            return CircleClientError(.notConnected, "cannot reach \(address): \(error)")
        }
    }
}
