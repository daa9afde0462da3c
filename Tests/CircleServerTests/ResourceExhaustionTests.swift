import CircleServer
import CircleSocket
import CircleTestSupport
import CircleWire
import Foundation
import NIOCore
import Testing

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// Findings that need the server as its own process: its memory and CPU are measured from
/// /proc, and its open-file limit is set small.
@Suite("Resource exhaustion (server process)", .serialized, .timeLimit(.minutes(3)))
struct ResourceExhaustionTests {
    private func http(_ port: Int, _ method: String, _ path: String, token: String? = nil, json: String? = nil) async throws -> (status: Int, body: String) {
        var request = URLRequest(url: URL(string: "http://127.0.0.1:\(port)\(path)")!)
        request.httpMethod = method
        request.timeoutInterval = 10
        if let token { request.setValue("Bearer \(token)", forHTTPHeaderField: "Authorization") }
        if let json { request.httpBody = Data(json.utf8) }
        let (data, response) = try await URLSession.shared.data(for: request)
        return ((response as? HTTPURLResponse)?.statusCode ?? 0, String(decoding: data, as: UTF8.self))
    }

    private func token(_ user: String) async throws -> String {
        try await TokenAuthority(.hs256(secret: testSecret)).mint(user: user, ttl: .seconds(600))
    }

    /// The largest growth of the server's resident memory over `window`, sampled every 100 ms;
    /// stops early once it passes `limit`.
    private func peakGrowth(pid: Int32, from baseline: Int, window: Duration, limit: Int) async throws -> Int {
        var peak = 0
        let end = ContinuousClock.now + window
        while ContinuousClock.now < end {
            guard let usage = ProcessUsage.of(pid: pid) else { break }
            peak = max(peak, usage.residentBytes - baseline)
            if peak > limit { break }
            try await Task.sleep(for: .milliseconds(100))
        }
        return peak
    }

