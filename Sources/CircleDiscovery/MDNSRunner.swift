import Logging
import NIOCore

/// Which interfaces and port multicast DNS runs on.
public struct MDNSConfiguration: Sendable {
    /// Interface names to use; `nil` for every multicast-capable interface that is up.
    public var interfaces: Set<String>?
    /// Also use the loopback interface (Linux's `lo` only carries multicast once it has the
    /// MULTICAST flag: `ip link set lo multicast on`).
    public var includeLoopback: Bool
    /// How often the interface list is read again to notice new or changed addresses.
    public var interfacePollInterval: Duration
    /// The UDP port: 5353 for real multicast DNS; another one keeps a test away from the host's responder.
    public var port: Int
    /// The address families used (and, when announcing, the addresses announced): a server bound to
    /// `0.0.0.0` announces IPv4 only.
    public var families: Set<DatagramAddress.Family>

    public init(
        interfaces: Set<String>? = nil,
        includeLoopback: Bool = false,
        interfacePollInterval: Duration = .seconds(5),
        port: Int = MDNS.port,
        families: Set<DatagramAddress.Family> = [.ipv4, .ipv6]
    ) {
        self.families = families
        self.interfaces = interfaces
        self.includeLoopback = includeLoopback
        self.interfacePollInterval = interfacePollInterval
        self.port = port
    }
}

/// What ``MDNSRunner`` needs of a state machine: the responder and the browser both fit.
protocol MDNSMachine: Sendable {
    associatedtype Output: Sendable
    var nextDeadline: Duration? { get }
    mutating func start(interfaces: [MDNSInterface], now: Duration) -> [Output]
    mutating func update(interfaces: [MDNSInterface], now: Duration) -> [Output]
    mutating func receive(_ message: DNSMessage, from origin: MDNSOrigin, now: Duration) -> [Output]
    mutating func tick(now: Duration) -> [Output]
    mutating func finish() -> [Output]
    static func packet(_ output: Output) -> (DNSMessage, MDNSDestination)?
}

extension MDNSResponder: MDNSMachine {
    mutating func finish() -> [Action] { self.stop() }
    static func packet(_ output: Action) -> (DNSMessage, MDNSDestination)? {
        if case .send(let message, let destination) = output { return (message, destination) }
        return nil
    }
}

extension MDNSBrowser: MDNSMachine {
    mutating func finish() -> [Action] { [] }
    static func packet(_ output: Action) -> (DNSMessage, MDNSDestination)? {
        if case .send(let message, let destination) = output { return (message, destination) }
        return nil
    }
}

