@testable import CircleServer
import CircleSocket
@testable import CircleWire
import NIOCore
import NIOEmbedded
import NIOWebSocket
import Testing

/// The `circle.v1` session as a value, driven through the orderings that carry the promises
/// (gapless resume, every request answered once, bounded queues) without a socket or a store.
@Suite("Session state machine")
struct SessionStateTests {
    // MARK: Fixtures

    /// A clock the tests move by hand.
    struct Clock {
        var seconds: Double = 1000
        var now: SessionInstant {
            SessionInstant(uptime: .uptimeNanoseconds(UInt64(self.seconds * 1e9)), wallMilliseconds: 1_700_000_000_000 + Int64(self.seconds * 1000))
        }
        mutating func advance(_ seconds: Double) { self.seconds += seconds }
    }

    static func settings(_ change: (inout SessionState.Settings) -> Void = { _ in }) -> SessionState.Settings {
        var settings = SessionState.Settings(user: "ann", limits: .init())
        change(&settings)
        return settings
    }

    static func makeState(
        _ change: (inout SessionState.Settings) -> Void = { _ in },
        clock: Clock = Clock(),
        expires: NIODeadline? = nil
    ) -> SessionState {
        SessionState(settings: settings(change), now: clock.now, expires: expires)
    }

    static func request(_ action: CircleAction, _ id: String, _ circle: String = "general", since: Int64? = nil, text: String? = "hi", quiet: Bool? = nil) -> CircleRequest {
        CircleRequest(action: action, id: id, circle: circle, since: since, text: action == .post ? text : nil, quiet: quiet)
    }

    static func info(_ circle: String = "general", lastSeq: Int64, isPrivate: Bool = false) -> CircleInfo {
        CircleInfo(name: circle, owner: "bob", isPrivate: isPrivate, createdAt: 0, lastSeq: lastSeq)
    }

    static func post(_ seq: Int64, _ circle: String = "general") -> CirclePost {
        CirclePost(circle: circle, seq: seq, author: "bob", text: "post \(seq)", attachment: nil, time: seq, id: "c\(seq)")
    }

    /// A live post as the hub delivers it; its payload text is `live <seq>`.
    static func live(_ seq: Int64, _ circle: String = "general") -> HubEvent {
        .post(circle: circle, seq: seq, payload: Self.livePayload(seq))
    }

    /// Live posts the hub delivers together (one commit); each payload's text is `live <seq>`.
    static func liveRun(_ seqs: [Int64], _ circle: String = "general") -> HubEvent {
        guard let run = HubPostRun(seqs.map { ($0, Self.livePayload($0)) }, allocator: ByteBufferAllocator()) else {
            Issue.record("no run for \(seqs)")
            return Self.live(seqs[0], circle)
        }
        return .posts(circle: circle, run: run)
    }

    static func livePayload(_ seq: Int64) -> HubPayload {
        HubPayload.framing(ByteBuffer(string: "live \(seq)"), allocator: ByteBufferAllocator())
    }

    /// Actions as short strings, so that a test states the exact sequence it expects.
    static func describe(_ actions: [SessionState.Action]) -> [String] {
        actions.flatMap { action -> [String] in
            switch action {
            case .send(let message): return ["send " + describe(message)]
            case .fail(let id, let code, let message): return ["error \(id ?? "-") \(code.rawValue): \(message)"]
            case .writePosts(let posts): return posts.map { "replay \($0.seq)" }
            case .write(let payload): return ["write \(String(buffer: payload.text))"]
            case .writeRun(let run): return ["write " + run.posts.map { String(buffer: $0.payload.text) }.joined(separator: ", ")]
            case .flush: return ["flush"]
            case .subscribe(let circle): return ["subscribe \(circle)"]
            case .unsubscribe(let circle): return ["unsubscribe \(circle)"]
            case .arrive(let circle): return ["arrive \(circle)"]
            case .depart(let circle): return ["depart \(circle)"]
            case .broadcastTyping(let circle): return ["typing \(circle)"]
            case .checkAccess(let request): return ["check \(request.id)"]
            case .readReplay(let circle, let after, let limit): return ["read \(circle) after \(after) limit \(limit)"]
            case .readHistory(let request): return ["history \(request.id)"]
            case .submit(let post):
                let change = post.change.map { " \($0.rawValue) \(post.target ?? 0)" } ?? ""
                return ["submit \(post.clientID) at \(post.time)" + change]
            case .markRead(let request): return ["mark \(request.circle) \(request.seq ?? -1)"]
            case .listCircles(let request): return ["circles \(request.id)"]
            case .search(let request): return ["search \(request.id)"]
            case .verifyToken(let request): return ["verify \(request.id)"]
            case .expiryChanged(let expiry): return ["expiry \(expiry.map { "\($0.uptimeNanoseconds / 1_000_000_000)" } ?? "none")"]
            case .broadcastRead(let circle, let seq): return ["tell read \(circle) \(seq)"]
            case .read: return ["read"]
            case .close(let code, let reason): return ["close \(code.rawValue) \(reason)"]
            case .count(let metric): return ["count \(metric)"]
            case .logReplayFailure(let circle, _): return ["log replay failure \(circle)"]
            case .unregister(let circles): return ["unregister \(circles.sorted())"]
            }
        }
    }

    static func describe(_ message: CircleServerMessage) -> String {
        switch message {
        case .ack(let id, let seq, _, let duplicate): return "ack \(id)\(seq.map { " seq \($0)" } ?? "")\(duplicate ? " duplicate" : "")"
        case .error(let id, let code, _): return "error \(id ?? "-") \(code.rawValue)"
        case .left(let circle, let user): return "left \(circle) \(user)"
        case .gap(let circle, let from, let to): return "gap \(circle) \(from)...\(to)"
        case .history(let id, _, let posts, let more, _): return "history \(id) \(posts.map(\.seq)) more \(more)"
        default: return "\(message)"
        }
    }

    /// Joins `general` and confirms it with `lastSeq` stored posts; returns the actions of the confirmation.
    @discardableResult
    static func joinConfirmed(_ state: inout SessionState, since: Int64? = nil, lastSeq: Int64, clock: Clock = Clock()) -> [String] {
        let request = request(.join, "j1", since: since)
        _ = state.received(.success(request), now: clock.now)
        return describe(state.accessChecked(request, .allowed(info(lastSeq: lastSeq)), now: clock.now))
    }

