import AsyncHTTPClient
import CircleWire
import Crypto
import Foundation
import JWTKit
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
import NIOSSL

/// How pushes reach Apple devices through APNs (docs/OPERATIONS.md, "APNs"): token-based
/// provider authentication with the app's `.p8` key. APNs is off unless all of these are given.
public struct APNsSettings: Sendable, Hashable {
    /// The `.p8` file's contents: a PEM PKCS#8 P-256 private key.
    public var keyPEM: String
    /// The key's 10-character id (the JWT's `kid`).
    public var keyID: String
    /// The developer team's 10-character id (the JWT's `iss`).
    public var teamID: String
    /// The app's bundle id (`apns-topic`).
    public var topic: String
    /// Where every push goes, whatever the device's environment (tests with a local HTTP/2
    /// server); `nil`: Apple's production or sandbox host, by the device's environment.
    public var url: String?
    /// An extra trusted root certificate, PEM (tests with a local server's own CA).
    public var caPEM: String?

    public static let productionURL = "https://api.push.apple.com"
    public static let developmentURL = "https://api.sandbox.push.apple.com"
    /// Apple: renew the provider token not more often than every 20 minutes, and before it is 60 minutes old.
    static let tokenLifetime: Int64 = 40 * 60

    public init(keyPEM: String, keyID: String, teamID: String, topic: String, url: String? = nil, caPEM: String? = nil) {
        self.keyPEM = keyPEM
        self.keyID = keyID
        self.teamID = teamID
        self.topic = topic
        self.url = url
        self.caPEM = caPEM
    }

    /// Why these settings cannot send, or `nil`: a sentence naming the flag.
    public static func problem(_ settings: APNsSettings) -> String? {
        if let problem = Self.keyProblem(settings.keyPEM) { return "--apns-key-file: \(problem)" }
        let identifier = { (value: String) in
            (1...32).contains(value.utf8.count) && value.unicodeScalars.allSatisfy { $0.isASCII && ($0.properties.isAlphabetic || ("0"..."9").contains($0)) }
        }
        guard identifier(settings.keyID) else { return "--apns-key-id is the key's id from Apple's developer site: letters and digits (10 of them)" }
        guard identifier(settings.teamID) else { return "--apns-team-id is your team id from Apple's developer site: letters and digits (10 of them)" }
        guard (1...255).contains(settings.topic.utf8.count),
            settings.topic.unicodeScalars.allSatisfy({ $0.isASCII && ($0.properties.isAlphabetic || ("0"..."9").contains($0) || ".-_".unicodeScalars.contains($0)) })
        else { return "--apns-topic is the app's bundle id, such as com.example.chat (letters, digits, '.', '-', '_')" }
        if let url = settings.url {
            guard let components = URLComponents(string: url), components.scheme?.lowercased() == "https", components.host?.isEmpty == false,
                components.path.isEmpty || components.path == "/", components.query == nil
            else { return "--apns-url is an https:// origin such as https://api.push.apple.com, not \"\(url)\"" }
        }
        if let ca = settings.caPEM, (try? NIOSSLCertificate.fromPEMBytes(Array(ca.utf8)))?.isEmpty != false {
            return "--apns-ca-file holds no PEM certificate"
        }
        return nil
    }

    /// Why `pem` is not an APNs signing key: APNs takes ES256, so a P-256 private key only.
    static func keyProblem(_ pem: String) -> String? {
        if (try? P256.Signing.PrivateKey(pemRepresentation: pem)) != nil { return nil }
        if (try? P384.Signing.PrivateKey(pemRepresentation: pem)) != nil { return "the key is a P-384 key; APNs keys (.p8) are P-256 (ES256)" }
        if (try? P521.Signing.PrivateKey(pemRepresentation: pem)) != nil { return "the key is a P-521 key; APNs keys (.p8) are P-256 (ES256)" }
        return "not a PEM P-256 private key (the .p8 file Apple gives: -----BEGIN PRIVATE KEY-----)"
    }

