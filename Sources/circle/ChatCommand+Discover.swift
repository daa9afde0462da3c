import ArgumentParser
import CircleClient
import CircleDiscovery
import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// `circle chat --discover`: find the server on the local network instead of giving --server.
struct ChatDiscoveryOptions: ParsableArguments {
    @Flag(help: "Find the server on the local network (DNS-SD) and join the first one that answers.")
    var discover = false

    @Flag(help: "With --discover: browse for --discover-timeout and choose among all servers found.")
    var pick = false

    @Option(help: "With --discover: how long to look, e.g. 3s.")
    var discoverTimeout: String = "3s"
}

extension ChatCommand {
    /// The client options to connect with: as given, or with --server replaced by a server found
    /// on the local network (the first one, or the one the person picks).
    func chatClientOptions() async throws -> ClientOptions {
        guard self.discovery.discover else { return self.client }
        guard let timeout = parseDuration(self.discovery.discoverTimeout), timeout > .zero else {
            throw ValidationError("--discover-timeout takes a duration such as 3s")
        }
        let found: [DiscoveredService]
        do {
            found = try await discoverCircleServers(timeout: timeout, firstOnly: !self.discovery.pick)
        } catch let error as DatagramError {
            Console.err("circle chat: cannot look for servers: \(error.message)\n")
            throw ExitCode(ExitStatus.unreachable)
        }
        guard !found.isEmpty else {
            Console.err("circle chat: no Circle server answered on the local network within \(self.discovery.discoverTimeout)\n")
            throw ExitCode(ExitStatus.unreachable)
        }
        var chosen = found[0]
        if found.count > 1 {
            for (index, service) in found.enumerated() { Console.out("\(index + 1). \(describe(service))\n") }
            while true {
                Console.out("Which server (1–\(found.count))? ")
                guard let line = readLine() else { throw ExitCode(ExitStatus.refused) }
                if let number = Int(line.trimmingCharacters(in: .whitespaces)), (1...found.count).contains(number) {
                    chosen = found[number - 1]
                    break
                }
            }
        }
        var options = self.client
        options.server = chosen.webSocketURLs.first ?? options.server
        return options
    }
}
