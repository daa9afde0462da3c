import CircleClient
import CircleTestSupport
import Foundation
import Testing

@testable import CircleDiscovery

/// Discovery across three hosts: network namespaces made by `scripts/discovery-test`, joined by
/// veth pairs, with IPv4 (169.254/16) and IPv6 link-local addresses only.
///
///     A (ca0 169.254.10.1 fe80::a:1) ── (cb0 169.254.10.2 fe80::b:1) B (cb1 169.254.20.2 fe80::b:2) ── (cc0 169.254.20.3 fe80::c:1) C
///
/// This test process runs inside B; peers run in A and C through `ip netns exec`. Multicast never
/// leaves these namespaces. Without `CIRCLE_DISCOVERY_NETNS` (set by the script) the suite is skipped.
@Suite(.serialized, .enabled(if: NamespaceEnvironment.current != nil, "needs the namespaces of scripts/discovery-test (root)"))
struct NamespaceTests {
    typealias Environment = NamespaceEnvironment

    static var environment: Environment? { NamespaceEnvironment.current }

    static var root: URL { URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent() }
    static var circle: String { root.appendingPathComponent(".build/debug/circle").path }
    static var helpers: String { root.appendingPathComponent("scripts/discovery_helpers.py").path }
    static let secret = "discovery-test-secret-0123456789abcdef"

