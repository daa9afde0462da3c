/// The announcing side of DNS-SD over multicast DNS as a value: probing for the instance and host
/// names (renaming on a conflict), announcing, answering queries per interface, re-announcing when
/// addresses change, and the goodbye. No I/O: each event returns the packets to send, and
/// ``nextDeadline`` says when ``tick(now:)`` is due. Time is a `Duration` since any origin the
/// owner picks; randomness comes from a seeded generator.
public struct MDNSResponder: Sendable {
    /// Timings and TTLs; the defaults follow RFC 6762.
    public struct Configuration: Sendable, Hashable {
        /// TTL of records naming the host (SRV, A, AAAA): 120 s (RFC 6762 §10).
        public var hostTTL: UInt32
        /// TTL of the other records (PTR, TXT): 75 minutes.
        public var otherTTL: UInt32
        public var probeCount: Int
        public var probeInterval: Duration
        /// Unsolicited announcements after probing and after an address change (at least 2).
        public var announceCount: Int
        /// The first gap between announcements; each next gap doubles.
        public var announceInterval: Duration

        public init(
            hostTTL: UInt32 = 120,
            otherTTL: UInt32 = 4500,
            probeCount: Int = 3,
            probeInterval: Duration = .milliseconds(250),
            announceCount: Int = 2,
            announceInterval: Duration = .seconds(1)
        ) {
            self.hostTTL = hostTTL
            self.otherTTL = otherTTL
            self.probeCount = probeCount
            self.probeInterval = probeInterval
            self.announceCount = announceCount
            self.announceInterval = announceInterval
        }
    }

    /// What the owner does.
    public enum Action: Sendable, Hashable {
        case send(DNSMessage, MDNSDestination)
        /// Probing found the names taken and picked new ones.
        case renamed(instance: String, host: String)
        /// Probing succeeded: the names are ours and announcements begin.
        case established(instance: String, host: String)
    }

    private enum State: Sendable, Hashable {
        case idle
        case probing(sent: Int, next: Duration)
        case running
        case stopped
    }

    public let configuration: Configuration
    /// The service as announced now (its name changes on a conflict).
    public private(set) var service: ServiceInstance
    /// The host label (`alice-circle` of `alice-circle.local`) as announced now.
    public private(set) var hostLabel: String
    private let baseName: String
    private let baseHostLabel: String
    private var attempt = 1
    private var state = State.idle
    private var interfaces: [UInt32: MDNSInterface] = [:]
    private var announcements: [UInt32: (sent: Int, next: Duration)] = [:]
    private var delayed: [(due: Duration, message: DNSMessage, destination: MDNSDestination)] = []
    private var random: SplitMix64

    /// - Parameters:
    ///   - service: the instance to announce.
    ///   - hostLabel: the first label of the host name its SRV record points to (`NAME.local`).
    ///   - seed: seeds the random probe and response delays.
    public init(service: ServiceInstance, hostLabel: String, configuration: Configuration = .init(), seed: UInt64) {
        self.service = service
        self.hostLabel = hostLabel
        self.baseName = service.name
        self.baseHostLabel = hostLabel
        self.configuration = configuration
        self.random = SplitMix64(seed: seed)
    }

    /// Whether probing has finished and the names are owned.
    public var isEstablished: Bool { self.state == .running }

    /// `NAME._circle._tcp.local.`
    public var instanceName: DNSName {
        (try? self.service.typeName().prepending(self.service.name)) ?? DNSName(unchecked: [])
    }

    /// `HOST.local.`
    public var hostName: DNSName { DNSName(unchecked: [Array(self.hostLabel.utf8)] + DNSName.local.labels) }

    /// When ``tick(now:)`` should be called next, or `nil` when nothing is scheduled.
    public var nextDeadline: Duration? {
        var deadlines = self.delayed.map(\.due)
        if case .probing(_, let next) = self.state { deadlines.append(next) }
        if self.state == .running {
            deadlines += self.announcements.values.filter { $0.sent < self.configuration.announceCount }.map(\.next)
        }
        return deadlines.min()
    }

    // MARK: Events

