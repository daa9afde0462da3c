import Crypto
import Foundation
import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
import NIOPosix

/// A publish hook's endpoint on loopback for tests: records each request and answers it as the
/// test's `answer` says (a verdict, garbage, an error status, or nothing at all).
final class HookReceiver: Sendable {
    enum Answer: Sendable {
        case json(String)
        case raw(status: Int, contentType: String?, body: String)
        /// Never answers (the connection stays open until the receiver stops).
        case hang
        /// Answers `json` once `release` is called (a hook that answers out of order).
        case held(String, release: Gate)
    }

    /// Holds a ``Answer/held(_:release:)`` answer until ``open()``.
    final class Gate: Sendable {
        private let state = NIOLockedValueBox<(open: Bool, waiting: [@Sendable () -> Void])>((false, []))

        func open() {
            let waiting = self.state.withLockedValue { state -> [@Sendable () -> Void] in
                state.open = true
                defer { state.waiting = [] }
                return state.waiting
            }
            for run in waiting { run() }
        }

        fileprivate func whenOpen(_ run: @escaping @Sendable () -> Void) {
            let now = self.state.withLockedValue { state -> Bool in
                if state.open { return true }
                state.waiting.append(run)
                return false
            }
            if now { run() }
        }
    }

    struct Call: Sendable {
        var headers: [String: String]
        var body: [UInt8]
        /// The request's target (path and query).
        var uri: String = ""
        var json: [String: Any]? { try? JSONSerialization.jsonObject(with: Data(self.body)) as? [String: Any] }
        var data: [String: Any]? { self.json?["data"] as? [String: Any] }
    }

    private struct State {
        var calls: [Call] = []
        var answer: @Sendable (Call) -> Answer = { _ in .json(#"{"action":"accept"}"#) }
        var waiters: [(count: Int, continuation: CheckedContinuation<Void, Never>)] = []
    }

    private let state = NIOLockedValueBox(State())
    private let channel: NIOLockedValueBox<(any Channel)?> = NIOLockedValueBox(nil)

    var port: Int { self.channel.withLockedValue { $0?.localAddress?.port ?? 0 } }
    var url: String { "http://127.0.0.1:\(self.port)/publish" }
    var calls: [Call] { self.state.withLockedValue { $0.calls } }

    func answer(_ rule: @escaping @Sendable (Call) -> Answer) {
        self.state.withLockedValue { $0.answer = rule }
    }

    func start() async throws {
        let receiver = self
        let channel = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelInitializer { channel in
                channel.pipeline.configureHTTPServerPipeline().flatMap {
                    channel.pipeline.addHandler(Handler(receiver: receiver))
                }
            }
            .bind(host: "127.0.0.1", port: 0).get()
        self.channel.withLockedValue { $0 = channel }
    }

    func stop() async {
        let channel = self.channel.withLockedValue { $0 }
        try? await channel?.close()
    }

    /// Returns once `count` calls have arrived, or after `limit` (the caller checks ``calls``).
    func waitForCalls(_ count: Int, upTo limit: Duration = .seconds(20)) async {
        let timer = Task {
            // Cancelled: the calls came; only the limit resumes the waiters.
            guard (try? await Task.sleep(for: limit)) != nil else { return }
            let waiters = self.state.withLockedValue { state -> [CheckedContinuation<Void, Never>] in
                defer { state.waiters = [] }
                return state.waiters.map(\.continuation)
            }
            for waiter in waiters { waiter.resume() }
        }
        defer { timer.cancel() }
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let done = self.state.withLockedValue { state -> Bool in
                if state.calls.count >= count { return true }
                state.waiters.append((count, continuation))
                return false
            }
            if done { continuation.resume() }
        }
    }

    fileprivate func received(_ call: Call) -> Answer {
        let (answer, ready) = self.state.withLockedValue { state -> (Answer, [CheckedContinuation<Void, Never>]) in
            state.calls.append(call)
            let count = state.calls.count
            let ready = state.waiters.filter { $0.count <= count }.map(\.continuation)
            state.waiters.removeAll { $0.count <= count }
            return (state.answer(call), ready)
        }
        for waiter in ready { waiter.resume() }
        return answer
    }

    /// Whether `call` carries a Standard Webhooks signature made with `secret`, computed here
    /// with swift-crypto (not with the server's signer), within five minutes of now.
    static func isSigned(_ call: Call, secret: String) -> Bool {
        guard let id = call.headers["webhook-id"], let timestamp = call.headers["webhook-timestamp"], let stamp = Int64(timestamp),
            abs(Int64(Date().timeIntervalSince1970) - stamp) < 300, let signature = call.headers["webhook-signature"],
            let key = Data(base64Encoded: String(secret.dropFirst("whsec_".count)))
        else { return false }
        let mac = HMAC<SHA256>.authenticationCode(for: Array("\(id).\(timestamp).".utf8) + call.body, using: SymmetricKey(data: key))
        return signature.split(separator: " ").contains { $0 == "v1," + Data(mac).base64EncodedString() }
    }

    private final class Handler: ChannelInboundHandler, @unchecked Sendable {
        // @unchecked: used on its channel's event loop only.
        typealias InboundIn = HTTPServerRequestPart
        typealias OutboundOut = HTTPServerResponsePart

        let receiver: HookReceiver
        var headers: [String: String] = [:]
        var body: [UInt8] = []
        var uri = ""

        init(receiver: HookReceiver) { self.receiver = receiver }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            switch self.unwrapInboundIn(data) {
            case .head(let head):
                self.headers = Dictionary(head.headers.map { ($0.name.lowercased(), $0.value) }) { $1 }
                self.uri = head.uri
                self.body = []
            case .body(let buffer):
                self.body += buffer.readableBytesView
            case .end:
                let answer = self.receiver.received(Call(headers: self.headers, body: self.body, uri: self.uri))
                switch answer {
                case .hang: return
                case .json(let json): Self.respond(context, 200, "application/json", json, handler: self)
                case .raw(let code, let contentType, let body): Self.respond(context, code, contentType, body, handler: self)
                case .held(let json, let gate):
                    let loop = context.eventLoop
                    let bound = NIOLoopBound((context, self), eventLoop: loop)
                    gate.whenOpen {
                        loop.execute { Self.respond(bound.value.0, 200, "application/json", json, handler: bound.value.1) }
                    }
                }
            }
        }

        private static func respond(_ context: ChannelHandlerContext, _ status: Int, _ type: String?, _ text: String, handler: Handler) {
            var headers = HTTPHeaders()
            if let type { headers.add(name: "Content-Type", value: type) }
            headers.add(name: "Content-Length", value: "\(text.utf8.count)")
            context.write(handler.wrapOutboundOut(.head(HTTPResponseHead(version: .http1_1, status: HTTPResponseStatus(statusCode: status), headers: headers))), promise: nil)
            context.write(handler.wrapOutboundOut(.body(.byteBuffer(ByteBuffer(string: text)))), promise: nil)
            context.writeAndFlush(handler.wrapOutboundOut(.end(nil)), promise: nil)
        }
    }
}
