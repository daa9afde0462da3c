import CircleHTTPClient
import Foundation
import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
import NIOPosix

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// The server's one way to reach a URL that someone configured (JWKS documents, webhooks; push
/// will use it too): a GET or POST with a time limit for the whole exchange, a size limit on the
/// body and the ``OutboundAddressPolicy`` applied to every address the host resolves to; the
/// connection then goes to the checked address.
///
/// Built on the package's own `CircleHTTPClient` (`HTTPConnection`) rather than
/// async-http-client: that client already does TLS with system roots, timeouts and
/// part-by-part reads, and it can connect to an address while TLS verifies the name, which the
/// address policy needs; async-http-client would add a large dependency (and build time) for
/// nothing this needs.
package struct OutboundHTTP: Sendable {
    /// Why a fetch failed, for the log.
    package struct Failure: Error, Sendable, CustomStringConvertible {
        package var message: String
        package var description: String { self.message }
        package init(_ message: String) { self.message = message }
    }

    /// An answer read whole.
    package struct Response: Sendable {
        package var status: Int
        package var headers: HTTPHeaders
        package var body: [UInt8]
    }

    package var policy: OutboundAddressPolicy
    /// The whole exchange: name resolution, connect, TLS, request and the body.
    package var timeout: Duration
    /// The largest body read; a longer one fails the fetch.
    package var maxBodyBytes: Int

    package init(policy: OutboundAddressPolicy, timeout: Duration, maxBodyBytes: Int) {
        self.policy = policy
        self.timeout = timeout
        self.maxBodyBytes = maxBodyBytes
    }

    /// GETs `url` (`https`, or `http`), within ``timeout``.
    package func get(_ url: String, headers: HTTPHeaders = [:]) async throws(Failure) -> Response {
        try await self.send(.GET, url, headers: headers, body: nil)
    }

    /// POSTs `body` to `url` (`https`, or `http`), within ``timeout``; redirects are answers
    /// like any other, never followed.
    package func post(_ url: String, headers: HTTPHeaders = [:], body: [UInt8]) async throws(Failure) -> Response {
        try await self.send(.POST, url, headers: headers, body: body)
    }

    private func send(_ method: HTTPMethod, _ url: String, headers: HTTPHeaders, body: [UInt8]?) async throws(Failure) -> Response {
        let (target, uri): (HTTPTarget, String)
        do {
            (target, uri) = try HTTPTarget.parse(url, schemes: ["http", "https"])
        } catch {
            throw Failure("\(error)")
        }
        // The exchange runs in a task of its own that the time limit cancels; the caller resumes
        // at the limit even if part of the exchange cannot be cancelled (getaddrinfo on its
        // thread), and that part ends on its own later.
        let timeout = self.timeout
        let gate = NIOLockedValueBox<CheckedContinuation<Result<Response, Failure>, Never>?>(nil)
        let tasks = NIOLockedValueBox<(exchange: Task<Void, Never>?, timer: Task<Void, Never>?)>((nil, nil))
        let outcome = await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Result<Response, Failure>, Never>) in
                gate.withLockedValue { $0 = continuation }
                let exchange = Task {
                    let result: Result<Response, Failure>
                    do throws(Failure) {
                        result = .success(try await self.exchange(method, target: target, uri: uri, headers: headers, body: body))
                    } catch {
                        result = .failure(error)
                    }
                    gate.withLockedValue { $0.take() }?.resume(returning: result)
                    tasks.withLockedValue { $0.timer }?.cancel()
                }
                let limit = Task {
                    try? await Task.sleep(for: timeout)
                    guard let waiting = gate.withLockedValue({ $0.take() }) else { return }
                    exchange.cancel()
                    waiting.resume(returning: .failure(Failure("no answer from \(target.address) within \(timeout)")))
                }
                tasks.withLockedValue { $0 = (exchange, limit) }
                // The exchange may have ended (or the caller been cancelled) before the tasks were stored.
                if gate.withLockedValue({ $0 == nil }) {
                    limit.cancel()
                    exchange.cancel()
                }
            }
        } onCancel: {
            // The caller gave up (a server shutting down): end the exchange now.
            let waiting = gate.withLockedValue { $0.take() }
            let (exchange, limit) = tasks.withLockedValue { $0 }
            exchange?.cancel()
            limit?.cancel()
            waiting?.resume(returning: .failure(Failure("cancelled")))
        }
        return try outcome.get()
    }

    private func exchange(_ method: HTTPMethod, target: HTTPTarget, uri: String, headers: HTTPHeaders, body: [UInt8]?) async throws(Failure) -> Response {
        let address = try await self.resolve(target)
        let connection: HTTPConnection
        do {
            (connection, _) = try await HTTPConnection.connect(to: target, address: address, timeout: self.timeout, writeTimeout: self.timeout)
        } catch {
            throw Failure("\(error)")
        }
        // Cancellation (the time limit) closes the connection, which ends a pending read.
        let result = await withTaskCancellationHandler { () async -> Result<Response, Failure> in
            defer { connection.close() }
            do {
                var requestHeaders = headers
                requestHeaders.replaceOrAdd(name: "Connection", value: "close")
                if let body {
                    requestHeaders.replaceOrAdd(name: "Content-Length", value: "\(body.count)")
                }
                try await connection.sendHead(method: method, uri: uri, headers: requestHeaders)
                if let body, !body.isEmpty {
                    try await connection.sendBody(ByteBuffer(bytes: body))
                }
                try await connection.sendEnd()
                var head: HTTPResponseHead?
                var answer: [UInt8] = []
                reading: while true {
                    switch try await connection.next(idleTimeout: self.timeout) {
                    case .head(let value):
                        if value.status.code < 200 { continue }
                        head = value
                        if let length = value.headers.first(name: "Content-Length").flatMap(Int.init), length > self.maxBodyBytes {
                            throw Failure("the answer has \(length) bytes, more than the limit of \(self.maxBodyBytes)")
                        }
                    case .body(let buffer):
                        guard answer.count + buffer.readableBytes <= self.maxBodyBytes else {
                            throw Failure("the answer is longer than the limit of \(self.maxBodyBytes) bytes")
                        }
                        answer += buffer.readableBytesView
                    case .end:
                        break reading
                    }
                }
                guard let head else { throw Failure("no answer from \(target.address)") }
                return .success(Response(status: Int(head.status.code), headers: head.headers, body: answer))
            } catch let failure as Failure {
                return .failure(failure)
            } catch {
                return .failure(Failure("\(error)"))
            }
        } onCancel: {
            connection.close()
        }
        return try result.get()
    }

    /// Resolves the host (off the event loops: `getaddrinfo` blocks) and checks every address;
    /// the first one is used.
    private func resolve(_ target: HTTPTarget) async throws(Failure) -> SocketAddress {
        let addresses: [SocketAddress]
        if let literal = try? SocketAddress(ipAddress: target.host, port: target.port) {
            addresses = [literal]
        } else {
            do {
                addresses = try await NIOThreadPool.singleton.runIfActive { try Self.lookUp(target.host, port: target.port) }
            } catch {
                throw Failure("cannot resolve \(target.host): \(error)")
            }
        }
        guard let first = addresses.first else { throw Failure("\(target.host) has no address") }
        for address in addresses {
            if let refusal = self.policy.refusal(of: address) {
                throw Failure("\(target.host) resolves to \(address.ipAddress ?? "?"), \(refusal); refused by the outbound address policy (--allow-private-outbound allows it)")
            }
        }
        return first
    }

    private static func lookUp(_ host: String, port: Int) throws -> [SocketAddress] {
        var hints = addrinfo()
        hints.ai_family = AF_UNSPEC
        #if canImport(Darwin)
        hints.ai_socktype = SOCK_STREAM
        #else
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        #endif
        var list: UnsafeMutablePointer<addrinfo>?
        let status = getaddrinfo(host, String(port), &hints, &list)
        guard status == 0, let list else {
            throw Failure(String(cString: gai_strerror(status)))
        }
        defer { freeaddrinfo(list) }
        var addresses: [SocketAddress] = []
        var entry: UnsafeMutablePointer<addrinfo>? = list
        while let current = entry {
            if let pointer = current.pointee.ai_addr {
                switch Int32(current.pointee.ai_family) {
                case AF_INET:
                    let v4 = UnsafeRawPointer(pointer).load(as: sockaddr_in.self)
                    addresses.append(SocketAddress(v4, host: host))
                case AF_INET6:
                    let v6 = UnsafeRawPointer(pointer).load(as: sockaddr_in6.self)
                    addresses.append(SocketAddress(v6, host: host))
                default:
                    break
                }
            }
            entry = current.pointee.ai_next
        }
        return addresses
    }
}
