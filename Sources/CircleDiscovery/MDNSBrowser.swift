/// A service found on the network by browsing: its instance name, host, port, TXT data and addresses.
public struct DiscoveredService: Sendable, Hashable {
    /// The instance name (`Alice's Circle`).
    public var name: String
    /// The service type without `.local` (`_circle._tcp`).
    public var type: String
    /// The host its SRV record names (`alice-circle.local.`).
    public var hostName: String
    public var port: UInt16
    public var txt: [TXTEntry]
    /// The host's addresses with the service's port: IPv4 first, link-local IPv6 scoped to the
    /// interface the answer came in on (so connecting to it leaves by that interface).
    public var addresses: [DatagramAddress]
    /// The names of the interfaces it was seen on.
    public var interfaces: [String]

    public init(name: String, type: String, hostName: String, port: UInt16, txt: [TXTEntry], addresses: [DatagramAddress], interfaces: [String]) {
        self.name = name
        self.type = type
        self.hostName = hostName
        self.port = port
        self.txt = txt
        self.addresses = addresses
        self.interfaces = interfaces
    }
}

/// The browsing side of DNS-SD over multicast DNS as a value: it asks for the PTR records of a
/// service type on every interface (1 s, 2 s, 4 s … apart, with known answers), asks for the SRV,
/// TXT and address records of each instance it learns of, keeps a cache with TTLs, and reports
/// services found, changed and gone. No I/O; time is a `Duration` since an origin the owner picks.
public struct MDNSBrowser: Sendable {
    public struct Configuration: Sendable, Hashable {
        public var firstQueryInterval: Duration
        /// Queries go out at growing intervals up to this one.
        public var maximumQueryInterval: Duration

        public init(firstQueryInterval: Duration = .seconds(1), maximumQueryInterval: Duration = .seconds(60)) {
            self.firstQueryInterval = firstQueryInterval
            self.maximumQueryInterval = maximumQueryInterval
        }
    }

    public enum Event: Sendable, Hashable {
        case found(DiscoveredService)
        case changed(DiscoveredService)
        /// The instance said goodbye or its records expired.
        case removed(name: String)
    }

    public enum Action: Sendable, Hashable {
        case send(DNSMessage, MDNSDestination)
        case event(Event)
    }

    private struct CacheKey: Hashable {
        var name: DNSName
        var data: DNSRecordData
        var interfaceIndex: UInt32
    }

    private struct CacheEntry {
        var record: DNSRecord
        var received: Duration
        var expires: Duration
    }

    /// The most records the cache holds.
    public static let cacheLimit = 512
    /// The most known answers one query carries.
    public static let knownAnswerLimit = 40

    public let configuration: Configuration
    public let serviceType: String
    private let typeName: DNSName
    private var interfaces: [UInt32: MDNSInterface] = [:]
    private var cache: [CacheKey: CacheEntry] = [:]
    private var nextQuery: Duration?
    private var queryInterval: Duration
    private var resolveQueries: [DNSName: Duration] = [:]
    private var published: [DNSName: DiscoveredService] = [:]

    /// - Parameter serviceType: `_circle._tcp` and the like.
    public init(serviceType: String = "_circle._tcp", configuration: Configuration = .init()) throws {
        self.serviceType = serviceType
        self.typeName = try DNSName(dotted: serviceType + ".local")
        self.configuration = configuration
        self.queryInterval = configuration.firstQueryInterval
    }

    /// When ``tick(now:)`` should be called next.
    public var nextDeadline: Duration? {
        ([self.nextQuery].compactMap { $0 } + self.cache.values.map(\.expires)).min()
    }

    /// The services resolved so far.
    public var services: [DiscoveredService] { self.published.values.sorted { $0.name < $1.name } }

    /// Starts browsing: the first query goes out at once.
    public mutating func start(interfaces: [MDNSInterface], now: Duration) -> [Action] {
        self.interfaces = Dictionary(interfaces.map { ($0.index, $0) }, uniquingKeysWith: { first, _ in first })
        self.nextQuery = now
        return self.tick(now: now)
    }

    /// New interface set: a query goes out at once on the new ones.
    public mutating func update(interfaces: [MDNSInterface], now: Duration) -> [Action] {
        let new = Dictionary(interfaces.map { ($0.index, $0) }, uniquingKeysWith: { first, _ in first })
        let added = new.keys.filter { self.interfaces[$0] == nil }.sorted()
        self.interfaces = new
        self.cache = self.cache.filter { new[$0.key.interfaceIndex] != nil }
        var actions = added.map { Action.send(self.browseQuery(interfaceIndex: $0, now: now), .multicast(interfaceIndex: $0)) }
        actions += self.republish(now: now)
        return actions
    }

