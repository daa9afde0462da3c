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
    /// The client configuration and the server's name for messages: from --server, or from discovery.
    func chatConfiguration() async throws -> (CircleClientConfiguration, String) {
        guard self.discovery.discover else {
            return (try self.client.clientConfiguration(postTimeout: .seconds(120)), self.client.server)
        }
        guard let timeout = parseDuration(self.discovery.discoverTimeout), timeout > .zero else {
            throw ValidationError("--discover-timeout takes a duration such as 3s")
        }
        let found: [DiscoveredService]
        do {
            found = try await discoverCircleServers(timeout: timeout, firstOnly: !self.discovery.pick)
        } catch let error as DatagramError {
            FileHandle.standardError.write(Data("circle chat: cannot look for servers: \(error.message)\n".utf8))
            throw ExitCode(2)
        }
        guard !found.isEmpty else {
            FileHandle.standardError.write(Data("circle chat: no Circle server answered on the local network within \(self.discovery.discoverTimeout)\n".utf8))
            throw ExitCode(2)
        }
        var chosen = found[0]
        if found.count > 1 {
            for (index, service) in found.enumerated() { print("\(index + 1). \(describe(service))") }
            while true {
                print("Which server (1–\(found.count))? ", terminator: "")
                fflush(nil)
                guard let line = readLine() else { throw ExitCode(1) }
                if let number = Int(line.trimmingCharacters(in: .whitespaces)), (1...found.count).contains(number) {
                    chosen = found[number - 1]
                    break
                }
            }
        }
        var options = self.client
        options.server = chosen.webSocketURLs.first ?? options.server
        let configuration = try CircleClientConfiguration(discovered: chosen, tokenProvider: try options.tokenProvider())
        var tuned = try options.clientConfiguration(postTimeout: .seconds(120))
        tuned.servers = configuration.servers
        return (tuned, "\"\(chosen.name)\" (\(chosen.webSocketURLs.first ?? chosen.hostName))")
    }
}