    // MARK: Gapless resume

    @Test("a join subscribes before it reads the store")
    func joinSubscribesFirst() {
        var state = Self.makeState()
        let actions = state.received(.success(Self.request(.join, "j1", since: 2)), now: Clock().now)
        #expect(Self.describe(actions) == ["subscribe general", "check j1"])
        #expect(state.requestsInFlight == 1)
    }

    @Test("live posts during a replay are held, then sent after it, in order, none lost or duplicated")
    func livePostsDuringReplay() {
        var state = Self.makeState()
        #expect(Self.joinConfirmed(&state, since: 1, lastSeq: 3) == ["count join", "send ack j1 seq 3", "arrive general", "read general after 1 limit 256"])
        // Committed while the store is read; 4 arrives after 5 would never happen, but the order must not matter.
        #expect(Self.describe(state.hubEvent(Self.live(5))).isEmpty)
        #expect(Self.describe(state.hubEvent(Self.live(4))).isEmpty)
        // The store already has 4 too (it was committed before the read ran): it goes out once.
        let page = state.replayRead(circle: "general", after: 1, .success([Self.post(2), Self.post(3), Self.post(4)]))
        #expect(Self.describe(page) == ["replay 2", "replay 3", "replay 4", "flush", "write live 5", "flush"])
        // After the replay, live posts go straight out; an old one is not repeated.
        #expect(Self.describe(state.hubEvent(Self.live(5))).isEmpty)
        #expect(Self.describe(state.hubEvent(Self.live(6))) == ["write live 6"])
    }

