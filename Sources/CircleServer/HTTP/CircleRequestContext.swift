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
public struct BasicCircleRequestContext: CircleRequestContext {
    public var coreContext: CoreRequestContextStorage
    public var circleUser: AuthenticatedUser?

    public init(source: ApplicationRequestContextSource) {
        self.coreContext = .init(source: source)
        self.circleUser = nil
    }
}

extension CircleRequestContext {
    /// The user the token middleware verified; routes behind it always have one.
    func requireUser() throws -> AuthenticatedUser {
        guard let user = self.circleUser else { throw APIError.missingToken }
        return user
    }
}