    /// Starts probing on `interfaces` after a random 0–250 ms (RFC 6762 §8.1).
    public mutating func start(interfaces: [MDNSInterface], now: Duration) -> [Action] {
        guard self.state == .idle else { return [] }
        self.interfaces = Dictionary(interfaces.map { ($0.index, $0) }, uniquingKeysWith: { first, _ in first })
        self.state = .probing(sent: 0, next: now + .milliseconds(Int.random(in: 0...250, using: &self.random)))
        return []
    }

    /// Sends what is due at `now`: probes, announcements, delayed answers.
    public mutating func tick(now: Duration) -> [Action] {
        var actions: [Action] = []
        let due = self.delayed.filter { $0.due <= now }
        self.delayed.removeAll { $0.due <= now }
        actions += due.map { .send($0.message, $0.destination) }
        switch self.state {
        case .probing(let sent, let next) where next <= now:
            if sent < self.configuration.probeCount {
                for interface in self.sortedInterfaces { actions.append(.send(self.probe(on: interface), .multicast(interfaceIndex: interface.index))) }
                self.state = .probing(sent: sent + 1, next: now + self.configuration.probeInterval)
            } else {
                self.state = .running
                self.announcements = Dictionary(uniqueKeysWithValues: self.interfaces.keys.map { ($0, (sent: 0, next: now)) })
                actions.append(.established(instance: self.service.name, host: self.hostLabel))
                actions += self.dueAnnouncements(now: now)
            }
        case .running:
            actions += self.dueAnnouncements(now: now)
        default:
            break
        }
        return actions
    }

    /// Handles a packet received on an interface.
    public mutating func receive(_ message: DNSMessage, from origin: MDNSOrigin, now: Duration) -> [Action] {
        switch self.state {
        case .idle, .stopped:
            return []
        case .probing:
            if self.conflicts(in: message) || self.losesTiebreak(to: message) {
                return self.rename(now: now)
            }
            return []
        case .running:
            if message.isResponse {
                if self.conflicts(in: message) {
                    // RFC 6762 §9: probe again; a real owner will defend and we rename then.
                    self.state = .probing(sent: 0, next: now)
                    self.announcements = [:]
                }
                return []
            }
            return self.answer(message, from: origin, now: now)
        }
    }

    /// The interfaces or their addresses changed: announce again where they did (RFC 6762 §8.4),
    /// and say goodbye for addresses that went away.
    public mutating func update(interfaces: [MDNSInterface], now: Duration) -> [Action] {
        let new = Dictionary(interfaces.map { ($0.index, $0) }, uniquingKeysWith: { first, _ in first })
        var actions: [Action] = []
        if self.state == .running {
            for (index, interface) in new where self.interfaces[index] != interface {
                if let old = self.interfaces[index] {
                    let gone = self.addressRecords(old).filter { record in !self.addressRecords(interface).contains { $0.sameData(as: record) } }
                    if !gone.isEmpty {
                        actions.append(.send(self.response(gone.map { $0.with(ttl: 0) }), .multicast(interfaceIndex: index)))
                    }
                }
                self.announcements[index] = (sent: 0, next: now)
            }
            for index in self.interfaces.keys where new[index] == nil { self.announcements[index] = nil }
        }
        self.interfaces = new
        if self.state == .running { actions += self.dueAnnouncements(now: now) }
        return actions
    }

    /// Stops: goodbye packets (every record with TTL 0) on every interface once established.
    public mutating func stop() -> [Action] {
        defer {
            self.state = .stopped
            self.delayed = []
        }
        guard self.state == .running else { return [] }
        return self.sortedInterfaces.map { interface in
            .send(self.response(self.records(on: interface).map { record in
                var goodbye = record.with(ttl: 0)
                goodbye.cacheFlush = false
                return goodbye
            }), .multicast(interfaceIndex: interface.index))
        }
    }

    // MARK: Records

    private var sortedInterfaces: [MDNSInterface] { self.interfaces.values.sorted { $0.index < $1.index } }

    private var typeName: DNSName { (try? self.service.typeName()) ?? DNSName(unchecked: []) }

