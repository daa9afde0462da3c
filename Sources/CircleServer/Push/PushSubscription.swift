import CircleWire
import Crypto
import Foundation
import NIOCore

/// A Web Push subscription of one device of one user (docs/API.md, "Push notifications"): where
/// the push service takes messages for it, and the keys its messages are encrypted to.
public struct PushSubscription: Sendable, Hashable {
    /// The owner.
    public var user: String
    /// The push service's URL for this device (W3C `PushSubscription.endpoint`).
    public var endpoint: String
    /// The device's P-256 public key, uncompressed, base64url (`keys.p256dh`).
    public var p256dh: String
    /// The 16-byte authentication secret, base64url (`keys.auth`).
    public var auth: String
    public var createdAt: Int64

    public init(user: String, endpoint: String, p256dh: String, auth: String, createdAt: Int64) {
        self.user = user
        self.endpoint = endpoint
        self.p256dh = p256dh
        self.auth = auth
        self.createdAt = createdAt
    }

    /// The longest endpoint URL (browsers' push services use a few hundred bytes).
    public static let maximumEndpointBytes = 1024
    /// Subscriptions one user may have (one per browser or device); a new one past it replaces
    /// the oldest.
    public static let maximumPerUser = 10
    /// The longest request body of the subscribe route.
    public static let maximumBodyBytes = 4096

    /// How the endpoint check treats addresses and schemes.
    package struct Policy: Sendable {
        /// `http://` endpoints (only for tests with a local push service).
        package var allowsHTTP = false
        /// Loopback, private and link-local address literals.
        package var allowsPrivate = false

        package init(allowsHTTP: Bool = false, allowsPrivate: Bool = false) {
            self.allowsHTTP = allowsHTTP
            self.allowsPrivate = allowsPrivate
        }
    }

    /// Why a subscription is refused: a sentence for the client (the route's 400).
    package struct Problem: Error, Equatable, CustomStringConvertible {
        package var description: String
        init(_ description: String) { self.description = description }
    }

    /// The W3C `PushSubscription` JSON (`PushSubscription.toJSON()`), as the subscribe route takes it.
    struct JSON: Decodable {
        struct Keys: Decodable {
            var p256dh: String
            var auth: String
        }

        var endpoint: String
        var keys: Keys
        var expirationTime: Double?
    }

