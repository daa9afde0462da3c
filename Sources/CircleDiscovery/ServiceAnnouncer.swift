#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Logging
import NIOConcurrencyHelpers
import ServiceLifecycle

/// Announces a service with DNS-SD over multicast DNS for as long as it runs: probes for the name
/// (renaming `Name` to `Name (2)` on a conflict), announces on every multicast-capable interface
/// (IPv4 and IPv6), answers queries, announces again when addresses change, and says goodbye
/// (TTL 0) when it stops. A `Service` for swift-service-lifecycle: run it in the same
/// `ServiceGroup` as the server it announces.
///
/// ```swift
/// let announcer = ServiceAnnouncer(
///     service: ServiceInstance(name: "Alice's Circle", port: 8080, txt: [TXTEntry("path", "/v1/ws")]),
///     logger: logger
/// )
/// let group = ServiceGroup(configuration: .init(services: [.init(service: server), .init(service: announcer)], logger: logger))
/// ```
public final class ServiceAnnouncer: Service, Sendable {
    private let service: ServiceInstance
    private let hostLabel: String
    private let configuration: MDNSConfiguration
    private let responderConfiguration: MDNSResponder.Configuration
    private let logger: Logger
    private let state = NIOLockedValueBox<(instance: String, host: String, established: Bool)>(("", "", false))
    private let onEstablished: (@Sendable (String) -> Void)?

    /// - Parameters:
    ///   - service: what to announce.
    ///   - hostLabel: the host name label for the SRV target; by default the system's host name with
    ///     `-circle-PORT`, so that two servers on one machine do not share (and say goodbye for) one host name.
    ///   - configuration: interfaces and port.
    ///   - onEstablished: called with the instance name each time probing succeeds (after a rename too).
    public init(
        service: ServiceInstance,
        hostLabel: String? = nil,
        configuration: MDNSConfiguration = .init(),
        responder: MDNSResponder.Configuration = .init(),
        logger: Logger = Logger(label: "circle.discovery"),
        onEstablished: (@Sendable (String) -> Void)? = nil
    ) {
        self.service = service
        self.hostLabel = hostLabel ?? "\(Self.defaultHostLabel())-\(service.port)"
        self.configuration = configuration
        self.responderConfiguration = responder
        self.logger = logger
        self.onEstablished = onEstablished
        self.state.withLockedValue { $0 = (service.name, self.hostLabel, false) }
    }

    /// The instance name announced now (it changes after a conflict).
    public var instanceName: String { self.state.withLockedValue { $0.instance } }

    /// Whether probing has finished and the name is announced.
    public var isEstablished: Bool { self.state.withLockedValue { $0.established } }

    /// Runs until cancelled or until graceful shutdown; then sends the goodbye.
    /// - Throws: ``DatagramError`` when no interface can do multicast.
    public func run() async throws {
        let machine = MDNSResponder(
            service: self.service,
            hostLabel: self.hostLabel,
            configuration: self.responderConfiguration,
            seed: UInt64.random(in: 0...UInt64.max)
        )
        let state = self.state
        let logger = self.logger
        let onEstablished = self.onEstablished
        let runner = MDNSRunner(machine: machine, configuration: self.configuration, logger: self.logger) { action in
            switch action {
            case .renamed(let instance, let host):
                state.withLockedValue { $0 = (instance, host, false) }
                logger.notice("the service name was taken; trying another", metadata: ["circle.mdns.instance": "\(instance)", "circle.mdns.host": "\(host)"])
            case .established(let instance, let host):
                state.withLockedValue { $0 = (instance, host, true) }
                logger.info("announcing", metadata: ["circle.mdns.instance": "\(instance)", "circle.mdns.host": "\(host).local"])
                onEstablished?(instance)
            case .send:
                break
            }
        }
        do {
            try await withGracefulShutdownHandler {
                try await runner.run()
            } onGracefulShutdown: {
                Task { await runner.stop() }
            }
        } catch {
            self.logger.error("not announcing on the local network", metadata: ["circle.mdns.error": "\(error)"])
            throw error
        }
    }

    /// `HOSTNAME-circle`, the host name cut to a valid label (the port is added by `init`).
    static func defaultHostLabel() -> String {
        var buffer = [CChar](repeating: 0, count: 256)
        let name = gethostname(&buffer, buffer.count) == 0
            ? String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self) : "circle"
        let first = name.split(separator: ".").first.map(String.init) ?? "circle"
        let cleaned = String(first.map { $0.isLetter || $0.isNumber || $0 == "-" ? $0 : "-" }.prefix(50))
        return (cleaned.isEmpty ? "circle" : cleaned) + "-circle"
    }
}
