#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import NIOCore

/// A datagram socket or discovery failure, with a code to switch on and a message a person can act on.
public struct DatagramError: Error, Sendable, Hashable, CustomStringConvertible {
    /// What went wrong.
    public struct Code: Sendable, Hashable, CustomStringConvertible {
        private enum Value: String, Sendable, Hashable {
            case invalidAddress, noSuchInterface, addressNotAvailable, addressInUse, familyMismatch, scopeRequired
            case multicastUnsupported, notMulticast, permissionDenied, networkUnreachable, messageTooLarge, closed, other
        }
        private let value: Value
        private init(_ value: Value) { self.value = value }

        /// The text is not an IP address (or a scoped IPv6 address).
        public static let invalidAddress = Code(.invalidAddress)
        /// The interface named (or numbered) does not exist.
        public static let noSuchInterface = Code(.noSuchInterface)
        /// The address is not one of this machine's, or not on that interface (`EADDRNOTAVAIL`).
        public static let addressNotAvailable = Code(.addressNotAvailable)
        /// Another socket holds the port (`EADDRINUSE`); multicast listeners set ``DatagramSocketConfiguration/reuseAddress``.
        public static let addressInUse = Code(.addressInUse)
        /// An IPv4 address used with an IPv6 socket or the other way round.
        public static let familyMismatch = Code(.familyMismatch)
        /// A link-local IPv6 address without its interface (`fe80::1%eth0`).
        public static let scopeRequired = Code(.scopeRequired)
        /// The interface cannot do multicast (no `IFF_MULTICAST`) or the system refused the membership.
        public static let multicastUnsupported = Code(.multicastUnsupported)
        /// A group address that is not a multicast address.
        public static let notMulticast = Code(.notMulticast)
        /// The system refused (`EACCES`, `EPERM`): a privileged port, a firewall, a sandbox or missing entitlement.
        public static let permissionDenied = Code(.permissionDenied)
        /// No route to the peer (`ENETUNREACH`, `EHOSTUNREACH`).
        public static let networkUnreachable = Code(.networkUnreachable)
        /// The datagram is larger than the socket can send (`EMSGSIZE`).
        public static let messageTooLarge = Code(.messageTooLarge)
        /// The socket is closed.
        public static let closed = Code(.closed)
        /// Anything else; the message carries the system's words.
        public static let other = Code(.other)

        public var description: String { self.value.rawValue }
    }

    public var code: Code
    public var message: String

    public init(_ code: Code, _ message: String) {
        self.code = code
        self.message = message
    }

    public var description: String { "\(self.message) (\(self.code))" }

    /// Maps a system error from `operation` on `subject` to a code and a sentence.
    static func from(_ error: any Error, operation: String, subject: String) -> DatagramError {
        if let error = error as? DatagramError { return error }
        if error is ChannelError {
            if case .ioOnClosedChannel = error as? ChannelError {
                return DatagramError(.closed, "cannot \(operation): the socket is closed")
            }
            return DatagramError(.other, "cannot \(operation) \(subject): \(error)")
        }
        guard let io = error as? IOError else {
            return DatagramError(.other, "cannot \(operation) \(subject): \(error)")
        }
        let reason = String(cString: strerror(io.errnoCode))
        switch io.errnoCode {
        case EADDRNOTAVAIL:
            return DatagramError(.addressNotAvailable, "cannot \(operation) \(subject): the address is not available on this machine or on that interface (\(reason))")
        case EADDRINUSE:
            return DatagramError(.addressInUse, "cannot \(operation) \(subject): the port is in use by another socket (\(reason))")
        case EACCES, EPERM:
            return DatagramError(.permissionDenied, "cannot \(operation) \(subject): permission denied (\(reason))")
        case EAFNOSUPPORT, EPFNOSUPPORT:
            return DatagramError(.familyMismatch, "cannot \(operation) \(subject): address family not supported here (\(reason))")
        case ENETUNREACH, EHOSTUNREACH:
            return DatagramError(.networkUnreachable, "cannot \(operation) \(subject): no route (\(reason))")
        case EMSGSIZE:
            return DatagramError(.messageTooLarge, "cannot \(operation) \(subject): the datagram is too large (\(reason))")
        case ENODEV, ENXIO:
            return DatagramError(.noSuchInterface, "cannot \(operation) \(subject): no such interface (\(reason))")
        case EINVAL where operation.hasPrefix("join"):
            return DatagramError(.multicastUnsupported, "cannot \(operation) \(subject): the system refused the membership (\(reason))")
        default:
            return DatagramError(.other, "cannot \(operation) \(subject): \(reason)")
        }
    }
}