    var env: Environment {
        get throws { try #require(Self.environment) }
    }

    /// `python helpers.py ARGS` inside namespace `ns`.
    func helper(in ns: String, _ arguments: [String]) throws -> Peer {
        try Peer(["ip", "netns", "exec", ns, try self.env.python, Self.helpers] + arguments)
    }

    /// `circle serve --announce` inside namespace `ns` (nil: this one, B).
    func server(in ns: String?, port: Int, name: String, data: String) throws -> Peer {
        let serve = [Self.circle, "serve", "--host", "::", "--port", "\(port)", "--data", data, "--jwt-secret", Self.secret, "--announce", name]
        return try Peer((ns.map { ["ip", "netns", "exec", $0] } ?? []) + serve)
    }

    static func temporaryDirectory() -> String {
        let path = NSTemporaryDirectory() + "circle-discovery-\(UUID().uuidString)"
        try? FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        return path
    }

    static func interface(_ name: String) throws -> NetworkInterface { try NetworkInterface.named(name) }

    // MARK: Datagrams

    @Test(arguments: [("fe80::a:1", "fe80::b:1"), ("169.254.10.1", "169.254.10.2")])
    func datagramsToALinkLocalPeerKeepTheirScope(peer: String, local: String) async throws {
        let env = try self.env
        let scoped = peer.contains(":")
        let echo = try self.helper(in: env.a, ["echo", scoped ? "\(peer)%ca0" : peer, "7001"])
        defer { echo.stop() }
        try await echo.waitForLine("ready")
        let cb0 = try Self.interface("cb0")
        let bindTo = try DatagramAddress(host: scoped ? "\(local)%cb0" : local, port: 0)
        try await DatagramSocket.withSocket(boundTo: bindTo) { socket in
            #expect(socket.localAddress.scopeID == (scoped ? cb0.index : nil))
            let target = try DatagramAddress(host: scoped ? "\(peer)%cb0" : peer, port: 7001)
            try await socket.send(Array("over the link".utf8), to: target)
            let reply = try #require(try await DatagramSocketTests.receive(1, from: socket, within: .seconds(15)).first)
            #expect(reply.bytes == Array("over the link".utf8))
            #expect(reply.source.ipAddress == peer)
            #expect(reply.interfaceIndex == cb0.index)
            if scoped {
                // The sender's scope is the interface it came in on, so a reply to it goes back out there.
                #expect(reply.source.scopeID == cb0.index)
                #expect(reply.source.host == "\(peer)%cb0")
            }
        }
        if scoped {
            // B's own address, but on the other interface: not available there.
            let failure: DatagramError? = await {
                do {
                    try await DatagramSocket.withSocket(boundTo: try DatagramAddress(host: "fe80::b:1%cb1", port: 0)) { _ in }
                    return nil
                } catch { return error as? DatagramError }
            }()
            #expect(failure?.code == .addressNotAvailable)
        }
    }

    @Test(arguments: [("239.7.7.7", "169.254.10.1", "169.254.20.3", "0.0.0.0"), ("ff02::7:7", "ca0", "cc0", "::")])
    func multicastMembershipIsPerInterface(group: String, fromA: String, fromC: String, wildcard: String) async throws {
        let env = try self.env
        let cb0 = try Self.interface("cb0")
        let cb1 = try Self.interface("cb1")
        let port = group.contains(":") ? 7003 : 7002
        try await DatagramSocket.withSocket(boundTo: try DatagramAddress(host: wildcard, port: port), configuration: .init(reuseAddress: true)) { socket in
            let groupAddress = try DatagramAddress(host: group, port: 0)
            try await socket.join(group: groupAddress, on: cb0)
            let arrivals = Task { try await DatagramSocketTests.receive(2, from: socket, within: .seconds(15)) }
            // C sends first: B has not joined on cb1, so that datagram is not delivered; A's is.
            try await self.helper(in: env.c, ["mcast-send", group, "\(port)", fromC, "from-c"]).waitForExit()
            try await self.helper(in: env.a, ["mcast-send", group, "\(port)", fromA, "from-a"]).waitForExit()
            // Joined on cb1 too: now C's arrive, marked with cb1.
            try await socket.join(group: groupAddress, on: cb1)
            try await self.helper(in: env.c, ["mcast-send", group, "\(port)", fromC, "from-c-again"]).waitForExit()
            let datagrams = try await arrivals.value
            #expect(datagrams.map { String(decoding: $0.bytes, as: UTF8.self) } == ["from-a", "from-c-again"])
            #expect(datagrams.map(\.interfaceIndex) == [cb0.index, cb1.index])
            #expect(datagrams.first?.destination?.ipAddress == groupAddress.ipAddress)
            try await socket.leave(group: groupAddress, on: cb1)
        }
    }

    // MARK: Announce and discover

    @Test func announcedInOneNamespaceDiscoveredInAnotherThenGoodbye() async throws {
        let env = try self.env
        let data = Self.temporaryDirectory()
        let server = try self.server(in: env.a, port: 18_181, name: "Lab Circle", data: data)
        defer { server.stop() }
        try await server.waitForStderr("announced")
        var found: DiscoveredService?
        var removed = false
        let deadline = ContinuousClock.now + .seconds(20)
        for try await event in ServiceBrowser.browse(type: CircleService.type, configuration: .init(interfaces: ["cb0"])) {
            switch event {
            case .found(let service) where service.name == "Lab Circle" && found == nil:
                found = service
                // SIGTERM: graceful shutdown says goodbye.
                server.terminate()
            case .removed(let name) where name == "Lab Circle":
                removed = true
            default:
                break
            }
            if removed || ContinuousClock.now > deadline { break }
        }
        let service = try #require(found)
        #expect(service.port == 18_181)
        #expect(service.path == "/v1/ws")
        #expect(!service.usesTLS)
        #expect(service.protocolVersion == "circle.v1")
        #expect(service.interfaces == ["cb0"])
        #expect(service.addresses.map(\.host) == ["169.254.10.1", "fe80::a:1%cb0"])
        #expect(service.webSocketURLs == ["ws://169.254.10.1:18181/v1/ws", "ws://[fe80::a:1%25cb0]:18181/v1/ws"])
        #expect(removed, "no goodbye seen after SIGTERM")
    }

    @Test func aNewAddressIsAnnounced() async throws {
        let env = try self.env
        let server = try self.server(in: env.a, port: 18_187, name: "Moving", data: Self.temporaryDirectory())
        defer { server.stop() }
        try await server.waitForStderr("announced")
        var before: DiscoveredService?
        var after: DiscoveredService?
        let deadline = ContinuousClock.now + .seconds(30)
        for try await event in ServiceBrowser.browse(type: CircleService.type, configuration: .init(interfaces: ["cb0"])) {
            switch event {
            case .found(let service) where service.name == "Moving":
                before = service
                // The server's host gets a second address on the link.
                try await Peer(["ip", "-n", env.a, "addr", "add", "169.254.10.9/24", "dev", "ca0", "scope", "link"]).waitForExit()
            case .changed(let service) where service.name == "Moving" && service.addresses.contains { $0.ipAddress == "169.254.10.9" }:
                after = service
            default:
                break
            }
            if after != nil || ContinuousClock.now > deadline { break }
        }
        try await Peer(["ip", "-n", env.a, "addr", "del", "169.254.10.9/24", "dev", "ca0"]).waitForExit()
        #expect(before?.addresses.map(\.ipAddress) == ["169.254.10.1", "fe80::a:1"])
        #expect(after?.addresses.map(\.ipAddress) == ["169.254.10.1", "169.254.10.9", "fe80::a:1"])
    }

    @Test func aTakenNameIsRenamed() async throws {
        let env = try self.env
        let first = try self.server(in: env.a, port: 18_182, name: "Twin", data: Self.temporaryDirectory())
        defer { first.stop() }
        try await first.waitForStderr("announced  \"Twin\"")
        let second = try self.server(in: env.a, port: 18_183, name: "Twin", data: Self.temporaryDirectory())
        defer { second.stop() }
        try await second.waitForStderr("announced  \"Twin (2)\"")
        let services = try await ServiceBrowser.discover(type: CircleService.type, timeout: .seconds(3), configuration: .init(interfaces: ["cb0"]))
        let ports = Dictionary(services.map { ($0.name, $0.port) }, uniquingKeysWith: { first, _ in first })
        #expect(ports["Twin"] == 18_182)
        #expect(ports["Twin (2)"] == 18_183)
    }

    @Test func answersOnEveryInterface() async throws {
        let env = try self.env
        // The server runs here in B, between A and C; each side sees B's address on its own link.
        let server = try self.server(in: nil, port: 18_184, name: "Middle", data: Self.temporaryDirectory())
        defer { server.stop() }
        try await server.waitForStderr("announced")
        let fromA = try Peer(["ip", "netns", "exec", env.a, Self.circle, "discover", "--json", "--timeout", "3s"])
        let fromC = try Peer(["ip", "netns", "exec", env.c, Self.circle, "discover", "--json", "--timeout", "3s"])
        try await fromA.waitForExit()
        try await fromC.waitForExit()
        let seenByA = try Self.servers(fromA.stdout)
        let seenByC = try Self.servers(fromC.stdout)
        #expect(seenByA.first { $0["name"] as? String == "Middle" }?["addresses"] as? [String] == ["169.254.10.2", "fe80::b:1%ca0"])
        #expect(seenByC.first { $0["name"] as? String == "Middle" }?["addresses"] as? [String] == ["169.254.20.2", "fe80::b:2%cc0"])
    }

    static func servers(_ json: String) throws -> [[String: Any]] {
        try #require(try JSONSerialization.jsonObject(with: Data(json.utf8)) as? [[String: Any]], "not a JSON array: \(json)")
    }

    // MARK: A client found by discovery

    @Test func clientChatsWithADiscoveredServer() async throws {
        let env = try self.env
        let data = Self.temporaryDirectory()
        let server = try self.server(in: env.a, port: 18_185, name: "Chat Here", data: data)
        defer { server.stop() }
        try await server.waitForStderr("announced")
        let found = try await ServiceBrowser.discover(type: CircleService.type, timeout: .seconds(10), firstOnly: true, configuration: .init(interfaces: ["cb0"]))
        let service = try #require(found.first { $0.name == "Chat Here" })
        let mint = try Peer([Self.circle, "token", "--user", "alice", "--jwt-secret", Self.secret])
        try await mint.waitForExit()
        let token = mint.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(!token.isEmpty)
        let create = try Peer([
            "ip", "netns", "exec", env.a, Self.circle, "circle", "create", "lab",
            "--server", "ws://127.0.0.1:18185/v1/ws", "--user", "alice", "--jwt-secret", Self.secret,
        ])
        try await create.waitForExit()
        #expect(create.stdout.contains("created"), "\(create.stderr)")

        // Every address the server announced works, the scoped link-local one included.
        for url in service.webSocketURLs {
            var configuration = try CircleClientConfiguration(discovered: service, tokenProvider: { token })
            configuration.servers = [url]
            configuration.postTimeout = .seconds(20)
            let client = try await CircleClient(configuration: configuration)
            await client.connect()
            let receipt = try await client.post("hello over \(url)", to: "lab")
            #expect(receipt.seq >= 1)
            let history = try await client.history(of: "lab")
            #expect(history.posts.contains { $0.text == "hello over \(url)" })
            await client.shutdown()
        }
        let configuration = try CircleClientConfiguration(discovered: service, tokenProvider: { token })
        #expect(configuration.servers == service.webSocketURLs)
    }

    // MARK: Interop with python-zeroconf

    @Test func zeroconfBrowsingSeesCircle() async throws {
        let env = try self.env
        let server = try self.server(in: env.a, port: 18_186, name: "Seen By Python", data: Self.temporaryDirectory())
        defer { server.stop() }
        try await server.waitForStderr("announced")
        // python-zeroconf runs here in B and browses.
        let browse = try Peer([try self.env.python, Self.helpers, "zc-browse", "_circle._tcp.local.", "15"])
        try await browse.waitForExit(within: .seconds(30))
        let lines = browse.stdout.split(separator: "\n").compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
        let entry = try #require(lines.first { $0["name"] as? String == "Seen By Python._circle._tcp.local." }, "zeroconf printed: \(browse.stdout) \(browse.stderr)")
        #expect(entry["port"] as? Int == 18_186)
        let txt = entry["txt"] as? [String: String]
        #expect(txt?["path"] == "/v1/ws")
        #expect(txt?["tls"] == "0")
        #expect(txt?["protocol"] == "circle.v1")
        #expect((entry["addresses"] as? [String])?.contains("169.254.10.1") == true)
    }

    @Test func circleDiscoverSeesAZeroconfService() async throws {
        let env = try self.env
        let register = try self.helper(in: env.c, ["zc-register", "Python Room", "_circle._tcp.local.", "19191", "path=/py/ws", "tls=1", "protocol=circle.v1"])
        defer { register.stop() }
        try await register.waitForLine("ready")
        let discover = try Peer([Self.circle, "discover", "--json", "--timeout", "4s", "--interface", "cb1"])
        try await discover.waitForExit()
        let servers = try Self.servers(discover.stdout)
        let room = try #require(servers.first { $0["name"] as? String == "Python Room" }, "discover printed: \(discover.stdout)")
        #expect(room["port"] as? Int == 19_191)
        #expect(room["path"] as? String == "/py/ws")
        #expect(room["tls"] as? Bool == true)
        #expect((room["urls"] as? [String])?.first == "wss://169.254.20.3:19191/py/ws")
        #expect((room["addresses"] as? [String])?.contains("fe80::c:1%cb1") == true)
        #expect(room["interfaces"] as? [String] == ["cb1"])
    }
}

extension NamespaceTests {
    // MARK: Interop with avahi (Debian's avahi-daemon in C)

