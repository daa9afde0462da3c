import CircleWire
import Foundation
import HTTPTypes
import Hummingbird

/// Every HTTP route of docs/API.md, registered on a Hummingbird router (or a group of one, for
/// an app that mounts Circle under a prefix). The routes that need a token sit behind
/// ``TokenAuthMiddleware``; the WebSocket upgrade itself is answered by ``CircleHTTPChannel``
/// before the router sees the request, so `/v1/ws` and `/v1/echo` here answer only requests
/// that are not upgrades.
struct CircleRoutes: Sendable {
    let services: ServerServices
    let media: MediaService

    func add<Context: CircleRequestContext>(to router: some RouterMethods<Context>) {
        let services = self.services
        router.get(RouterPath(HTTPAPI.Path.health)) { _, _ in
            Response.json(
                .ok,
                HTTPAPI.Health(status: services.isAccepting ? "ok" : "shutting_down", connections: services.hub.connectionCount)
            )
        }
        router.get(RouterPath(HTTPAPI.Path.metrics)) { _, _ in
            Response(
                status: .ok,
                headers: [.contentType: "text/plain; version=0.0.4"],
                body: .init(byteBuffer: ByteBuffer(bytes: services.metrics.render()))
            )
        }
        for path in [HTTPAPI.Path.health, HTTPAPI.Path.metrics] {
            for method in [HTTPRequest.Method.post, .put, .delete, .patch, .head, .options] {
                router.on(RouterPath(path), method: method) { _, _ -> Response in
                    throw APIError(.methodNotAllowed, .badRequest, "\(path) answers GET only", headers: [.allow: "GET"])
                }
            }
        }
        router.get(RouterPath(HTTPAPI.Path.page)) { request, _ in
            // The page's URLs are relative to where it was served: under a prefix it needs the
            // trailing slash (`/chat` → `/chat/`). A relative `./SEGMENT/` cannot leave the origin.
            let path = request.uri.path
            if !path.hasSuffix("/"), let last = path.split(separator: "/").last {
                let query = request.uri.query.map { "?" + $0 } ?? ""
                return Response(status: .permanentRedirect, headers: [.location: "./\(last)/\(query)"])
            }
            return ChatPage.shared.response(for: nil, headers: request.headers)
        }
        router.get(RouterPath(HTTPAPI.Path.Pattern.asset.template)) { request, context in
            ChatPage.shared.response(for: try context.pathParameter("file"), headers: request.headers)
        }
        router.get(RouterPath(HTTPAPI.Path.favicon)) { _, _ in Response(status: .noContent, headers: [.contentType: "image/x-icon"]) }
        router.get(RouterPath(HTTPAPI.Path.config)) { _, _ in
            Response.json(.ok, HTTPAPI.ServerConfig(developmentTokens: services.configuration.developmentTokens, subprotocol: circleSubprotocol))
        }
        router.get(RouterPath(HTTPAPI.Path.developmentToken)) { request, _ in
            try await self.developmentToken(request)
        }
        for path in [HTTPAPI.Path.webSocket, HTTPAPI.Path.echo] {
            for method in [HTTPRequest.Method.get, .post, .put, .delete, .patch, .head] {
                router.on(RouterPath(path), method: method) { request, _ -> Response in
                    if request.headers[values: .upgrade].contains(where: { $0.lowercased() == "websocket" }) {
                        throw APIError(
                            .badRequest,
                            .badRequest,
                            "invalid WebSocket upgrade: it needs Sec-WebSocket-Key and Sec-WebSocket-Version: 13, as the first request on its connection"
                        )
                    }
                    throw APIError(.upgradeRequired, .badRequest, "\(path) speaks WebSocket only")
                }
            }
        }

        let authenticated = router.group().add(middleware: TokenAuthMiddleware<Context>(services: services))
        // The routes that take API keys too (docs/API.md, "API keys"): each checks the key's scope.
        let keyed = router.group().add(middleware: TokenAuthMiddleware<Context>(services: services, acceptsAPIKeys: true))
        IdentityRoutes(services: services).add(public: router, authenticated: authenticated, admin: keyed)
        WebhookRoutes(services: services).add(authenticated: keyed)
        PublishHookRoutes(services: services).add(authenticated: keyed)
        ModerationRoutes(services: services).add(authenticated: keyed)
        ErasureRoutes(services: services).add(authenticated: keyed)
        APIKeyRoutes(services: services).add(authenticated: keyed)
        PushRoutes(services: services).add(authenticated: authenticated)
        MessageRoutes(services: services).add(authenticated: keyed)
        self.addCircles(to: keyed)
        self.addRetention(to: keyed)
        SearchRoutes(search: SearchAnswer(store: services.store)).add(authenticated: keyed)
        MediaRoutes(media: self.media).add(to: authenticated)
    }