    /// Sends due queries and drops expired records.
    public mutating func tick(now: Duration) -> [Action] {
        var actions: [Action] = []
        let before = self.cache.count
        self.cache = self.cache.filter { $0.value.expires > now }
        if let next = self.nextQuery, next <= now {
            for index in self.interfaces.keys.sorted() {
                actions.append(.send(self.browseQuery(interfaceIndex: index, now: now), .multicast(interfaceIndex: index)))
            }
            self.nextQuery = now + self.queryInterval
            self.queryInterval = min(self.queryInterval * 2, self.configuration.maximumQueryInterval)
        }
        if self.cache.count != before { actions += self.republish(now: now) }
        return actions
    }

    /// Takes in a packet: responses fill the cache.
    public mutating func receive(_ message: DNSMessage, from origin: MDNSOrigin, now: Duration) -> [Action] {
        guard message.isResponse, self.interfaces[origin.interfaceIndex] != nil else { return [] }
        let records = message.answers + message.additionals
        // Address records are kept only for hosts that an SRV record of our type names.
        var targets = Set(self.cache.values.compactMap { entry -> DNSName? in
            if case .srv(_, _, _, let target) = entry.record.data { return target }
            return nil
        })
        for record in records where self.isRelevant(record) {
            if case .srv(_, _, _, let target) = record.data { targets.insert(target) }
        }
        for record in records {
            guard self.isRelevant(record) else { continue }
            if record.type == .a || record.type == .aaaa, !targets.contains(record.name) { continue }
            let key = CacheKey(name: record.name, data: record.data, interfaceIndex: origin.interfaceIndex)
            if record.cacheFlush {
                // RFC 6762 §10.2: other records of this name and type received over a second ago are stale.
                for (other, entry) in self.cache
                where other.name == record.name && other.data.type == record.type && other.interfaceIndex == origin.interfaceIndex
                    && other.data != record.data && entry.received + .seconds(1) < now
                {
                    self.cache[other]?.expires = now + .seconds(1)
                }
            }
            // A goodbye (TTL 0) lingers one second (RFC 6762 §10.1).
            let life: Duration = record.ttl == 0 ? .seconds(1) : .seconds(Int(record.ttl))
            if self.cache[key] == nil, self.cache.count >= Self.cacheLimit {
                // Bounded: a busy network cannot grow the cache without end; the oldest entry goes.
                if let oldest = self.cache.min(by: { $0.value.received < $1.value.received })?.key { self.cache[oldest] = nil }
            }
            self.cache[key] = CacheEntry(record: record, received: now, expires: now + life)
        }
        return self.republish(now: now)
    }

    private func isRelevant(_ record: DNSRecord) -> Bool {
        switch record.data {
        case .ptr: return record.name == self.typeName
        case .srv, .txt: return record.name.parent == self.typeName
        case .a, .aaaa: return true
        default: return false
        }
    }

    private func browseQuery(interfaceIndex: UInt32, now: Duration) -> DNSMessage {
        // Known answers: PTRs we hold with more than half their TTL left (RFC 6762 §7.1).
        let known = self.cache.filter { key, entry in
            key.interfaceIndex == interfaceIndex && entry.record.type == .ptr && entry.record.ttl > 0
                && (entry.expires - now) * 2 > .seconds(Int(entry.record.ttl))
        }.map { key, entry in
            entry.record.with(ttl: UInt32(max(0, (entry.expires - now).components.seconds)))
        }.sorted { $0.name.description < $1.name.description }
        // Bounded so the query fits one packet; the rest are simply answered again.
        return DNSMessage(questions: [DNSQuestion(name: self.typeName, type: .ptr)], answers: Array(known.prefix(Self.knownAnswerLimit)))
    }

