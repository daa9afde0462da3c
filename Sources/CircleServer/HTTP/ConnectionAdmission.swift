import NIOConcurrencyHelpers
import NIOCore

/// Bounds the connections that have not (yet) become authenticated WebSockets: plain HTTP
/// connections, and upgrades still being checked. They cost a file descriptor each and prove
/// nothing about who holds them, so a few are allowed per peer address and a bounded number in
/// all; past either bound a new connection is closed at once, before anything is read from it.
/// An upgraded WebSocket leaves this count (it is bounded per user instead).
final class ConnectionAdmission: Sendable {
    struct Ticket: Sendable {
        fileprivate let address: String?
    }

    private struct State {
        var total = 0
        var perAddress: [String: Int] = [:]
    }

    private let maxTotal: Int
    private let maxPerAddress: Int
    private let state = NIOLockedValueBox(State())

    /// - Parameters:
    ///   - maxTotal: connections not yet upgraded, in all.
    ///   - maxPerAddress: the same per peer IP address; 0 for no per-address bound (behind a
    ///     reverse proxy every connection comes from the proxy's address). It is lowered to
    ///     ``perAddressBound(configured:total:)`` so that one address cannot take every place.
    init(maxTotal: Int, maxPerAddress: Int) {
        self.maxTotal = maxTotal
        self.maxPerAddress = Self.perAddressBound(configured: maxPerAddress, total: maxTotal)
    }

    /// The per-address bound in force: the configured one, but at most a quarter of the total
    /// (and at least 1), so that at any open-file limit three more addresses' worth of places
    /// stay open to others while one address holds all it may. 0 stays 0 (no bound).
    static func perAddressBound(configured: Int, total: Int) -> Int {
        guard configured > 0 else { return 0 }
        return min(configured, max(1, total / 4))
    }

    enum Refusal: String, Sendable {
        case total = "pending_connections"
        case perAddress = "pending_connections_per_address"
    }

    /// A ticket for a new connection from `address`, or why it is refused.
    func admit(address: SocketAddress?) -> Result<Ticket, ConnectionAdmissionRefused> {
        let key = self.maxPerAddress > 0 ? address?.ipAddress : nil
        return self.state.withLockedValue { state in
            guard state.total < self.maxTotal else { return .failure(.init(reason: .total)) }
            if let key {
                guard state.perAddress[key, default: 0] < self.maxPerAddress else { return .failure(.init(reason: .perAddress)) }
                state.perAddress[key, default: 0] += 1
            }
            state.total += 1
            return .success(Ticket(address: key))
        }
    }

    func release(_ ticket: Ticket) {
        self.state.withLockedValue { state in
            state.total -= 1
            if let key = ticket.address {
                state.perAddress[key, default: 1] -= 1
                if state.perAddress[key] == 0 { state.perAddress[key] = nil }
            }
        }
    }

    var pendingCount: Int { self.state.withLockedValue { $0.total } }
}

struct ConnectionAdmissionRefused: Error {
    var reason: ConnectionAdmission.Refusal
}

extension Optional where Wrapped == SocketAddress {
    /// `192.0.2.1:51234` or `[2001:db8::1]:51234` for log lines.
    var logDescription: String {
        guard let address = self, let ip = address.ipAddress else { return "unknown" }
        let port = address.port.map { ":\($0)" } ?? ""
        return ip.contains(":") ? "[\(ip)]\(port)" : "\(ip)\(port)"
    }
}