    private func developmentToken(_ request: Request) async throws -> Response {
        guard self.services.configuration.developmentTokens else {
            throw APIError(.notFound, .notFound, "development tokens are off (start the server with --dev)")
        }
        guard let name = request.uri.queryParameters.get("user"), TokenAuthority.isValidUserName(name) else {
            throw APIError(.badRequest, .badRequest, "give ?user=NAME (letters, digits, . _ - @; at most 64)")
        }
        do {
            let token = try await self.services.authority.mint(user: name, ttl: .seconds(24 * 3600))
            return .json(.ok, HTTPAPI.DevelopmentToken(token: token, user: name))
        } catch {
            throw APIError(.internalServerError, .internalError, "could not mint a token: \(error)")
        }
    }

    // MARK: - Circles

    /// Circle names: 1–64 characters of lower-case letters, digits, `.`, `_`, `-`.
    static func isValidCircleName(_ name: String) -> Bool {
        !name.isEmpty && name.utf8.count <= 64
            && name.utf8.allSatisfy { ($0 >= 0x61 && $0 <= 0x7A) || ($0 >= 0x30 && $0 <= 0x39) || $0 == 0x2E || $0 == 0x5F || $0 == 0x2D }
    }

    private func addCircles<Context: CircleRequestContext>(to router: some RouterMethods<Context>) {
        let store = self.services.store
        router.get(RouterPath(HTTPAPI.Path.circles)) { _, context in
            let user = try context.requirePrincipal(.read).name
            return Response.json(.ok, HTTPAPI.CircleList(circles: try await store.circles(visibleTo: user).map(Self.body)))
        }
        router.post(RouterPath(HTTPAPI.Path.circles)) { request, context in
            let user = try context.requirePrincipal(.manage).name
            var request = request
            let body = try await request.jsonBody()
            let create = try body.decodeJSON(HTTPAPI.CreateCircle.self, send: #"{"name": "…", "private": false}"#)
            guard Self.isValidCircleName(create.name) else {
                throw APIError(.badRequest, .badRequest, "a circle name has 1–64 characters: a–z, 0–9, . _ -")
            }
            guard !create.name.hasPrefix(DirectMessageKey.namePrefix) else {
                throw APIError(.badRequest, .badRequest, "names starting with \"\(DirectMessageKey.namePrefix)\" are kept for direct messages")
            }
            let info = try await store.createCircle(
                name: create.name,
                owner: user,
                isPrivate: create.private ?? false,
                createdAt: Int64(Date().timeIntervalSince1970 * 1000)
            )
            return Response.json(.created, Self.body(info))
        }
        router.post(RouterPath(HTTPAPI.Path.directMessages)) { request, context in
            let user = try context.requirePrincipal(.manage).name
            var request = request
            let body = try await request.jsonBody()
            let start = try body.decodeJSON(HTTPAPI.StartDirectMessage.self, send: #"{"members": ["name", …]}"#)
            // At most 9 names (openapi.yaml's maxItems), repeated ones included: refused unread.
            guard start.members.count <= DirectMessageKey.memberRange.upperBound else {
                throw APIError(.badRequest, .badRequest, "\"members\" has \(start.members.count) names; a direct message has 2 to 9 people, you included")
            }
            let members: DirectMessageKey
            switch DirectMessageKey.make(members: start.members, starter: user) {
            case .success(let key): members = key
            case .failure(let error): throw APIError(.badRequest, .badRequest, error.description)
            }
            let now = Int64(Date().timeIntervalSince1970 * 1000)
            let info = try await store.directMessage(members, starter: user, createdAt: now)
            if info.createdAt == now, let others = info.direct?.filter({ $0 != user }) {
                // Started now: the others see it in their lists at once.
                await self.tellAdded(others, to: info.name)
            }
            let listed = try await store.circles(visibleTo: user, named: info.name).first
            return Response.json(.ok, Self.body(listed ?? info))
        }
                router.put(RouterPath(HTTPAPI.Path.Pattern.notify.template)) { request, context in
            let principal = try context.requirePrincipal(.read)
            let info = try await self.visibleCircle(context, principal: principal)
            var request = request
            let body = try await request.jsonBody()
            let setting = try body.decodeJSON(HTTPAPI.NotificationSetting.self, send: #"{"level": "all" | "mentions" | "none" | null}"#)
            try await store.setNotificationLevel(setting.level, of: principal.name, in: info.name)
            let listed = try await store.circles(visibleTo: principal.name, named: info.name).first ?? info
            // Every connection of the user learns it, this node's and the others'.
            self.services.hub.send(.notify(circle: info.name, level: listed.summary.notify), toUser: principal.name, except: nil)
            return Response.json(.ok, Self.body(listed))
        }
        router.get(RouterPath(HTTPAPI.Path.Pattern.circle.template)) { _, context in
            let principal = try context.requirePrincipal(.read)
            let info = try await self.visibleCircle(context, principal: principal)
            // With the user's read marker and unread count, as in the list.
            let listed = try await store.circles(visibleTo: principal.name, named: info.name).first
            return Response.json(.ok, Self.body(listed ?? info))
        }
        router.get(RouterPath(HTTPAPI.Path.Pattern.messages.template)) { request, context in
            let principal = try context.requirePrincipal(.read)
            let info = try await self.visibleCircle(context, principal: principal)
            return try await self.messages(request, circle: info.name, viewer: principal.name)
        }
        router.get(RouterPath(HTTPAPI.Path.Pattern.members.template)) { _, context in
            let info = try await self.visibleCircle(context, principal: try context.requirePrincipal(.manage), managing: true)
            return Response.json(.ok, HTTPAPI.MemberList(members: try await store.members(of: info.name)))
        }
        router.post(RouterPath(HTTPAPI.Path.Pattern.members.template)) { request, context in
            let principal = try context.requirePrincipal(.manage)
            let info = try await self.visibleCircle(context, principal: principal, managing: true)
            guard try await self.managesMembers(of: info, principal: principal) else {
                throw APIError(.forbidden, .forbidden, "only the owner (\(info.owner)) or an admin adds members")
            }
            guard info.direct == nil else {
                throw APIError(.badRequest, .badRequest, "a direct message's members are fixed; start another one with POST /v1/dms")
            }
            var request = request
            let body = try await request.jsonBody()
            let add = try body.decodeJSON(HTTPAPI.AddMember.self, send: #"{"user": "name"}"#)
            guard TokenAuthority.isValidUserName(add.user) else {
                throw APIError(.badRequest, .badRequest, "\"\(add.user)\" is not a valid user name; send {\"user\": \"name\"}")
            }
            if try await self.changeMembership(.added, of: add.user, in: info.name, by: principal.name) {
                await self.tellAdded([add.user], to: info.name)
            }
            return Response.json(.ok, HTTPAPI.MemberList(members: try await store.members(of: info.name)))
        }
        router.put(RouterPath(HTTPAPI.Path.Pattern.systemEntries.template)) { request, context in
            let principal = try context.requirePrincipal(.manage)
            let info = try await self.visibleCircle(context, principal: principal, managing: true)
            guard try await self.managesMembers(of: info, principal: principal) else {
                throw APIError(.forbidden, .forbidden, "only the owner (\(info.owner)) or an admin turns system entries on or off")
            }
            var request = request
            let body = try await request.jsonBody()
            let setting = try body.decodeJSON(HTTPAPI.SystemEntries.self, send: #"{"enabled": true | false}"#)
            try await store.setSystemEntries(setting.enabled, in: info.name)
            var changed = try await store.circles(visibleTo: principal.name, named: info.name).first ?? info
            changed.systemEntries = setting.enabled
            return Response.json(.ok, Self.body(changed))
        }
        router.delete(RouterPath(HTTPAPI.Path.Pattern.member.template)) { _, context in
            // A moderator's key removes members too (it does not add them).
            let principal = try context.requirePrincipal(.manage, .moderate)
            let info = try await self.visibleCircle(context, principal: principal, managing: true, removing: true)
            let user = principal.name
            let member = try context.pathParameter("user")
            guard TokenAuthority.isValidUserName(member) else {
                throw APIError(.badRequest, .badRequest, "\"\(member)\" is not a valid user name")
            }
            let allowed = member == user ? true : try await self.managesMembers(of: info, principal: principal, removing: true)
            guard allowed else {
                throw APIError(.forbidden, .forbidden, "only the owner or an admin removes other members")
            }
            guard member != info.owner else {
                throw APIError(.badRequest, .badRequest, "the owner stays a member of their circle")
            }
            guard info.direct == nil else {
                throw APIError(.badRequest, .badRequest, "a direct message's members are fixed")
            }
            try await self.changeMembership(member == user ? .left : .removed, of: member, in: info.name, by: user)
            if info.isPrivate { self.services.hub.revoke(user: member, from: info.name) }
            return Response.json(.ok, HTTPAPI.MemberList(members: try await store.members(of: info.name)))
        }
    }

    /// Adds or removes `member` by committing the change as a system entry (``NewPost/event``):
    /// the membership and its entry are written in one transaction, and the entry reaches every
    /// subscriber through the hub like a post. Idempotent: a change that changes nothing stores
    /// no entry.
    /// - Returns: Whether the membership changed.
    @discardableResult
    private func changeMembership(_ event: CircleSystemEvent, of member: String, in circle: String, by actor: String) async throws -> Bool {
        let post = NewPost(
            circle: circle, author: actor, clientID: "system-" + Identity.randomSecret(bytes: 12), text: nil, attachment: nil,
            time: Int64(Date().timeIntervalSince1970 * 1000), event: event, member: member
        )
        let committer = self.services.committer
        let outcome = await withCheckedContinuation { (continuation: CheckedContinuation<Result<PostOutcome, any Error>, Never>) in
            committer.submit(post) { continuation.resume(returning: $0) }
        }
        switch outcome {
        case .success(.stored):
            return true
        case .success(.duplicate), .success(.applied):
            return false
        case .success(.noSuchCircle):
            throw APIError(.noSuchCircle(circle))
        case .success(.rejected(let code, let message)):
            throw APIError(.badRequest, code, message)
        case .failure(let error as StoreError) where error.code == .unavailable:
            throw APIError(.serviceUnavailable, .unavailable, "\(error.message); retry")
        case .failure(let error):
            throw APIError(.internalServerError, .internalError, "the membership was not changed (\(error)); retry")
        }
    }

    /// Tells every connection of each of `users`, on every node, that `circle` is now in their
    /// list (`added`, with the circle as their list shows it). Best effort: a user whose list
    /// cannot be read now finds the circle at their list's next refresh.
    private func tellAdded(_ users: [String], to circle: String) async {
        for user in users {
            guard let listed = try? await self.services.store.circles(visibleTo: user, named: circle).first else { continue }
            self.services.hub.send(.added(listed.summary), toUser: user, except: nil)
        }
    }

    /// Whether `principal` may add and remove members of `circle`: its owner, an admin, or an
    /// API key with `manage` (or, `removing`, with `moderate`).
    func managesMembers(of circle: CircleInfo, principal: AuthenticatedUser, removing: Bool = false) async throws -> Bool {
        if circle.owner == principal.name { return true }
        if let scopes = principal.apiKeyScopes {
            return scopes.contains(.manage) || (removing && scopes.contains(.moderate))
        }
        guard let account = try await self.services.store.account(named: principal.name) else { return false }
        return account.role == .admin && account.status == .active
    }

    /// The circle of the `{name}` in the path, if the user may see it: 404 when there is none,
    /// 403 when it is private and the user is not a member.
    func visibleCircle(
        _ context: some CircleRequestContext,
        principal: AuthenticatedUser,
        managing: Bool = false,
        removing: Bool = false
    ) async throws -> CircleInfo {
        let name = try context.pathParameter("name")
        let visibility = try await CircleVisibility.read(name, for: principal.name, in: self.services.store)
        switch visibility {
        case .visible(let info):
            return info
        case .notMember(let info) where managing:
            // Admins manage the members of private circles they are not in (but do not read them).
            if try await self.managesMembers(of: info, principal: principal, removing: removing) { return info }
        case .notMember, .noSuchCircle:
            break
        }
        throw APIError(visibility.refusal() ?? .noSuchCircle(name))
    }

    /// `GET /v1/circles/{name}/messages?before=&after=&limit=`: the same paging as `history`.
    private func messages(_ request: Request, circle: String, viewer: String) async throws -> Response {
        let query = request.uri.queryParameters
        func integer(_ key: String) -> Int64?? {
            guard let text = query.get(key) else { return .some(nil) }
            guard let value = Int64(text), value >= 0 else { return nil }
            return .some(value)
        }
        guard let before = integer("before"), let after = integer("after"), let limitValue = integer("limit") else {
            throw APIError(.badRequest, .badRequest, "before, after and limit are non-negative integers")
        }
        let limit = Int(clamping: limitValue ?? Int64(HistoryPaging.defaultLimit))
        if let problem = HistoryPaging.problem(limit: limit) { throw APIError(.badRequest, .badRequest, "limit \(problem)") }
        guard before == nil || after == nil else { throw APIError(.badRequest, .badRequest, "give before or after, not both") }
        let page = try await self.services.store.historyPage(in: circle, before: before, after: after, limit: limit, viewer: viewer)
        return .json(.ok, HTTPAPI.MessagePage(posts: page.posts, more: page.more, lastSeq: page.lastSeq))
    }

    private static func body(_ info: CircleInfo) -> HTTPAPI.Circle {
        info.summary
    }
}