    /// Rebuilds the resolved services from the cache; asks for what is missing.
    private mutating func republish(now: Duration) -> [Action] {
        var actions: [Action] = []
        var current: [DNSName: DiscoveredService] = [:]
        // A goodbye (TTL 0) keeps its record for its last second; expiry removes it.
        var instances: [DNSName: Set<UInt32>] = [:]
        for (key, entry) in self.cache where entry.expires > now {
            if case .ptr(let target) = entry.record.data, entry.record.name == self.typeName {
                instances[target, default: []].insert(key.interfaceIndex)
            }
        }
        var byName: [DNSName: [CacheKey: CacheEntry]] = [:]
        for (key, entry) in self.cache where entry.expires > now { byName[key.name, default: [:]][key] = entry }
        for (instance, ptrInterfaces) in instances.map({ (key: $0.key.description, name: $0.key, interfaces: $0.value) })
            .sorted(by: { $0.key < $1.key }).map({ ($0.name, $0.interfaces) })
        {
            let mine = byName[instance] ?? [:]
            let srv = mine.values.filter { $0.record.type == .srv }.max { $0.received < $1.received }
            let txt = mine.values.filter { $0.record.type == .txt }.max { $0.received < $1.received }
            guard let srv, case .srv(_, _, let port, let target) = srv.record.data else {
                actions += self.resolve(instance, types: [.srv, .txt], interfaces: ptrInterfaces, now: now)
                continue
            }
            var addresses: [DatagramAddress] = []
            var seenOn: [String] = []
            for (key, entry) in byName[target] ?? [:] {
                let interfaceName = self.interfaces[key.interfaceIndex]?.name
                switch entry.record.data {
                case .a(let bytes):
                    if let address = try? DatagramAddress(bytes: bytes, port: Int(port)), !addresses.contains(address) { addresses.append(address) }
                case .aaaa(let bytes):
                    let linkLocal = bytes[0] == 0xFE && bytes[1] & 0xC0 == 0x80
                    if let address = try? DatagramAddress(bytes: bytes, port: Int(port), scopeID: linkLocal ? key.interfaceIndex : 0),
                        !addresses.contains(address)
                    {
                        addresses.append(address)
                    }
                default:
                    continue
                }
                if let interfaceName, !seenOn.contains(interfaceName) { seenOn.append(interfaceName) }
            }
            guard !addresses.isEmpty else {
                actions += self.resolve(target, types: [.a, .aaaa], interfaces: ptrInterfaces.union(mine.keys.map(\.interfaceIndex)), now: now)
                continue
            }
            var txtEntries: [TXTEntry] = []
            if let txt, case .txt(let strings) = txt.record.data { txtEntries = strings.compactMap(TXTEntry.init(bytes:)) }
            current[instance] = DiscoveredService(
                name: instance.firstLabel,
                type: self.serviceType,
                hostName: target.description,
                port: port,
                txt: txtEntries,
                addresses: Self.ordered(addresses),
                interfaces: seenOn.sorted()
            )
        }
        for (name, service) in current.map({ (key: $0.key.description, name: $0.key, service: $0.value) })
            .sorted(by: { $0.key < $1.key }).map({ ($0.name, $0.service) })
        {
            if let old = self.published[name] {
                if old != service { actions.append(.event(.changed(service))) }
            } else {
                actions.append(.event(.found(service)))
            }
        }
        for (name, service) in self.published where current[name] == nil {
            actions.append(.event(.removed(name: service.name)))
        }
        self.published = current
        return actions
    }

    /// A question for `name`'s missing records, at most once a second per name.
    private mutating func resolve(_ name: DNSName, types: [DNSRecordType], interfaces: Set<UInt32>, now: Duration) -> [Action] {
        if let last = self.resolveQueries[name], last + .seconds(1) > now { return [] }
        self.resolveQueries[name] = now
        let query = DNSMessage(questions: types.map { DNSQuestion(name: name, type: $0) })
        return interfaces.sorted().map { .send(query, .multicast(interfaceIndex: $0)) }
    }

    /// IPv4 before IPv6, routable before link-local.
    static func ordered(_ addresses: [DatagramAddress]) -> [DatagramAddress] {
        addresses.sorted { lhs, rhs in
            func rank(_ address: DatagramAddress) -> Int {
                (address.family == .ipv4 ? 0 : 2) + (address.isLinkLocal ? 1 : 0)
            }
            if rank(lhs) != rank(rhs) { return rank(lhs) < rank(rhs) }
            // Numeric order; no names looked up (an interface name costs a system call).
            if lhs.bytes != rhs.bytes { return lhs.bytes.lexicographicallyPrecedes(rhs.bytes) }
            return (lhs.scopeID ?? 0) < (rhs.scopeID ?? 0)
        }
    }
}
