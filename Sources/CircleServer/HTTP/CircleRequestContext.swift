import Foundation
import NIOCore
import Hummingbird

/// What Circle's routes need of an app's request context: a place for the user the token named.
///
/// An app that mounts Circle gives its own context this one field:
/// ```swift
/// struct AppContext: CircleRequestContext {
///     var coreContext: CoreRequestContextStorage
///     var circleUser: AuthenticatedUser?
///     init(source: ApplicationRequestContextSource) {
///         self.coreContext = .init(source: source)
///         self.circleUser = nil
///     }
/// }
/// ```
public protocol CircleRequestContext: RequestContext {
    /// Set by Circle's token middleware on the routes that need a token.
    var circleUser: AuthenticatedUser? { get set }
}

/// The request context `circle serve` uses.
public struct BasicCircleRequestContext: CircleRequestContext, RemoteAddressRequestContext {
    public var coreContext: CoreRequestContextStorage
    public var circleUser: AuthenticatedUser?

    /// The peer's address (sign-in throttling per address, the sessions list).
    public let remoteAddress: SocketAddress?

    public init(source: ApplicationRequestContextSource) {
        self.coreContext = .init(source: source)
        self.circleUser = nil
        self.remoteAddress = source.channel.remoteAddress
    }
}

extension RequestContext {
    /// The peer's IP address, when the context knows it (contexts that are
    /// `RemoteAddressRequestContext`, as ``BasicCircleRequestContext`` is).
    var circleRemoteAddress: String? {
        self.circleRemoteSocketAddress?.ipAddress
    }

    /// The peer's socket address, when the context knows it.
    var circleRemoteSocketAddress: SocketAddress? {
        (self as? any RemoteAddressRequestContext)?.remoteAddress
    }
}

extension CircleRequestContext {
    /// The user the token middleware verified; routes behind it always have one. An API key is
    /// refused here: routes that take keys ask ``requirePrincipal(_:)`` instead.
    func requireUser() throws -> AuthenticatedUser {
        guard let user = self.circleUser else { throw APIError.missingToken }
        if user.apiKeyScopes != nil {
            throw APIError(.forbidden, .forbidden, "this route does not take API keys (docs/API.md, \"API keys\", lists the routes that do)")
        }
        return user
    }

    /// The principal of a route that takes API keys too: a key must hold one of `scopes`
    /// (docs/API.md, "API keys", has the table); a person's credential passes as it is.
    func requirePrincipal(_ scopes: APIKeyScope...) throws -> AuthenticatedUser {
        guard let user = self.circleUser else { throw APIError.missingToken }
        if let held = user.apiKeyScopes, held.isDisjoint(with: scopes) {
            let names = scopes.map(\.rawValue).joined(separator: " or ")
            throw APIError(.forbidden, .forbidden, "this API key lacks the scope \(names) this route needs")
        }
        return user
    }
}

extension RequestContext {
    /// The path parameter `name` as the client meant it: percent-decoded, once (`jos%C3%A9` is
    /// `josé`). Every route reads its parameters here. A missing one, or one whose
    /// percent-encoding is not UTF-8, is a 400.
    func pathParameter(_ name: String) throws -> String {
        let raw = try self.parameters.require(name)
        guard let decoded = raw.removingPercentEncoding else {
            throw APIError(.badRequest, .badRequest, "the path segment \"\(raw)\" is not valid percent-encoded UTF-8")
        }
        return decoded
    }
}
