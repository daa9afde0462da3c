import CircleWire
import Foundation
import NIOCore
import NIOHTTP1

/// A request as the API sees it: head fields and the whole (bounded) body.
struct APIRequest: Sendable {
    var method: HTTPMethod
    var path: String
    var query: [String: String]
    var headers: HTTPHeaders
    var body: ByteBuffer?

    init(head: HTTPRequestHead, body: ByteBuffer?) {
        self.method = head.method
        let (path, query) = splitURI(head.uri)
        self.path = path
        self.query = query
        self.headers = head.headers
        self.body = body
    }

    /// The bearer token from `Authorization`, or the `token` query parameter (browsers cannot
    /// set headers on a WebSocket upgrade).
    var token: String? {
        if let header = self.headers.first(name: "Authorization") {
            let parts = header.split(separator: " ", maxSplits: 1)
            if parts.count == 2, parts[0].lowercased() == "bearer" { return String(parts[1]) }
        }
        return self.query["token"]
    }
}

struct APIResponse: Sendable {
    var status: HTTPResponseStatus
    var contentType: String
    var body: ByteBuffer
    /// Headers besides `Content-Type` and `Content-Length`; without a `Cache-Control` of its
    /// own the response gets `no-store`.
    var headers = HTTPHeaders()

    static func json(_ status: HTTPResponseStatus, _ value: some Encodable) -> APIResponse {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        let data = (try? encoder.encode(value)) ?? Data("{}".utf8)
        return APIResponse(status: status, contentType: "application/json", body: ByteBuffer(bytes: data))
    }

    static func error(_ status: HTTPResponseStatus, _ code: CircleErrorCode, _ message: String) -> APIResponse {
        .json(status, APIErrorBody(error: .init(code: code, message: message)))
    }
}

/// The JSON body of every HTTP error: `{"error": {"code": "...", "message": "..."}}`.
struct APIErrorBody: Codable, Sendable {
    struct Detail: Codable, Sendable {
        var code: CircleErrorCode
        var message: String
    }
    var error: Detail
}

func splitURI(_ uri: String) -> (path: String, query: [String: String]) {
    guard let components = URLComponents(string: uri) else { return (uri, [:]) }
    var query: [String: String] = [:]
    for item in components.queryItems ?? [] { query[item.name] = item.value ?? "" }
    return (components.percentEncodedPath.isEmpty ? "/" : components.path, query)
}

/// The HTTP API beside the WebSocket (documented in docs/API.md).
struct APIRouter: Sendable {
    let services: ServerServices
    let media: MediaService

    init(services: ServerServices) {
        self.services = services
        self.media = MediaService(services: services, files: MediaFiles(dataDirectory: services.configuration.dataDirectory))
    }

    private struct CircleBody: Codable, Sendable {
        var name: String
        var owner: String
        var `private`: Bool
        var createdAt: Int64
        var lastSeq: Int64

        init(_ info: CircleInfo) {
            self.name = info.name
            self.owner = info.owner
            self.private = info.isPrivate
            self.createdAt = info.createdAt
            self.lastSeq = info.lastSeq
        }
    }

    private struct CreateCircle: Codable {
        var name: String
        var `private`: Bool?
    }

    private struct AddMember: Codable {
        var user: String
    }

    /// Circle names: 1–64 characters of lower-case letters, digits, `.`, `_`, `-`.
    static func isValidCircleName(_ name: String) -> Bool {
        !name.isEmpty && name.utf8.count <= 64
            && name.utf8.allSatisfy { ($0 >= 0x61 && $0 <= 0x7A) || ($0 >= 0x30 && $0 <= 0x39) || $0 == 0x2E || $0 == 0x5F || $0 == 0x2D }
    }

    /// The route label used in metrics: one of the known routes, or "other", so that clients
    /// cannot create new time series by asking for random paths.
    static func routeLabel(method: HTTPMethod, path: String) -> String {
        let parts = path.split(separator: "/").map(String.init)
        let label: String
        switch parts {
        case [], ["healthz"], ["metrics"], ["favicon.ico"], ["v1", "circles"], ["v1", "config"], ["v1", "dev", "token"], ["v1", "ws"], ["v1", "echo"]:
            label = "/" + parts.joined(separator: "/")
        case let p where p.count == 3 && p[0] == "v1" && p[1] == "circles":
            label = "/v1/circles/{name}"
        case let p where p.count == 4 && p[0] == "v1" && p[1] == "circles" && (p[3] == "messages" || p[3] == "members"):
            label = "/v1/circles/{name}/\(p[3])"
        case let p where p.count == 5 && p[0] == "v1" && p[1] == "circles" && p[3] == "members":
            label = "/v1/circles/{name}/members/{user}"
        case let p where p.count == 2 && p[0] == "assets":
            label = "/assets/{file}"
        case ["v1", "media"], ["v1", "media", "uploads"]:
            label = "/" + parts.joined(separator: "/")
        case let p where p.count == 4 && p[0] == "v1" && p[1] == "media" && p[2] == "uploads":
            label = "/v1/media/uploads/{upload}"
        case let p where p.count == 3 && p[0] == "v1" && p[1] == "media":
            label = "/v1/media/{id}"
        default:
            return "other"
        }
        switch method {
        case .GET, .POST, .DELETE, .PUT, .HEAD, .PATCH: return "\(method.rawValue) \(label)"
        default: return "other"
        }
    }

