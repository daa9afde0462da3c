import CircleWire
import Crypto
import Foundation
import Testing

@testable import CircleServer

/// Web Push encryption (RFC 8291), VAPID (RFC 8292), the subscription parser and the push
/// decisions, without I/O.
@Suite struct WebPushTests {
    func bytes(_ base64url: String) throws -> [UInt8] {
        try #require(Base64URL.decode(base64url))
    }

    /// RFC 8291 §5 (and Appendix A): its keys, auth secret and salt reproduce its message byte for byte.
    @Test func rfc8291Example() throws {
        let plaintext = try self.bytes("V2hlbiBJIGdyb3cgdXAsIEkgd2FudCB0byBiZSBhIHdhdGVybWVsb24")
        #expect(String(decoding: plaintext, as: UTF8.self) == "When I grow up, I want to be a watermelon")
        let sender = try P256.KeyAgreement.PrivateKey(rawRepresentation: try self.bytes("yfWPiYE-n46HLnH0KqZOF1fJJU3MYrct3AELtAQ-oRw"))
        #expect(
            Base64URL.encode(sender.publicKey.x963Representation)
                == "BP4z9KsN6nGRTbVYI_c7VJSPQTBtkgcy27mlmlMoZIIgDll6e3vCYLocInmYWAmS6TlzAC8wEqKK6PBru3jl7A8"
        )
        let message = try WebPushEncryption.encrypt(
            plaintext,
            subscriberKey: try self.bytes("BCVxsr7N_eNgVRqvHtD0zTZsEc6-VV-JvLexhqUzORcxaOzi6-AYWXvTBHm4bjyPjs7Vd8pZGH6SRpkNtoIAiw4"),
            authSecret: try self.bytes("BTBZMqHH6r4Tts7J_aSIgg"),
            ephemeral: sender,
            salt: try self.bytes("DGv6ra1nlYgDCS1FRnbzlw")
        )
        #expect(
            Base64URL.encode(message)
                == "DGv6ra1nlYgDCS1FRnbzlwAAEABBBP4z9KsN6nGRTbVYI_c7VJSPQTBtkgcy27mlmlMoZIIgDll6e3vCYLocInmYWAmS6TlzAC8wEqKK6PBru3jl7A_yl95bQpu6cVPTpK4Mqgkf1CXztLVBSt2Ks3oZwbuwXPXLWyouBWLVWGNWQexSgSxsj_Qulcy4a-fN"
        )
    }

    /// A fresh key and salt each time; the size is the plaintext's plus the fixed overhead;
    /// a bad subscriber key and a plaintext past one record are refused.
    @Test func encryptionBounds() throws {
        let receiver = P256.KeyAgreement.PrivateKey()
        let key = Array(receiver.publicKey.x963Representation)
        let auth = [UInt8](repeating: 7, count: 16)
        let first = try WebPushEncryption.encrypt(Array("hi".utf8), subscriberKey: key, authSecret: auth)
        let second = try WebPushEncryption.encrypt(Array("hi".utf8), subscriberKey: key, authSecret: auth)
        #expect(first != second)
        #expect(first.count == 2 + WebPushEncryption.overhead)
        #expect(throws: WebPushEncryption.Failure.badSubscriberKey) {
            try WebPushEncryption.encrypt([1], subscriberKey: [4] + [UInt8](repeating: 1, count: 64), authSecret: auth)
        }
        #expect(throws: WebPushEncryption.Failure.tooLong) {
            try WebPushEncryption.encrypt([UInt8](repeating: 0, count: WebPushEncryption.maxPlaintextBytes + 1), subscriberKey: key, authSecret: auth)
        }
        let longest = try WebPushEncryption.encrypt([UInt8](repeating: 0, count: WebPushEncryption.maxPlaintextBytes), subscriberKey: key, authSecret: auth)
        #expect(longest.count <= 4096 + 86)
    }

    /// One VAPID header per push service origin, made anew after an hour, valid 12 hours.
    @Test func vapidHeadersAreReusedPerOriginForAnHour() {
        var cache = VAPIDHeaderCache()
        var signed: [Int64] = []
        func header(_ audience: String, at now: Int64) -> String {
            cache.header(audience: audience, subject: "mailto:ops@example.com", now: now) { expires in
                signed.append(expires)
                return "\(audience) until \(expires)"
            }
        }
        let start: Int64 = 1_800_000_000
        #expect(header("https://a.example", at: start) == "https://a.example until \(start + 12 * 3600)")
        #expect(header("https://a.example", at: start + 3599) == "https://a.example until \(start + 12 * 3600)")
        #expect(header("https://b.example", at: start + 10) == "https://b.example until \(start + 10 + 12 * 3600)")
        #expect(signed.count == 2)
        // After an hour, and when the clock went back, a new one.
        #expect(header("https://a.example", at: start + 3600) == "https://a.example until \(start + 3600 + 12 * 3600)")
        #expect(header("https://a.example", at: start) == "https://a.example until \(start + 12 * 3600)")
        #expect(signed.count == 4)
        // Bounded: past the capacity it starts again.
        for index in 0..<VAPIDHeaderCache.capacity + 5 { _ = header("https://\(index).example", at: start) }
        let count = signed.count
        _ = header("https://0.example", at: start)
        #expect(signed.count == count + 1, "the first origins were forgotten when the cache started again")
    }

    /// `vapid t=<JWT>,k=<key>`: an ES256 JWT whose header and claims are what RFC 8292 asks,
    /// whose signature verifies with the key in `k`.
    @Test func vapidHeaderShape() throws {
        let key = VAPIDKey()
        let header = key.authorization(audience: "https://push.example.net", subject: "mailto:ops@example.com", expires: 1_800_000_000)
        #expect(header.hasPrefix("vapid t="))
        let parts = header.dropFirst("vapid t=".count).components(separatedBy: ",k=")
        #expect(parts.count == 2)
        #expect(parts[1] == key.publicKey)
        let jwt = parts[0].split(separator: ".").map(String.init)
        #expect(jwt.count == 3)
        let head = try JSONSerialization.jsonObject(with: Data(try self.bytes(jwt[0]))) as? [String: String]
        #expect(head == ["typ": "JWT", "alg": "ES256"])
        let claims = try JSONSerialization.jsonObject(with: Data(try self.bytes(jwt[1]))) as? [String: Any]
        #expect(claims?["aud"] as? String == "https://push.example.net")
        #expect(claims?["sub"] as? String == "mailto:ops@example.com")
        #expect((claims?["exp"] as? NSNumber)?.int64Value == 1_800_000_000)
        let publicKey = try P256.Signing.PublicKey(x963Representation: try self.bytes(parts[1]))
        let signature = try P256.Signing.ECDSASignature(rawRepresentation: try self.bytes(jwt[2]))
        #expect(publicKey.isValidSignature(signature, for: Data((jwt[0] + "." + jwt[1]).utf8)))
        // The key kept in the store comes back the same.
        #expect(VAPIDKey(stored: key.stored)?.publicKey == key.publicKey)
        #expect(VAPIDKey(stored: "not a key") == nil)
    }

    func subscription(endpoint: String = "https://push.example.net/send/abc", p256dh: String? = nil, auth: String = "BTBZMqHH6r4Tts7J_aSIgg") -> [UInt8] {
        let key = p256dh ?? Base64URL.encode(P256.KeyAgreement.PrivateKey().publicKey.x963Representation)
        let object: [String: Any] = ["endpoint": endpoint, "expirationTime": NSNull(), "keys": ["p256dh": key, "auth": auth]]
        return Array((try? JSONSerialization.data(withJSONObject: object)) ?? Data())
    }

    func problem(_ body: [UInt8], _ policy: PushSubscription.Policy = .init()) -> String? {
        if case .failure(let problem) = PushSubscription.parse(body, user: "bob", policy: policy, now: 5) { return problem.description }
        return nil
    }

    /// The parser takes a browser's subscription and refuses, with a sentence each, what no push could reach.
    @Test func subscriptionParser() throws {
        let parsed = try PushSubscription.parse(self.subscription(), user: "bob", policy: .init(), now: 5).get()
        #expect(parsed.user == "bob")
        #expect(parsed.endpoint == "https://push.example.net/send/abc")
        #expect(parsed.createdAt == 5)
        #expect(try self.bytes(parsed.auth).count == 16)

        #expect(self.problem(Array("{".utf8))?.contains("PushSubscription JSON") == true)
        #expect(self.problem(self.subscription(endpoint: "http://push.example.net/x"))?.contains("https://") == true)
        #expect(self.problem(self.subscription(endpoint: "http://push.example.net/x"), .init(allowsHTTP: true, allowsPrivate: false)) == nil)
        #expect(self.problem(self.subscription(endpoint: "https://user@push.example.net/x")) != nil)
        #expect(self.problem(self.subscription(endpoint: "ftp://push.example.net/x")) != nil)
        #expect(self.problem(self.subscription(endpoint: "https://127.0.0.1:8443/x"))?.contains("loopback") == true)
        #expect(self.problem(self.subscription(endpoint: "https://[::1]/x"))?.contains("loopback") == true)
        #expect(self.problem(self.subscription(endpoint: "https://10.1.2.3/x"))?.contains("private") == true)
        #expect(self.problem(self.subscription(endpoint: "https://127.0.0.1:8443/x"), .init(allowsHTTP: false, allowsPrivate: true)) == nil)
        let long = "https://push.example.net/" + String(repeating: "a", count: PushSubscription.maximumEndpointBytes)
        #expect(self.problem(self.subscription(endpoint: long))?.contains("at most") == true)
        #expect(self.problem(self.subscription(p256dh: "BBBB"))?.contains("p256dh") == true)
        // 65 bytes that are not a point on the curve.
        #expect(self.problem(self.subscription(p256dh: Base64URL.encode([4] + [UInt8](repeating: 0xFF, count: 64))))?.contains("p256dh") == true)
        #expect(self.problem(self.subscription(auth: "AAAA"))?.contains("auth") == true)
        #expect(self.problem(self.subscription(auth: "!!!!"))?.contains("auth") == true)
        #expect(self.problem([UInt8](repeating: 32, count: PushSubscription.maximumBodyBytes + 1))?.contains("at most") == true)
        #expect(PushSubscription.origin(of: "https://Push.Example.net:8443/a/b?c") == "https://push.example.net:8443")
    }

    func pending(attempts: Int = 0, createdAt: Int64 = 0) -> PendingPush {
        PendingPush(
            id: 1, subscription: PushSubscription(user: "bob", endpoint: "https://p.example/x", p256dh: "", auth: "", createdAt: 0),
            circle: "lobby", seq: 3, kind: .mention, attempts: attempts, createdAt: createdAt
        )
    }

    /// 2xx delivered; 404/410 gone; 429/5xx/no answer retried with doubling backoff, at least
    /// Retry-After, until the give-up time; other 4xx dropped.
    @Test func attemptDecisions() {
        let policy = WebhookRetryPolicy(first: .seconds(5), longest: .seconds(600), jitter: 0, giveUpAfter: .seconds(3600))
        func result(_ status: Int?, retryAfter: String? = nil, attempts: Int = 0, now: Int64 = 1000) -> PushResult {
            PushAttempt.result(status: status, retryAfter: retryAfter, push: self.pending(attempts: attempts), now: now, policy: policy, random: 0.5)
        }
        #expect(result(201) == .delivered)
        #expect(result(410) == .gone)
        #expect(result(404) == .gone)
        #expect(result(400) == .dropped)
        #expect(result(403) == .dropped)
        #expect(result(413) == .dropped)
        #expect(result(500) == .retry(at: 1000 + 5000))
        #expect(result(503, attempts: 2) == .retry(at: 1000 + 20_000))
        #expect(result(nil, attempts: 20) == .retry(at: 1000 + 600_000))
        #expect(result(429, retryAfter: "120") == .retry(at: 1000 + 120_000))
        #expect(result(429, retryAfter: "1") == .retry(at: 1000 + 5000))
        #expect(result(429, retryAfter: "Wed, 21 Oct 2015 07:28:00 GMT") == .retry(at: 1000 + 5000))
        #expect(result(500, now: 3_600_000) == .dropped)
    }

    /// The payload: small JSON, text cut at a character boundary, none of it when content-free.
    @Test func payload() throws {
        let entry = CirclePost(circle: "lobby", seq: 3, author: "alice", text: String(repeating: "é", count: 400), attachment: nil, time: 1, id: "p")
        let body = PushPayload.body(self.pending(), entry: entry, direct: false, contentFree: false)
        let decoded = try JSONDecoder().decode(PushPayload.self, from: Data(body))
        #expect(decoded.kind == "mention")
        #expect(decoded.circle == "lobby")
        #expect(decoded.seq == 3)
        #expect(decoded.author == "alice")
        #expect((decoded.text?.utf8.count ?? 0) <= PushPayload.maxTextBytes)
        #expect(decoded.text?.hasSuffix("…") == true)
        let bare = try JSONDecoder().decode(PushPayload.self, from: Data(PushPayload.body(self.pending(), entry: entry, direct: true, contentFree: true)))
        #expect(bare.text == nil && bare.author == nil && bare.direct == true)
        #expect(PushTopic.topic(circle: "lobby").count == 32)
        #expect(PushTopic.topic(circle: "lobby") != PushTopic.topic(circle: "den"))
    }

    /// CommitPlan's push rules: mentions at levels mentions/all, not none; DMs at all; never the author.
    @Test func planPushes() {
        var known = CommitPlan.Known()
        known.circles[BinaryText("lobby")] = CommitPlan.Circle(lastSeq: 0, owner: "alice", isPrivate: false)
        known.circles[BinaryText("dm.x")] = CommitPlan.Circle(lastSeq: 0, owner: "alice", isPrivate: true, direct: ["alice", "bob", "carol"])
        for name in ["bob", "carol", "dave"] { known.mentionable.insert(MemberKey(circle: "lobby", user: name)) }
        known.mentionable.insert(MemberKey(circle: "dm.x", user: "bob"))
        let posts = [
            NewPost(circle: "lobby", author: "alice", clientID: "1", text: "@bob @carol @dave @alice hi", attachment: nil, time: 1),
            NewPost(circle: "dm.x", author: "alice", clientID: "2", text: "@bob look", attachment: nil, time: 1),
            NewPost(circle: "lobby", author: "alice", clientID: "3", text: "no one", attachment: nil, time: 1),
        ]
        let plan = CommitPlan(posts: posts, known: known)
        let candidates = plan.pushCandidates().map { "\($0.circle)/\($0.user)" }
        #expect(Set(candidates) == ["lobby/bob", "lobby/carol", "lobby/dave", "dm.x/bob", "dm.x/carol"])
        let subscribers: [MemberKey: CommitPlan.PushTarget] = [
            MemberKey(circle: "lobby", user: "bob"): .init(level: nil, endpoints: ["b1", "b2"]),
            MemberKey(circle: "lobby", user: "carol"): .init(level: NotificationLevel.none, endpoints: ["c1"]),
            MemberKey(circle: "dm.x", user: "bob"): .init(level: nil, endpoints: ["b1"]),
            MemberKey(circle: "dm.x", user: "carol"): .init(level: nil, endpoints: ["c1"]),
            // dave has no subscription.
        ]
        let writes = plan.pushWrites(subscribers: subscribers).map { "\($0.circle)/\($0.seq)/\($0.user)/\($0.endpoint)/\($0.kind.rawValue)" }
        #expect(writes == ["lobby/1/bob/b1/mention", "lobby/1/bob/b2/mention", "dm.x/1/bob/b1/mention", "dm.x/1/carol/c1/dm"])
        // carol quiets the DM: only mentions there.
        var quiet = subscribers
        quiet[MemberKey(circle: "dm.x", user: "carol")] = .init(level: .mentions, endpoints: ["c1"])
        #expect(!plan.pushWrites(subscribers: quiet).contains { $0.user == "carol" })
    }

    /// Entries restored by `circle import` happened long ago elsewhere: their mentions are
    /// recorded (for the counts above the restored read markers), but they set off no push and
    /// no webhook delivery; the same entries written live set off both.
    @Test func restoredEntriesTellNoOne() {
        var known = CommitPlan.Known()
        known.circles[BinaryText("lobby")] = CommitPlan.Circle(lastSeq: 0, owner: "alice", isPrivate: false)
        known.circles[BinaryText("dm.x")] = CommitPlan.Circle(lastSeq: 0, owner: "alice", isPrivate: true, direct: ["alice", "bob"])
        known.mentionable.insert(MemberKey(circle: "lobby", user: "bob"))
        known.mentionable.insert(MemberKey(circle: "dm.x", user: "bob"))
        func posts(restored: Bool) -> [NewPost] {
            [
                NewPost(circle: "lobby", author: "alice", clientID: "1", text: "@bob look", attachment: nil, time: 1, restored: restored),
                NewPost(circle: "dm.x", author: "alice", clientID: "2", text: "psst", attachment: nil, time: 1, restored: restored),
                NewPost(circle: "lobby", author: "alice", clientID: "3", text: "morning", attachment: nil, time: 1, restored: restored),
            ]
        }
        let subscribers: [MemberKey: CommitPlan.PushTarget] = [
            MemberKey(circle: "lobby", user: "bob"): .init(level: .all, endpoints: ["b1"]),
            MemberKey(circle: "dm.x", user: "bob"): .init(level: nil, endpoints: ["b1"]),
        ]
        let everyPost = ["lobby": ["bob"]]
        let webhooks = [Webhook(id: "all", url: "", circle: nil, events: [.post, .mention], secrets: [], createdBy: "", createdAt: 0)]

        let live = CommitPlan(posts: posts(restored: false), known: known)
        #expect(live.pushWrites(subscribers: subscribers, everyPost: everyPost).map { "\($0.circle)/\($0.seq)/\($0.kind.rawValue)" } == [
            "lobby/1/mention", "dm.x/1/dm", "lobby/2/post",
        ])
        #expect(live.webhookDeliveries(webhooks, now: 9).count == 3)

        let restored = CommitPlan(posts: posts(restored: true), known: known)
        #expect(restored.outcomes.allSatisfy { if case .stored = $0 { true } else { false } })
        #expect(restored.mentionWrites.map { "\($0.circle)/\($0.post)/\($0.user)" } == ["lobby/1/bob"], "mentions are still recorded")
        #expect(restored.pushCandidates(everyPost: everyPost).isEmpty)
        #expect(restored.circlesForEveryPost().isEmpty)
        #expect(restored.pushWrites(subscribers: subscribers, everyPost: everyPost).isEmpty)
        #expect(restored.webhookDeliveries(webhooks, now: 9).isEmpty)
    }

    /// Level `all` in a circle: every post is pushed (kind `post`) to those the store found
    /// wanting it; a mention of them in the post is pushed once, as a mention; never the author;
    /// change entries and DMs are not asked about.
    @Test func planPushesEveryPostAtLevelAll() {
        var known = CommitPlan.Known()
        known.circles[BinaryText("lobby")] = CommitPlan.Circle(lastSeq: 0, owner: "alice", isPrivate: false)
        known.circles[BinaryText("dm.x")] = CommitPlan.Circle(lastSeq: 0, owner: "alice", isPrivate: true, direct: ["alice", "bob"])
        known.mentionable.insert(MemberKey(circle: "lobby", user: "bob"))
        let posts = [
            NewPost(circle: "lobby", author: "alice", clientID: "1", text: "morning", attachment: nil, time: 1),
            NewPost(circle: "lobby", author: "alice", clientID: "2", text: "@bob look", attachment: nil, time: 1),
            NewPost(circle: "lobby", author: "erin", clientID: "3", text: "mine", attachment: nil, time: 1),
            NewPost(circle: "dm.x", author: "alice", clientID: "4", text: "psst", attachment: nil, time: 1),
        ]
        let plan = CommitPlan(posts: posts, known: known)
        #expect(plan.circlesForEveryPost().map(\.circle) == ["lobby"])
        #expect(plan.circlesForEveryPost().map(\.isPrivate) == [false])
        let everyPost = ["lobby": ["bob", "erin"]]
        #expect(Set(plan.pushCandidates(everyPost: everyPost).map { "\($0.circle)/\($0.user)" }) == ["lobby/bob", "lobby/erin", "dm.x/bob"])
        let subscribers: [MemberKey: CommitPlan.PushTarget] = [
            MemberKey(circle: "lobby", user: "bob"): .init(level: .all, endpoints: ["b1"]),
            MemberKey(circle: "lobby", user: "erin"): .init(level: .all, endpoints: ["e1"]),
            MemberKey(circle: "dm.x", user: "bob"): .init(level: nil, endpoints: ["b1"]),
        ]
        let writes = plan.pushWrites(subscribers: subscribers, everyPost: everyPost).map { "\($0.circle)/\($0.seq)/\($0.user)/\($0.kind.rawValue)" }
        #expect(writes == ["lobby/2/bob/mention", "lobby/1/bob/post", "lobby/1/erin/post", "lobby/2/erin/post", "lobby/3/bob/post", "dm.x/1/bob/dm"])
        // Without `all` (the store found nobody): only the mention.
        #expect(plan.pushWrites(subscribers: subscribers).map { "\($0.circle)/\($0.seq)/\($0.user)" } == ["lobby/2/bob", "dm.x/1/bob"])
        // A level of `mentions` read for someone listed: no `post` push.
        var mentionsOnly = subscribers
        mentionsOnly[MemberKey(circle: "lobby", user: "erin")] = .init(level: .mentions, endpoints: ["e1"])
        #expect(!plan.pushWrites(subscribers: mentionsOnly, everyPost: everyPost).contains { $0.user == "erin" })
    }
}

