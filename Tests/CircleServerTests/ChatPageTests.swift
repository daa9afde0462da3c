import CircleTestSupport
import Foundation
import HTTPTypes
import Hummingbird
import NIOCore
import Testing

@testable import CircleServer

@Suite("The chat page's files")
struct ChatPageTests {
    static let policy =
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' blob: data:; connect-src 'self' ws: wss:; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"

    private func headers(_ pairs: [(String, String)] = []) -> HTTPFields {
        var fields = HTTPFields()
        for (name, value) in pairs { fields[HTTPField.Name(name)!] = value }
        return fields
    }

    /// The bytes of a response body, as the server would write them.
    private func body(_ response: Response) async throws -> String {
        let collector = BodyCollector()
        try await response.body.write(collector)
        return String(buffer: collector.buffer.value)
    }

    @Test("the resources are found beside the test binary and served with the security headers")
    func servedFromResources() async throws {
        let page = ChatPage.load()
        #expect(page.directory != nil)
        #expect(Set(page.assets.keys).isSuperset(of: ["index.html", "app.js", "markdown.js", "app.css", "icon.svg"]))
        let index = page.response(for: nil, headers: self.headers())
        #expect(index.status == .ok)
        #expect(index.headers[.contentType] == "text/html; charset=utf-8")
        #expect(index.headers[HTTPField.Name("Content-Security-Policy")!] == Self.policy)
        #expect(index.headers[HTTPField.Name("X-Frame-Options")!] == "DENY")
        #expect(index.headers[HTTPField.Name("X-Content-Type-Options")!] == "nosniff")
        #expect(index.headers[HTTPField.Name("Referrer-Policy")!] == "no-referrer")
        #expect(try await self.body(index).contains("<script src=\"assets/app.js\""))

        let script = page.response(for: "app.js", headers: self.headers())
        #expect(script.headers[.contentType] == "text/javascript; charset=utf-8")
        let etag = try #require(script.headers[.eTag])
        let again = page.response(for: "app.js", headers: self.headers([("If-None-Match", etag)]))
        #expect(again.status == .notModified)
        #expect(try await self.body(again).isEmpty)
        #expect(page.response(for: "nope.js", headers: self.headers()).status == .notFound)
        #expect(page.response(for: "index.html", headers: self.headers()).status == .notFound)
    }

    @Test("without its files the page answers 503 and says what is missing")
    func missingFiles() async throws {
        let page = ChatPage(assets: [:], directory: nil)
        let response = page.response(for: nil, headers: self.headers())
        #expect(response.status == .serviceUnavailable)
        #expect(try await self.body(response).contains("Circle_CircleServer.resources"))
        #expect(response.headers[HTTPField.Name("Content-Security-Policy")!] == Self.policy)
    }

    @Test("a running server serves the page at / and its files under /assets")
    func liveServer() async throws {
        let server = TestServer()
        defer { server.remove() }
        try await server.start()
        let page = try await server.rawHTTP("GET / HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        #expect(page.hasPrefix("HTTP/1.1 200 OK"))
        #expect(page.contains("Content-Security-Policy: \(Self.policy)"))
        let style = try await server.rawHTTP("GET /assets/app.css HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        #expect(style.hasPrefix("HTTP/1.1 200 OK"))
        #expect(style.contains("Content-Type: text/css; charset=utf-8"))
        await server.stop()
    }
}

/// Collects what a response body writes.
private struct BodyCollector: ResponseBodyWriter {
    final class Box: @unchecked Sendable {
        // @unchecked: written by one test task, read after the write finished.
        var value = ByteBuffer()
    }
    let buffer = Box()

    mutating func write(_ buffer: ByteBuffer) async throws {
        var buffer = buffer
        self.buffer.value.writeBuffer(&buffer)
    }

    consuming func finish(_ trailingHeaders: HTTPFields?) async throws {}
}