    func handle(_ request: APIRequest) async -> APIResponse {
        let segments = request.path.split(separator: "/").map(String.init)
        switch (request.method, segments) {
        case (.GET, ["healthz"]):
            struct Health: Codable { var status: String; var connections: Int }
            return .json(.ok, Health(status: self.services.isAccepting ? "ok" : "shutting_down", connections: self.services.hub.connectionCount))
        case (.GET, ["metrics"]):
            return APIResponse(status: .ok, contentType: "text/plain; version=0.0.4", body: ByteBuffer(bytes: self.services.metrics.render()))
        case (.GET, []):
            return ChatPage.shared.response(for: nil, request: request)
        case (.GET, let parts) where parts.count == 2 && parts[0] == "assets":
            return ChatPage.shared.response(for: parts[1], request: request)
        case (.GET, ["favicon.ico"]):
            return APIResponse(status: .noContent, contentType: "image/x-icon", body: ByteBuffer())
        case (.GET, ["v1", "config"]):
            struct Config: Codable { var developmentTokens: Bool; var subprotocol: String }
            return .json(.ok, Config(developmentTokens: self.services.configuration.developmentTokens, subprotocol: circleSubprotocol))
        case (.GET, ["v1", "dev", "token"]):
            return await self.developmentToken(request)
        case (_, ["healthz"]), (_, ["metrics"]):
            var response = APIResponse.error(.methodNotAllowed, .badRequest, "\(request.path) answers GET only")
            response.headers.add(name: "Allow", value: "GET")
            return response
        default:
            break
        }
        if let route = MediaService.Route(method: request.method, path: request.path) {
            return await self.media.handle(request, route: route)
        }
        if segments == ["v1", "ws"] || segments == ["v1", "echo"] {
            return request.headers["Upgrade"].contains(where: { $0.lowercased() == "websocket" })
                ? .error(.badRequest, .badRequest, "invalid WebSocket upgrade: it needs Sec-WebSocket-Key and Sec-WebSocket-Version: 13, as the first request on its connection")
                : .error(.upgradeRequired, .badRequest, "\(request.path) speaks WebSocket only")
        }
        guard segments.first == "v1", segments.count >= 2, segments[1] == "circles" else {
            return .error(.notFound, .notFound, "no route \(request.method.rawValue) \(request.path)")
        }
        let user: AuthenticatedUser
        do {
            guard let token = request.token else {
                return .error(.unauthorized, .unauthorized, "send a token as \"Authorization: Bearer …\" or ?token=")
            }
            user = try await self.services.authority.verify(token)
        } catch {
            return .error(.unauthorized, error.code, error.message)
        }
        do {
            return try await self.circles(request, segments: Array(segments.dropFirst(2)), user: user.name)
        } catch let error as StoreError {
            switch error.code {
            case .conflict: return .error(.conflict, .conflict, error.message)
            case .notFound: return .error(.notFound, .notFound, error.message)
            case .unavailable: return .error(.serviceUnavailable, .unavailable, error.message)
            }
        } catch {
            return .error(.internalServerError, .internalError, "\(error)")
        }
    }

    private func developmentToken(_ request: APIRequest) async -> APIResponse {
        guard self.services.configuration.developmentTokens else {
            return .error(.notFound, .notFound, "development tokens are off (start the server with --dev)")
        }
        guard let name = request.query["user"], TokenAuthority.isValidUserName(name) else {
            return .error(.badRequest, .badRequest, "give ?user=NAME (letters, digits, . _ - @; at most 64)")
        }
        do {
            struct Token: Codable { var token: String; var user: String }
            return .json(.ok, Token(token: try await self.services.authority.mint(user: name, ttl: .seconds(24 * 3600)), user: name))
        } catch {
            return .error(.internalServerError, .internalError, "could not mint a token: \(error)")
        }
    }