    private var serviceRecords: [DNSRecord] {
        let config = self.configuration
        let txt = self.service.txt.map(\.bytes).filter { $0.count <= 255 }
        return [
            DNSRecord(name: .serviceTypeEnumeration, data: .ptr(self.typeName), ttl: config.otherTTL),
            DNSRecord(name: self.typeName, data: .ptr(self.instanceName), ttl: config.otherTTL),
            DNSRecord(
                name: self.instanceName,
                data: .srv(priority: 0, weight: 0, port: self.service.port, target: self.hostName),
                ttl: config.hostTTL,
                cacheFlush: true
            ),
            DNSRecord(name: self.instanceName, data: .txt(txt), ttl: config.otherTTL, cacheFlush: true),
        ]
    }

    private func addressRecords(_ interface: MDNSInterface) -> [DNSRecord] {
        interface.ipv4.map { DNSRecord(name: self.hostName, data: .a($0), ttl: self.configuration.hostTTL, cacheFlush: true) }
            + interface.ipv6.map { DNSRecord(name: self.hostName, data: .aaaa($0), ttl: self.configuration.hostTTL, cacheFlush: true) }
    }

    /// Every record as answered on `interface` (address records are that interface's).
    func records(on interface: MDNSInterface) -> [DNSRecord] {
        self.serviceRecords + self.addressRecords(interface)
    }

    private func response(_ answers: [DNSRecord], additionals: [DNSRecord] = []) -> DNSMessage {
        DNSMessage(isResponse: true, isAuthoritative: true, answers: answers, additionals: additionals)
    }

    // MARK: Probing

    private func probe(on interface: MDNSInterface) -> DNSMessage {
        let proposed = self.records(on: interface).filter { $0.name == self.instanceName || $0.name == self.hostName }
        return DNSMessage(
            questions: [
                DNSQuestion(name: self.instanceName, type: .any, unicastResponse: true),
                DNSQuestion(name: self.hostName, type: .any, unicastResponse: true),
            ],
            authorities: proposed.map { record in
                var plain = record
                plain.cacheFlush = false
                return plain
            }
        )
    }

    /// Whether a response holds a record for one of our unique names with data that is not ours.
    private func conflicts(in message: DNSMessage) -> Bool {
        guard message.isResponse else { return false }
        let ours = self.interfaces.values.flatMap { self.records(on: $0) } + self.serviceRecords
        for record in message.answers + message.additionals where record.name == self.instanceName || record.name == self.hostName {
            guard record.type == .srv || record.type == .txt || record.type == .a || record.type == .aaaa else { continue }
            if record.ttl == 0 { continue }
            if !ours.contains(where: { $0.sameData(as: record) }) { return true }
        }
        return false
    }

    /// RFC 6762 §8.2: a simultaneous probe for one of our names whose proposed records sort later wins.
    private func losesTiebreak(to message: DNSMessage) -> Bool {
        guard !message.isResponse, !message.authorities.isEmpty else { return false }
        let ours = self.interfaces.values.flatMap { self.records(on: $0) }
        for name in [self.instanceName, self.hostName] where message.questions.contains(where: { $0.name == name }) {
            let theirs = message.authorities.filter { $0.name == name }
            guard !theirs.isEmpty else { continue }
            let mine = Array(Set(ours.filter { $0.name == name }.map { $0.with(ttl: 0) }))
            if theirs.allSatisfy({ record in mine.contains { $0.sameData(as: record) } }) { continue }  // our own probe, looped back
            if Self.compare(theirs, mine) > 0 { return true }
        }
        return false
    }

    /// Lexicographic comparison of two record sets: class, type, then data, each set sorted.
    static func compare(_ lhs: [DNSRecord], _ rhs: [DNSRecord]) -> Int {
        func key(_ record: DNSRecord) -> [UInt8] {
            [0, 1, UInt8(record.type.rawValue >> 8), UInt8(record.type.rawValue & 0xFF)] + record.canonicalData
        }
        let left = lhs.map(key).sorted { $0.lexicographicallePrecedes($1) }
        let right = rhs.map(key).sorted { $0.lexicographicallePrecedes($1) }
        for (a, b) in zip(left, right) where a != b { return a.lexicographicallePrecedes(b) ? -1 : 1 }
        return left.count == right.count ? 0 : (left.count < right.count ? -1 : 1)
    }

