import Testing

@testable import CircleDiscovery

/// The responder and browser driven without I/O, with time as plain durations.
@Suite struct MDNSStateMachineTests {
    static let eth0 = MDNSInterface(index: 2, name: "eth0", ipv4: [[169, 254, 1, 1]], ipv6: [[0xFE, 0x80] + Array(repeating: 0, count: 13) + [0x0A]])
    static let eth1 = MDNSInterface(index: 3, name: "eth1", ipv4: [[169, 254, 2, 1]], ipv6: [])

    static func service() throws -> ServiceInstance {
        try CircleService.instance(name: "Team Chat", port: 8080, tls: false)
    }

    static func peer(_ port: Int = 5353) throws -> MDNSOrigin {
        MDNSOrigin(interfaceIndex: 2, source: try DatagramAddress(bytes: [169, 254, 1, 2], port: port))
    }

    static func sent(_ actions: [MDNSResponder.Action]) -> [(DNSMessage, MDNSDestination)] {
        actions.compactMap { if case .send(let message, let destination) = $0 { return (message, destination) } else { return nil } }
    }

    /// Runs the responder's timers until it is established; returns every action.
    static func establish(_ responder: inout MDNSResponder, from start: Duration = .zero) -> (actions: [MDNSResponder.Action], now: Duration) {
        var now = start
        var actions: [MDNSResponder.Action] = []
        while !responder.isEstablished, let next = responder.nextDeadline, now < start + .seconds(10) {
            now = max(now, next)
            actions += responder.tick(now: now)
        }
        return (actions, now)
    }

    /// Runs every timer until nothing is scheduled; returns the time reached.
    static func settle(_ responder: inout MDNSResponder, from start: Duration) -> Duration {
        var now = start
        while let next = responder.nextDeadline, next < start + .seconds(60) {
            now = max(now, next)
            _ = responder.tick(now: now)
        }
        return now
    }