    private func circles(_ request: APIRequest, segments: [String], user: String) async throws -> APIResponse {
        let store = self.services.store
        switch (request.method, segments.count) {
        case (.GET, 0):
            struct List: Codable { var circles: [CircleBody] }
            return .json(.ok, List(circles: try await store.circles(visibleTo: user).map(CircleBody.init)))
        case (.POST, 0):
            guard let body = request.body, let create = try? JSONDecoder().decode(CreateCircle.self, from: Data(body.readableBytesView)) else {
                return .error(.badRequest, .badRequest, "send {\"name\": \"…\", \"private\": false}")
            }
            guard Self.isValidCircleName(create.name) else {
                return .error(.badRequest, .badRequest, "a circle name has 1–64 characters: a–z, 0–9, . _ -")
            }
            let info = try await store.createCircle(
                name: create.name,
                owner: user,
                isPrivate: create.private ?? false,
                createdAt: Int64(Date().timeIntervalSince1970 * 1000)
            )
            return .json(.created, CircleBody(info))
        default:
            break
        }
        // DELETE or PUT /v1/circles: no circle named, no route (found by scripts/api-conformance,
        // which made the server trap here).
        guard let name = segments.first else {
            return .error(.notFound, .notFound, "no route \(request.method.rawValue) \(request.path)")
        }
        guard let info = try await store.circle(named: name) else {
            return .error(.notFound, .notFound, "no circle \"\(name)\"")
        }
        let isMember = info.isPrivate ? try await store.isMember(user, of: name) : true
        guard isMember else {
            return .error(.forbidden, .forbidden, "\"\(name)\" is private and you are not a member")
        }
        switch (request.method, Array(segments.dropFirst())) {
        case (.GET, []):
            return .json(.ok, CircleBody(info))
        case (.GET, ["messages"]):
            return try await self.messages(request, circle: name)
        case (.GET, ["members"]):
            struct Members: Codable { var members: [String] }
            return .json(.ok, Members(members: try await store.members(of: name)))
        case (.POST, ["members"]):
            guard info.owner == user else { return .error(.forbidden, .forbidden, "only the owner (\(info.owner)) adds members") }
            guard let body = request.body, let add = try? JSONDecoder().decode(AddMember.self, from: Data(body.readableBytesView)),
                TokenAuthority.isValidUserName(add.user)
            else {
                return .error(.badRequest, .badRequest, "send {\"user\": \"name\"}")
            }
            try await store.addMember(add.user, to: name)
            struct Members: Codable { var members: [String] }
            return .json(.ok, Members(members: try await store.members(of: name)))
        case (.DELETE, let rest) where rest.count == 2 && rest[0] == "members":
            guard info.owner == user || rest[1] == user else {
                return .error(.forbidden, .forbidden, "only the owner removes other members")
            }
            guard rest[1] != info.owner else {
                return .error(.badRequest, .badRequest, "the owner stays a member of their circle")
            }
            try await store.removeMember(rest[1], from: name)
            if info.isPrivate { self.services.hub.revoke(user: rest[1], from: name) }
            struct Members: Codable { var members: [String] }
            return .json(.ok, Members(members: try await store.members(of: name)))
        default:
            return .error(.notFound, .notFound, "no route \(request.method.rawValue) \(request.path)")
        }
    }

    /// `GET /v1/circles/{name}/messages?before=&after=&limit=`: the same paging as `history`.
    private func messages(_ request: APIRequest, circle: String) async throws -> APIResponse {
        func integer(_ key: String) -> Int64?? {
            guard let text = request.query[key] else { return .some(nil) }
            guard let value = Int64(text), value >= 0 else { return nil }
            return .some(value)
        }
        guard let before = integer("before"), let after = integer("after"), let limitValue = integer("limit") else {
            return .error(.badRequest, .badRequest, "before, after and limit are non-negative integers")
        }
        let limit = Int(limitValue ?? 50)
        guard (1...200).contains(limit) else { return .error(.badRequest, .badRequest, "limit is between 1 and 200") }
        guard before == nil || after == nil else { return .error(.badRequest, .badRequest, "give before or after, not both") }
        struct Page: Codable { var posts: [CirclePost]; var more: Bool }
        if let after {
            let page = try await self.services.store.posts(in: circle, after: after, limit: limit + 1)
            return .json(.ok, Page(posts: Array(page.prefix(limit)), more: page.count > limit))
        }
        let page = try await self.services.store.posts(in: circle, before: before, limit: limit + 1)
        return .json(.ok, Page(posts: Array(page.suffix(limit)), more: page.count > limit))
    }
}
