import CircleWire
import HTTPTypes
import Hummingbird
import Logging
import NIOCore

/// Token auth, written once: the routes behind it get ``CircleRequestContext/circleUser``; the
/// WebSocket upgrade uses the same ``ServerServices/authenticate(_:)``.
///
/// API keys pass only the middleware of the group of routes that take them (`acceptsAPIKeys`),
/// where each route asks for its scope (``CircleRequestContext/requirePrincipal(_:)``); every
/// other route refuses them here, whatever its handler does.
struct TokenAuthMiddleware<Context: CircleRequestContext>: RouterMiddleware {
    let services: ServerServices
    var acceptsAPIKeys = false

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        var context = context
        var credentials = request.credentials(address: context.circleRemoteAddress)
        credentials.acceptsAPIKeys = self.acceptsAPIKeys
        context.circleUser = try await self.services.authenticate(credentials)
        return try await next(request, context)
    }
}

/// Counts every request by route and status. The route label is the router's matched endpoint
/// (`GET /v1/circles/{name}`), so paths nobody registered are all counted as `other` and clients
/// cannot create new series.
struct RouteMetricsMiddleware<Context: RequestContext>: RouterMiddleware {
    let metrics: ServerMetrics

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        do {
            let response = try await next(request, context)
            self.metrics.httpRequest(route: Self.label(request.method, context.endpointPath), status: UInt(response.status.code))
            return response
        } catch {
            let status = (error as? any HTTPResponseError)?.status.code ?? 500
            self.metrics.httpRequest(route: Self.label(request.method, context.endpointPath), status: UInt(status))
            throw error
        }
    }

    static func label(_ method: HTTPRequest.Method, _ endpoint: String?) -> String {
        guard let endpoint, endpoint.hasPrefix("/") else { return "other" }
        switch method {
        case .get, .post, .delete, .put, .head, .patch: return "\(method.rawValue) \(endpoint)"
        default: return "other"
        }
    }
}

/// CORS for the configured origin as it is now (``CircleServer/reload(_:)`` may change it): no
/// CORS headers without one; `*` for any origin.
struct CurrentCORSMiddleware<Context: RequestContext>: RouterMiddleware {
    let services: ServerServices

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        guard let origin = self.services.configuration.corsOrigin else { return try await next(request, context) }
        let allowed: CORSMiddleware<Context>.AllowOriginExtended = origin == "*" ? .all : .custom(origin)
        let cors = CORSMiddleware<Context>(
            allowOrigin: allowed,
            allowHeaders: [.accept, .authorization, .contentType, .origin, .uploadOffset, .uploadLength, .range, .ifRange, .ifNoneMatch],
            allowMethods: [.get, .post, .patch, .delete, .head, .options],
            exposedHeaders: ["Location", "Upload-Offset", "Upload-Length", "ETag", "Content-Range", "Accept-Ranges"],
            maxAge: .seconds(600)
        )
        return try await cors.handle(request, context: context, next: next)
    }
}

/// Turns whatever a route threw into Circle's JSON error body (404 for paths no route matches,
/// 500 with the error for the unexpected) and gives answers without a `Cache-Control` of their
/// own `no-store`.
struct CircleErrorMiddleware<Context: RequestContext>: RouterMiddleware {
    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        var response: Response
        do {
            response = try await next(request, context)
        } catch let error as APIError {
            response = error.response
        } catch let error as HTTPError where error.status == .notFound {
            response = APIError(.notFound, .notFound, "no route \(request.method.rawValue) \(request.uri.path)").response
        } catch let error as HTTPError where error.status == .contentTooLarge {
            response = APIError(.contentTooLarge, .tooLarge, "bodies are limited to 1 MiB").response
        } catch let error as any HTTPResponseError {
            response = APIError(error.status, error.status.code >= 500 ? .internalError : .badRequest, "\(error)").response
        } catch let error as StoreError {
            response = error.apiError.response
        } catch {
            response = APIError(.internalServerError, .internalError, "\(error)").response
        }
        if response.headers[.cacheControl] == nil { response.headers[.cacheControl] = "no-store" }
        // Such a request is its connection's last (``HTTPRequest/isLastOnHTTP1Connection``); the
        // field cannot reach HTTP/2, which refuses `Upgrade` in a request.
        if request.headers[.upgrade] != nil { response.headers[.connection] = "close" }
        return response
    }
}

extension StoreError {
    var apiError: APIError {
        switch self.code {
        case .conflict: return APIError(.conflict, .conflict, self.message)
        case .notFound: return APIError(.notFound, .notFound, self.message)
        case .unavailable: return APIError(.serviceUnavailable, .unavailable, self.message)
        }
    }
}
