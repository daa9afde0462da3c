/// A WebSocket close status code (RFC 6455, section 7.4).
///
/// Codes are plain numbers on the wire; the named constants cover the ones
/// defined by the RFC and the IANA registry. Applications may use 4000–4999.
public struct WebSocketCloseCode: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    public var rawValue: UInt16

    public init(rawValue: UInt16) {
        self.rawValue = rawValue
    }

    public init(_ rawValue: UInt16) {
        self.rawValue = rawValue
    }

    /// 1000: the purpose of the connection has been fulfilled.
    public static let normalClosure = Self(1000)
    /// 1001: the endpoint is going away (server shutdown, page navigated away).
    public static let goingAway = Self(1001)
    /// 1002: the peer violated the protocol.
    public static let protocolError = Self(1002)
    /// 1003: the peer sent a kind of data that cannot be accepted.
    public static let unsupportedData = Self(1003)
    /// 1005: no status code was present in the close frame (never sent on the wire).
    public static let noStatusReceived = Self(1005)
    /// 1006: the connection ended without a close frame (never sent on the wire).
    public static let abnormalClosure = Self(1006)
    /// 1007: a message's data was inconsistent with its type (for example invalid UTF-8 in a text message).
    public static let invalidPayloadData = Self(1007)
    /// 1008: a message violated the endpoint's policy.
    public static let policyViolation = Self(1008)
    /// 1009: a message was larger than the endpoint accepts.
    public static let messageTooBig = Self(1009)
    /// 1010: the client expected an extension the server did not negotiate.
    public static let mandatoryExtension = Self(1010)
    /// 1011: the server met an unexpected condition.
    public static let internalError = Self(1011)
    /// 1012: the service is restarting.
    public static let serviceRestart = Self(1012)
    /// 1013: try again later (for example an overloaded server or a consumer that is too slow).
    public static let tryAgainLater = Self(1013)

    /// Whether this code may be sent in a close frame (RFC 6455 section 7.4 and the IANA registry).
    public var isSendable: Bool {
        switch self.rawValue {
        case 1000...1003, 1007...1014, 3000...4999: return true
        default: return false
        }
    }

    public var description: String {
        let name: String
        switch self {
        case .normalClosure: name = "normal closure"
        case .goingAway: name = "going away"
        case .protocolError: name = "protocol error"
        case .unsupportedData: name = "unsupported data"
        case .noStatusReceived: name = "no status received"
        case .abnormalClosure: name = "abnormal closure"
        case .invalidPayloadData: name = "invalid payload data"
        case .policyViolation: name = "policy violation"
        case .messageTooBig: name = "message too big"
        case .mandatoryExtension: name = "mandatory extension"
        case .internalError: name = "internal error"
        case .serviceRestart: name = "service restart"
        case .tryAgainLater: name = "try again later"
        default: return "\(self.rawValue)"
        }
        return "\(self.rawValue) (\(name))"
    }
}

/// How a WebSocket connection ended.
public struct WebSocketCloseInfo: Sendable, Hashable, CustomStringConvertible {
    /// The code the peer sent, `.noStatusReceived` when its close frame had none, or
    /// `.abnormalClosure` when the connection ended without a close frame from the peer.
    public var code: WebSocketCloseCode
    /// The reason the peer sent (empty if none).
    public var reason: String
    /// The code this side sent, if it sent a close frame.
    public var sentCode: WebSocketCloseCode?
    /// Whether the peer started the close handshake.
    public var initiatedByPeer: Bool
    /// Whether both close frames were exchanged before the connection ended.
    public var wasClean: Bool

    public init(
        code: WebSocketCloseCode,
        reason: String = "",
        sentCode: WebSocketCloseCode? = nil,
        initiatedByPeer: Bool = false,
        wasClean: Bool = false
    ) {
        self.code = code
        self.reason = reason
        self.sentCode = sentCode
        self.initiatedByPeer = initiatedByPeer
        self.wasClean = wasClean
    }

    public var description: String {
        var text = "closed with \(self.code)"
        if !self.reason.isEmpty { text += " \"\(self.reason)\"" }
        if !self.wasClean { text += ", not clean" }
        return text
    }
}