    /// Parses and checks the subscribe route's body for `user`: the one parser of subscriptions
    /// (a fuzz target, `push-subscription`).
    package static func parse(_ body: [UInt8], user: String, policy: Policy, now: Int64) -> Result<PushSubscription, Problem> {
        guard body.count <= Self.maximumBodyBytes else { return .failure(Problem("a subscription has at most \(Self.maximumBodyBytes) bytes")) }
        guard let json = try? JSONDecoder().decode(JSON.self, from: Data(body)) else {
            return .failure(Problem(#"send the browser's PushSubscription JSON: {"endpoint": "https://…", "keys": {"p256dh": "…", "auth": "…"}}"#))
        }
        if let problem = Self.endpointProblem(json.endpoint, policy: policy) { return .failure(problem) }
        guard let key = Base64URL.decode(json.keys.p256dh), key.count == 65, key[0] == 4,
            (try? P256.KeyAgreement.PublicKey(x963Representation: key)) != nil
        else {
            return .failure(Problem("keys.p256dh is an uncompressed P-256 public key (65 bytes) in base64url"))
        }
        guard let auth = Base64URL.decode(json.keys.auth), auth.count == 16 else {
            return .failure(Problem("keys.auth is a 16-byte secret in base64url"))
        }
        return .success(PushSubscription(user: user, endpoint: json.endpoint, p256dh: Base64URL.encode(key), auth: Base64URL.encode(auth), createdAt: now))
    }

    /// Why `endpoint` cannot be pushed to, or `nil`: `https://` (or `http://` where allowed), a
    /// host, no user, no fragment, at most ``maximumEndpointBytes``, and not an address literal
    /// the outbound policy refuses (a name is checked on every connection, ``OutboundHTTP``).
    static func endpointProblem(_ endpoint: String, policy: Policy) -> Problem? {
        guard endpoint.utf8.count <= Self.maximumEndpointBytes else {
            return Problem("a push endpoint has at most \(Self.maximumEndpointBytes) bytes")
        }
        let schemes = policy.allowsHTTP ? ["https", "http"] : ["https"]
        guard let components = URLComponents(string: endpoint), let scheme = components.scheme?.lowercased(), schemes.contains(scheme),
            let host = components.host, !host.isEmpty, components.user == nil, components.password == nil, components.fragment == nil,
            URL(string: endpoint) != nil
        else {
            return Problem("a push endpoint is an \(policy.allowsHTTP ? "http:// or https://" : "https://") URL with a host, no user and no fragment")
        }
        let bareHost = host.hasPrefix("[") && host.hasSuffix("]") ? String(host.dropFirst().dropLast()) : host
        if let address = try? SocketAddress(ipAddress: bareHost, port: 0),
            let refusal = OutboundAddressPolicy(allowsPrivate: policy.allowsPrivate).refusal(of: address)
        {
            return Problem("\(host) is \(refusal): push endpoints are public addresses only")
        }
        return nil
    }

    /// The origin of the endpoint (`scheme://host[:port]`): the VAPID JWT's `aud`.
    static func origin(of endpoint: String) -> String? {
        guard let components = URLComponents(string: endpoint), let scheme = components.scheme?.lowercased(), let host = components.host else { return nil }
        let port = components.port.map { ":\($0)" } ?? ""
        return "\(scheme)://\(host.lowercased())\(port)"
    }
}

/// How urgent a push is (RFC 8030 §5.3).
enum PushKind: String, Sendable, Hashable, Codable {
    /// Someone mentioned the recipient (or `@everyone`).
    case mention
    /// A post in a direct message the recipient is in.
    case dm
    /// A post in a circle where the recipient's level is `all`.
    case post
}

/// One push a commit queued (``CommitPlan/pushWrites(subscribers:)``): the subscription at
/// `endpoint`, of `user`, is told of entry `seq` of `circle`.
public struct PushWrite: Sendable, Hashable {
    public var endpoint: String
    public var user: String
    public var circle: String
    public var seq: Int64
    var kind: PushKind
}

/// A queued push as the dispatcher claims it, with its subscription.
public struct PendingPush: Sendable, Hashable {
    public var id: Int64
    public var subscription: PushSubscription
    public var circle: String
    public var seq: Int64
    var kind: PushKind
    public var attempts: Int
    public var createdAt: Int64
}

/// What became of a claimed push.
public enum PushResult: Sendable, Hashable {
    /// The push service took it (2xx): the row goes.
    case delivered
    /// The push service no longer knows the subscription (404, 410): it goes, with its pushes.
    case gone
    /// Try again at this time (429, 5xx, no answer); the lease ends.
    case retry(at: Int64)
    /// Given up (another 4xx, or past the retry time): the row goes.
    case dropped
    /// Not tried (shutdown): the lease ends, nothing else changes.
    case released
    /// Not sent: the recipient is connected, or was within ``PushSettings/awayAfter``
    /// (``PushPresence``): the row goes.
    case present
    /// Not sent: a newer push for the same device and circle was claimed with it (``PushBurst``): the row goes.
    case folded
    /// Not tried yet: the device was pushed about the circle less than
    /// ``PushSettings/burstInterval`` ago (``PushBurst``); due again then, attempts unchanged.
    case deferred(until: Int64)
}

/// The push outbox and the subscriptions (docs/API.md, "Push notifications"): commits fill the
/// outbox (``CommitPlan/pushWrites(subscribers:)``, in the entries' transaction), each node's
/// ``PushDispatcher`` empties it.
public protocol PushStore: Sendable {
    /// The server key `name`, stored as `candidate` first if there is none: the first node to
    /// ask makes it, every node gets the same one.
    func serverKey(_ name: String, candidate: String) async throws -> String
    /// Adds a subscription, or replaces the one with its endpoint (which may have been another
    /// user's: a browser signed in anew); past `maxPerUser` of the user's, the oldest go.
    func putPushSubscription(_ subscription: PushSubscription, maxPerUser: Int) async throws
    /// A user's subscriptions, oldest first.
    func pushSubscriptions(of user: String) async throws -> [PushSubscription]
    /// Removes one of the user's subscriptions and its queued pushes; `false` when it has none with that endpoint.
    func deletePushSubscription(endpoint: String, of user: String) async throws -> Bool
    /// Removes all of a user's subscriptions and their queued pushes (signing out everywhere,
    /// erasing the user); returns how many subscriptions went.
    @discardableResult
    func deletePushSubscriptions(user: String) async throws -> Int
    /// Leases up to `limit` pushes that are due (not leased, or whose lease ended) to `node`
    /// until `now + lease`, oldest first, with their subscriptions.
    func claimPushes(node: String, now: Int64, lease: Int64, limit: Int) async throws -> [PendingPush]
    /// Records what became of pushes leased to `node` (one whose lease went to another node is left alone).
    func finishPushes(_ results: [(push: PendingPush, result: PushResult)], node: String) async throws
    /// How many pushes are queued (metrics and tests).
    func queuedPushes() async throws -> Int
    /// Records that each of `counts`' users has that many connections open on `node` now (0:
    /// the last one closed now) (``PresenceRecorder``).
    func markConnections(node: String, counts: [String: Int], now: Int64) async throws
    /// The users with connections open on `node` were seen `now`; every node's marks older than
    /// `forgetBefore` go.
    func refreshConnections(node: String, now: Int64, forgetBefore: Int64) async throws
    /// Every node's marks of each of `users` (a user with none is absent), for ``PushPresence``.
    func connectionMarks(users: [String]) async throws -> [String: [ConnectionMark]]
    /// When each of `keys` (a device and a circle) was last pushed to, for those that were since
    /// their record was forgotten (``PushBurst``).
    func lastPushesSent(_ keys: [PushBurstKey]) async throws -> [PushBurstKey: Int64]
    /// Records that `keys` were pushed to at `at`; records older than `forgetBefore` go.
    func recordPushesSent(_ keys: [PushBurstKey], at: Int64, forgetBefore: Int64) async throws
}