    @Test("a replay longer than a page reads page after page")
    func replayPages() {
        var state = Self.makeState { $0.replayPage = 2 }
        #expect(Self.joinConfirmed(&state, since: 0, lastSeq: 5).last == "read general after 0 limit 2")
        #expect(Self.describe(state.replayRead(circle: "general", after: 0, .success([Self.post(1), Self.post(2)])))
            == ["replay 1", "replay 2", "flush", "read general after 2 limit 2"])
        // A page for a position that was passed already (a stale read) changes nothing.
        #expect(Self.describe(state.replayRead(circle: "general", after: 0, .success([Self.post(1), Self.post(2)]))).isEmpty)
        #expect(Self.describe(state.replayRead(circle: "general", after: 2, .success([Self.post(3), Self.post(4)])))
            == ["replay 3", "replay 4", "flush", "read general after 4 limit 2"])
        #expect(Self.describe(state.replayRead(circle: "general", after: 4, .success([Self.post(5)]))) == ["replay 5", "flush", "flush"])
        #expect(Self.describe(state.hubEvent(Self.live(6))) == ["write live 6"])
    }

    @Test("entries a retention policy removed: the replay says gap for them, then goes on after them")
    func replayAcrossRemovedEntries() {
        var state = Self.makeState { $0.replayPage = 2 }
        #expect(Self.joinConfirmed(&state, since: 2, lastSeq: 9).last == "read general after 2 limit 2")
        // The store's oldest entry is 7 now (1…6 removed).
        #expect(Self.describe(state.replayRead(circle: "general", after: 2, .success([Self.post(7), Self.post(8)])))
            == ["send gap general 3...6", "replay 7", "replay 8", "flush", "read general after 8 limit 2"])
        #expect(Self.describe(state.replayRead(circle: "general", after: 8, .success([Self.post(9)]))) == ["replay 9", "flush", "flush"])
        #expect(Self.describe(state.hubEvent(Self.live(10))) == ["write live 10"])
        // Nothing left at all (every entry removed): nothing to say until the next entry, whose
        // hole starts a replay that finds it.
        var empty = Self.makeState()
        _ = Self.joinConfirmed(&empty, since: 2, lastSeq: 6)
        #expect(Self.describe(empty.replayRead(circle: "general", after: 2, .success([]))) == ["flush", "flush"])
        #expect(Self.describe(empty.hubEvent(Self.live(7))) == ["read general after 2 limit 256"])
        #expect(Self.describe(empty.replayRead(circle: "general", after: 2, .success([Self.post(7)])))
            == ["send gap general 3...6", "replay 7", "flush", "flush"])
    }

    @Test("a replay page is one write of its posts in order, without the ones already sent")
    func replayPageIsOneWrite() throws {
        var state = Self.makeState()
        _ = Self.joinConfirmed(&state, since: 1, lastSeq: 4)
        let actions = state.replayRead(circle: "general", after: 1, .success([Self.post(1), Self.post(2), Self.post(3), Self.post(4)]))
        guard case .writePosts(let page) = try #require(actions.first) else {
            Issue.record("expected one write of the page first, got \(Self.describe(actions))")
            return
        }
        #expect(page.map(\.seq) == [2, 3, 4])
        #expect(Self.describe(Array(actions.dropFirst())) == ["flush", "flush"])
        // A page with nothing new writes nothing.
        var again = Self.makeState()
        _ = Self.joinConfirmed(&again, since: 3, lastSeq: 4)
        #expect(Self.describe(again.replayRead(circle: "general", after: 3, .success([Self.post(2), Self.post(3)]))) == ["flush", "flush"])
    }

    @Test("a live-only join starts after the newest stored post; a cursor from the future too")
    func liveOnlyAndFutureCursor() {
        for since: Int64? in [nil, 99] {
            var state = Self.makeState()
            #expect(Self.joinConfirmed(&state, since: since, lastSeq: 7) == ["count join", "send ack j1 seq 7", "arrive general", "read general after 7 limit 256"])
            #expect(Self.describe(state.replayRead(circle: "general", after: 7, .success([]))) == ["flush", "flush"])
            #expect(Self.describe(state.hubEvent(Self.live(8))) == ["write live 8"])
        }
    }

    @Test("a hole in the live posts is filled from the store, never skipped")
    func holeInLivePosts() {
        var state = Self.makeState()
        Self.joinConfirmed(&state, lastSeq: 5)
        _ = state.replayRead(circle: "general", after: 5, .success([]))
        #expect(Self.describe(state.hubEvent(Self.live(7))) == ["read general after 5 limit 256"])
        #expect(Self.describe(state.replayRead(circle: "general", after: 5, .success([Self.post(6), Self.post(7)])))
            == ["replay 6", "replay 7", "flush", "flush"])
        #expect(Self.describe(state.hubEvent(Self.live(8))) == ["write live 8"])
    }

    @Test("a commit's posts reach a live connection as one write; out of step they go one by one, never skipped or repeated")
    func postRuns() {
        var state = Self.makeState()
        Self.joinConfirmed(&state, lastSeq: 5)
        _ = state.replayRead(circle: "general", after: 5, .success([]))
        let whole = state.hubEvent(Self.liveRun([6, 7, 8]))
        #expect(Self.describe(whole) == ["write live 6, live 7, live 8"])
        guard case .writeRun(let run)? = whole.first else { Issue.record("not a run: \(whole)"); return }
        var frames = ByteBuffer()
        for seq: Int64 in [6, 7, 8] { frames.writeImmutableBuffer(Self.livePayload(seq).framed ?? ByteBuffer()) }
        #expect(run.framed == frames, "the run's frames back to back")
        // The state moved past the run: the next post follows it, and a repeat of the run sends nothing.
        #expect(Self.describe(state.hubEvent(Self.live(9))) == ["write live 9"])
        #expect(Self.describe(state.hubEvent(Self.liveRun([8, 9]))).isEmpty)
        // Overlapping what was sent: only the new posts, one by one.
        #expect(Self.describe(state.hubEvent(Self.liveRun([9, 10, 11]))) == ["write live 10", "write live 11"])
        // A run after a gap: the hole is read from the store, and the run waits for it.
        #expect(Self.describe(state.hubEvent(Self.liveRun([13, 14]))) == ["read general after 11 limit 256"])
        #expect(Self.describe(state.replayRead(circle: "general", after: 11, .success([Self.post(12), Self.post(13)])))
            == ["replay 12", "replay 13", "flush", "write live 14", "flush"])
        #expect(Self.describe(state.hubEvent(Self.liveRun([15, 16]))) == ["write live 15, live 16"])
    }

    @Test("a run during a replay is held post by post and sent after it; a run that finds the socket full closes as a slow consumer")
    func postRunsHeldOrRefused() {
        var state = Self.makeState()
        Self.joinConfirmed(&state, since: 1, lastSeq: 3)
        #expect(Self.describe(state.hubEvent(Self.liveRun([4, 5]))).isEmpty)
        #expect(Self.describe(state.replayRead(circle: "general", after: 1, .success([Self.post(2), Self.post(3), Self.post(4)])))
            == ["replay 2", "replay 3", "replay 4", "flush", "write live 5", "flush"])
        #expect(Self.describe(state.hubEvent(Self.liveRun([7, 8], "elsewhere"))).isEmpty, "a circle not joined")
        state.isWritable = false
        #expect(Self.describe(state.hubEvent(Self.liveRun([6, 7]))) == ["count slowConsumer", "close 1013 too slow to keep up; reconnect with since"])
    }

    @Test("at most seven writes wait for a batch's flush, so NIO's pending-writes queue of 15 never grows")
    func unflushedWritesBounded() {
        var unflushed = UnflushedWrites()
        var flushes = 0
        for _ in 0..<20 {
            if unflushed.wrote() {
                flushes += 1
                #expect(unflushed.count == UnflushedWrites.limit)
                unflushed.flushed()
            }
            #expect(unflushed.count * 2 < 15, "two buffers a write must fit NIO's first queue")
        }
        #expect(flushes == 2 && unflushed.count == 6)
        unflushed.flushed()
        #expect(unflushed.count == 0)
    }

    @Test("a run is made only of two or more posts in sequence, each with its frame, up to 16 KiB of frames")
    func runShape() {
        let allocator = ByteBufferAllocator()
        #expect(HubPostRun([(1, Self.livePayload(1))], allocator: allocator) == nil, "one post goes as a post")
        #expect(HubPostRun([(1, Self.livePayload(1)), (3, Self.livePayload(3))], allocator: allocator) == nil, "a gap")
        #expect(HubPostRun([(1, Self.livePayload(1)), (2, HubPayload(text: ByteBuffer(string: "x")))], allocator: allocator) == nil, "no frame")
        let big = HubPayload.framing(ByteBuffer(repeating: UInt8(ascii: "z"), count: HubPostRun.maxBytes / 2), allocator: allocator)
        #expect(HubPostRun([(1, big), (2, big)], allocator: allocator) == nil, "more than maxBytes")
        let run = HubPostRun([(4, Self.livePayload(4)), (5, Self.livePayload(5))], allocator: allocator)
        #expect(run?.firstSeq == 4 && run?.lastSeq == 5)
    }

    @Test("the hub sends a small commit batch to each subscriber as one run, a large one post by post")
    func hubRuns() throws {
        let hub = Hub()
        let loop = EmbeddedEventLoop()
        let sink = EventSink()
        hub.subscribe(HubSubscriber(eventLoop: loop, user: "ann", sink: sink), to: "general")
        func posts(_ seqs: ClosedRange<Int64>, text: String) -> [CirclePost] {
            seqs.map { CirclePost(circle: "general", seq: $0, author: "bob", text: text, attachment: nil, time: $0, id: "c\($0)") }
        }
        func publish(_ posts: [CirclePost]) -> Int {
            var wakes = InboxWakes()
            defer { wakes.wake() }
            return hub.publish(posts, wakes: &wakes)
        }
        #expect(publish(posts(1...3, text: "small")) == 3)
        loop.run()
        #expect(sink.events == ["run 1-3", "flush"])
        #expect(publish(posts(4...6, text: String(repeating: "b", count: 8000))) == 3)
        loop.run()
        #expect(sink.events == ["run 1-3", "flush", "post 4", "post 5", "post 6", "flush"])
        try loop.syncShutdownGracefully()
    }

    @Test("a failed replay closes with 1011 so the client resumes elsewhere")
    func replayFailure() {
        struct Broken: Error {}
        var state = Self.makeState()
        Self.joinConfirmed(&state, since: 0, lastSeq: 2)
        #expect(Self.describe(state.replayRead(circle: "general", after: 0, .failure(Broken())))
            == ["log replay failure general", "close 1011 could not replay the circle; reconnect with since"])
        #expect(state.isClosing)
    }

    // MARK: Joins, holds and leaves

    @Test("posts pipelined behind a join wait for its check, then go to the committer in order")
    func postsHeldBehindJoin() {
        var state = Self.makeState()
        let clock = Clock()
        let join = Self.request(.join, "j1")
        _ = state.received(.success(join), now: clock.now)
        #expect(Self.describe(state.received(.success(Self.request(.post, "p1")), now: clock.now)).isEmpty)
        #expect(Self.describe(state.received(.success(Self.request(.post, "p2")), now: clock.now)).isEmpty)
        // typing is not held.
        #expect(Self.describe(state.received(.success(Self.request(.typing, "t1")), now: clock.now))
            == ["error t1 forbidden: join \"general\" first"])
        let confirmed = state.accessChecked(join, .allowed(Self.info(lastSeq: 0)), now: clock.now)
        #expect(Self.describe(confirmed) == [
            "count join", "send ack j1 seq 0", "arrive general", "read general after 0 limit 256",
            "submit p1 at 1700001000000", "submit p2 at 1700001000000",
        ])
    }

    @Test("a refused join answers the join, repeated joins and the held posts, and unsubscribes")
    func refusedJoin() {
        var state = Self.makeState()
        let clock = Clock()
        let join = Self.request(.join, "j1", "team")
        _ = state.received(.success(join), now: clock.now)
        _ = state.received(.success(Self.request(.join, "j2", "team")), now: clock.now)
        _ = state.received(.success(Self.request(.post, "p1", "team")), now: clock.now)
        #expect(Self.describe(state.accessChecked(join, .notMember, now: clock.now)) == [
            "unsubscribe team",
            "error j1 forbidden: \"team\" is private and you are not a member",
            "error j2 forbidden: \"team\" is private and you are not a member",
            "error p1 forbidden: the join of \"team\" was refused: \"team\" is private and you are not a member",
        ])
        #expect(state.circles.isEmpty)
        #expect(Self.describe(state.received(.success(Self.request(.post, "p2", "team")), now: clock.now))
            == ["error p2 forbidden: join \"team\" before posting in it"])
        #expect(Self.describe(state.hubEvent(Self.live(1, "team"))).isEmpty)
        let missing = Self.request(.join, "j3", "nope")
        _ = state.received(.success(missing), now: clock.now)
        #expect(Self.describe(state.accessChecked(missing, .noSuchCircle, now: clock.now)) == ["unsubscribe nope", "error j3 not_found: no circle \"nope\""])
    }

    @Test("leave before the join's ack answers every waiting request once, and the late check is ignored")
    func leaveBeforeJoinAck() {
        var state = Self.makeState()
        let clock = Clock()
        let join = Self.request(.join, "j1")
        _ = state.received(.success(join), now: clock.now)
        _ = state.received(.success(Self.request(.join, "j2")), now: clock.now)
        _ = state.received(.success(Self.request(.post, "p1")), now: clock.now)
        #expect(Self.describe(state.received(.success(Self.request(.leave, "l1")), now: clock.now)) == [
            "unsubscribe general",
            "error j1 bad_request: left \"general\" before the join completed",
            "error j2 bad_request: left \"general\" before the join completed",
            "error p1 forbidden: left \"general\" before the join was confirmed",
            "send ack l1",
        ])
        // No `depart`: the join was never confirmed, so the circle never heard `joined`.
        #expect(Self.describe(state.accessChecked(join, .allowed(Self.info(lastSeq: 3)), now: clock.now)).isEmpty)
        #expect(state.requestsInFlight == 0)
        #expect(Self.describe(state.hubEvent(Self.live(4))).isEmpty)
    }

    @Test("rejoin: a leave and a new join before the first check returns; only the new check counts")
    func rejoin() {
        var state = Self.makeState()
        let clock = Clock()
        let first = Self.request(.join, "j1")
        let second = Self.request(.join, "j2", since: 2)
        _ = state.received(.success(first), now: clock.now)
        _ = state.received(.success(Self.request(.leave, "l1")), now: clock.now)
        #expect(Self.describe(state.received(.success(second), now: clock.now)) == ["subscribe general", "check j2"])
        #expect(Self.describe(state.accessChecked(first, .allowed(Self.info(lastSeq: 3)), now: clock.now)).isEmpty)
        #expect(Self.describe(state.accessChecked(second, .allowed(Self.info(lastSeq: 3)), now: clock.now))
            == ["count join", "send ack j2 seq 3", "arrive general", "read general after 2 limit 256"])
        // Joining again while joined acks where it stands, without a replay.
        _ = state.replayRead(circle: "general", after: 2, .success([Self.post(3)]))
        #expect(Self.describe(state.received(.success(Self.request(.join, "j3", since: 0)), now: clock.now)) == ["send ack j3 seq 3"])
        // A confirmed leave tells the circle.
        #expect(Self.describe(state.received(.success(Self.request(.leave, "l2")), now: clock.now)) == ["unsubscribe general", "send ack l2", "depart general"])
    }

    @Test("a quiet join is not announced, on arrival or departure")
    func quietJoin() {
        var state = Self.makeState()
        let join = Self.request(.join, "j1", quiet: true)
        _ = state.received(.success(join), now: Clock().now)
        #expect(!Self.describe(state.accessChecked(join, .allowed(Self.info(lastSeq: 0)), now: Clock().now)).contains("arrive general"))
        #expect(Self.describe(state.ended()) == ["unregister [\"general\"]"])
    }

    @Test("removal from a private circle while connected: a left event, and posts there refused")
    func revoke() {
        var state = Self.makeState()
        Self.joinConfirmed(&state, lastSeq: 0)
        #expect(Self.describe(state.hubEvent(.revoke(circle: "general"))) == ["unsubscribe general", "send left general ann", "depart general"])
        #expect(Self.describe(state.received(.success(Self.request(.post, "p1")), now: Clock().now))
            == ["error p1 forbidden: join \"general\" before posting in it"])
    }

    @Test("removal while a join is checked answers the join and its held posts once; the late check sends nothing")
    func revokeDuringJoin() {
        var state = Self.makeState()
        let clock = Clock()
        let join = Self.request(.join, "j1", "team")
        _ = state.received(.success(join), now: clock.now)
        _ = state.received(.success(Self.request(.post, "p1", "team")), now: clock.now)
        #expect(Self.describe(state.hubEvent(.revoke(circle: "team"))) == [
            "unsubscribe team",
            "error j1 forbidden: \"team\" is private and you are not a member",
            "error p1 forbidden: the join of \"team\" was refused: \"team\" is private and you are not a member",
            "send left team ann",
        ])
        #expect(Self.describe(state.accessChecked(join, .allowed(Self.info("team", lastSeq: 1)), now: clock.now)).isEmpty)
        #expect(state.requestsInFlight == 0)
    }

    @Test("a connection that ends leaves the hub and tells the circles it had confirmed")
    func ended() {
        var state = Self.makeState()
        Self.joinConfirmed(&state, lastSeq: 0)
        _ = state.received(.success(Self.request(.join, "j9", "other")), now: Clock().now)
        #expect(Self.describe(state.ended()) == ["unregister [\"general\", \"other\"]", "depart general"])
    }

    // MARK: Posts and their results

    @Test("commit results become acks, duplicates and errors; after close they send nothing")
    func commitResults() {
        var state = Self.makeState()
        #expect(Self.describe(state.hubEvent(.answered(id: "p1", .success(.stored(Self.post(4)))))) == ["send ack p1 seq 4"])
        #expect(Self.describe(state.hubEvent(.answered(id: "p1", .success(.duplicate(Self.post(4)))))) == ["count duplicatePost", "send ack p1 seq 4 duplicate"])
        #expect(Self.describe(state.hubEvent(.answered(id: "p2", .success(.noSuchCircle)))) == ["error p2 not_found: the circle no longer exists"])
        #expect(Self.describe(state.hubEvent(.answered(id: "p3", .failure(StoreError(.unavailable, "the store is busy")))))
            == ["error p3 unavailable: the store is busy; retry"])
        var clock = Clock()
        clock.advance(76)
        #expect(Self.describe(state.timerFired(now: clock.now)) == ["close 4002 idle timeout"])
        #expect(Self.describe(state.hubEvent(.answered(id: "p4", .success(.stored(Self.post(5)))))).isEmpty)
        #expect(Self.describe(state.received(.success(Self.request(.ping, "x")), now: clock.now)).isEmpty)
    }

    @Test("changes go to the committer like posts, need the join, and their refusals become errors")
    func changes() {
        var state = Self.makeState()
        let clock = Clock()
        let edit = CircleRequest.edit(3, in: "general", text: "fixed", id: "e1")
        #expect(Self.describe(state.received(.success(edit), now: clock.now)) == ["error e1 forbidden: join \"general\" before changing posts in it"])
        Self.joinConfirmed(&state, lastSeq: 5, clock: clock)
        #expect(Self.describe(state.received(.success(edit), now: clock.now)) == ["submit e1 at 1700001000000 edit 3"])
        let react = CircleRequest.react("\u{1F44D}", to: 2, in: "general", id: "r1")
        #expect(Self.describe(state.received(.success(react), now: clock.now)) == ["submit r1 at 1700001000000 react 2"])
        #expect(Self.describe(state.received(.success(.delete(1, in: "general", id: "d1")), now: clock.now)) == ["submit d1 at 1700001000000 delete 1"])
        #expect(Self.describe(state.hubEvent(.answered(id: "e1", .success(.rejected(.notAuthor, "not yours"))))) == ["error e1 not_author: not yours"])
        #expect(Self.describe(state.hubEvent(.answered(id: "r1", .success(.rejected(.tooManyReactions, "full"))))) == ["error r1 too_many_reactions: full"])
    }

    @Test("read markers: need the join, ack the stored marker and tell the user's other connections; circles lists")
    func readMarkersAndCircles() {
        var state = Self.makeState()
        let clock = Clock()
        #expect(Self.describe(state.received(.success(.read("general", upTo: 4, id: "m0")), now: clock.now)) == ["error m0 forbidden: join \"general\" first"])
        Self.joinConfirmed(&state, lastSeq: 5, clock: clock)
        let read = CircleRequest.read("general", upTo: 9, id: "m1")
        #expect(Self.describe(state.received(.success(read), now: clock.now)) == ["mark general 9"])
        #expect(Self.describe(state.readMarked(read, .success(ReadMarker(seq: 5, moved: true)), now: clock.now)) == ["send ack m1 seq 5", "tell read general 5"])
        // A marker that stayed where it was is acked and told to no one.
        #expect(Self.describe(state.readMarked(read, .success(ReadMarker(seq: 5, moved: false)), now: clock.now)) == ["send ack m1 seq 5"])
        #expect(Self.describe(state.readMarked(read, .failure(StoreError(.notFound, "gone")), now: clock.now)) == ["error m1 not_found"].map { $0 + ": no circle \"general\"" })
        let circles = CircleRequest.circles(id: "c1")
        #expect(Self.describe(state.received(.success(circles), now: clock.now)) == ["circles c1"])
        let summary = CircleSummary(name: "general", owner: "bob", private: false, createdAt: 0, lastSeq: 5, readSeq: 5, unread: 0)
        #expect(Self.describe(state.circlesListed(circles, .success([summary]), now: clock.now)) == ["send \(CircleServerMessage.circles(id: "c1", circles: [summary]))"])
        let marker = HubPayload(text: ByteBuffer(string: "read 5"))
        #expect(Self.describe(state.hubEvent(.user(marker))) == ["write read 5"])
    }

    @Test("search: asked without a join, answered with the page or the refusal's own code")
    func search() {
        var state = Self.makeState()
        let clock = Clock()
        let search = CircleRequest.search(HTTPAPI.SearchRequest(q: "deploy"), id: "s1")
        #expect(Self.describe(state.received(.success(search), now: clock.now)) == ["search s1"])
        let page = HTTPAPI.SearchResults(hits: [HTTPAPI.SearchHit(circle: "general", seq: 3, author: "ann", time: 9, snippet: "\u{E000}deploy\u{E001}")], next: "n")
        #expect(Self.describe(state.searchAnswered(search, .success(page), now: clock.now)) == ["send \(CircleServerMessage.search(id: "s1", results: page))"])
        #expect(Self.describe(state.received(.success(search), now: clock.now)) == ["search s1"])
        #expect(Self.describe(state.searchAnswered(search, .failure(SearchRefusal(.searchTimedOut, "narrow it")), now: clock.now)) == ["error s1 search_timed_out: narrow it"])
        #expect(Self.describe(state.received(.success(search), now: clock.now)) == ["search s1"])
        #expect(Self.describe(state.searchAnswered(search, .failure(StoreError(.unavailable, "down")), now: clock.now)).first?.hasPrefix("error s1 unavailable") == true)
    }

    @Test("posts are rate limited by the token bucket on the injected clock")
    func rateLimit() {
        var state = Self.makeState { $0.postBurst = 2; $0.postsPerSecond = 1 }
        var clock = Clock()
        Self.joinConfirmed(&state, lastSeq: 0, clock: clock)
        #expect(Self.describe(state.received(.success(Self.request(.post, "p1")), now: clock.now)) == ["submit p1 at 1700001000000"])
        #expect(Self.describe(state.received(.success(Self.request(.post, "p2")), now: clock.now)) == ["submit p2 at 1700001000000"])
        #expect(Self.describe(state.received(.success(Self.request(.post, "p3")), now: clock.now))
            == ["error p3 rate_limited: more than 1 posts per second; slow down and retry"])
        clock.advance(1)
        #expect(Self.describe(state.received(.success(Self.request(.post, "p4")), now: clock.now)) == ["submit p4 at 1700001001000"])
        let long = String(repeating: "x", count: 8 * 1024 + 1)
        #expect(Self.describe(state.received(.success(Self.request(.post, "p5", text: long)), now: clock.now))
            == ["error p5 too_large: the text has 8193 bytes; the limit is 8192"])
    }

    @Test("typing reaches the others at most once a second; every typing is acked")
    func typingThrottle() {
        var state = Self.makeState()
        var clock = Clock()
        Self.joinConfirmed(&state, lastSeq: 0, clock: clock)
        #expect(Self.describe(state.received(.success(Self.request(.typing, "t1")), now: clock.now)) == ["typing general", "send ack t1"])
        clock.advance(0.5)
        #expect(Self.describe(state.received(.success(Self.request(.typing, "t2")), now: clock.now)) == ["send ack t2"])
        clock.advance(0.6)
        #expect(Self.describe(state.received(.success(Self.request(.typing, "t3")), now: clock.now)) == ["typing general", "send ack t3"])
    }

    // MARK: Backpressure and limits

    @Test("at most maxRequestsInFlight store reads; the rest wait in order and reads pause")
    func requestsInFlight() {
        var state = Self.makeState { $0.maxRequestsInFlight = 2 }
        let clock = Clock()
        let h1 = Self.request(.history, "h1")
        #expect(Self.describe(state.received(.success(h1), now: clock.now)) == ["history h1"])
        #expect(Self.describe(state.received(.success(Self.request(.history, "h2")), now: clock.now)) == ["history h2"])
        #expect(state.readRequested() == false)
        #expect(Self.describe(state.received(.success(Self.request(.history, "h3")), now: clock.now)).isEmpty)
        // A decoding failure waits its turn too, so replies keep the order of requests.
        #expect(Self.describe(state.received(.failure(.init(id: "bad", code: .badRequest, message: "nope")), now: clock.now)).isEmpty)
        #expect(state.queuedRequestCount == 2)
        #expect(Self.describe(state.historyRead(h1, .success(.page([Self.post(1)], more: false, lastSeq: 1)), now: clock.now))
            == ["send history h1 [1] more false", "history h3"])
        // h2 and h3 are under way: the failed decode still waits, and reading stays paused.
        #expect(state.queuedRequestCount == 1)
        #expect(Self.describe(state.historyRead(Self.request(.history, "h2"), .success(.refused(.notMember("general"))), now: clock.now))
            == ["error h2 forbidden: \"general\" is private and you are not a member", "error bad bad_request: nope", "read"])
    }

    @Test("requests wait while the socket is not writable, and too many waiting close with 1013")
    func requestQueueLimit() {
        var state = Self.makeState { $0.maxQueuedRequests = 2 }
        let clock = Clock()
        state.isWritable = false
        #expect(Self.describe(state.received(.success(Self.request(.ping, "a")), now: clock.now)).isEmpty)
        #expect(Self.describe(state.received(.success(Self.request(.ping, "b")), now: clock.now)).isEmpty)
        #expect(Self.describe(state.received(.success(Self.request(.ping, "c")), now: clock.now))
            == ["count requestQueueFull", "close 1013 too many requests waiting; read the replies"])
        #expect(Self.describe(state.writabilityChanged(isWritable: true, now: clock.now)).isEmpty)
    }

    @Test("writability: waiting requests and a paused replay resume when the socket drains")
    func writabilityResumes() {
        var state = Self.makeState()
        let clock = Clock()
        let join = Self.request(.join, "j1", since: 0)
        _ = state.received(.success(join), now: clock.now)
        state.isWritable = false
        #expect(Self.describe(state.accessChecked(join, .allowed(Self.info(lastSeq: 2)), now: clock.now)) == ["count join", "send ack j1 seq 2", "arrive general"])
        #expect(Self.describe(state.received(.success(Self.request(.ping, "x")), now: clock.now)).isEmpty)
        #expect(state.readRequested() == false)
        #expect(Self.describe(state.writabilityChanged(isWritable: true, now: clock.now))
            == ["read general after 0 limit 256", "send ack x", "read"])
    }

    @Test("a live post that finds the socket full closes the connection as a slow consumer")
    func slowConsumerLive() {
        var state = Self.makeState()
        Self.joinConfirmed(&state, lastSeq: 0)
        _ = state.replayRead(circle: "general", after: 0, .success([]))
        state.isWritable = false
        #expect(Self.describe(state.hubEvent(Self.live(1))) == ["count slowConsumer", "close 1013 too slow to keep up; reconnect with since"])
        #expect(Self.describe(state.hubEvent(Self.live(2))).isEmpty)
    }

    @Test("more live posts behind a replay than allowed closes as a slow consumer")
    func slowConsumerDuringReplay() {
        var state = Self.makeState { $0.maxPendingDuringReplay = 2 }
        Self.joinConfirmed(&state, since: 0, lastSeq: 10)
        #expect(Self.describe(state.hubEvent(Self.live(11))).isEmpty)
        #expect(Self.describe(state.hubEvent(Self.live(12))).isEmpty)
        #expect(Self.describe(state.hubEvent(Self.live(13))) == ["count slowConsumer", "close 1013 too slow to keep up; reconnect with since"])
    }

    @Test("a connection joins at most maxJoinedCircles circles")
    func joinLimit() {
        var state = Self.makeState { $0.maxJoinedCircles = 1 }
        _ = state.received(.success(Self.request(.join, "j1", "a")), now: Clock().now)
        #expect(Self.describe(state.received(.success(Self.request(.join, "j2", "b")), now: Clock().now))
            == ["error j2 bad_request: one connection may join at most 1 circles"])
    }

    // MARK: Timers and other input

    @Test("idle timeout and token expiry on the injected clock")
    func timers() {
        var clock = Clock()
        var state = Self.makeState(clock: clock, expires: clock.now.uptime + .seconds(150))
        clock.advance(60)
        #expect(Self.describe(state.timerFired(now: clock.now)).isEmpty)
        state.frameArrived(now: clock.now)
        clock.advance(60)
        #expect(Self.describe(state.timerFired(now: clock.now)).isEmpty)
        clock.advance(40)
        #expect(Self.describe(state.timerFired(now: clock.now)) == ["close 4001 token expired"])
        // Once closing, nothing closes twice.
        clock.advance(100)
        #expect(Self.describe(state.timerFired(now: clock.now)).isEmpty)
    }

    @Test("auth: a verified token for the same user moves the expiry; another user, or a refused token, leaves it")
    func authMovesTheExpiry() {
        var clock = Clock()
        var state = Self.makeState(clock: clock, expires: clock.now.uptime + .seconds(150))
        let user = state.settings.user
        let auth = CircleRequest.auth(token: "t", id: "a1")
        #expect(Self.describe(state.received(.success(auth), now: clock.now)) == ["verify a1"])
        let later = clock.now.uptime + .seconds(3600)
        let actions = Self.describe(state.tokenVerified(auth, .success((user, later)), now: clock.now))
        #expect(actions.count == 2 && actions[0].hasPrefix("expiry ") && actions[1] == "send ack a1", "\(actions)")
        #expect(state.expires == later)
        let other = CircleRequest.auth(token: "t", id: "a2")
        _ = state.received(.success(other), now: clock.now)
        #expect(Self.describe(state.tokenVerified(other, .success(("mallory", clock.now.uptime + .seconds(10))), now: clock.now))
            == ["error a2 user_mismatch: the token names another user than this connection's; reconnect to change users"])
        let refused = CircleRequest.auth(token: "t", id: "a3")
        _ = state.received(.success(refused), now: clock.now)
        #expect(Self.describe(state.tokenVerified(refused, .failure(TokenError(code: .tokenExpired, message: "expired")), now: clock.now))
            == ["error a3 token_expired: expired"])
        #expect(state.expires == later)
        // Past the first token's expiry: no 4001 (frames keep the idle timer quiet).
        clock.advance(60)
        state.frameArrived(now: clock.now)
        clock.advance(60)
        state.frameArrived(now: clock.now)
        clock.advance(60)
        #expect(Self.describe(state.timerFired(now: clock.now)).isEmpty)
        #expect(state.requestsInFlight == 0)
    }

    @Test("binary messages and ping requests")
    func binaryAndPing() {
        var state = Self.makeState()
        #expect(Self.describe(state.receivedBinary()) == ["send error - bad_request"])
        let actions = state.received(.success(Self.request(.ping, "p")), now: Clock().now)
        guard case .send(.ack(let id, nil, let time?, false))? = actions.first else {
            Issue.record("expected a ping ack, got \(Self.describe(actions))")
            return
        }
        #expect(id == "p" && time == 1_700_001_000_000)
    }

    @Test("shutting down closes with 1001 and stops delivering")
    func shutDown() {
        var state = Self.makeState()
        Self.joinConfirmed(&state, lastSeq: 0)
        #expect(Self.describe(state.shutDown()) == ["close 1001 server shutting down"])
        #expect(Self.describe(state.hubEvent(Self.live(1))).isEmpty)
    }

    @Test("the joined circles keep join order, update in place and remove by name")
    func joinedCircles() {
        var joined = JoinedCircles<Int>()
        #expect(joined["a"] == nil && joined.count == 0)
        joined["b"] = 1
        joined["a"] = 2
        joined["c"] = 3
        #expect(joined.circles == ["b", "a", "c"])
        joined["a"] = 20
        joined["a"]? += 1
        #expect(joined["a"] == 21 && joined.count == 3)
        #expect(joined.remove("b") == 1)
        #expect(joined.remove("b") == nil)
        joined["c"] = nil
        joined["zz"] = nil
        #expect(joined.map(\.circle) == ["a"] && joined.map(\.value) == [21])
    }
}

