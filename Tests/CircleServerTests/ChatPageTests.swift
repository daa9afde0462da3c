import CircleTestSupport
import Foundation
import NIOCore
import NIOHTTP1
import Testing

@testable import CircleServer

@Suite("The chat page's files")
struct ChatPageTests {
    static let policy =
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' blob: data:; connect-src 'self' ws: wss:; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"

    private func request(_ uri: String, headers: [(String, String)] = []) -> APIRequest {
        APIRequest(head: HTTPRequestHead(version: .http1_1, method: .GET, uri: uri, headers: HTTPHeaders(headers)), body: nil)
    }

    @Test("the resources are found beside the test binary and served with the security headers")
    func servedFromResources() throws {
        let page = ChatPage.load()
        #expect(page.directory != nil)
        #expect(Set(page.assets.keys).isSuperset(of: ["index.html", "app.js", "markdown.js", "app.css", "icon.svg"]))
        let index = page.response(for: nil, request: self.request("/"))
        #expect(index.status == .ok)
        #expect(index.contentType == "text/html; charset=utf-8")
        #expect(index.headers.first(name: "Content-Security-Policy") == Self.policy)
        #expect(index.headers.first(name: "X-Frame-Options") == "DENY")
        #expect(index.headers.first(name: "X-Content-Type-Options") == "nosniff")
        #expect(index.headers.first(name: "Referrer-Policy") == "no-referrer")
        #expect(String(buffer: index.body).contains("<script src=\"/assets/app.js\""))

        let script = page.response(for: "app.js", request: self.request("/assets/app.js"))
        #expect(script.contentType == "text/javascript; charset=utf-8")
        let etag = try #require(script.headers.first(name: "ETag"))
        let again = page.response(for: "app.js", request: self.request("/assets/app.js", headers: [("If-None-Match", etag)]))
        #expect(again.status == .notModified)
        #expect(again.body.readableBytes == 0)
        #expect(page.response(for: "nope.js", request: self.request("/assets/nope.js")).status == .notFound)
        #expect(page.response(for: "index.html", request: self.request("/assets/index.html")).status == .notFound)
    }

    @Test("without its files the page answers 503 and says what is missing")
    func missingFiles() {
        let page = ChatPage(assets: [:], directory: nil)
        let response = page.response(for: nil, request: self.request("/"))
        #expect(response.status == .serviceUnavailable)
        #expect(String(buffer: response.body).contains("Circle_CircleServer.resources"))
        #expect(response.headers.first(name: "Content-Security-Policy") == Self.policy)
    }

    @Test("a running server serves the page at / and its files under /assets")
    func liveServer() async throws {
        let server = TestServer()
        defer { server.remove() }
        try await server.start()
        let page = try server.rawHTTP("GET / HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        #expect(page.hasPrefix("HTTP/1.1 200 OK"))
        #expect(page.contains("Content-Security-Policy: \(Self.policy)"))
        let style = try server.rawHTTP("GET /assets/app.css HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        #expect(style.hasPrefix("HTTP/1.1 200 OK"))
        #expect(style.contains("Content-Type: text/css; charset=utf-8"))
        await server.stop()
    }
}
