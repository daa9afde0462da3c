import CircleServer
import CircleSocket
import CircleTestSupport
import Foundation
import Testing

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// ``CircleServer/reload(_:)``, what `circle serve` does on SIGHUP: the limits read at use time
/// change for the next connection; an invalid configuration is refused and the running one kept.
@Suite("CircleServer.reload")
struct ServerReloadTests {
    @Test("max-connections-per-user changes for the next connection; an invalid value changes nothing")
    func reload() async throws {
        let server = TestServer(limits: .init(maxConnectionsPerUser: 3))
        defer { server.remove() }
        let circle = try await server.start()
        let first = try await TestClient.connect(server, user: "eve")
        try circle.reload { $0.limits.maxConnectionsPerUser = 1 }
        #expect(circle.currentConfiguration.limits.maxConnectionsPerUser == 1)
        do {
            _ = try await TestClient.connect(server, user: "eve")
            Issue.record("a second connection beyond the reloaded limit of 1 was let in")
        } catch let error as WebSocketError {
            #expect(error.httpStatus == 429)
        }
        #expect(throws: CircleServerConfiguration.InvalidSetting.self) {
            try circle.reload {
                $0.limits.presenceLimit = 7
                $0.limits.maxConnectionsPerUser = 0
            }
        }
        // Nothing of the refused change was applied, not even its valid part.
        #expect(circle.currentConfiguration.limits.maxConnectionsPerUser == 1)
        #expect(circle.currentConfiguration.limits.presenceLimit == CircleServerConfiguration.Limits().presenceLimit)
        // The canary: the open connection is still served.
        let other = try await TestClient.connect(server, user: "ann")
        await other.close()
        await first.close()
        await server.stop()
    }

    @Test("the CORS origin changes for the next request")
    func cors() async throws {
        let server = TestServer()
        defer { server.remove() }
        let circle = try await server.start()
        func allowed() async throws -> String? {
            var request = URLRequest(url: URL(string: server.httpBase + "/healthz")!)
            request.setValue("https://app.example.com", forHTTPHeaderField: "Origin")
            let (_, response) = try await URLSession.shared.data(for: request)
            return (response as? HTTPURLResponse)?.value(forHTTPHeaderField: "Access-Control-Allow-Origin")
        }
        #expect(try await allowed() == nil)
        try circle.reload { $0.corsOrigin = "https://app.example.com" }
        #expect(try await allowed() == "https://app.example.com")
        try circle.reload { $0.corsOrigin = nil }
        #expect(try await allowed() == nil)
        await server.stop()
    }
}
