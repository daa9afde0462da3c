import CircleTestSupport
import Testing

@Suite("HTTP/1.0 without keep-alive")
struct HTTP10Tests {
    @Test("the connection is closed after the answer")
    func closedAfterAnswer() async throws {
        let server = TestServer()
        defer { server.remove() }
        try await server.start()
        let connection = try RawTCP(port: server.port)
        connection.send("GET /healthz HTTP/1.0\r\n\r\n")
        let (bytes, ending) = await connection.readToEnd(timeout: .seconds(10))
        #expect(String(decoding: bytes, as: UTF8.self).hasPrefix("HTTP/1.1 200"))
        #expect(ending == .closed)
        await server.stop()
    }
}