/// Records what the hub hands to a session; like a session, it flushes only what it wrote.
private final class EventSink: HubSubscriberSink, @unchecked Sendable {
    var events: [String] = []
    private var unflushed = false
    func receive(_ event: HubEvent) {
        self.unflushed = true
        switch event {
        case .post(_, let seq, _): self.events.append("post \(seq)")
        case .posts(_, let run): self.events.append("run \(run.firstSeq)-\(run.lastSeq)")
        default: self.events.append("other")
        }
    }
    func flushDeliveries() {
        guard self.unflushed else { return }
        self.unflushed = false
        self.events.append("flush")
    }
    func shutDown() {}
}

@Suite("Hub: one compression per setting")
struct HubCompressionTests {
    static func post(_ text: String) -> CirclePost {
        CirclePost(circle: "general", seq: 1, author: "ann", text: text, attachment: nil, time: 1, id: "c1")
    }

    @Test("a post is deflated once per setting, exactly as each connection would, and inflates back")
    func sharedDeflate() throws {
        var parameters = PerMessageDeflateParameters()
        parameters.serverNoContextTakeover = true
        parameters.serverMaxWindowBits = 12
        let connection = try PerMessageDeflate(parameters: parameters, isClient: false, compressionLevel: 6, minimumCompressedSize: 64)
        let setting = try #require(connection.sharedCompression)
        #expect(setting == .init(windowBits: 12, compressionLevel: 6, minimumCompressedSize: 64))

        let hub = Hub()
        let text = String(repeating: "circles all the way down; ", count: 40)
        let payload = hub.payload(for: .post(Self.post(text)), sharedCompression: [setting])
        let deflated = try #require(payload.deflated(for: setting))
        #expect(deflated.readableBytes < payload.text.readableBytes / 4)
        // The same bytes the connection's own compressor makes, every time (no context carried over).
        #expect(try connection.compress(payload.text, allocator: .init()) == deflated)
        #expect(try connection.compress(payload.text, allocator: .init()) == deflated)
        #expect(hub.payload(for: .post(Self.post(text)), sharedCompression: [setting]).deflated(for: setting) == deflated)

        // A client that agreed to these parameters inflates it to the JSON of the post.
        let client = try PerMessageDeflate(parameters: parameters, isClient: true, compressionLevel: 6, minimumCompressedSize: 64)
        var state = WebSocketProtocolState(role: .client, maxMessageSize: 1 << 20, deflate: client)
        var server = WebSocketProtocolState(role: .server, maxMessageSize: 1 << 20, deflate: nil)
        let frame = server.frame(opcode: .text, deflated: deflated)
        let received = try #require(frame)
        #expect(received.rsv1)
        guard case .deliver(.text(let json)) = state.receive(received, allocator: .init()) else {
            Issue.record("the shared deflated payload did not inflate")
            return
        }
        #expect(json == String(buffer: payload.text))
    }

