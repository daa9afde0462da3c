import CircleWire

/// Whether a user may see (read, join, search) a circle: the one rule, and its errors, for the
/// HTTP routes, the WebSocket `join` and `history`, and search.
///
/// - no such circle: `404 not_found`, "no circle \"NAME\"";
/// - a private circle whose members do not include the user: `403 forbidden`,
///   "\"NAME\" is private and you are not a member" (or "… and USER is not a member" when the
///   answer speaks of someone else, such as the author an API key posts as);
/// - otherwise visible.
///
/// ``decide(name:circle:isMember:)`` is the rule without I/O; ``read(_:for:in:)`` reads what it
/// needs from a store (the membership only for a private circle). The stores' listings (`circles`,
/// search, media) filter by the same rule in SQL: `NOT private OR the reader is a member`.
enum CircleVisibility: Sendable, Hashable {
    case visible(CircleInfo)
    case noSuchCircle(name: String)
    case notMember(CircleInfo)

    /// The rule: `circle` as stored under `name` (nil when there is none) and whether the user
    /// is one of its members (asked only of a private circle).
    static func decide(name: String, circle: CircleInfo?, isMember: () throws -> Bool) rethrows -> CircleVisibility {
        guard let circle else { return .noSuchCircle(name: name) }
        guard circle.isPrivate else { return .visible(circle) }
        return try isMember() ? .visible(circle) : .notMember(circle)
    }

    /// The rule applied to what `store` holds for the circle `name` and `user`.
    static func read(_ name: String, for user: String, in store: any CircleStore) async throws -> CircleVisibility {
        let circle = try await store.circle(named: name)
        guard let circle, circle.isPrivate else { return Self.decide(name: name, circle: circle, isMember: { false }) }
        let member = try await store.isMember(user, of: name)
        return Self.decide(name: name, circle: circle, isMember: { member })
    }

    /// The circle when it is visible, nil otherwise.
    var circle: CircleInfo? {
        if case .visible(let circle) = self { return circle }
        return nil
    }

    /// Why the circle may not be seen (nil when it may), speaking to the user (`you`) or, with
    /// `user`, of them.
    func refusal(naming user: String? = nil) -> Refusal? {
        switch self {
        case .visible: nil
        case .noSuchCircle(let name): .noSuchCircle(name)
        case .notMember(let circle): .notMember(circle.name, naming: user)
        }
    }

    /// An error code and its message.
    struct Refusal: Error, Sendable, Hashable, CustomStringConvertible {
        var code: CircleErrorCode
        var message: String

        /// There is no circle `name` (names longer than 64 characters are cut in the message).
        static func noSuchCircle(_ name: String) -> Refusal {
            Refusal(code: .notFound, message: "no circle \"\(name.prefix(64))\"")
        }

        /// The circle `name` is private and the user (`you`, or `user`) is not a member.
        static func notMember(_ name: String, naming user: String? = nil) -> Refusal {
            Refusal(code: .forbidden, message: "\"\(name.prefix(64))\" is private and \(user ?? "you") \(user == nil ? "are" : "is") not a member")
        }

        /// The code and the message, as a session's error answer takes them.
        var pair: (CircleErrorCode, String) { (self.code, self.message) }

        var description: String { "\(self.code.rawValue): \(self.message)" }
    }
}

extension StoreError {
    /// A store's "no circle" error, with the message of ``CircleVisibility/Refusal/noSuchCircle(_:)``.
    static func noSuchCircle(_ name: String) -> StoreError {
        StoreError(.notFound, CircleVisibility.Refusal.noSuchCircle(name).message)
    }
}