    /// The origin pushes to `environment` go to.
    func origin(_ environment: APNsDevice.Environment) -> String {
        let url = self.url ?? (environment == .production ? Self.productionURL : Self.developmentURL)
        return url.hasSuffix("/") ? String(url.dropLast()) : url
    }
}

/// An Apple device's APNs token, registered by an app built on the SDK
/// (`POST /v1/push/apns`, docs/API.md, "APNs devices"). It is kept as a push subscription whose
/// endpoint is `apns:<environment>:<token>` (``endpoint``), so one outbox, one claim and one
/// per-user limit serve Web Push and APNs alike.
public struct APNsDevice: Sendable, Hashable {
    public enum Environment: String, Sendable, Hashable, Codable, CaseIterable {
        /// Apps from the App Store and TestFlight.
        case production
        /// Apps built for development (Xcode): Apple's sandbox.
        case development
    }

    /// The token, lowercase hex.
    public var token: String
    public var environment: Environment

    /// Tokens are 32 bytes today; Apple says their size may grow, up to 100 bytes.
    public static let tokenHexLength = 64...200
    /// The longest body of the register route.
    public static let maximumBodyBytes = 1024
    static let prefix = "apns:"

    public init(token: String, environment: Environment) {
        self.token = token
        self.environment = environment
    }

    /// The push subscription endpoint this device is kept under.
    public var endpoint: String { "\(Self.prefix)\(self.environment.rawValue):\(self.token)" }

    /// The device a subscription endpoint names, or `nil` for a Web Push endpoint.
    public init?(endpoint: String) {
        guard endpoint.hasPrefix(Self.prefix) else { return nil }
        let parts = endpoint.dropFirst(Self.prefix.count).split(separator: ":", omittingEmptySubsequences: false)
        guard parts.count == 2, let environment = Environment(rawValue: String(parts[0])), let token = Self.token(String(parts[1])) else { return nil }
        self.init(token: token, environment: environment)
    }

    /// `raw` as a token: 64 to 200 hex digits, lowercased; `nil` otherwise.
    public static func token(_ raw: String) -> String? {
        guard Self.tokenHexLength.contains(raw.utf8.count), raw.utf8.count % 2 == 0, raw.utf8.allSatisfy({ $0.isHexDigit }) else { return nil }
        return raw.lowercased()
    }

    struct JSON: Decodable {
        var token: String
        var environment: String?
    }