    @Test("the hub's frames decode as one text frame with the payload, for every length encoding")
    func framedPayloads() throws {
        for length in [0, 1, 125, 126, 65_535, 65_536, 70_000] {
            let payload = ByteBuffer(string: String(repeating: "p", count: length))
            for compressed in [false, true] {
                let bytes = ServerFrame.text(payload, compressed: compressed, allocator: .init())
                let channel = EmbeddedChannel(handler: ByteToMessageHandler(WebSocketFrameDecoder(maxFrameSize: 1 << 20)))
                try channel.writeInbound(bytes)
                let frame = try #require(try channel.readInbound(as: WebSocketFrame.self))
                #expect(frame.fin && frame.opcode == .text && frame.rsv1 == compressed && frame.maskKey == nil)
                #expect(frame.data == payload, "length \(length)")
                #expect(try channel.readInbound(as: WebSocketFrame.self) == nil)
                _ = try channel.finish()
            }
        }
        // A payload the hub makes carries its frame, and each deflated copy its own.
        let hub = Hub()
        let setting = PerMessageDeflate.SharedCompression(windowBits: 15, compressionLevel: 6, minimumCompressedSize: 16)
        let made = hub.payload(for: .post(Self.post(String(repeating: "abc ", count: 50))), sharedCompression: [setting])
        #expect(made.framed == ServerFrame.text(made.text, compressed: false, allocator: .init()))
        let deflated = try #require(made.deflated(for: setting))
        #expect(made.framedDeflated(for: setting) == ServerFrame.text(deflated, compressed: true, allocator: .init()))
    }