    @Test(.enabled(if: NamespaceEnvironment.current?.avahiBus != nil, "avahi-daemon is not running in C"))
    func avahiBrowseSeesCircle() async throws {
        let env = try self.env
        let bus = try #require(env.avahiBus)
        let server = try self.server(in: nil, port: 18_188, name: "Seen By Avahi", data: Self.temporaryDirectory())
        defer { server.stop() }
        try await server.waitForStderr("announced")
        // -r resolve, -p parsable (spaces escaped as \032), -t end once the cache is dumped.
        var resolved: [String] = []
        var output = ""
        let deadline = ContinuousClock.now + .seconds(20)
        while resolved.isEmpty && ContinuousClock.now < deadline {
            let browse = try Peer(["DBUS_SYSTEM_BUS_ADDRESS=\(bus)", "ip", "netns", "exec", env.c, "avahi-browse", "-r", "-p", "-t", "_circle._tcp"])
            try await browse.waitForExit()
            output = browse.stdout + browse.stderr
            resolved = browse.stdout.split(separator: "\n").map(String.init).filter { $0.hasPrefix("=;cc0;IPv4;Seen\\032By\\032Avahi;") }
        }
        // =;interface;protocol;name;type;domain;host;address;port;txt
        let fields = try #require(resolved.first, "avahi-browse did not resolve the service: \(output)").split(separator: ";", maxSplits: 9).map(String.init)
        #expect(fields[7] == "169.254.20.2")
        #expect(fields[8] == "18188")
        #expect(fields[9].contains("\"path=/v1/ws\""))
        #expect(fields[9].contains("\"tls=0\""))
        #expect(fields[9].contains("\"protocol=circle.v1\""))
    }

