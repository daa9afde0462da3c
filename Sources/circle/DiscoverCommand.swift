import ArgumentParser
import CircleDiscovery
import Foundation
import Logging

struct DiscoverCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "discover",
        abstract: "Find Circle servers on the local network (DNS-SD over multicast DNS).",
        discussion: """
            Browses for _circle._tcp on every multicast-capable interface for --timeout, then lists \
            each server found with its addresses (link-local IPv6 ones with their interface, \
            fe80::1%eth0) and WebSocket URLs. Servers announce themselves with `circle serve --announce`.
            Exit status: 0 when at least one server was found, 1 when none was, 2 when the network \
            could not be used (no multicast-capable interface, port 5353 refused).

            Example: circle discover --timeout 2s --json
            """
    )

    @Option(help: "How long to browse, e.g. 3s or 500ms.")
    var timeout: String = "3s"

    @Flag(help: "Print JSON: an array of servers with name, host, port, tls, path, protocol, addresses, urls, interfaces, txt.")
    var json = false

    @Flag(help: "Stop at the first server found.")
    var first = false

    @Option(name: .customLong("interface"), help: ArgumentHelp("Browse on this interface only (repeatable).", valueName: "name"))
    var interfaces: [String] = []

    func run() async throws {
        guard let timeout = parseDuration(self.timeout), timeout > .zero else {
            throw ValidationError("--timeout takes a duration such as 3s or 500ms")
        }
        let services: [DiscoveredService]
        do {
            services = try await discoverCircleServers(timeout: timeout, firstOnly: self.first, interfaces: self.interfaces)
        } catch let error as DatagramError {
            Console.err("circle discover: \(error.message)\n")
            throw ExitCode(ExitStatus.unreachable)
        }
        if self.json {
            print(discoveredServersJSON(services))
        } else {
            for service in services { print(describe(service)) }
        }
        if services.isEmpty {
            Console.err("circle discover: no Circle server answered within \(self.timeout)\n")
            throw ExitCode(ExitStatus.refused)
        }
    }
}

/// Browses for Circle servers; shared by `discover` and `chat --discover`.
func discoverCircleServers(timeout: Duration, firstOnly: Bool, interfaces: [String] = []) async throws -> [DiscoveredService] {
    var logger = Logger(label: "circle.discovery")
    logger.logLevel = .error
    return try await ServiceBrowser.discover(
        type: CircleService.type,
        timeout: timeout,
        firstOnly: firstOnly,
        configuration: MDNSConfiguration(interfaces: interfaces.isEmpty ? nil : Set(interfaces)),
        logger: logger
    )
}

/// Two or three lines per server for people.
func describe(_ service: DiscoveredService) -> String {
    var lines = ["\(service.name)  \(service.webSocketURLs.first ?? "")"]
    lines.append(
        "  host \(service.hostName)  port \(service.port)  tls \(service.usesTLS ? "yes" : "no")  protocol \(service.protocolVersion ?? "?")  via \(service.interfaces.joined(separator: ", "))"
    )
    lines.append("  addresses \(service.addresses.map(\.host).joined(separator: "  "))")
    return lines.joined(separator: "\n")
}

/// The servers as a JSON array (stable key order).
func discoveredServersJSON(_ services: [DiscoveredService]) -> String {
    let objects: [[String: Any]] = services.map { service in
        var txt: [String: Any] = [:]
        for entry in service.txt where txt[entry.key] == nil { txt[entry.key] = entry.value ?? NSNull() }
        return [
            "name": service.name,
            "host": service.hostName,
            "port": Int(service.port),
            "tls": service.usesTLS,
            "path": service.path,
            "protocol": service.protocolVersion ?? NSNull(),
            "addresses": service.addresses.map(\.host),
            "urls": service.webSocketURLs,
            "interfaces": service.interfaces,
            "txt": txt,
        ]
    }
    guard let data = try? JSONSerialization.data(withJSONObject: objects, options: [.sortedKeys, .prettyPrinted, .withoutEscapingSlashes]) else {
        return "[]"
    }
    return String(decoding: data, as: UTF8.self)
}
