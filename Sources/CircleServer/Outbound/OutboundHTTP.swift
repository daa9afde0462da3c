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

    /// Connections kept open between exchanges (webhook endpoints, which are sent to again and
    /// again); without one, each exchange opens a connection and closes it. A kept connection
    /// goes to the address that was checked when it was opened.
    package var pool: HTTPConnectionPool?

    package init(policy: OutboundAddressPolicy, timeout: Duration, maxBodyBytes: Int, pool: HTTPConnectionPool? = nil) {
        self.policy = policy
        self.timeout = timeout
        self.maxBodyBytes = maxBodyBytes
        self.pool = pool
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
        // thread), and that part ends on its own later. A caller that gives up (a server shutting
        // down) ends the exchange at once.
        let timeout = self.timeout
        let outcome: Result<Response, Failure> = await withDeadline(
            timeout,
            timedOut: { .failure(Failure("no answer from \(target.address) within \(timeout)")) },
            cancelled: { .failure(Failure("cancelled")) },
            {
                do throws(Failure) {
                    return .success(try await self.exchange(method, target: target, uri: uri, headers: headers, body: body))
                } catch {
                    return .failure(error)
                }
            }
        )
        return try outcome.get()
    }

    private func exchange(_ method: HTTPMethod, target: HTTPTarget, uri: String, headers: HTTPHeaders, body: [UInt8]?) async throws(Failure) -> Response {
        if let pool = self.pool, let kept = await pool.take(target) {
            switch await self.exchange(method, on: kept, uri: uri, headers: headers, body: body) {
            case .success(let response): return response
            case .failure(let failure) where failure.answered || Task.isCancelled: throw failure.failure
            case .failure:
                // A kept connection the endpoint had closed before it read the request: once
                // more on a new one.
                break
            }
        }
        let address = try await self.resolve(target)
        let connection: HTTPConnection
        do {
            (connection, _) = try await HTTPConnection.connect(to: target, address: address, timeout: self.timeout, writeTimeout: self.timeout)
        } catch {
            throw Failure("\(error)")
        }
        return try await self.exchange(method, on: connection, uri: uri, headers: headers, body: body).mapError(\.failure).get()
    }

    /// Why an exchange on a connection failed, and whether an answer had begun.
    private struct ExchangeFailure: Error {
        var failure: Failure
        var answered: Bool
    }

    /// One request and its answer on `connection`, which then goes back to the pool (if the
    /// answer lets it) or is closed.
    private func exchange(_ method: HTTPMethod, on connection: HTTPConnection, uri: String, headers: HTTPHeaders, body: [UInt8]?) async
        -> Result<Response, ExchangeFailure>
    {
        // Cancellation (the time limit) closes the connection, which ends a pending read.
        let target = connection.target
        var answered = false
        let result = await withTaskCancellationHandler { () async -> Result<Response, ExchangeFailure> in
            do {
                var requestHeaders = headers
                if self.pool == nil {
                    requestHeaders.replaceOrAdd(name: "Connection", value: "close")
                }
                if let body {
                    requestHeaders.replaceOrAdd(name: "Content-Length", value: "\(body.count)")
                }
                try await connection.sendRequest(method: method, uri: uri, headers: requestHeaders, body: body.map { ByteBuffer(bytes: $0) })
                var head: HTTPResponseHead?
                var answer: [UInt8] = []
                reading: while true {
                    switch try await connection.next(idleTimeout: self.timeout) {
                    case .head(let value):
                        answered = true
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
                return .failure(ExchangeFailure(failure: failure, answered: answered))
            } catch {
                return .failure(ExchangeFailure(failure: Failure("\(error)"), answered: answered))
            }
        } onCancel: {
            connection.close()
        }
        if case .success = result, let pool = self.pool, !Task.isCancelled {
            await pool.give(connection)
        } else {
            connection.close()
        }
        return result
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