    @Test(.enabled(if: NamespaceEnvironment.current?.avahiBus != nil, "avahi-daemon is not running in C"))
    func circleDiscoverSeesAnAvahiPublishedService() async throws {
        let env = try self.env
        let bus = try #require(env.avahiBus)
        let publish = try Peer([
            "DBUS_SYSTEM_BUS_ADDRESS=\(bus)", "ip", "netns", "exec", env.c,
            "avahi-publish", "-s", "Avahi Room", "_circle._tcp", "19292", "path=/av/ws", "tls=0", "protocol=circle.v1",
        ])
        defer { publish.stop() }
        try await publish.waitForOutput("Established")
        let discover = try Peer([Self.circle, "discover", "--json", "--timeout", "3s", "--interface", "cb1"])
        try await discover.waitForExit()
        let room = try #require(try Self.servers(discover.stdout).first { $0["name"] as? String == "Avahi Room" }, "discover printed: \(discover.stdout)")
        #expect(room["port"] as? Int == 19_292)
        #expect(room["host"] as? String == "avahi-c.local.")
        #expect(room["urls"] as? [String] == ["ws://169.254.20.3:19292/av/ws", "ws://[fe80::c:1%25cb1]:19292/av/ws"])
    }
}

extension NamespaceTests {
    // MARK: circle chat --discover, as a person uses it (tmux)

