import NIOCore
import NIOSSL
import NIOTLS

/// Sits right behind `NIOSSLClientHandler` and lets the connection go on only once the TLS
/// handshake is done and the server's key matches one of the pins (when there are pins).
///
/// It completes its promise then, and passes `TLSUserEvent.handshakeCompleted` on only when the
/// key is accepted, so a handler behind it may send its request on that event. A failure (an
/// untrusted certificate, a pin mismatch, a connection closed during the handshake) fails the
/// promise and is passed on as an ``HTTPClientError`` through `errorCaught`.
package final class TLSHandshakeGate: ChannelInboundHandler {
    package typealias InboundIn = NIOAny

    private let promise: EventLoopPromise<Void>
    private let pins: [[UInt8]]
    private let host: String
    private var done = false

    package init(promise: EventLoopPromise<Void>, pins: [[UInt8]], host: String) {
        self.promise = promise
        self.pins = pins
        self.host = host
    }

    package func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        guard case TLSUserEvent.handshakeCompleted = event, !self.done else {
            context.fireUserInboundEventTriggered(event)
            return
        }
        if let refusal = self.checkPins(context: context) {
            self.fail(refusal, context: context)
            context.close(promise: nil)
            return
        }
        self.done = true
        self.promise.succeed()
        context.fireUserInboundEventTriggered(event)
    }

    private func checkPins(context: ChannelHandlerContext) -> HTTPClientError? {
        guard !self.pins.isEmpty else { return nil }
        let certificate = try? context.pipeline.syncOperations.handler(type: NIOSSLClientHandler.self).peerCertificate
        guard let certificate, let digest = try? ClientTLSConfiguration.spkiSHA256(of: certificate) else {
            return HTTPClientError(.pinMismatch, "the server \(self.host) presented no certificate to check against the pins")
        }
        guard self.pins.contains(digest) else {
            let seen = (try? ClientTLSConfiguration.publicKeyPin(of: certificate)) ?? "?"
            return HTTPClientError(
                .pinMismatch,
                "the certificate of \(self.host) is trusted but its key (\(seen)) matches none of the \(self.pins.count) pinned keys"
            )
        }
        return nil
    }

    package func errorCaught(context: ChannelHandlerContext, error: any Error) {
        if self.done {
            context.fireErrorCaught(error)
        } else {
            self.fail(HTTPClientError(.tlsFailed, "the TLS handshake with \(self.host) failed", underlying: error), context: context)
        }
    }

    package func channelInactive(context: ChannelHandlerContext) {
        if !self.done {
            self.done = true
            self.promise.fail(HTTPClientError(.tlsFailed, "the connection closed during the TLS handshake with \(self.host)"))
        }
        context.fireChannelInactive()
    }

    private func fail(_ error: HTTPClientError, context: ChannelHandlerContext) {
        guard !self.done else { return }
        self.done = true
        self.promise.fail(error)
        context.fireErrorCaught(error)
    }
}
