import CircleServer
import CircleTestSupport
import Foundation
import Testing

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

@Suite("CORS: off by default, one origin when configured")
struct CORSTests {
    static let origin = "https://app.example.com"

    @Test("a preflight is answered and responses carry the allowed origin; without the option, no CORS headers")
    func corsOrigin() async throws {
        let server = TestServer()
        defer { server.remove() }
        server.configuration.corsOrigin = Self.origin
        try await server.start()
        let preflight = try await Self.request("OPTIONS", server.httpBase + "/v1/circles", headers: ["Access-Control-Request-Method": "POST"])
        #expect(preflight.statusCode == 204)
        #expect(preflight.value(forHTTPHeaderField: "Access-Control-Allow-Origin") == Self.origin)
        #expect(preflight.value(forHTTPHeaderField: "Access-Control-Allow-Headers")?.lowercased().contains("authorization") == true)
        #expect(preflight.value(forHTTPHeaderField: "Access-Control-Allow-Methods")?.contains("PATCH") == true)
        let health = try await Self.request("GET", server.httpBase + "/healthz")
        #expect(health.statusCode == 200)
        #expect(health.value(forHTTPHeaderField: "Access-Control-Allow-Origin") == Self.origin)
        let refused = try await Self.request("GET", server.httpBase + "/v1/circles")
        #expect(refused.statusCode == 401)
        #expect(refused.value(forHTTPHeaderField: "Access-Control-Allow-Origin") == Self.origin)
        await server.stop()

        let plain = TestServer()
        defer { plain.remove() }
        try await plain.start()
        let answer = try await Self.request("GET", plain.httpBase + "/healthz")
        #expect(answer.statusCode == 200)
        #expect(answer.value(forHTTPHeaderField: "Access-Control-Allow-Origin") == nil)
        await plain.stop()
    }

    static func request(_ method: String, _ url: String, headers: [String: String] = [:]) async throws -> HTTPURLResponse {
        var request = URLRequest(url: try #require(URL(string: url)))
        request.httpMethod = method
        request.setValue(Self.origin, forHTTPHeaderField: "Origin")
        for (name, value) in headers { request.setValue(value, forHTTPHeaderField: name) }
        let (_, response) = try await URLSession.shared.data(for: request)
        return try #require(response as? HTTPURLResponse)
    }
}