    @Test func probesThreeTimesThenAnnouncesTwice() throws {
        var responder = MDNSResponder(service: try Self.service(), hostLabel: "box-circle", seed: 1)
        #expect(responder.start(interfaces: [Self.eth0, Self.eth1], now: .zero).isEmpty)
        let first = try #require(responder.nextDeadline)
        #expect(first <= .milliseconds(250))
        var now = first
        var probes: [(DNSMessage, MDNSDestination)] = []
        var times: [Duration] = []
        var announcements: [(Duration, DNSMessage, MDNSDestination)] = []
        while !responder.isEstablished {
            for (message, destination) in Self.sent(responder.tick(now: now)) {
                if message.isResponse {
                    announcements.append((now, message, destination))
                } else {
                    probes.append((message, destination))
                    times.append(now)
                }
            }
            if !responder.isEstablished { now = try #require(responder.nextDeadline) }
        }
        // Three rounds, one probe per interface each, 250 ms apart.
        #expect(probes.count == 6)
        #expect(Set(times).count == 3)
        #expect(times.last! - times.first! == .milliseconds(500))
        let probe = probes[0].0
        #expect(probe.questions.map(\.type) == [.any, .any])
        #expect(probe.questions.allSatisfy { $0.unicastResponse })
        #expect(probe.questions[0].name == responder.instanceName)
        #expect(probe.authorities.contains { $0.type == .srv })
        #expect(probe.authorities.contains { $0.data == .a([169, 254, 1, 1]) })

        // Announcements: at once, then 1 s later, then no more.
        #expect(announcements.count == 2)
        for _ in 0..<10 {
            guard let next = responder.nextDeadline else { break }
            now = max(now, next)
            for (message, destination) in Self.sent(responder.tick(now: now)) { announcements.append((now, message, destination)) }
        }
        #expect(announcements.count == 4)
        #expect(responder.nextDeadline == nil)
        let onEth0 = announcements.filter { $0.2 == .multicast(interfaceIndex: 2) }
        #expect(onEth0.count == 2)
        #expect(onEth0[1].0 - onEth0[0].0 == .seconds(1))
        let records = onEth0[0].1.answers
        let target = try DNSName(dotted: "box-circle.local")
        #expect(onEth0[0].1.isResponse && onEth0[0].1.isAuthoritative)
        #expect(records.contains { $0.data == .ptr(responder.instanceName) && !$0.cacheFlush })
        #expect(records.contains { $0.data == .srv(priority: 0, weight: 0, port: 8080, target: target) && $0.cacheFlush })
        #expect(records.contains { $0.data == .txt([Array("txtvers=1".utf8), Array("path=/v1/ws".utf8), Array("tls=0".utf8), Array("protocol=circle.v1".utf8)]) })
        #expect(records.contains { $0.data == .a([169, 254, 1, 1]) })
        // Each interface announces its own addresses only.
        #expect(!records.contains { $0.data == .a([169, 254, 2, 1]) })
        let onEth1 = announcements.first { $0.2 == .multicast(interfaceIndex: 3) }!.1.answers
        #expect(onEth1.contains { $0.data == .a([169, 254, 2, 1]) })
        #expect(!onEth1.contains { $0.type == .aaaa })
    }

    @Test func conflictWhileProbingRenames() throws {
        var responder = MDNSResponder(service: try Self.service(), hostLabel: "box-circle", seed: 2)
        _ = responder.start(interfaces: [Self.eth0], now: .zero)
        _ = responder.tick(now: .milliseconds(250))
        let taken = DNSMessage(
            isResponse: true,
            answers: [DNSRecord(name: responder.instanceName, data: .srv(priority: 0, weight: 0, port: 9999, target: try DNSName(dotted: "other.local")), ttl: 120)]
        )
        let actions = responder.receive(taken, from: try Self.peer(), now: .milliseconds(300))
        #expect(actions == [.renamed(instance: "Team Chat (2)", host: "box-circle-2")])
        let (rest, _) = Self.establish(&responder, from: .milliseconds(300))
        #expect(rest.contains(.established(instance: "Team Chat (2)", host: "box-circle-2")))
        #expect(responder.instanceName == (try DNSName(dotted: "_circle._tcp.local").prepending("Team Chat (2)")))
    }

    @Test func ownProbeLoopedBackIsNoConflict() throws {
        var responder = MDNSResponder(service: try Self.service(), hostLabel: "box-circle", seed: 3)
        _ = responder.start(interfaces: [Self.eth0], now: .zero)
        let probe = try #require(Self.sent(responder.tick(now: .milliseconds(250))).first?.0)
        #expect(responder.receive(probe, from: try Self.peer(), now: .milliseconds(260)).isEmpty)
        let (actions, _) = Self.establish(&responder, from: .milliseconds(260))
        #expect(actions.contains(.established(instance: "Team Chat", host: "box-circle")))
    }

    @Test func simultaneousProbeTiebreak() throws {
        var responder = MDNSResponder(service: try Self.service(), hostLabel: "box-circle", seed: 4)
        _ = responder.start(interfaces: [Self.eth0], now: .zero)
        let probe = try #require(Self.sent(responder.tick(now: .milliseconds(250))).first?.0)
        // The same probe but proposing a higher port: lexicographically later, it wins.
        var theirs = probe
        theirs.authorities = probe.authorities.map { record in
            guard case .srv(let priority, let weight, _, let target) = record.data else { return record }
            var copy = record
            copy.data = .srv(priority: priority, weight: weight, port: 9000, target: target)
            return copy
        }
        #expect(responder.receive(theirs, from: try Self.peer(), now: .milliseconds(300)).first == .renamed(instance: "Team Chat (2)", host: "box-circle-2"))
        // A lower port loses to us: no rename.
        var other = MDNSResponder(service: try Self.service(), hostLabel: "box-circle", seed: 4)
        _ = other.start(interfaces: [Self.eth0], now: .zero)
        var lower = probe
        lower.authorities = probe.authorities.map { record in
            guard case .srv(let priority, let weight, _, let target) = record.data else { return record }
            var copy = record
            copy.data = .srv(priority: priority, weight: weight, port: 80, target: target)
            return copy
        }
        #expect(other.receive(lower, from: try Self.peer(), now: .milliseconds(300)).isEmpty)
    }

    @Test func answersBrowseQueriesWithDelayAndKnownAnswerSuppression() throws {
        var responder = MDNSResponder(service: try Self.service(), hostLabel: "box-circle", seed: 5)
        _ = responder.start(interfaces: [Self.eth0, Self.eth1], now: .zero)
        let (_, established) = Self.establish(&responder)
        var now = Self.settle(&responder, from: established)
        let typeName = try DNSName(dotted: "_circle._tcp.local")
        let query = DNSMessage(questions: [DNSQuestion(name: typeName, type: .ptr)])
        now += .seconds(10)
        #expect(responder.receive(query, from: try Self.peer(), now: now).isEmpty)  // shared record: delayed
        let due = try #require(responder.nextDeadline)
        #expect(due - now >= .milliseconds(20) && due - now <= .milliseconds(120))
        let reply = try #require(Self.sent(responder.tick(now: due)).first { $0.0.answers.contains { $0.type == .ptr } })
        #expect(reply.1 == .multicast(interfaceIndex: 2, family: .ipv4))  // the family it was asked on
        #expect(reply.0.answers.map(\.type) == [.ptr])
        #expect(Set(reply.0.additionals.map(\.type)) == [.srv, .txt, .a, .aaaa])

        // The querier already knows the PTR with most of its TTL: no answer at all.
        let known = DNSMessage(
            questions: [DNSQuestion(name: typeName, type: .ptr)],
            answers: [DNSRecord(name: typeName, data: .ptr(responder.instanceName), ttl: 4000)]
        )
        #expect(responder.receive(known, from: try Self.peer(), now: due + .seconds(1)).isEmpty)
        #expect(Self.sent(responder.tick(now: due + .seconds(2))).isEmpty)
        // With under half the TTL left it is answered again.
        let stale = DNSMessage(questions: known.questions, answers: [known.answers[0].with(ttl: 100)])
        _ = responder.receive(stale, from: try Self.peer(), now: due + .seconds(3))
        #expect(!Self.sent(responder.tick(now: due + .seconds(4))).isEmpty)
    }

    @Test func unicastAndLegacyQueries() throws {
        var responder = MDNSResponder(service: try Self.service(), hostLabel: "box-circle", seed: 6)
        _ = responder.start(interfaces: [Self.eth0], now: .zero)
        let (_, established) = Self.establish(&responder)
        let now = Self.settle(&responder, from: established)
        let host = try DNSName(dotted: "box-circle.local")
        // QU: straight back to the asker.
        let qu = DNSMessage(questions: [DNSQuestion(name: host, type: .a, unicastResponse: true)])
        let quReply = Self.sent(responder.receive(qu, from: try Self.peer(), now: now + .seconds(1)))
        #expect(quReply.count == 1)
        #expect(quReply.first?.1 == .unicast(try Self.peer().source, interfaceIndex: 2))
        #expect(quReply.first?.0.answers.map(\.data) == [.a([169, 254, 1, 1])])
        // Legacy unicast from port 40000: id echoed, question repeated, TTL at most 10, no cache-flush.
        var legacy = DNSMessage(id: 4242, questions: [DNSQuestion(name: host, type: .aaaa)])
        legacy.id = 4242
        let legacyReply = try #require(Self.sent(responder.receive(legacy, from: try Self.peer(40000), now: now + .seconds(2))).first)
        #expect(legacyReply.0.id == 4242)
        #expect(legacyReply.0.questions == legacy.questions)
        #expect(legacyReply.0.answers.allSatisfy { $0.ttl <= 10 && !$0.cacheFlush })
        #expect(legacyReply.1 == .unicast(try Self.peer(40000).source, interfaceIndex: 2))
        // A question about someone else's name: silence.
        let other = DNSMessage(questions: [DNSQuestion(name: try DNSName(dotted: "other.local"), type: .a)])
        #expect(responder.receive(other, from: try Self.peer(), now: now + .seconds(3)).isEmpty)
    }

    @Test func addressChangeReannouncesAndSaysGoodbyeForTheOldAddress() throws {
        var responder = MDNSResponder(service: try Self.service(), hostLabel: "box-circle", seed: 7)
        _ = responder.start(interfaces: [Self.eth0], now: .zero)
        let (_, established) = Self.establish(&responder)
        var now = Self.settle(&responder, from: established)
        var moved = Self.eth0
        moved.ipv4 = [[169, 254, 9, 9]]
        now += .seconds(30)
        let sent = Self.sent(responder.update(interfaces: [moved], now: now))
        #expect(sent.count == 2)
        #expect(sent[0].0.answers == [DNSRecord(name: try DNSName(dotted: "box-circle.local"), data: .a([169, 254, 1, 1]), ttl: 0, cacheFlush: true)])
        #expect(sent[1].0.answers.contains { $0.data == .a([169, 254, 9, 9]) })
        #expect(responder.nextDeadline == now + .seconds(1))  // the second announcement
    }

    @Test func stopSaysGoodbyeOnEveryInterface() throws {
        var responder = MDNSResponder(service: try Self.service(), hostLabel: "box-circle", seed: 8)
        _ = responder.start(interfaces: [Self.eth0, Self.eth1], now: .zero)
        _ = Self.establish(&responder)
        let goodbyes = Self.sent(responder.stop())
        #expect(goodbyes.map(\.1) == [.multicast(interfaceIndex: 2), .multicast(interfaceIndex: 3)])
        #expect(goodbyes.allSatisfy { $0.0.answers.allSatisfy { $0.ttl == 0 } && $0.0.answers.contains { $0.type == .ptr } })
        #expect(responder.stop().isEmpty)
    }

    // MARK: Browser

    static func events(_ actions: [MDNSBrowser.Action]) -> [MDNSBrowser.Event] {
        actions.compactMap { if case .event(let event) = $0 { return event } else { return nil } }
    }

    static func queries(_ actions: [MDNSBrowser.Action]) -> [(DNSMessage, MDNSDestination)] {
        actions.compactMap { if case .send(let message, let destination) = $0 { return (message, destination) } else { return nil } }
    }

    @Test func browserQueriesWithGrowingIntervals() throws {
        var browser = try MDNSBrowser()
        let first = Self.queries(browser.start(interfaces: [Self.eth0, Self.eth1], now: .zero))
        #expect(first.map(\.1) == [.multicast(interfaceIndex: 2), .multicast(interfaceIndex: 3)])
        #expect(first[0].0.questions == [DNSQuestion(name: try DNSName(dotted: "_circle._tcp.local"), type: .ptr)])
        var times: [Duration] = []
        for _ in 0..<5 {
            let next = try #require(browser.nextDeadline)
            if !Self.queries(browser.tick(now: next)).isEmpty { times.append(next) }
        }
        #expect(times == [.seconds(1), .seconds(3), .seconds(7), .seconds(15), .seconds(31)])
    }

    @Test func browserResolvesTheResponderAnnouncementAndSeesTheGoodbye() throws {
        var responder = MDNSResponder(service: try Self.service(), hostLabel: "box-circle", seed: 9)
        _ = responder.start(interfaces: [Self.eth0], now: .zero)
        let (actions, now) = Self.establish(&responder)
        let announcement = try #require(Self.sent(actions).first { $0.0.isResponse }?.0)
        // Over the wire and back, as a browser on another host would get it.
        let received = try DNSMessage.decode(try announcement.encode())

        var browser = try MDNSBrowser()
        let local = MDNSInterface(index: 7, name: "veth-b", ipv4: [[169, 254, 1, 2]], ipv6: [])
        _ = browser.start(interfaces: [local], now: now)
        let origin = MDNSOrigin(interfaceIndex: 7, source: try DatagramAddress(bytes: [169, 254, 1, 1], port: 5353))
        let found = Self.events(browser.receive(received, from: origin, now: now + .milliseconds(5)))
        guard case .found(let service)? = found.first else {
            Issue.record("nothing found: \(found)")
            return
        }
        #expect(service.name == "Team Chat")
        #expect(service.port == 8080)
        #expect(service.path == "/v1/ws")
        #expect(!service.usesTLS)
        #expect(service.protocolVersion == "circle.v1")
        #expect(service.hostName == "box-circle.local.")
        #expect(service.interfaces == ["veth-b"])
        // IPv4 first; the link-local IPv6 address is scoped to the interface it came in on.
        #expect(service.addresses.map(\.ipAddress) == ["169.254.1.1", "fe80::a"])
        #expect(service.addresses[1].scopeID == 7)
        #expect(service.webSocketURLs.first == "ws://169.254.1.1:8080/v1/ws")

        // The same announcement again changes nothing.
        #expect(Self.events(browser.receive(received, from: origin, now: now + .seconds(1))).isEmpty)
        // Next query carries the PTR as a known answer.
        let next = try #require(browser.nextDeadline)
        let query = try #require(Self.queries(browser.tick(now: next)).first?.0)
        #expect(query.answers.contains { $0.type == .ptr })

        // Goodbye: gone one second later.
        let goodbye = try #require(Self.sent(responder.stop()).first?.0)
        #expect(Self.events(browser.receive(goodbye, from: origin, now: next + .seconds(1))).isEmpty)
        let removed = Self.events(browser.tick(now: next + .seconds(2) + .milliseconds(1)))
        #expect(removed == [.removed(name: "Team Chat")])
        #expect(browser.services.isEmpty)
    }

    @Test func browserAsksForWhatIsMissing() throws {
        var browser = try MDNSBrowser()
        _ = browser.start(interfaces: [Self.eth0], now: .zero)
        let typeName = try DNSName(dotted: "_circle._tcp.local")
        let instance = try typeName.prepending("Lone")
        let host = try DNSName(dotted: "lone.local")
        let ptrOnly = DNSMessage(isResponse: true, answers: [DNSRecord(name: typeName, data: .ptr(instance), ttl: 4500)])
        let ask = Self.queries(browser.receive(ptrOnly, from: try Self.peer(), now: .milliseconds(10)))
        #expect(ask.first?.0.questions.map(\.type) == [.srv, .txt])
        #expect(ask.first?.0.questions.first?.name == instance)
        let srv = DNSMessage(isResponse: true, answers: [DNSRecord(name: instance, data: .srv(priority: 0, weight: 0, port: 1, target: host), ttl: 120)])
        let askAddress = Self.queries(browser.receive(srv, from: try Self.peer(), now: .seconds(2)))
        #expect(askAddress.first?.0.questions.map(\.type) == [.a, .aaaa])
        let address = DNSMessage(isResponse: true, answers: [DNSRecord(name: host, data: .a([169, 254, 1, 9]), ttl: 120)])
        let events = Self.events(browser.receive(address, from: try Self.peer(), now: .seconds(3)))
        #expect(events.count == 1)
        if case .found(let service)? = events.first {
            #expect(service.txt.isEmpty)
            #expect(service.webSocketURLs == ["ws://169.254.1.9:1/v1/ws"])
        }
        // Queries never reach the cache.
        var other = try MDNSBrowser()
        _ = other.start(interfaces: [Self.eth0], now: .zero)
        var query = ptrOnly
        query.isResponse = false
        #expect(other.receive(query, from: try Self.peer(), now: .seconds(1)).isEmpty)
    }

    /// Packets decoded from mutated announcements, queries and probes, fed to a running responder
    /// and a browser: nothing traps, and the responder keeps its name unless a packet really
    /// claims it with other data.
    @Test func machinesSurviveFuzzedPackets() throws {
        var responder = MDNSResponder(service: try Self.service(), hostLabel: "box-circle", seed: 11)
        _ = responder.start(interfaces: [Self.eth0], now: .zero)
        let (actions, established) = Self.establish(&responder)
        var now = Self.settle(&responder, from: established)
        var seeds = Self.sent(actions).map { $0.0 }
        seeds.append(DNSMessage(questions: [DNSQuestion(name: try DNSName(dotted: "_circle._tcp.local"), type: .ptr)]))
        let encoded = try seeds.map { try $0.encode() }
        var browser = try MDNSBrowser()
        _ = browser.start(interfaces: [Self.eth0], now: now)
        var random = SplitMix64(seed: 99)
        var delivered = 0
        for round in 0..<2_000 {
            var bytes = encoded[round % encoded.count]
            for _ in 0..<Int.random(in: 1...4, using: &random) {
                bytes[Int.random(in: 12..<bytes.count, using: &random)] = UInt8.random(in: 0...255, using: &random)
            }
            guard let message = try? DNSMessage.decode(bytes) else { continue }
            delivered += 1
            now += .milliseconds(Int.random(in: 0...50, using: &random))
            let origin = MDNSOrigin(interfaceIndex: 2, source: try DatagramAddress(bytes: [169, 254, 1, 2], port: round % 7 == 0 ? 40000 : 5353))
            for action in responder.receive(message, from: origin, now: now) {
                if case .send(let reply, _) = action { #expect((try? reply.encode()) != nil) }
            }
            for action in browser.receive(message, from: origin, now: now) {
                if case .send(let query, _) = action { #expect((try? query.encode()) != nil) }
            }
            if round % 100 == 0 {
                _ = responder.tick(now: now)
                _ = browser.tick(now: now)
            }
        }
        #expect(delivered > 100)
        #expect(responder.service.name.hasPrefix("Team Chat"))
    }
}
