@testable import CircleClient
import Testing

@Suite("Where the SDK's HTTP calls go")
struct ServerBaseTests {
    @Test(
        "the HTTP base of the first server, or of transfers.baseURL, with the prefix a mounted server has",
        arguments: [
            ("ws://127.0.0.1:8080/v1/ws", nil, "127.0.0.1", 8080, false, ""),
            ("wss://chat.example.com/v1/ws", nil, "chat.example.com", 443, true, ""),
            ("wss://example.com/chat/v1/ws", nil, "example.com", 443, true, "/chat"),
            ("ws://[::1]:9000/v1/ws?x=1", nil, "::1", 9000, false, ""),
            ("wss://example.com/v1/ws", "https://media.example.com:8443/api/", "media.example.com", 8443, true, "/api"),
            ("wss://example.com/v1/ws", "http://10.0.0.2", "10.0.0.2", 80, false, ""),
        ] as [(String, String?, String, Int, Bool, String)]
    )
    func base(server: String, baseURL: String?, host: String, port: Int, tls: Bool, prefix: String) throws {
        let configuration = CircleClientConfiguration(servers: [server], tokenProvider: { "" }, transfers: .init(baseURL: baseURL))
        let base = try MediaTransfers.base(configuration)
        #expect(base.target == HTTPTarget(host: host, port: port, usesTLS: tls))
        #expect(base.prefix == prefix)
    }

    @Test("a server URL without a host is refused with bad_request")
    func refused() {
        #expect(throws: CircleClientError.self) {
            _ = try MediaTransfers.base(CircleClientConfiguration(servers: ["ws:///v1/ws"], tokenProvider: { "" }))
        }
    }
}
