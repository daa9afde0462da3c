import ArgumentParser
import CircleDiscovery
import Foundation
import Logging

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

extension ServeCommand {
    /// `--announce` needs a name DNS-SD can carry and an address the network can reach.
    func validateAnnounce() throws {
        if let name = self.announce, name.utf8.count > 63 {
            throw ValidationError("--announce: a service name must be 1 to 63 bytes of UTF-8 (\"\(name)\" has \(name.utf8.count))")
        }
        if self.announce != nil {
            let host = self.host.trimmingCharacters(in: CharacterSet(charactersIn: "[]"))
            if host == "localhost" || host.hasPrefix("127.") || host == "::1" {
                throw ValidationError("--announce needs a server reachable from the network: add --host 0.0.0.0 (IPv4) or --host :: (IPv4 and IPv6)")
            }
        }
    }

    /// The DNS-SD announcer for `--announce [NAME]`, or `nil` without the option.
    ///
    /// A server bound to a loopback address cannot be reached from the network, so announcing it is
    /// refused; one bound to `0.0.0.0` announces its IPv4 addresses only, one bound to `::` both.
    func makeAnnouncer(port: Int, tls: Bool, logger: Logger) throws -> ServiceAnnouncer? {
        guard let requested = self.announce else { return nil }
        let host = self.host.trimmingCharacters(in: CharacterSet(charactersIn: "[]"))
        let name = requested.isEmpty ? Self.defaultAnnounceName() : requested
        let instance: ServiceInstance
        do {
            instance = try CircleService.instance(name: name, port: port, tls: tls)
        } catch {
            throw ValidationError("--announce: \(error)")
        }
        let families: Set<DatagramAddress.Family> = host.contains(":") ? [.ipv4, .ipv6] : [.ipv4]
        return ServiceAnnouncer(
            service: instance,
            configuration: MDNSConfiguration(families: families),
            logger: logger,
            onEstablished: { announced in
                Console.err("  announced  \"\(announced)\" as _circle._tcp on the local network\n")
            }
        )
    }

    /// `Circle on HOSTNAME`.
    static func defaultAnnounceName() -> String {
        var buffer = [CChar](repeating: 0, count: 256)
        guard gethostname(&buffer, buffer.count) == 0 else { return "Circle" }
        let name = String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        let short = name.split(separator: ".").first.map(String.init) ?? name
        var text = "Circle on \(short)"
        while text.utf8.count > 63 { text.removeLast() }
        return text
    }
}