    @Test("an echoed message as one frame: text and binary decode whole, at every length up to the limit; longer ones are left to the encoder")
    func framedMessages() throws {
        let limit = 4_096
        for length in [0, 1, 125, 126, 1_000, limit - 4] {
            let text = String(repeating: "é", count: length / 2) + (length % 2 == 1 ? "x" : "")
            let bytes = ByteBuffer(bytes: (0..<length).map { UInt8(truncatingIfNeeded: $0 &* 7) })
            for (message, opcode) in [(WebSocketMessage.text(text), WebSocketOpcode.text), (.binary(bytes), .binary)] {
                let framed = try #require(ServerFrame.frame(of: message, maxBytes: limit, allocator: .init()), "length \(length)")
                let channel = EmbeddedChannel(handler: ByteToMessageHandler(WebSocketFrameDecoder(maxFrameSize: 1 << 20)))
                try channel.writeInbound(framed)
                let frame = try #require(try channel.readInbound(as: WebSocketFrame.self))
                #expect(frame.fin && frame.opcode == opcode && !frame.rsv1 && frame.maskKey == nil)
                switch message {
                case .text(let text): #expect(String(buffer: frame.data) == text, "length \(length)")
                case .binary(let bytes): #expect(frame.data == bytes, "length \(length)")
                }
                #expect(try channel.readInbound(as: WebSocketFrame.self) == nil)
                _ = try channel.finish()
            }
        }
        // Header and payload over the limit: nil, the message goes through the frame encoder.
        #expect(ServerFrame.frame(of: .binary(ByteBuffer(repeating: 1, count: limit - 3)), maxBytes: limit, allocator: .init()) == nil)
        #expect(ServerFrame.frame(of: .binary(ByteBuffer(repeating: 1, count: limit - 4)), maxBytes: limit, allocator: .init())?.readableBytes == limit)
        #expect(ServerFrame.frame(of: .text(String(repeating: "é", count: limit / 2)), maxBytes: limit, allocator: .init()) == nil)
    }

