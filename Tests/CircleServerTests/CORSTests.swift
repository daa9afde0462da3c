import CircleServer
import CircleTestSupport
import Testing

@Suite("CORS: off by default, one origin when configured")
struct CORSTests {
    @Test("a preflight is answered and responses carry the allowed origin; without the option, no CORS headers")
    func corsOrigin() async throws {
        let server = TestServer()
        defer { server.remove() }
        server.configuration.corsOrigin = "https://app.example.com"
        try await server.start()
        let preflight = try server.rawHTTP(
            "OPTIONS /v1/circles HTTP/1.1\r\nHost: x\r\nOrigin: https://app.example.com\r\nAccess-Control-Request-Method: POST\r\nConnection: close\r\n\r\n"
        )
        #expect(preflight.hasPrefix("HTTP/1.1 204"), "\(preflight)")
        #expect(preflight.contains("Access-Control-Allow-Origin: https://app.example.com"))
        #expect(preflight.lowercased().contains("access-control-allow-headers: accept, authorization"))
        let health = try server.rawHTTP("GET /healthz HTTP/1.1\r\nHost: x\r\nOrigin: https://app.example.com\r\nConnection: close\r\n\r\n")
        #expect(health.hasPrefix("HTTP/1.1 200"))
        #expect(health.contains("Access-Control-Allow-Origin: https://app.example.com"))
        let refused = try server.rawHTTP("GET /v1/circles HTTP/1.1\r\nHost: x\r\nOrigin: https://app.example.com\r\nConnection: close\r\n\r\n")
        #expect(refused.hasPrefix("HTTP/1.1 401"))
        #expect(refused.contains("Access-Control-Allow-Origin: https://app.example.com"))
        await server.stop()

        let plain = TestServer()
        defer { plain.remove() }
        try await plain.start()
        let answer = try plain.rawHTTP("GET /healthz HTTP/1.1\r\nHost: x\r\nOrigin: https://app.example.com\r\nConnection: close\r\n\r\n")
        #expect(answer.hasPrefix("HTTP/1.1 200"))
        #expect(!answer.contains("Access-Control"))
        await plain.stop()
    }
}
