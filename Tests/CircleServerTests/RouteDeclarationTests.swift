@testable import CircleServer
import CircleTestSupport
import CircleWire
import Foundation
import HTTPTypes
import Hummingbird
import NIOConcurrencyHelpers
import Testing

/// Records the routes a router is given, without serving them.
final class RouteRecorder<Context: RequestContext>: RouterMethods, Sendable {
    let routes = NIOLockedValueBox<[(path: String, method: HTTPRequest.Method)]>([])

    @discardableResult func on<Responder: HTTPResponder>(_ path: RouterPath, method: HTTPRequest.Method, responder: Responder) -> Self
    where Responder.Context == Context {
        self.routes.withLockedValue { $0.append((path.description, method)) }
        return self
    }

    func add(middleware: any MiddlewareProtocol<Request, Response, Context>) -> Self { self }

    var paths: Set<String> { Set(self.routes.withLockedValue { $0.map(\.path) }) }
}

/// Every route the server's router registers is declared in `HTTPAPI.Path` (the constants and
/// `HTTPAPI.Path.Pattern`), and every declaration is a route: no route string is written twice
/// between the router, the SDK and the CLI.
@Suite("Routes declared once in HTTPAPI.Path")
struct RouteDeclarationTests {
    static var declared: Set<String> { Set(HTTPAPI.Path.all + HTTPAPI.Path.Pattern.all.map(\.template)) }

    func withServer<T>(_ body: (CircleServer) async throws -> T) async throws -> T {
        let data = FileManager.default.temporaryDirectory.appendingPathComponent("circle-routes-\(UUID().uuidString)").path
        defer { try? FileManager.default.removeItem(atPath: data) }
        let server = try await CircleServer(configuration: CircleServerConfiguration(dataDirectory: data, tokenKeys: .hs256(secret: testSecret)))
        do {
            let result = try await body(server)
            await server.closeStore()
            return result
        } catch {
            await server.closeStore()
            throw error
        }
    }

    @Test func everyRegisteredRouteIsDeclaredAndEveryDeclarationIsRegistered() async throws {
        let registered = try await self.withServer { server in
            let recorder = RouteRecorder<BasicCircleRequestContext>()
            server.addRoutes(to: recorder)
            return recorder.paths
        }
        #expect(registered.count > 60, "\(registered.sorted())")
        #expect(registered.subtracting(Self.declared).sorted() == [], "registered but not declared in HTTPAPI.Path")
        #expect(Self.declared.subtracting(registered).sorted() == [], "declared in HTTPAPI.Path but not registered")
    }

    @Test func mountedUnderAPrefixEveryRouteIsUnderIt() async throws {
        let registered = try await self.withServer { server in
            let recorder = RouteRecorder<BasicCircleRequestContext>()
            server.addRoutes(to: recorder.group("chat"))
            return recorder.paths
        }
        #expect(!registered.isEmpty)
        #expect(registered.filter { $0 != "/chat" && !$0.hasPrefix("/chat/") }.sorted() == [])
        #expect(registered == Set(Self.declared.map { $0 == "/" ? "/chat" : "/chat" + $0 }))
    }

    @Test func patternsFillInEscapedSegments() {
        #expect(HTTPAPI.Path.member("josé", of: "club") == "/v1/circles/club/members/jos%C3%A9")
        #expect(HTTPAPI.Path.reaction("👍", to: 7, in: "general") == "/v1/circles/general/messages/7/reactions/%F0%9F%91%8D")
        #expect(HTTPAPI.Path.adminWebhookRetry("wh/1", delivery: "d 2") == "/v1/admin/webhooks/wh%2F1/deliveries/d%202/retry")
        #expect(HTTPAPI.Path.circle("a/b") == "/v1/circles/a%2Fb")
        #expect(HTTPAPI.Path.Pattern.adminWebhookRetry.parameters == ["id", "delivery"])
        // Every pattern's parameters are distinct names the routes read.
        for pattern in HTTPAPI.Path.Pattern.all {
            #expect(!pattern.parameters.isEmpty, "\(pattern)")
            #expect(Set(pattern.parameters).count == pattern.parameters.count, "\(pattern)")
        }
        // No constant repeats a pattern or another constant.
        #expect(Set(HTTPAPI.Path.all).count == HTTPAPI.Path.all.count)
        #expect(Set(HTTPAPI.Path.Pattern.all).count == HTTPAPI.Path.Pattern.all.count)
    }

    @Test(arguments: [
        ("", true), ("/chat", true), ("/apps/chat-1", true), ("/a.b_c~d", true),
        ("chat", false), ("/chat/", false), ("/", false), ("//chat", false), ("/chat//x", false), ("/./x", false), ("/..", false),
        ("/ch at", false), ("/chat?x", false), ("/chat#x", false), ("/ch%41t", false), ("/chät", false), ("/" + String(repeating: "a", count: 200), false),
    ])
    func pathPrefixes(prefix: String, valid: Bool) {
        #expect(CircleServerConfiguration.isValidPathPrefix(prefix) == valid, "\(prefix)")
        var configuration = CircleServerConfiguration(tokenKeys: .hs256(secret: testSecret))
        configuration.pathPrefix = prefix
        #expect((try? configuration.validate()) != nil || !valid)
        #expect((try? configuration.validate()) == nil || valid)
    }
}