    @Test("a reader that stops reading cannot grow the server: WebSocket history and pipelined HTTP requests are held back")
    func readerThatStopsReading() async throws {
        let port = try ServerProcess.freePort()
        let data = FileManager.default.temporaryDirectory.appendingPathComponent("circle-exhaust-\(UUID().uuidString)").path
        defer { try? FileManager.default.removeItem(atPath: data) }
        let server = ServerProcess(port: port, dataDirectory: data, arguments: ["--write-stall-timeout", "2s"])
        try await server.start()
        defer { server.stop() }
        let pid = try #require(server.pid)
        let wsURL = "ws://127.0.0.1:\(port)/v1/ws"

        let owner = try await self.token("owner")
        #expect(try await self.http(port, "POST", "/v1/circles", token: owner, json: #"{"name":"general"}"#).status == 201)
        let writer = try await TestClient(url: wsURL, token: owner)
        _ = try await writer.request { .join("general", id: $0) }
        let kilobyte = String(repeating: "k", count: 1000)
        for index in 0..<200 {
            try await writer.send(.post(kilobyte, to: "general", id: "fill-\(index)"))
        }
        while case let reply? = try await writer.next(), reply.ackSeq != 200 {}

        let canary = try await TestClient(url: wsURL, token: try await self.token("canary"))
        _ = try await canary.request { .join("general", id: $0) }
        let baseline = try #require(ProcessUsage.of(pid: pid)).residentBytes

        // 1,000 history requests of 200 posts each (about 200 MB of replies) from a client that
        // reads nothing: its sends stall once the server stops reading, so they run detached.
        var configuration = WebSocketConfiguration()
        configuration.subprotocols = [circleSubprotocol]
        configuration.inboundBufferLimit = 2
        configuration.headers.add(name: "Authorization", value: "Bearer \(try await self.token("sponge"))")
        let sponge = try await WebSocket.connect(to: wsURL, configuration: configuration)
        let flood = Task.detached {
            for index in 0..<1000 {
                try await sponge.send(#"{"action":"history","id":"h\#(index)","circle":"general","limit":200}"#)
            }
        }
        let webSocketGrowth = try await self.peakGrowth(pid: pid, from: baseline, window: .seconds(4), limit: 64 << 20)
        // Others are served meanwhile: the canary's post is acked.
        let ack = try await canary.request { .post("still here", to: "general", id: $0) }
        #expect(ack.ackSeq == 201, "\(ack)")
        #expect(webSocketGrowth < 32 << 20, "the server grew by \(webSocketGrowth >> 20) MiB for a WebSocket reader that does not read")
        flood.cancel()
        sponge.abort()

        // The same over HTTP: 300 pipelined history requests, none of their answers read.
        let pipelined = try RawTCP(port: port)
        let request = "GET /v1/circles/general/messages?limit=200 HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \(owner)\r\n\r\n"
        let sender = Task.detached { pipelined.send(String(repeating: request, count: 300)) }
        let httpBaseline = try #require(ProcessUsage.of(pid: pid)).residentBytes
        let httpGrowth = try await self.peakGrowth(pid: pid, from: min(baseline, httpBaseline), window: .seconds(4), limit: 64 << 20)
        #expect(httpGrowth < 32 << 20, "the server grew by \(httpGrowth >> 20) MiB for pipelined HTTP requests never read")
        let second = try await canary.request { .post("still here over HTTP", to: "general", id: $0) }
        #expect(second.ackSeq == 202, "\(second)")
        // The connection that does not read its answers is closed by the write-stall timeout.
        var stalled = false
        let deadline = ContinuousClock.now + .seconds(30)
        while !stalled && ContinuousClock.now < deadline {
            stalled = try await self.http(port, "GET", "/metrics").body.contains(#"circle_limit_hits_total{limit="http_write_stall_timeout"}"#)
            if !stalled { try await Task.sleep(for: .milliseconds(200)) }
        }
        #expect(stalled, "the unread HTTP connection was not closed for its write stall")
        sender.cancel()
        await canary.close()
        await writer.close()
    }

    @Test("out of file descriptors, the server does not spin on accept and recovers when idle connections time out")
    func fileDescriptorExhaustion() async throws {
        let port = try ServerProcess.freePort()
        let data = FileManager.default.temporaryDirectory.appendingPathComponent("circle-emfile-\(UUID().uuidString)").path
        defer { try? FileManager.default.removeItem(atPath: data) }
        // The server's output, shown if it is gone mid-test (it once was, in a full run).
        let log = data + ".log"
        defer { try? FileManager.default.removeItem(atPath: log) }
        func usage(_ pid: Int32) throws -> ProcessUsage {
            guard let usage = ProcessUsage.of(pid: pid) else {
                let output = (try? String(contentsOfFile: log, encoding: .utf8)) ?? "(no output)"
                throw ServerGone(description: "the server (pid \(pid)) is gone; its output ends: \(output.suffix(3000))")
            }
            return usage
        }
        let server = ServerProcess(
            port: port,
            dataDirectory: data,
            arguments: ["--max-pending-connections", "100000", "--max-pending-connections-per-address", "0", "--request-head-timeout", "3s"],
            openFileLimit: 160,
            logFile: log
        )
        try await server.start()
        defer { server.stop() }
        let pid = try #require(server.pid)
        // More idle connections than the server has descriptors: the kernel completes their
        // handshakes, the server cannot accept() them all.
        var idle: [RawTCP] = []
        for _ in 0..<220 { idle.append(try RawTCP(port: port)) }
        let before = try usage(pid).cpuSeconds
        try await Task.sleep(for: .seconds(2))
        let after = try usage(pid).cpuSeconds
        // A busy accept loop burns most of a core (1.7 s of CPU in these 2 s before the fix).
        #expect(after - before < 0.5, "the server used \(after - before) s of CPU in 2 s while out of descriptors")
        // Once the idle connections time out, it serves again.
        var healthy = false
        let deadline = ContinuousClock.now + .seconds(60)
        while !healthy && ContinuousClock.now < deadline {
            healthy = (try? await self.http(port, "GET", "/healthz").status) == 200
            if !healthy { try await Task.sleep(for: .milliseconds(200)) }
        }
        #expect(healthy, "the server did not recover after the idle connections timed out")
        idle.removeAll()
    }
}

/// The server process of a test ended while the test still needed it.
private struct ServerGone: Error, CustomStringConvertible {
    var description: String
}