    @discardableResult
    static func tmux(_ socket: String, _ arguments: [String]) throws -> String {
        try Tmux(socket: socket).run(arguments)
    }

    static func waitForScreen(_ socket: String, within timeout: Duration = .seconds(30), _ predicate: (String) -> Bool) async throws -> String {
        let deadline = ContinuousClock.now + timeout
        var screen = ""
        while ContinuousClock.now < deadline {
            screen = try Tmux(socket: socket).screen("chat")
            if predicate(screen) { return screen }
            try await Task.sleep(for: .milliseconds(100))
        }
        throw DatagramError(.other, "the screen never matched; it shows:\n\(screen)")
    }

    @Test func chatDiscoverLetsThePersonPick() async throws {
        let env = try self.env
        // Two servers here in B; the chat runs in A and finds them over the A-B link.
        let one = try self.server(in: nil, port: 18_189, name: "Room One", data: Self.temporaryDirectory())
        defer { one.stop() }
        let two = try self.server(in: nil, port: 18_190, name: "Room Two", data: Self.temporaryDirectory())
        defer { two.stop() }
        try await one.waitForStderr("announced")
        try await two.waitForStderr("announced")
        let create = try Peer([Self.circle, "circle", "create", "lab", "--server", "ws://127.0.0.1:18190/v1/ws", "--user", "alice", "--jwt-secret", Self.secret])
        try await create.waitForExit()
        #expect(create.stdout.contains("created"), "\(create.stderr)")

        let socket = "circle-discovery-\(UUID().uuidString.prefix(8))"
        defer { _ = try? Self.tmux(socket, ["kill-server"]) }
        let chat = "ip netns exec \(env.a) \(Self.circle) chat lab --discover --pick --discover-timeout 3s --user alice --jwt-secret \(Self.secret)"
        try Self.tmux(socket, ["new-session", "-d", "-s", "chat", "-x", "120", "-y", "30", chat])
        let menu = try await Self.waitForScreen(socket) { $0.contains("Which server") }
        let line = try #require(menu.split(separator: "\n").first { $0.contains(". Room Two") }, "no Room Two in:\n\(menu)")
        let number = String(line.prefix { $0.isNumber })
        #expect(menu.contains(". Room One"))
        try Self.tmux(socket, ["send-keys", "-t", "chat", number, "Enter"])
        _ = try await Self.waitForScreen(socket) { $0.contains("lab — alice — connected") }
        try Self.tmux(socket, ["send-keys", "-t", "chat", "found you by name", "Enter"])
        _ = try await Self.waitForScreen(socket) { $0.contains("#1") && $0.contains("alice: found you by name") }

        // The post is on Room Two's server.
        let tail = try Peer([Self.circle, "tail", "lab", "--server", "ws://127.0.0.1:18190/v1/ws", "--user", "bob", "--jwt-secret", Self.secret, "--since", "0"])
        try await tail.waitForExit()
        #expect(tail.stdout.contains("found you by name"), "tail printed: \(tail.stdout) \(tail.stderr)")
    }
}

/// The namespaces made by scripts/discovery-test.
struct NamespaceEnvironment {
    var a: String
    var c: String
    var python: String
    /// The D-Bus address of the avahi-daemon running in C, when the script could start one.
    var avahiBus: String?