    @Test("stored posts framed back to back: each decodes as its own text frame; buffers split at the size, a large post alone")
    func storedFrames() throws {
        let texts = ["a", String(repeating: "b", count: 200), String(repeating: "c", count: 3_000), "d", String(repeating: "e", count: 70_000), "f"]
        let messages = texts.enumerated().map { CircleServerMessage.post(
            CirclePost(circle: "general", seq: Int64($0.offset + 1), author: "ann", text: $0.element, attachment: nil, time: 1, id: "c\($0.offset)")
        ) }
        let buffers = ServerFrame.frames(of: messages, maxBytes: 2_048, allocator: .init())
        // "a" and the 200-byte post share a buffer; each larger one starts its own; "d" fits
        // nowhere after the 3,000-byte post; "f" follows the 70,000-byte one in a new buffer.
        #expect(buffers.count == 5)
        let channel = EmbeddedChannel(handler: ByteToMessageHandler(WebSocketFrameDecoder(maxFrameSize: 1 << 20)))
        for buffer in buffers { try channel.writeInbound(buffer) }
        for message in messages {
            let frame = try #require(try channel.readInbound(as: WebSocketFrame.self))
            #expect(frame.fin && frame.opcode == .text && !frame.rsv1 && frame.maskKey == nil)
            #expect(String(buffer: frame.data) == message.encodedJSON())
        }
        #expect(try channel.readInbound(as: WebSocketFrame.self) == nil)
        _ = try channel.finish()
        #expect(ServerFrame.frames(of: [CircleServerMessage](), maxBytes: 2_048, allocator: .init()).isEmpty)
    }

    @Test("small payloads and context-takeover connections get no shared copy")
    func noSharedCopy() throws {
        let hub = Hub()
        let setting = PerMessageDeflate.SharedCompression(windowBits: 15, compressionLevel: 6, minimumCompressedSize: 4096)
        #expect(hub.payload(for: .post(Self.post("short")), sharedCompression: [setting]).deflated.isEmpty)
        let takeover = try PerMessageDeflate(parameters: .init(), isClient: false, compressionLevel: 6, minimumCompressedSize: 64)
        #expect(takeover.sharedCompression == nil)
    }
}