/// The thin I/O owner of an mDNS state machine: one socket per interface and family, bound to the
/// mDNS port and joined to the group on that interface only; packets in go to the machine, the
/// machine's packets go out; timers and the interface list drive it.
actor MDNSRunner<Machine: MDNSMachine> {
    private var machine: Machine
    private let configuration: MDNSConfiguration
    private let logger: Logger
    private let onOutput: @Sendable (Machine.Output) -> Void
    private let origin = ContinuousClock.now
    private var sockets: [UInt32: [DatagramAddress.Family: DatagramSocket]] = [:]
    private var socketTasks: [UInt32: Task<Void, Never>] = [:]
    private var interfaces: [MDNSInterface] = []
    private var timer: (deadline: Duration, id: Int, task: Task<Void, Never>)?
    private var timerCount = 0
    private var stopped = false
    private var pollTask: Task<Void, Never>?

    init(machine: Machine, configuration: MDNSConfiguration, logger: Logger, onOutput: @escaping @Sendable (Machine.Output) -> Void) {
        self.machine = machine
        self.configuration = configuration
        self.logger = logger
        self.onOutput = onOutput
    }

    private var now: Duration { ContinuousClock.now - self.origin }

    /// Runs until the task is cancelled or ``stop()`` is called; then performs the machine's
    /// last words (goodbyes) and closes the sockets.
    func run() async throws {
        let interfaces = try self.currentInterfaces()
        guard !interfaces.isEmpty else {
            throw DatagramError(
                .multicastUnsupported,
                self.configuration.interfaces.map { "none of the interfaces \($0.sorted().joined(separator: ", ")) is up with multicast" }
                    ?? "no network interface is up with multicast"
            )
        }
        var opened: [MDNSInterface] = []
        for interface in interfaces where await self.open(interface) { opened.append(interface) }
        guard !opened.isEmpty else {
            throw DatagramError(.multicastUnsupported, "could not join the mDNS group on any interface (\(interfaces.map(\.name).joined(separator: ", ")))")
        }
        self.interfaces = opened
        await self.perform(self.machine.start(interfaces: opened, now: self.now))
        let interval = self.configuration.interfacePollInterval
        let poll = Task {
            while !Task.isCancelled {
                try? await Task.sleep(for: interval)
                guard !Task.isCancelled else { break }
                await self.pollInterfaces()
            }
        }
        self.pollTask = poll
        if self.stopped { poll.cancel() }
        await withTaskCancellationHandler {
            await poll.value
        } onCancel: {
            poll.cancel()
        }
        await self.shutdown()
    }

    /// Asks ``run()`` to finish: it sends the machine's last words at once.
    func stop() {
        self.stopped = true
        self.pollTask?.cancel()
        self.timer?.task.cancel()
        self.timer = nil
    }

    private func shutdown() async {
        await self.perform(self.machine.finish(), final: true)
        self.timer?.task.cancel()
        for task in self.socketTasks.values { task.cancel() }
        for task in self.socketTasks.values { await task.value }
        self.socketTasks = [:]
        self.sockets = [:]
    }

    private func currentInterfaces() throws -> [MDNSInterface] {
        let families = self.configuration.families
        return try MDNSInterface.current(includeLoopback: self.configuration.includeLoopback, only: self.configuration.interfaces).compactMap { interface in
            var interface = interface
            if !families.contains(.ipv4) { interface.ipv4 = [] }
            if !families.contains(.ipv6) { interface.ipv6 = [] }
            return interface.ipv4.isEmpty && interface.ipv6.isEmpty ? nil : interface
        }
    }

    private func pollInterfaces() async {
        guard let current = try? self.currentInterfaces(), current != self.interfaces else { return }
        let known = Set(self.interfaces.map(\.index))
        var usable: [MDNSInterface] = []
        for interface in current {
            let old = self.interfaces.first { $0.index == interface.index }
            let familiesChanged = old.map { ($0.ipv4.isEmpty != interface.ipv4.isEmpty) || ($0.ipv6.isEmpty != interface.ipv6.isEmpty) } ?? true
            if familiesChanged {
                self.close(interface.index)
                if await self.open(interface) { usable.append(interface) }
            } else if known.contains(interface.index) {
                usable.append(interface)
            }
        }
        for index in known where !current.contains(where: { $0.index == index }) { self.close(index) }
        self.logger.debug("interfaces changed", metadata: ["circle.mdns.interfaces": "\(usable.map(\.name))"])
        self.interfaces = usable
        await self.perform(self.machine.update(interfaces: usable, now: self.now))
    }

    // MARK: Sockets

    /// Opens the sockets of one interface; `false` when neither family could join the group.
    private func open(_ interface: MDNSInterface) async -> Bool {
        var families: [DatagramAddress.Family] = []
        if !interface.ipv4.isEmpty { families.append(.ipv4) }
        if !interface.ipv6.isEmpty { families.append(.ipv6) }
        guard let network = try? NetworkInterface.named(interface.name) else { return false }
        let port = self.configuration.port
        let logger = self.logger
        let (readiness, continuation) = AsyncStream<Bool>.makeStream()
        let task = Task {
            await withTaskGroup(of: Void.self) { group in
                for family in families {
                    group.addTask {
                        do {
                            let wildcard = try DatagramAddress(host: family == .ipv4 ? "0.0.0.0" : "::", port: port)
                            let socketConfiguration = DatagramSocketConfiguration(
                                reuseAddress: true,
                                reusePort: true,
                                multicastInterface: network,
                                multicastHops: 255,
                                multicastLoopback: true
                            )
                            try await DatagramSocket.withSocket(boundTo: wildcard, configuration: socketConfiguration) { socket in
                                let group = try DatagramAddress(bytes: family == .ipv4 ? MDNS.ipv4Group : MDNS.ipv6Group, port: 0)
                                try await socket.join(group: group, on: network)
                                await self.register(socket, family: family, interface: interface.index)
                                continuation.yield(true)
                                for try await datagram in socket.inbound {
                                    await self.received(datagram, on: interface.index)
                                }
                            }
                        } catch {
                            if !Task.isCancelled {
                                logger.warning(
                                    "mDNS unavailable on an interface",
                                    metadata: ["circle.mdns.interface": "\(interface.name)", "circle.mdns.family": "\(family)", "circle.mdns.error": "\(error)"]
                                )
                            }
                            continuation.yield(false)
                        }
                    }
                }
            }
            continuation.finish()
        }
        self.socketTasks[interface.index] = task
        var ready = false
        var answers = 0
        for await success in readiness {
            ready = ready || success
            answers += 1
            if answers == families.count { break }
        }
        if !ready { self.close(interface.index) }
        return ready
    }

    private func register(_ socket: DatagramSocket, family: DatagramAddress.Family, interface: UInt32) {
        self.sockets[interface, default: [:]][family] = socket
    }

    private func close(_ index: UInt32) {
        self.socketTasks[index]?.cancel()
        self.socketTasks[index] = nil
        self.sockets[index] = nil
    }

    private func received(_ datagram: Datagram, on index: UInt32) async {
        guard !self.stopped else { return }
        let arrival = datagram.interfaceIndex ?? index
        if datagram.destination?.isMulticast ?? true {
            // Every socket listens on the wildcard address and may see the group's traffic of
            // other interfaces too: each keeps what arrived on its own interface.
            guard arrival == index else { return }
        } else {
            // Unicast to port 5353 goes to any one of the sockets sharing it: take it as coming
            // from the interface it arrived on, if that is one of ours.
            guard self.sockets[arrival] != nil else { return }
        }
        let message: DNSMessage
        do {
            message = try DNSMessage.decode(datagram.bytes)
        } catch {
            self.logger.debug("malformed mDNS packet dropped", metadata: ["circle.mdns.source": "\(datagram.source)", "circle.mdns.error": "\(error)"])
            return
        }
        await self.perform(self.machine.receive(message, from: MDNSOrigin(interfaceIndex: arrival, source: datagram.source), now: self.now))
    }

    // MARK: Output

    private func perform(_ outputs: [Machine.Output], final: Bool = false) async {
        for output in outputs {
            if let (message, destination) = Machine.packet(output) {
                await self.send(message, to: destination)
            } else {
                self.onOutput(output)
            }
        }
        if !final { self.scheduleTimer() }
    }

    private func send(_ message: DNSMessage, to destination: MDNSDestination) async {
        let bytes: [UInt8]
        do {
            bytes = try message.encode()
        } catch {
            self.logger.warning("mDNS message not sent", metadata: ["circle.mdns.error": "\(error)"])
            return
        }
        let port = self.configuration.port
        var targets: [(DatagramSocket, DatagramAddress)] = []
        switch destination {
        case .multicast(let index, let family):
            var sockets = self.sockets[index] ?? [:]
            if let family { sockets = sockets.filter { $0.key == family } }
            if let v4 = sockets[.ipv4], let group = try? DatagramAddress(bytes: MDNS.ipv4Group, port: port) { targets.append((v4, group)) }
            if let v6 = sockets[.ipv6], let group = try? DatagramAddress(bytes: MDNS.ipv6Group, port: port, scopeID: index) { targets.append((v6, group)) }
        case .unicast(let address, let index):
            if let socket = self.sockets[index]?[address.family] { targets.append((socket, address)) }
        }
        for (socket, address) in targets {
            do {
                try await socket.send(bytes, to: address)
            } catch {
                self.logger.debug("mDNS send failed", metadata: ["circle.mdns.destination": "\(address)", "circle.mdns.error": "\(error)"])
            }
        }
    }

    private func scheduleTimer() {
        guard !self.stopped, let deadline = self.machine.nextDeadline else { return }
        if let timer = self.timer, timer.deadline <= deadline { return }
        self.timer?.task.cancel()
        let delay = deadline - self.now
        self.timerCount += 1
        let id = self.timerCount
        self.timer = (
            deadline,
            id,
            Task {
                if delay > .zero { try? await Task.sleep(for: delay) }
                guard !Task.isCancelled else { return }
                await self.fire(id)
            }
        )
    }

    private func fire(_ id: Int) async {
        guard self.timer?.id == id else { return }
        self.timer = nil
        guard !self.stopped else { return }
        await self.perform(self.machine.tick(now: self.now))
    }
}