    static var current: NamespaceEnvironment? {
        let variables = ProcessInfo.processInfo.environment
        guard let names = variables["CIRCLE_DISCOVERY_NETNS"]?.split(separator: " ").map(String.init), names.count == 3,
            let python = variables["CIRCLE_DISCOVERY_PYTHON"]
        else { return nil }
        let bus = variables["CIRCLE_DISCOVERY_AVAHI_BUS"].flatMap { $0.isEmpty ? nil : $0 }
        return NamespaceEnvironment(a: names[0], c: names[2], python: python, avahiBus: bus)
    }
}

/// A helper process with its output collected; every wait is bounded.
final class Peer: @unchecked Sendable {
    // @unchecked: the buffers are guarded by `lock`; the process is driven by one test.
    private let process = Process()
    private let input = Pipe()
    private let lock = NSLock()
    private var out = Data()
    private var err = Data()
    let arguments: [String]

    init(_ arguments: [String]) throws {
        self.arguments = arguments
        let output = Pipe()
        let error = Pipe()
        self.process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        self.process.arguments = arguments
        self.process.standardInput = self.input
        self.process.standardOutput = output
        self.process.standardError = error
        output.fileHandleForReading.readabilityHandler = { [weak self] handle in
            let data = handle.availableData
            self?.lock.withLock { self?.out.append(data) }
        }
        error.fileHandleForReading.readabilityHandler = { [weak self] handle in
            let data = handle.availableData
            self?.lock.withLock { self?.err.append(data) }
        }
        try self.process.run()
    }

    deinit { self.stop() }

    var stdout: String { self.lock.withLock { String(decoding: self.out, as: UTF8.self) } }
    var stderr: String { self.lock.withLock { String(decoding: self.err, as: UTF8.self) } }

    func waitForLine(_ text: String, within timeout: Duration = .seconds(20)) async throws {
        try await self.wait(within: timeout, what: "\"\(text)\" on stdout") { self.stdout.contains(text) }
    }

    func waitForOutput(_ text: String, within timeout: Duration = .seconds(20)) async throws {
        try await self.wait(within: timeout, what: "\"\(text)\" on stdout or stderr") { self.stdout.contains(text) || self.stderr.contains(text) }
    }

    func waitForStderr(_ text: String, within timeout: Duration = .seconds(30)) async throws {
        try await self.wait(within: timeout, what: "\"\(text)\" on stderr") { self.stderr.contains(text) }
    }

    func waitForExit(within timeout: Duration = .seconds(30)) async throws {
        try await self.wait(within: timeout, what: "the exit") { !self.process.isRunning }
        // Let the pipe readers take the last bytes.
        try await Task.sleep(for: .milliseconds(100))
    }

    private func wait(within timeout: Duration, what: String, until done: () -> Bool) async throws {
        let deadline = ContinuousClock.now + timeout
        while !done() {
            if ContinuousClock.now > deadline {
                self.stop()
                throw DatagramError(.other, "\(self.arguments.joined(separator: " ")): no \(what) within \(timeout); stdout: \(self.stdout) stderr: \(self.stderr)")
            }
            try await Task.sleep(for: .milliseconds(20))
        }
    }

    /// SIGTERM (a graceful stop).
    func terminate() {
        if self.process.isRunning { kill(self.process.processIdentifier, SIGTERM) }
    }

    /// Ends the process: stdin closed, SIGTERM, then SIGKILL after two seconds.
    func stop() {
        try? self.input.fileHandleForWriting.close()
        guard self.process.isRunning else { return }
        kill(self.process.processIdentifier, SIGTERM)
        let deadline = Date().addingTimeInterval(2)
        while self.process.isRunning && Date() < deadline { usleep(20_000) }
        if self.process.isRunning { kill(self.process.processIdentifier, SIGKILL) }
        self.process.waitUntilExit()
    }
}