    private mutating func rename(now: Duration) -> [Action] {
        self.attempt += 1
        self.service.name = "\(self.baseName) (\(self.attempt))"
        self.hostLabel = "\(self.baseHostLabel)-\(self.attempt)"
        // RFC 6762 §8.1: after a conflict, probe again; a short wait lets the other host settle.
        self.state = .probing(sent: 0, next: now + .milliseconds(250))
        return [.renamed(instance: self.service.name, host: self.hostLabel)]
    }

    // MARK: Announcing and answering

    private mutating func dueAnnouncements(now: Duration) -> [Action] {
        var actions: [Action] = []
        for interface in self.sortedInterfaces {
            guard let entry = self.announcements[interface.index], entry.sent < self.configuration.announceCount, entry.next <= now else { continue }
            actions.append(.send(self.response(self.records(on: interface)), .multicast(interfaceIndex: interface.index)))
            let gap = self.configuration.announceInterval * (1 << min(entry.sent, 10))
            self.announcements[interface.index] = (sent: entry.sent + 1, next: now + gap)
        }
        return actions
    }

    private mutating func answer(_ query: DNSMessage, from origin: MDNSOrigin, now: Duration) -> [Action] {
        guard let interface = self.interfaces[origin.interfaceIndex] else { return [] }
        let records = self.records(on: interface)
        var answers: [DNSRecord] = []
        for question in query.questions {
            for record in records where record.name == question.name && (question.type == .any || question.type == record.type) {
                if !answers.contains(where: { $0.sameData(as: record) }) { answers.append(record) }
            }
        }
        // Known-answer suppression (RFC 6762 §7.1): the querier has it with at least half our TTL.
        answers.removeAll { ours in query.answers.contains { $0.sameData(as: ours) && $0.ttl >= ours.ttl / 2 } }
        guard !answers.isEmpty else { return [] }
        var additionals: [DNSRecord] = []
        func add(_ record: DNSRecord) {
            if !answers.contains(where: { $0.sameData(as: record) }) && !additionals.contains(where: { $0.sameData(as: record) }) {
                additionals.append(record)
            }
        }
        for answer in answers {
            switch answer.data {
            case .ptr(let target) where target == self.instanceName:
                for record in records where record.name == self.instanceName || record.name == self.hostName { add(record) }
            case .srv:
                for record in records where record.name == self.hostName { add(record) }
            default:
                break
            }
        }
        if origin.source.port != MDNS.port {
            // Legacy unicast (RFC 6762 §6.7): same id, the questions repeated, short TTLs, no cache-flush bits.
            func legacy(_ record: DNSRecord) -> DNSRecord {
                var copy = record.with(ttl: min(record.ttl, 10))
                copy.cacheFlush = false
                return copy
            }
            var reply = self.response(answers.map(legacy), additionals: additionals.map(legacy))
            reply.id = query.id
            reply.questions = query.questions.map { DNSQuestion(name: $0.name, type: $0.type) }
            return [.send(reply, .unicast(origin.source, interfaceIndex: origin.interfaceIndex))]
        }
        let reply = self.response(answers, additionals: additionals)
        let isProbe = !query.authorities.isEmpty
        if !isProbe, query.questions.allSatisfy(\.unicastResponse) {
            return [.send(reply, .unicast(origin.source, interfaceIndex: origin.interfaceIndex))]
        }
        // Multicast answers go to the group of the family the question came in on.
        if answers.allSatisfy(\.cacheFlush) {
            return [.send(reply, .multicast(interfaceIndex: interface.index, family: origin.source.family))]
        }
        // Shared records (PTR): wait 20–120 ms so several responders do not collide (RFC 6762 §6).
        let delay = Duration.milliseconds(Int.random(in: 20...120, using: &self.random))
        self.delayed.append((due: now + delay, message: reply, destination: .multicast(interfaceIndex: interface.index, family: origin.source.family)))
        return []
    }
}

extension Array where Element == UInt8 {
    fileprivate func lexicographicallePrecedes(_ other: [UInt8]) -> Bool { self.lexicographicallyPrecedes(other) }
}
