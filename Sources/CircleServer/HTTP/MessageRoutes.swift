import CircleWire
import Foundation
import HTTPTypes
import Hummingbird

/// Posting over HTTP (docs/API.md, "Posting over HTTP"): a post, an edit, a delete or a reaction
/// goes through the same group commit as a WebSocket request, with the same idempotency key
/// (circle, author, id), and reaches every subscriber through the hub; the answer is its ack.
struct MessageRoutes: Sendable {
    let services: ServerServices

    static let idempotencyKeyHeader = HTTPField.Name("Idempotency-Key")!

    func add<Context: CircleRequestContext>(authenticated router: some RouterMethods<Context>) {
                router.post(RouterPath(HTTPAPI.Path.Pattern.messages.template)) { request, context in
            let principal = try context.requirePrincipal(.postAsBot, .postAsUser)
            var request = request
            let body = try await request.jsonBody()
            let message = try body.decodeJSON(HTTPAPI.NewMessage.self, send: #"{"text": "…", "id": "a key of yours"}"#)
            let author = try await self.author(principal, as: message.as)
            let circle = try await self.writableCircle(context, author: author)
            let id = try Self.idempotencyKey(request, body: message.id)
            guard message.text != nil || message.attachment != nil else {
                throw APIError(.badRequest, .badRequest, "a post needs \"text\" or \"attachment\"")
            }
            try self.checkText(message.text)
            if let replyTo = message.replyTo, replyTo < 1 { throw APIError(.badRequest, .badRequest, "\"replyTo\" is a seq (1 or more)") }
            if let attachment = message.attachment, attachment.utf8.count > 128 {
                throw APIError(.badRequest, .invalidAttachment, "\"attachment\" is the id of media you uploaded (POST /v1/media)")
            }
            return try await self.commit(context: context,
                NewPost(circle: circle, author: author, clientID: id, text: message.text, attachment: message.attachment, time: Identity.now, replyTo: message.replyTo)
            )
        }
        router.patch(RouterPath(HTTPAPI.Path.Pattern.message.template)) { request, context in
            let principal = try context.requirePrincipal(.postAsBot, .postAsUser)
            var request = request
            let body = try await request.jsonBody()
            let edit = try body.decodeJSON(HTTPAPI.EditMessage.self, send: #"{"text": "the new text"}"#)
            let author = try await self.author(principal, as: edit.as)
            let circle = try await self.writableCircle(context, author: author)
            let target = try Self.seq(context)
            let id = try Self.idempotencyKey(request, body: edit.id)
            guard !edit.text.isEmpty else { throw APIError(.badRequest, .badRequest, "an edit needs a non-empty \"text\"") }
            try self.checkText(edit.text)
            return try await self.commit(context: context,
                NewPost(circle: circle, author: author, clientID: id, text: edit.text, attachment: nil, time: Identity.now, change: .edit, target: target)
            )
        }
        router.delete(RouterPath(HTTPAPI.Path.Pattern.message.template)) { request, context in
            let principal = try context.requirePrincipal(.postAsBot, .postAsUser, .moderate)
            let named = request.uri.queryParameters.get("as")
            // A key with `moderate` deletes any post, in any circle, as its bot (or as `as`).
            let moderates = principal.apiKeyScopes?.contains(.moderate) ?? false
            let author: String
            let circle: String
            if moderates {
                if let named {
                    author = try await self.author(principal, as: named)
                } else {
                    author = principal.name
                }
                circle = try await self.existingCircle(context).name
            } else {
                author = try await self.author(principal, as: named)
                circle = try await self.writableCircle(context, author: author)
            }
            let target = try Self.seq(context)
            let id = try Self.idempotencyKey(request, body: nil)
            return try await self.commit(context: context,
                NewPost(
                    circle: circle, author: author, clientID: id, text: nil, attachment: nil, time: Identity.now, change: .delete, target: target,
                    moderated: moderates
                )
            )
        }
        for change in [CircleChange.react, .unreact] {
            let handler: @Sendable (Request, Context) async throws -> Response = { request, context in
                let principal = try context.requirePrincipal(.postAsBot, .postAsUser)
                let author = try await self.author(principal, as: request.uri.queryParameters.get("as"))
                let circle = try await self.writableCircle(context, author: author)
                let target = try Self.seq(context)
                let text = try context.pathParameter("emoji")
                guard text.utf8.count <= CircleRequest.maxEmojiBytes, let emoji = CircleEmoji.normalized(text) else {
                    throw APIError(.badRequest, .invalidEmoji, "the path's emoji must be exactly one emoji, percent-encoded")
                }
                let id = try Self.idempotencyKey(request, body: nil)
                return try await self.commit(context: context,
                    NewPost(circle: circle, author: author, clientID: id, text: nil, attachment: nil, time: Identity.now, change: change, target: target, emoji: emoji)
                )
            }
            router.on(RouterPath(HTTPAPI.Path.Pattern.reaction.template), method: change == .react ? .put : .delete, use: handler)
        }
    }

    // MARK: - Checks

    /// Who the entry is by: a person as themselves; a key's bot (`post_as_bot`), or with `as`
    /// the user it names (`post_as_user`).
    private func author(_ principal: AuthenticatedUser, as named: String?) async throws -> String {
        guard let scopes = principal.apiKeyScopes else {
            guard named == nil || named == principal.name else {
                throw APIError(.forbidden, .forbidden, "you post as yourself; only API keys with the scope post_as_user name another author")
            }
            return principal.name
        }
        guard let named, named != principal.name else {
            guard scopes.contains(.postAsBot) else {
                throw APIError(.badRequest, .badRequest, "this key posts as users only (post_as_user): give \"as\", the author's user name")
            }
            return principal.name
        }
        guard scopes.contains(.postAsUser) else {
            throw APIError(.forbidden, .forbidden, "this API key lacks the scope post_as_user, which \"as\" needs")
        }
        guard TokenAuthority.isValidUserName(named) else {
            throw APIError(.badRequest, .badRequest, "\"as\" is a user name: 1–64 bytes of letters (of one script), digits, . _ - @")
        }
        if let account = try await self.services.store.account(named: named), account.status != .active {
            throw APIError(.forbidden, .accountDisabled, "the account \(named) is \(account.status.rawValue)")
        }
        return named
    }

    /// The circle of the path, if `author` may write there: it exists, and a private one has
    /// them as a member (the WebSocket's join rule).
    private func writableCircle(_ context: some CircleRequestContext, author: String) async throws -> String {
        let name = try context.pathParameter("name")
        let visibility = try await CircleVisibility.read(name, for: author, in: self.services.store)
        if let refusal = visibility.refusal(naming: author) { throw APIError(refusal) }
        return name
    }

    /// The circle of the path: 404 when there is none.
    private func existingCircle(_ context: some CircleRequestContext) async throws -> CircleInfo {
        let name = try context.pathParameter("name")
        guard let info = try await self.services.store.circle(named: name) else {
            throw APIError(.noSuchCircle(name))
        }
        return info
    }

    private func checkText(_ text: String?) throws {
        let limit = self.services.configuration.limits.maxPostBytes
        if let text, text.utf8.count > limit {
            throw APIError(.contentTooLarge, .tooLarge, "the text has \(text.utf8.count) bytes; the limit is \(limit)")
        }
    }

    static func seq(_ context: some RequestContext) throws -> Int64 {
        let text = try context.pathParameter("seq")
        guard let seq = Int64(text), seq >= 1 else { throw APIError(.badRequest, .badRequest, "the path's seq is a post's seq: 1 or more") }
        return seq
    }

    /// The entry's idempotency key: the body's `id` or the `Idempotency-Key` header (the same
    /// when both are given), or one made here (then a repeat is a new entry).
    static func idempotencyKey(_ request: Request, body: String?) throws -> String {
        let header = request.headers[Self.idempotencyKeyHeader]
        if let header, let body, header != body {
            throw APIError(.badRequest, .badRequest, "the Idempotency-Key header and the body's \"id\" differ; give one, or the same")
        }
        guard let key = header ?? body else { return "http-" + Identity.randomSecret(bytes: 16) }
        guard !key.isEmpty, key.utf8.count <= CircleRequest.maxIDLength else {
            throw APIError(.badRequest, .badRequest, "an idempotency key (\"id\" or Idempotency-Key) has 1–\(CircleRequest.maxIDLength) bytes")
        }
        return key
    }

    // MARK: - Commit

    /// Hands the entry to the group commit and answers with its ack or its documented error.
    /// Each author has the WebSocket's allowance of entries (`postsPerSecond`, `postBurst`);
    /// beyond it, 429 with `Retry-After`.
    private func commit(context: some CircleRequestContext, _ post: NewPost) async throws -> Response {
        var post = post
        post.byAPIKey = context.circleUser?.apiKeyScopes != nil
        if let wait = self.services.httpWrites.take(post.author) {
            let seconds = max(1, Int((Double(wait.nanoseconds) / 1e9).rounded(.up)))
            throw APIError(
                .tooManyRequests,
                .rateLimited,
                "\(post.author) writes too fast; retry in \(seconds) s with the same id",
                headers: [.retryAfter: "\(seconds)"]
            )
        }
        let committer = self.services.committer
        let outcome = await withCheckedContinuation { (continuation: CheckedContinuation<Result<PostOutcome, any Error>, Never>) in
            committer.submit(post) { continuation.resume(returning: $0) }
        }
        func ack(_ stored: CirclePost, duplicate: Bool) -> HTTPAPI.MessageAck {
            HTTPAPI.MessageAck(id: post.clientID, circle: post.circle, seq: stored.seq, time: stored.time, author: post.author, duplicate: duplicate)
        }
        switch outcome {
        case .success(.stored(let stored)):
            return Response.json(.created, ack(stored, duplicate: false))
        case .success(.duplicate(let stored)):
            self.services.metrics.duplicatePosts.increment()
            return Response.json(.ok, ack(stored, duplicate: true))
        case .success(.noSuchCircle):
            throw APIError(.notFound, .notFound, "the circle no longer exists")
        case .success(.applied):
            // Only a membership change (``NewPost/event``) is answered so; these routes send none.
            throw APIError(.internalServerError, .internalError, "the entry was taken for a membership change; retry with the same id")
        case .success(.rejected(let code, let message)):
            let status: HTTPResponse.Status
            switch code {
            case .noSuchPost: status = .notFound
            case .notAuthor, .refusedByHook, .readOnly: status = .forbidden
            case .hookUnavailable: status = .serviceUnavailable
            case .postDeleted, .tooManyReactions: status = .conflict
            default: status = .badRequest
            }
            throw APIError(status, code, message)
        case .failure(let error as InvalidAttachment):
            throw APIError(.badRequest, .invalidAttachment, "\"\(error.media.prefix(128))\" is not the id of media the author uploaded (POST /v1/media)")
        case .failure(let error as StoreError) where error.code == .unavailable:
            throw APIError(.serviceUnavailable, .unavailable, "\(error.message); retry with the same id")
        case .failure(let error):
            throw APIError(.internalServerError, .internalError, "the entry was not stored (\(error)); retry with the same id")
        }
    }
}
