import CircleWire
import Foundation
import Testing

@testable import CircleServer

/// Webhook rules without I/O: which entries a subscription gets, signatures, retries.
@Suite("Webhooks: planning, signatures, retries")
struct WebhookTests {
    @Test("the Standard Webhooks signature of the specification's example (checked with the standardwebhooks package)")
    func signature() {
        let body = Array(#"{"test": 2432232314}"#.utf8)
        let signature = WebhookSignature.sign(id: "msg_p5jXN8AQM9LWM0D4loKWxJek", timestamp: 1_614_265_330, body: body, secrets: ["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"])
        #expect(signature == "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=")
        let two = WebhookSignature.sign(id: "msg_x", timestamp: 1, body: body, secrets: [WebhookSignature.newSecret(), "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"])
        #expect(two.split(separator: " ").count == 2)
        #expect(WebhookSignature.key("whsec_short") == nil)
        #expect(WebhookSignature.newSecret().hasPrefix("whsec_"))
    }

    /// Every circle's entries, one circle's reactions, and a disabled subscription.
    static var subscriptions: [Webhook] {
        var off = Webhook(id: "off", url: "", circle: nil, events: Set(WebhookEvent.allCases), secrets: [], createdBy: "", createdAt: 0)
        off.status = .disabled
        return [
            Webhook(id: "all", url: "", circle: nil, events: Set(WebhookEvent.allCases), secrets: [], createdBy: "", createdAt: 0),
            Webhook(id: "general-reactions", url: "", circle: "general", events: [.reaction], secrets: [], createdBy: "", createdAt: 0),
            off,
        ]
    }

    @Test("a commit's deliveries: each stored entry, each active subscription that wants its circle and event")
    func planning() {
        var known = CommitPlan.Known()
        known.circles[BinaryText("general")] = .init(lastSeq: 0, owner: "ada", isPrivate: false)
        known.circles[BinaryText("random")] = .init(lastSeq: 0, owner: "ada", isPrivate: false)
        let posts = [
            NewPost(circle: "general", author: "ada", clientID: "a", text: "hi", attachment: nil, time: 5),
            NewPost(circle: "random", author: "ada", clientID: "b", text: "yo", attachment: nil, time: 5),
            NewPost(circle: "general", author: "ada", clientID: "c", text: nil, attachment: nil, time: 5, change: .react, target: 1, emoji: "👍"),
        ]
        let plan = CommitPlan(posts: posts, known: known)
        let webhooks = Self.subscriptions
        let deliveries = plan.webhookDeliveries(webhooks, now: 9)
        #expect(deliveries.map { "\($0.webhook) \($0.circle)/\($0.seq) \($0.event.rawValue)" } == [
            "all general/1 post", "all random/1 post", "all general/2 reaction", "general-reactions general/2 reaction",
        ])
        #expect(deliveries.allSatisfy { $0.nextAttemptAt == 9 && $0.createdAt == 5 })
        #expect(plan.webhookDeliveries([], now: 9).isEmpty)
        #expect(Set(deliveries.map(\.id)).count == deliveries.count)
    }

    @Test("delivery ids follow the entries' time, then the queue and the seq, and are the same wherever they are made")
    func deliveryIDs() {
        let first = WebhookDelivery.id(webhook: "all", circle: "general", seq: 7, time: 1_795_319_508_583)
        #expect(first == WebhookDelivery.id(webhook: "all", circle: "general", seq: 7, time: 1_795_319_508_583))
        #expect(first.hasPrefix("msg_01a20161ae67") && first.count == 4 + 12 + 16 + 16)
        #expect(first.hasSuffix("0000000000000007"))
        // Later entries sort after, whatever their queue: a commit's ids are appended to the index.
        let later = WebhookDelivery.id(webhook: "all", circle: "aaa", seq: 1, time: 1_795_319_508_584)
        #expect(first < later)
        #expect(first != WebhookDelivery.id(webhook: "all", circle: "random", seq: 7, time: 1_795_319_508_583))
        #expect(first != WebhookDelivery.id(webhook: "other", circle: "general", seq: 7, time: 1_795_319_508_583))
    }

    @Test("a commit's wake-up claims nothing while this node is sending every queue it may have added to")
    func wakeUpsWhileSending() {
        let webhooks = Self.subscriptions
        typealias Queue = WebhookDispatcher.Queue
        let sendingGeneral: Set<Queue> = [Queue(webhook: "all", circle: "general"), Queue(webhook: "general-reactions", circle: "general")]
        #expect(WebhookDispatcher.alreadySending(["general"], webhooks: webhooks, running: sendingGeneral))
        // A circle whose queue of `all` is not being sent: claim.
        #expect(!WebhookDispatcher.alreadySending(["general", "random"], webhooks: webhooks, running: sendingGeneral))
        // `general-reactions` never has deliveries of `random`; a disabled subscription has none.
        #expect(WebhookDispatcher.alreadySending(["random"], webhooks: webhooks, running: [Queue(webhook: "all", circle: "random")]))
        // One of general's queues is idle: claim.
        #expect(!WebhookDispatcher.alreadySending(["general"], webhooks: webhooks, running: [Queue(webhook: "all", circle: "general")]))
    }

    @Test("member events: a system entry comes as member to subscriptions that ask for it, and to a bot's only when not its own")
    func memberEvents() {
        var known = CommitPlan.Known()
        known.circles[BinaryText("team")] = .init(lastSeq: 0, owner: "ada", isPrivate: true)
        known.members.insert(MemberKey(circle: "team", user: "cy"))
        let posts = [
            NewPost(circle: "team", author: "ada", clientID: "a", text: nil, attachment: nil, time: 5, event: .added, member: "bo"),
            NewPost(circle: "team", author: "ada", clientID: "b", text: "@bot hi", attachment: nil, time: 5),
            NewPost(circle: "team", author: "cy", clientID: "c", text: nil, attachment: nil, time: 5, event: .left, member: "cy"),
            NewPost(circle: "team", author: "ada", clientID: "d", text: nil, attachment: nil, time: 5, event: .removed, member: "nobody"),
            NewPost(circle: "team", author: "bot", clientID: "e", text: nil, attachment: nil, time: 5, event: .added, member: "dee"),
        ]
        let plan = CommitPlan(posts: posts, known: known)
        #expect(plan.outcomes[3] == .applied)
        #expect(plan.memberWrites.map { "\($0.user) \($0.add)" } == ["bo true", "cy false", "dee true"])
        let webhooks = [
            Webhook(id: "members", url: "", circle: nil, events: [.member], secrets: [], createdBy: "", createdAt: 0),
            Webhook(id: "posts", url: "", circle: "team", events: [.post], secrets: [], createdBy: "", createdAt: 0),
            Webhook(id: "bot", url: "", circle: nil, events: [.member, .mention], secrets: [], bot: "bot", createdBy: "", createdAt: 0),
        ]
        let deliveries = plan.webhookDeliveries(webhooks, now: 9)
        #expect(deliveries.map { "\($0.webhook) \($0.seq) \($0.event.rawValue)" } == [
            "members 1 member", "bot 1 member", "posts 2 post", "members 3 member", "bot 3 member", "members 4 member",
        ])
    }

    @Test("retries back off exponentially with jitter, up to the longest wait, and give up after the limit")
    func retries() {
        let policy = WebhookRetryPolicy(first: .seconds(5), longest: .seconds(60), jitter: 0.2, giveUpAfter: .seconds(3600))
        let delivery = WebhookDelivery(id: "msg", webhook: "w", circle: "c", seq: 1, event: .post, createdAt: 0, nextAttemptAt: 0)
        func wait(_ attempt: Int, random: Double) -> Int64? {
            guard case .retry(_, _, let at) = policy.afterFailure(delivery, attempt: attempt, now: 1000, status: 500, error: "x", random: random) else { return nil }
            return at - 1000
        }
        #expect(wait(1, random: 0.5) == 5000)
        #expect(wait(2, random: 0.5) == 10_000)
        #expect(wait(3, random: 0.5) == 20_000)
        #expect(wait(10, random: 0.5) == 60_000, "capped")
        #expect(wait(1, random: 0) == 4000)
        #expect(wait(1, random: 0.999_999)! > 5990)
        guard case .failed(let status, _, let reason) = policy.afterFailure(delivery, attempt: 40, now: 3_600_000, status: 503, error: "down", random: 0.5) else {
            Issue.record("an hour old: given up")
            return
        }
        #expect(status == 503)
        #expect(reason.contains("down"))
    }

    @Test("the payload: type, an RFC 3339 timestamp and the entry")
    func payload() throws {
        let entry = CirclePost(circle: "general", seq: 3, author: "ada", text: "hi", attachment: nil, time: 1, id: "p")
        let body = WebhookPayload.body(event: .post, entry: entry, circle: "general", seq: 3, at: 1_614_265_330_123)
        let json = try #require(try JSONSerialization.jsonObject(with: Data(body)) as? [String: Any])
        #expect(json["type"] as? String == "post")
        #expect(json["timestamp"] as? String == "2021-02-25T15:02:10.123Z")
        let data = try #require(json["data"] as? [String: Any])
        #expect(data["seq"] as? Int == 3)
        #expect((data["entry"] as? [String: Any])?["text"] as? String == "hi")
    }

    @Test("a bot's reply: JSON text within the limit becomes a post; anything else is no reply or a stated problem")
    func replies() {
        func parse(_ body: String, status: Int = 200, type: String? = "application/json") -> Result<WebhookReply, WebhookReply.Problem>? {
            WebhookReply.parse(status: status, contentType: type, body: Array(body.utf8), maxTextBytes: 10)
        }
        #expect(parse(#"{"text":"pong"}"#) == .success(WebhookReply(text: "pong")))
        #expect(parse(#"{"text":"pong","extra":[1,2]}"#, type: "Application/JSON; charset=utf-8") == .success(WebhookReply(text: "pong")))
        #expect(parse(#"{"text":"a\nb\tc"}"#) == .success(WebhookReply(text: "a\nb\tc")))
        #expect(parse(#"{"text":"pong"}"#, status: 500) == nil, "a failed delivery has no reply")
        #expect(parse(#"{"text":"pong"}"#, type: "text/plain") == nil)
        #expect(parse(#"{"text":"pong"}"#, type: nil) == nil)
        #expect(parse("", status: 204) == nil)
        if case .failure(.notJSON)? = parse("not json") {} else { Issue.record("a body that is not JSON: \(String(describing: parse("not json")))") }
        #expect(parse("[1]") == .failure(.notAnObject))
        #expect(parse(#"{"text":3}"#) == .failure(.noText))
        #expect(parse(#"{"text":"  \n "}"#) == .failure(.emptyText))
        #expect(parse(#"{"text":"12345678901"}"#) == .failure(.tooLong(limit: 10)))
        #expect(parse(#"{"text":"a\u0007"}"#) == .failure(.controlCharacters))
        #expect(parse(String(repeating: "[", count: 100)) != nil, "deep nesting is a parse error, not a crash")
    }

    @Test("mention events: an entry that mentions the bot or is in its direct message comes once, as mention")
    func mentions() {
        var known = CommitPlan.Known()
        known.circles[BinaryText("general")] = .init(lastSeq: 0, owner: "ada", isPrivate: false)
        known.circles[BinaryText("dm.1")] = .init(lastSeq: 0, owner: "ada", isPrivate: true, direct: ["ada", "pingbot"])
        known.mentionable = [MemberKey(circle: "general", user: "pingbot")]
        let posts = [
            NewPost(circle: "general", author: "ada", clientID: "a", text: "@pingbot ping", attachment: nil, time: 5),
            NewPost(circle: "general", author: "ada", clientID: "b", text: "no mention", attachment: nil, time: 5),
            NewPost(circle: "dm.1", author: "ada", clientID: "c", text: "just us", attachment: nil, time: 5),
            NewPost(circle: "general", author: "ada", clientID: "d", text: "now @pingbot", attachment: nil, time: 5, change: .edit, target: 2),
            NewPost(circle: "dm.1", author: "ada", clientID: "e", text: nil, attachment: nil, time: 5, change: .react, target: 1, emoji: "👍"),
            NewPost(circle: "general", author: "pingbot", clientID: "f", text: "@pingbot myself", attachment: nil, time: 5),
        ]
        let plan = CommitPlan(posts: posts, known: known)
        func hook(_ id: String, _ events: Set<WebhookEvent>, bot: String? = "pingbot") -> Webhook {
            Webhook(id: id, url: "", circle: nil, events: events, secrets: [], bot: bot, createdBy: "", createdAt: 0)
        }
        let webhooks = [
            hook("only-mentions", [.mention]), hook("all", Set(WebhookEvent.allCases)), hook("posts", [.post]),
            hook("no-bot", Set(WebhookEvent.allCases), bot: nil),
        ]
        let deliveries = plan.webhookDeliveries(webhooks, now: 9).map { "\($0.webhook) \($0.circle)/\($0.seq) \($0.event.rawValue)" }
        #expect(deliveries == [
            // "@pingbot ping": a mention for those that ask, a post for the rest.
            "only-mentions general/1 mention", "all general/1 mention", "posts general/1 post", "no-bot general/1 post",
            "all general/2 post", "posts general/2 post", "no-bot general/2 post",
            // A post in the bot's direct message.
            "only-mentions dm.1/1 mention", "all dm.1/1 mention", "posts dm.1/1 post", "no-bot dm.1/1 post",
            // An edit that adds the mention.
            "only-mentions general/3 mention", "all general/3 mention", "no-bot general/3 edit",
            // A reaction in the direct message is not a mention; the bot's own post reaches only the bot-less one.
            "all dm.1/2 reaction", "no-bot dm.1/2 reaction", "no-bot general/4 post",
        ])
    }

    @Test("a bot's own entries are not delivered to its subscription")
    func botsDoNotHearThemselves() {
        var known = CommitPlan.Known()
        known.circles[BinaryText("general")] = .init(lastSeq: 0, owner: "ada", isPrivate: false)
        let posts = [
            NewPost(circle: "general", author: "ada", clientID: "a", text: "@pingbot ping", attachment: nil, time: 5),
            NewPost(circle: "general", author: "pingbot", clientID: "b", text: "pong", attachment: nil, time: 5),
        ]
        let plan = CommitPlan(posts: posts, known: known)
        let hook = Webhook(id: "bot", url: "", circle: nil, events: Set(WebhookEvent.allCases), secrets: [], bot: "pingbot", createdBy: "", createdAt: 0)
        let other = Webhook(id: "log", url: "", circle: nil, events: Set(WebhookEvent.allCases), secrets: [], createdBy: "", createdAt: 0)
        #expect(plan.webhookDeliveries([hook, other], now: 1).map { "\($0.webhook) \($0.seq)" } == ["bot 1", "log 1", "log 2"])
    }
}