    /// Parses and checks the register route's body: the one parser of device registrations (a
    /// fuzz target, `apns-device`).
    package static func parse(_ body: [UInt8]) -> Result<APNsDevice, PushSubscription.Problem> {
        guard body.count <= Self.maximumBodyBytes else { return .failure(.init("a device registration has at most \(Self.maximumBodyBytes) bytes")) }
        guard let json = try? JSONDecoder().decode(JSON.self, from: Data(body)) else {
            return .failure(.init(#"send {"token": "<the device token in hex>", "environment": "production" or "development"}"#))
        }
        guard let token = Self.token(json.token) else {
            return .failure(.init("token is the device token in hex: \(Self.tokenHexLength.lowerBound) to \(Self.tokenHexLength.upperBound) hex digits"))
        }
        guard let environment = Environment(rawValue: json.environment ?? Environment.production.rawValue) else {
            return .failure(.init(#"environment is "production" (App Store, TestFlight) or "development" (Xcode builds)"#))
        }
        return .success(APNsDevice(token: token, environment: environment))
    }
}

extension UInt8 {
    fileprivate var isHexDigit: Bool { (0x30...0x39).contains(self) || (0x41...0x46).contains(self) || (0x61...0x66).contains(self) }
}

/// The provider token's claims (Apple: `iss` the team id, `iat` when it was made; header `alg`
/// ES256 and `kid` the key id).
struct APNsProviderClaims: JWTPayload, Equatable {
    var iss: IssuerClaim
    var iat: IssuedAtClaim

    func verify(using algorithm: some JWTAlgorithm) async throws {}
}

/// The provider token, made once and reused for ``APNsSettings/tokenLifetime`` (Apple refuses
/// tokens renewed more often than every 20 minutes, and older than an hour); made anew at once
/// after APNs answers `ExpiredProviderToken`.
final class APNsProviderToken: Sendable {
    private let keys: JWTKeyCollection
    private let keyID: JWKIdentifier
    private let teamID: String
    private let current = NIOLockedValueBox<(token: String, issued: Int64)?>(nil)

    init(settings: APNsSettings) async throws {
        let keys = JWTKeyCollection()
        let keyID = JWKIdentifier(string: settings.keyID)
        await keys.add(ecdsa: try ES256PrivateKey(pem: settings.keyPEM), kid: keyID)
        self.keys = keys
        self.keyID = keyID
        self.teamID = settings.teamID
    }

    /// The token to send at `now` (seconds since 1970).
    func token(now: Int64) async throws -> String {
        if let current = self.current.withLockedValue({ $0 }), now - current.issued < APNsSettings.tokenLifetime, now >= current.issued {
            return current.token
        }
        let claims = APNsProviderClaims(iss: IssuerClaim(value: self.teamID), iat: IssuedAtClaim(value: Date(timeIntervalSince1970: TimeInterval(now))))
        let token = try await self.keys.sign(claims, kid: self.keyID)
        self.current.withLockedValue { $0 = (token, now) }
        return token
    }

    /// APNs refused `token` as expired: the next ``token(now:)`` makes a new one (unless another
    /// attempt already did).
    func expire(_ token: String) {
        self.current.withLockedValue { if $0?.token == token { $0 = nil } }
    }
}

/// One APNs request (Apple's "Sending notification requests to APNs"): built without I/O, tested so.
struct APNsRequest: Equatable {
    var url: String
    var headers: [(String, String)]
    var body: [UInt8]

    static func == (lhs: APNsRequest, rhs: APNsRequest) -> Bool {
        lhs.url == rhs.url && lhs.body == rhs.body && lhs.headers.map { "\($0.0): \($0.1)" } == rhs.headers.map { "\($0.0): \($0.1)" }
    }

    /// APNs takes alert payloads of at most 4096 bytes.
    static let maximumBodyBytes = 4096
    /// `apns-collapse-id` has at most 64 bytes.
    static let maximumCollapseIDBytes = 64

    /// The request that tells `device` of `push` (about `entry`, `nil` if it is gone) at `now`
    /// (milliseconds), with the provider token `jwt`.
    static func make(
        _ push: PendingPush, device: APNsDevice, entry: CirclePost?, direct: Bool, settings: APNsSettings, pushSettings: PushSettings, jwt: String,
        now: Int64
    ) -> APNsRequest {
        let expiration = now / 1000 + pushSettings.ttl.components.seconds
        let headers: [(String, String)] = [
            ("authorization", "bearer \(jwt)"),
            ("apns-topic", settings.topic),
            ("apns-push-type", "alert"),
            ("apns-priority", push.kind == .post ? "5" : "10"),
            ("apns-expiration", "\(expiration)"),
            ("apns-collapse-id", Self.collapseID(circle: push.circle)),
            ("apns-id", Self.id(push)),
            ("content-type", "application/json"),
        ]
        return APNsRequest(
            url: "\(settings.origin(device.environment))/3/device/\(device.token)",
            headers: headers,
            body: Self.body(push, entry: entry, direct: direct, contentFree: pushSettings.contentFree)
        )
    }

    /// One per circle, so a device shows a circle's newest notification rather than each: the
    /// circle's name, or its hash (``PushTopic``) when the name is longer than APNs takes.
    static func collapseID(circle: String) -> String {
        circle.utf8.count <= Self.maximumCollapseIDBytes ? circle : PushTopic.topic(circle: circle)
    }

    /// A UUID that is the same on every attempt of one push (APNs echoes it; a retry is
    /// recognisable in Apple's logs).
    static func id(_ push: PendingPush) -> String {
        var bytes = Array(SHA256.hash(data: Array("\(push.id)\u{0}\(push.subscription.endpoint)\u{0}\(push.circle)\u{0}\(push.seq)".utf8)).prefix(16))
        bytes[6] = (bytes[6] & 0x0f) | 0x50  // version 5-like: a name-based UUID
        bytes[8] = (bytes[8] & 0x3f) | 0x80
        return UUID(uuid: (bytes[0], bytes[1], bytes[2], bytes[3], bytes[4], bytes[5], bytes[6], bytes[7], bytes[8], bytes[9], bytes[10], bytes[11], bytes[12], bytes[13], bytes[14], bytes[15])).uuidString.lowercased()
    }

    struct Payload: Encodable {
        struct APS: Encodable {
            struct Alert: Encodable {
                var title: String
                var body: String
            }
            var alert: Alert
            var threadID: String
            var sound = "default"

            enum CodingKeys: String, CodingKey {
                case alert
                case threadID = "thread-id"
                case sound
            }
        }
        var aps: APS
        /// What the app reads to open the circle at the post (the same fields as a Web Push payload).
        var circle: String
        var seq: Int64
        var kind: String
        var direct: Bool?
    }

    /// The JSON body: the alert a device shows (the same preview rules as Web Push: the author
    /// and at most ``PushPayload/maxTextBytes`` of text, none when content-free) and the circle
    /// and seq for the app.
    static func body(_ push: PendingPush, entry: CirclePost?, direct: Bool, contentFree: Bool) -> [UInt8] {
        let author = contentFree ? nil : entry.map { String($0.author.prefix(64)) }
        let text = contentFree ? nil : entry?.text.map { PushPayload.truncate($0, bytes: PushPayload.maxTextBytes) }
        let title = direct ? (author ?? "Direct message") : "#\(push.circle)"
        let line: String
        switch (author, text) {
        case (let author?, let text?): line = direct ? text : "\(author): \(text)"
        case (let author?, nil): line = "New message from \(author)"
        default: line = push.kind == .mention ? "You were mentioned" : "New message"
        }
        var payload = Payload(
            aps: .init(alert: .init(title: title, body: line), threadID: push.circle),
            circle: push.circle, seq: push.seq, kind: push.kind.rawValue, direct: direct ? true : nil
        )
        var bytes = Array(HTTPAPI.encode(payload))
        if bytes.count > Self.maximumBodyBytes {
            payload.aps.alert = .init(title: "New message", body: "New message")
            bytes = Array(HTTPAPI.encode(payload))
        }
        return bytes
    }
}

/// What an APNs answer comes to (Apple's "Handling notification responses from APNs"; pure,
/// tested without I/O).
package enum APNsAttempt {
    /// The reasons that mean the token will never be delivered to: it goes.
    static let goneReasons: Set<String> = ["BadDeviceToken", "DeviceTokenNotForTopic", "Unregistered", "ExpiredToken"]
    /// The reasons that mean the provider token must be made anew.
    static let providerTokenReasons: Set<String> = ["ExpiredProviderToken"]
    /// The longest error body read.
    static let maximumReplyBytes = 2048

    /// The `reason` of an error body `{"reason": "…", "timestamp": …}`, if it is one (a fuzz
    /// target, `apns-reply`): at most 64 ASCII letters, anything else is no reason.
    package static func reason(_ body: [UInt8]) -> String? {
        struct Reply: Decodable { var reason: String }
        guard body.count <= Self.maximumReplyBytes, let reply = try? JSONDecoder().decode(Reply.self, from: Data(body)),
            (1...64).contains(reply.reason.utf8.count), reply.reason.unicodeScalars.allSatisfy({ $0.isASCII && $0.properties.isAlphabetic })
        else { return nil }
        return reply.reason
    }

    static func result(status: Int?, reason: String?, retryAfter: String?, push: PendingPush, now: Int64, policy: WebhookRetryPolicy, random: Double) -> PushResult {
        switch status {
        case .some(200..<300): return .delivered
        case .some(410): return .gone
        case .some(400) where reason.map(Self.goneReasons.contains) == true: return .gone
        case .some(403) where reason.map(Self.providerTokenReasons.contains) == true,
            .some(429), .some(500...599), .none:
            // The same backoff and give-up time as Web Push.
            return PushAttempt.result(status: 503, retryAfter: retryAfter, push: push, now: now, policy: policy, random: random)
        default:
            // A bad request, a topic or key Apple refuses (403 InvalidProviderToken,
            // TopicDisallowed), 413: trying again would not help.
            return .dropped
        }
    }
}

/// Sends pushes to APNs over HTTP/2 (async-http-client negotiates `h2` by ALPN; one connection
/// per origin carries every push at once). Made and shut down by ``PushDispatcher/run()``.
final class APNsSender: Sendable {
    let settings: APNsSettings
    let push: PushSettings
    private let client: HTTPClient
    private let provider: APNsProviderToken
    private let logger: Logger

    init(settings: APNsSettings, push: PushSettings, logger: Logger) async throws {
        self.settings = settings
        self.push = push
        self.logger = logger
        self.provider = try await APNsProviderToken(settings: settings)
        var tls = TLSConfiguration.makeClientConfiguration()
        if let ca = settings.caPEM {
            tls.additionalTrustRoots = [.certificates(try NIOSSLCertificate.fromPEMBytes(Array(ca.utf8)))]
        }
        var configuration = HTTPClient.Configuration(
            tlsConfiguration: tls,
            timeout: .init(connect: TimeAmount(push.timeout), read: TimeAmount(push.timeout))
        )
        configuration.httpVersion = .automatic
        configuration.redirectConfiguration = .disallow
        self.client = HTTPClient(eventLoopGroupProvider: .singleton, configuration: configuration)
    }

    func shutdown() async {
        try? await self.client.shutdown()
    }

    /// One attempt of `push` to `device`; a refused provider token is made anew and tried once more.
    func send(_ push: PendingPush, device: APNsDevice, entry: CirclePost?, direct: Bool) async -> PushResult {
        var renewed = false
        while true {
            if Task.isCancelled { return .released }
            let now = Identity.now
            let jwt: String
            do {
                jwt = try await self.provider.token(now: now / 1000)
            } catch {
                self.logger.warning("could not sign the APNs provider token", metadata: ["error": "\(error)"])
                return self.result(status: nil, reason: nil, retryAfter: nil, push: push)
            }
            let request = APNsRequest.make(push, device: device, entry: entry, direct: direct, settings: self.settings, pushSettings: self.push, jwt: jwt, now: now)
            var http = HTTPClientRequest(url: request.url)
            http.method = .POST
            for (name, value) in request.headers { http.headers.add(name: name, value: value) }
            http.body = .bytes(ByteBuffer(bytes: request.body))
            let status: Int
            let reason: String?
            let retryAfter: String?
            do {
                let response = try await self.client.execute(http, timeout: TimeAmount(self.push.timeout))
                status = Int(response.status.code)
                retryAfter = response.headers.first(name: "retry-after")
                let reply = try await response.body.collect(upTo: APNsAttempt.maximumReplyBytes)
                reason = APNsAttempt.reason(Array(buffer: reply))
            } catch {
                self.logger.debug("an APNs request failed", metadata: ["error": "\(error)"])
                return self.result(status: nil, reason: nil, retryAfter: nil, push: push)
            }
            if status == 403, let reason, APNsAttempt.providerTokenReasons.contains(reason) {
                self.provider.expire(jwt)
                if !renewed {
                    renewed = true
                    continue
                }
            }
            let result = self.result(status: status, reason: reason, retryAfter: retryAfter, push: push)
            if case .dropped = result {
                self.logger.info(
                    "APNs refused a push",
                    metadata: ["circle.status": "\(status)", "circle.reason": "\(reason ?? "")", "circle.user": "\(push.subscription.user)"]
                )
            }
            return result
        }
    }

    private func result(status: Int?, reason: String?, retryAfter: String?, push: PendingPush) -> PushResult {
        APNsAttempt.result(
            status: status, reason: reason, retryAfter: retryAfter, push: push, now: Identity.now, policy: self.push.retry, random: Double.random(in: 0..<1)
        )
    }
}
