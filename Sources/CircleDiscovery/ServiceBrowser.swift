import Logging
import NIOConcurrencyHelpers

/// Browses for DNS-SD services over multicast DNS on every multicast-capable interface.
///
/// ```swift
/// for try await event in ServiceBrowser.browse(type: "_circle._tcp") {
///     if case .found(let service) = event { print(service.name, service.addresses) }
/// }
/// // or, all found within two seconds:
/// let services = try await ServiceBrowser.discover(type: "_circle._tcp", timeout: .seconds(2))
/// ```
public enum ServiceBrowser {
    /// Services as they are found, changed and removed, until the consumer stops iterating.
    /// - Throws: (from the sequence) ``DatagramError`` when no interface can do multicast.
    public static func browse(
        type: String = "_circle._tcp",
        configuration: MDNSConfiguration = .init(),
        browser: MDNSBrowser.Configuration = .init(),
        logger: Logger = Logger(label: "circle.discovery")
    ) -> AsyncThrowingStream<MDNSBrowser.Event, any Error> {
        let (stream, continuation) = AsyncThrowingStream<MDNSBrowser.Event, any Error>.makeStream(bufferingPolicy: .bufferingNewest(256))
        let task = Task {
            do {
                let machine = try MDNSBrowser(serviceType: type, configuration: browser)
                let runner = MDNSRunner(machine: machine, configuration: configuration, logger: logger) { action in
                    if case .event(let event) = action { continuation.yield(event) }
                }
                try await runner.run()
                continuation.finish()
            } catch {
                continuation.finish(throwing: error)
            }
        }
        continuation.onTermination = { _ in task.cancel() }
        return stream
    }

    /// The services found within `timeout`; with `firstOnly`, returns as soon as one is found.
    /// - Throws: ``DatagramError`` when no interface can do multicast.
    public static func discover(
        type: String = "_circle._tcp",
        timeout: Duration,
        firstOnly: Bool = false,
        configuration: MDNSConfiguration = .init(),
        logger: Logger = Logger(label: "circle.discovery")
    ) async throws -> [DiscoveredService] {
        let found = NIOLockedValueBox<[DiscoveredService]>([])
        let events = Self.browse(type: type, configuration: configuration, logger: logger)
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try? await Task.sleep(for: timeout) }
            group.addTask {
                for try await event in events {
                    let done = found.withLockedValue { services -> Bool in
                        switch event {
                        case .found(let service), .changed(let service):
                            if let index = services.firstIndex(where: { $0.name == service.name }) {
                                services[index] = service
                            } else {
                                services.append(service)
                            }
                        case .removed(let name):
                            services.removeAll { $0.name == name }
                        }
                        return firstOnly && !services.isEmpty
                    }
                    if done { return }
                }
            }
            // Whichever ends first (the timeout, the first service, or an error) ends the browse.
            try await group.next()
            group.cancelAll()
        }
        return found.withLockedValue { $0 }
    }
}
