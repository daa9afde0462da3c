// Re-exported: `WebSocketTLSConfiguration` is `ClientTLSConfiguration`, and its errors name `HTTPClientError`.
@_exported import CircleHTTPClient
import NIOSSL

/// TLS settings for `wss://` connections: the client TLS settings of CircleHTTPClient, so a
/// WebSocket and the HTTP requests beside it trust the same certificates and pins.
///
/// ```swift
/// var tls = WebSocketTLSConfiguration()
/// tls.trust = try .certificateAuthorities(pemFile: "ca.pem")   // a private CA
/// tls.pinnedPublicKeys = ["sha256/47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU="]
/// ```
///
/// A key that matches none of the pins fails the connect with ``WebSocketError/Code/pinMismatch``;
/// an untrusted certificate or a malformed pin with ``WebSocketError/Code/tlsFailed``.
public typealias WebSocketTLSConfiguration = ClientTLSConfiguration

extension WebSocketError {
    /// The WebSocket error for a failure of the shared HTTP client layer (TLS, pins, connect).
    init(_ error: HTTPClientError) {
        let code: Code
        switch error.code {
        case .invalidURL: code = .invalidURL
        case .connectTimeout: code = .connectTimeout
        case .tlsFailed: code = .tlsFailed
        case .pinMismatch: code = .pinMismatch
        default: code = .connectionFailed
        }
        self.init(code, error.message, underlying: error.underlying)
    }
}
