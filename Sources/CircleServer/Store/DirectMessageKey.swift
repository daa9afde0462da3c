import CircleWire
import Crypto
import Foundation

/// The members of a direct message, as both stores find it: the set of user names (sorted by
/// bytes, each once), its key (``key``, stored in `circles.direct`) and the circle's name
/// (``circleName``: `dm.` and 32 hex digits of the key's SHA-256, a name ``CircleRoutes`` keeps
/// for direct messages).
public struct DirectMessageKey: Sendable, Hashable {
    /// Fewest and most people in a direct message, its starter included.
    public static let memberRange = 2...9
    /// What every direct message's circle name starts with; no circle may be created with it.
    public static let namePrefix = "dm."

    /// The members, sorted by their UTF-8 bytes, each once.
    public let members: [String]

    /// Why `members` (with `starter` added) makes no direct message, or the key.
    public static func make(members: [String], starter: String) -> Result<DirectMessageKey, DirectMessageError> {
        var seen = Set<BinaryText>()
        var all: [String] = []
        for name in [starter] + members where seen.insert(BinaryText(name)).inserted {
            guard TokenAuthority.isValidUserName(name) else { return .failure(.badName(name)) }
            all.append(name)
        }
        guard Self.memberRange.contains(all.count) else { return .failure(.count(all.count)) }
        all.sort { Array($0.utf8).lexicographicallyPrecedes(Array($1.utf8)) }
        return .success(DirectMessageKey(members: all))
    }

    /// The value of `circles.direct`: the names joined by newlines (no user name has one).
    public var key: String { self.members.joined(separator: "\n") }

    /// The circle's name.
    public var circleName: String {
        let digest = SHA256.hash(data: Data(self.key.utf8))
        return Self.namePrefix + digest.prefix(16).map { String(format: "%02x", $0) }.joined()
    }

    /// The members of a stored `circles.direct` value; `nil` for a circle.
    static func members(fromColumn column: String?) -> [String]? {
        guard let column, !column.isEmpty else { return nil }
        return column.split(separator: "\n").map(String.init)
    }
}

/// Why a direct message cannot be started (docs/API.md, `POST /v1/dms`).
public enum DirectMessageError: Error, Sendable, Hashable, CustomStringConvertible {
    case badName(String)
    case count(Int)

    public var description: String {
        switch self {
        case .badName(let name):
            "\"\(name.prefix(80))\" is not a valid user name (letters, digits, . _ - @; at most 64 bytes)"
        case .count(let count):
            "a direct message has 2 to 9 people, you included; this one would have \(count)"
        }
    }
}
