import CircleServer
import CircleTestSupport
import CircleWire
import Foundation
import Testing

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// A browser's view of the API: keeps the session cookie (HttpOnly: never read by the page) and
/// sends the CSRF token the state gave, as the page does.
final class CookieClient: @unchecked Sendable {
    // @unchecked: used by one test task at a time.
    let base: String
    var cookie: String?
    var csrf: String?
    /// The `Origin` a browser would send (the server's own by default).
    var origin: String?

    init(base: String) {
        self.base = base
        self.origin = base
    }

    /// A session that never stores or adds cookies of its own (URLSession.shared would share
    /// them between the test's "browsers").
    static let session: URLSession = {
        let configuration = URLSessionConfiguration.ephemeral
        configuration.httpCookieStorage = nil
        configuration.httpShouldSetCookies = false
        configuration.httpCookieAcceptPolicy = .never
        return URLSession(configuration: configuration)
    }()

    struct Answer {
        var status: Int
        var body: String
        var headers: [String: String]
        func json() -> [String: Any] {
            (try? JSONSerialization.jsonObject(with: Data(self.body.utf8))) as? [String: Any] ?? [:]
        }
        var code: String? { (self.json()["error"] as? [String: Any])?["code"] as? String }
    }

    @discardableResult
    func call(_ method: String, _ path: String, _ json: String? = nil, bearer: String? = nil, csrf: Bool = true) async throws -> Answer {
        var request = URLRequest(url: URL(string: self.base + path)!)
        request.httpMethod = method
        request.httpShouldHandleCookies = false
        if let cookie { request.setValue(cookie, forHTTPHeaderField: "Cookie") }
        if let origin { request.setValue(origin, forHTTPHeaderField: "Origin") }
        if csrf, let token = self.csrf { request.setValue(token, forHTTPHeaderField: "X-Circle-CSRF") }
        if let bearer { request.setValue("Bearer \(bearer)", forHTTPHeaderField: "Authorization") }
        if let json {
            request.httpBody = Data(json.utf8)
            request.setValue("application/json", forHTTPHeaderField: "Content-Type")
        }
        let (data, response) = try await Self.session.data(for: request)
        let http = response as! HTTPURLResponse
        var headers: [String: String] = [:]
        for (key, value) in http.allHeaderFields { headers[String(describing: key).lowercased()] = String(describing: value) }
        if let setCookie = headers["set-cookie"], let pair = setCookie.split(separator: ";").first {
            let value = pair.split(separator: "=", maxSplits: 1)
            self.cookie = value.count == 2 && !value[1].isEmpty ? String(pair) : nil
        }
        let answer = Answer(status: http.statusCode, body: String(decoding: data, as: UTF8.self), headers: headers)
        if let csrf = answer.json()["csrf"] as? String { self.csrf = csrf }
        return answer
    }

    /// The state's user name, or nil when signed out.
    func signedInUser() async throws -> String? {
        let state = try await self.call("GET", HTTPAPI.Path.authState)
        return (state.json()["user"] as? [String: Any])?["name"] as? String
    }
}

@Suite("Sign-in and identity", .serialized)
struct IdentityLiveTests {
    /// A server with its first admin made through the setup link, and that admin's browser.
    static func serverWithAdmin(_ server: TestServer, name: String = "ada") async throws -> CookieClient {
        let running = try await server.start()
        let link = try #require(running.setupLink, "an empty store has a setup link")
        let token = String(link.split(separator: "#setup=")[1])
        let admin = CookieClient(base: server.httpBase)
        let state = try await admin.call("GET", HTTPAPI.Path.authState)
        #expect(state.json()["setupRequired"] as? Bool == true)
        let made = try await admin.call("POST", HTTPAPI.Path.authSetup, #"{"token":"\#(token)","name":"\#(name)","password":"correct horse battery","displayName":"Ada"}"#)
        #expect(made.status == 201, "\(made.body)")
        #expect(admin.cookie != nil && admin.csrf != nil)
        #expect(running.setupLink == nil, "the setup link works once")
        return admin
    }

    static func invite(_ admin: CookieClient, _ json: String = "{}") async throws -> String {
        let answer = try await admin.call("POST", HTTPAPI.Path.adminInvites, json)
        #expect(answer.status == 201, "\(answer.body)")
        return try #require(answer.json()["token"] as? String)
    }

    static func signUp(_ server: TestServer, invite: String, name: String, password: String = "a long password 1") async throws -> CookieClient {
        let browser = CookieClient(base: server.httpBase)
        let answer = try await browser.call("POST", HTTPAPI.Path.authSignUp, #"{"invite":"\#(invite)","name":"\#(name)","password":"\#(password)"}"#)
        #expect(answer.status == 201, "\(answer.body)")
        return browser
    }

    @Test("setup link, invite, sign-up, password sign-in, sign-out; the cookie is HttpOnly and SameSite=Lax")
    func accountsEndToEnd() async throws {
        let server = TestServer()
        defer { server.remove() }
        let admin = try await Self.serverWithAdmin(server)
        defer { Task { await server.stop() } }
        #expect(try await admin.signedInUser() == "ada")

        // The setup link is gone, and no second first admin can be made.
        let again = try await CookieClient(base: server.httpBase).call("POST", HTTPAPI.Path.authSetup, #"{"token":"x","name":"eve","password":"0123456789ab"}"#)
        #expect(again.status == 404 && again.code == "invite_invalid")

        try await server.createCircle("general", owner: "ada")
        let invite = try await Self.invite(admin, #"{"hours": 2, "uses": 1, "circles": ["general"]}"#)
        let offer = try await CookieClient(base: server.httpBase).call("POST", HTTPAPI.Path.authInvite, #"{"invite":"\#(invite)"}"#)
        #expect(offer.json()["circles"] as? [String] == ["general"])
        let bo = try await Self.signUp(server, invite: invite, name: "bo")
        #expect(try await bo.signedInUser() == "bo")
        let cookie = try #require(try await CookieClient(base: server.httpBase).call("POST", HTTPAPI.Path.authSignIn, #"{"name":"bo","password":"a long password 1"}"#).headers["set-cookie"])
        #expect(cookie.contains("HttpOnly") && cookie.contains("SameSite=Lax") && cookie.hasPrefix("circle_session="))
        #expect(!cookie.contains("Secure"), "plain http: no Secure flag (it would never be sent back)")

        // Used up.
        let second = try await CookieClient(base: server.httpBase).call("POST", HTTPAPI.Path.authSignUp, #"{"invite":"\#(invite)","name":"cy","password":"a long password 1"}"#)
        #expect(second.status == 404 && second.code == "invite_invalid")

        // Bo joined general through the invite, and can read it with the cookie.
        let circles = try await bo.call("GET", HTTPAPI.Path.circles)
        #expect(circles.status == 200 && circles.body.contains("\"general\""))

        let out = try await bo.call("POST", HTTPAPI.Path.authSignOut)
        #expect(out.status == 204, "\(out.body)")
        #expect(bo.cookie == nil)
        #expect(try await bo.signedInUser() == nil)
    }

    @Test("bad sign-ins: the same answer for an unknown name and a wrong password; then 429 with Retry-After")
    func signInFailures() async throws {
        let server = TestServer()
        defer { server.remove() }
        _ = try await Self.serverWithAdmin(server)
        defer { Task { await server.stop() } }
        let browser = CookieClient(base: server.httpBase)
        let unknown = try await browser.call("POST", HTTPAPI.Path.authSignIn, #"{"name":"nobody","password":"whatever it is"}"#)
        let wrong = try await browser.call("POST", HTTPAPI.Path.authSignIn, #"{"name":"ada","password":"whatever it is"}"#)
        #expect(unknown.status == 401 && wrong.status == 401)
        #expect(unknown.body == wrong.body, "nothing tells which names exist")
        for _ in 0..<4 { _ = try await browser.call("POST", HTTPAPI.Path.authSignIn, #"{"name":"ada","password":"still wrong!"}"#) }
        // Five failures for "ada": the next attempt, even with the right password, waits.
        let throttled = try await browser.call("POST", HTTPAPI.Path.authSignIn, #"{"name":"ada","password":"correct horse battery"}"#)
        #expect(throttled.status == 429 && throttled.code == "rate_limited")
        #expect(Int(throttled.headers["retry-after"] ?? "") ?? 0 >= 1)
        // Unknown names are throttled the same way.
        for _ in 0..<4 { _ = try await browser.call("POST", HTTPAPI.Path.authSignIn, #"{"name":"nobody","password":"whatever it is"}"#) }
        #expect(try await browser.call("POST", HTTPAPI.Path.authSignIn, #"{"name":"nobody","password":"x"}"#).status == 429)
        // Weak passwords and bad names are refused at sign-up with their reason.
        let short = try await CookieClient(base: server.httpBase).call("POST", HTTPAPI.Path.authSignUp, #"{"invite":"x","name":"cy","password":"short"}"#)
        #expect(short.status == 400 && short.body.contains("at least 10"))
    }

    @Test("cookie sessions: CSRF header on changes, Origin on sign-in and on the WebSocket upgrade")
    func csrfAndOrigin() async throws {
        let server = TestServer()
        defer { server.remove() }
        let admin = try await Self.serverWithAdmin(server)
        defer { Task { await server.stop() } }
        // Without the CSRF header a change is refused; reads work.
        let forged = try await admin.call("POST", HTTPAPI.Path.circles, #"{"name":"x"}"#, csrf: false)
        #expect(forged.status == 403 && forged.body.contains("X-Circle-CSRF"))
        #expect(try await admin.call("GET", HTTPAPI.Path.circles, csrf: false).status == 200)
        #expect(try await admin.call("POST", HTTPAPI.Path.circles, #"{"name":"x"}"#).status == 201)
        // A page of another site that makes the browser send the cookie: refused.
        let evil = CookieClient(base: server.httpBase)
        evil.cookie = admin.cookie
        evil.csrf = admin.csrf
        evil.origin = "https://evil.example"
        #expect(try await evil.call("POST", HTTPAPI.Path.circles, #"{"name":"y"}"#).status == 403)
        // Login CSRF: a sign-in posted from another site.
        #expect(try await evil.call("POST", HTTPAPI.Path.authSignIn, #"{"name":"ada","password":"correct horse battery"}"#).status == 403)

        // Cross-site WebSocket hijacking: the cookie alone, from another origin, is refused.
        let cookie = try #require(admin.cookie)
        await #expect(throws: (any Error).self) {
            _ = try await TestClient(url: server.wsURL, token: nil, headers: [("Cookie", cookie), ("Origin", "https://evil.example")])
        }
        await #expect(throws: (any Error).self) {
            _ = try await TestClient(url: server.wsURL, token: nil, headers: [("Cookie", cookie)])
        }
        let client = try await TestClient(url: server.wsURL, token: nil, headers: [("Cookie", cookie), ("Origin", server.httpBase)])
        let joined = try await client.request { .join("x", id: $0) }
        if case .ack = joined {} else { Issue.record("a join with a cookie session: \(joined)") }
        await client.close()
    }

    @Test("an admin bans a user: their sessions end, their open WebSocket closes with 4005, tokens of the app are refused")
    func banEndsEverything() async throws {
        let server = TestServer()
        defer { server.remove() }
        let admin = try await Self.serverWithAdmin(server)
        defer { Task { await server.stop() } }
        let bo = try await Self.signUp(server, invite: try await Self.invite(admin), name: "bo")
        let socket = try await TestClient(url: server.wsURL, token: nil, headers: [("Cookie", bo.cookie!), ("Origin", server.httpBase)])
        let jwtSocket = try await TestClient.connect(server, user: "bo")

        // Not an admin: no admin API.
        #expect(try await bo.call("GET", HTTPAPI.Path.adminUsers).status == 403)
        #expect(try await admin.call("PATCH", HTTPAPI.Path.adminUser("ada"), #"{"status":"banned"}"#).status == 400, "no admin bans themselves")

        let banned = try await admin.call("PATCH", HTTPAPI.Path.adminUser("bo"), #"{"status":"banned"}"#)
        #expect(banned.status == 200 && banned.json()["status"] as? String == "banned")
        for connection in [socket, jwtSocket] {
            #expect(try await Self.closeCode(of: connection) == CircleCloseCode.accessEnded)
        }
        #expect(try await bo.signedInUser() == nil)
        let refused = try await server.http("GET", HTTPAPI.Path.circles, token: try await server.token("bo"))
        #expect(refused.status == 403 && refused.body.contains("account_disabled"))
        let again = try await CookieClient(base: server.httpBase).call("POST", HTTPAPI.Path.authSignIn, #"{"name":"bo","password":"a long password 1"}"#)
        #expect(again.status == 403 && again.code == "account_disabled")

        // Reactivated: signs in again.
        #expect(try await admin.call("PATCH", HTTPAPI.Path.adminUser("bo"), #"{"status":"active"}"#).status == 200)
        #expect(try await CookieClient(base: server.httpBase).call("POST", HTTPAPI.Path.authSignIn, #"{"name":"bo","password":"a long password 1"}"#).status == 200)
        let users = try await admin.call("GET", HTTPAPI.Path.adminUsers)
        #expect((users.json()["users"] as? [[String: Any]])?.compactMap { $0["name"] as? String } == ["ada", "bo"])
    }

    @Test("sessions list, sign out everywhere, personal tokens and device credentials as bearer tokens")
    func sessionsAndTokens() async throws {
        let server = TestServer()
        defer { server.remove() }
        let admin = try await Self.serverWithAdmin(server)
        defer { Task { await server.stop() } }
        let laptop = CookieClient(base: server.httpBase)
        #expect(try await laptop.call("POST", HTTPAPI.Path.authSignIn, #"{"name":"ada","password":"correct horse battery"}"#).status == 200)
        let device = try await CookieClient(base: server.httpBase).call(
            "POST", HTTPAPI.Path.authSignIn, #"{"name":"ada","password":"correct horse battery","device":"build box"}"#
        )
        #expect(device.status == 200 && device.headers["set-cookie"] == nil, "a device gets a bearer credential, not a cookie")
        let deviceToken = try #require(device.json()["token"] as? String)
        let token = try await admin.call("POST", HTTPAPI.Path.authTokens, #"{"name":"deploy","days":30}"#)
        #expect(token.status == 201)
        let personal = try #require(token.json()["token"] as? String)
        #expect(try await server.http("GET", HTTPAPI.Path.circles, token: personal).status == 200)
        #expect(try await server.http("GET", HTTPAPI.Path.circles, token: deviceToken).status == 200)
        // A bearer credential needs no CSRF header: no browser sends it by itself.
        #expect(try await server.http("POST", HTTPAPI.Path.circles, token: personal, json: #"{"name":"bots"}"#).status == 201)

        let list = try await admin.call("GET", HTTPAPI.Path.authSessions)
        let sessions = try #require(list.json()["sessions"] as? [[String: Any]])
        #expect(Set(sessions.compactMap { $0["kind"] as? String }) == ["page", "device", "personal"])
        #expect(sessions.filter { $0["current"] as? Bool == true }.count == 1)

        let laptopSocket = try await TestClient(url: server.wsURL, token: nil, headers: [("Cookie", laptop.cookie!), ("Origin", server.httpBase)])
        #expect(try await admin.call("POST", HTTPAPI.Path.authSignOutEverywhere).status == 204)
        #expect(try await Self.closeCode(of: laptopSocket) == CircleCloseCode.accessEnded)
        #expect(try await laptop.signedInUser() == nil)
        #expect(try await server.http("GET", HTTPAPI.Path.circles, token: deviceToken).status == 401, "devices are signed out too")
        #expect(try await server.http("GET", HTTPAPI.Path.circles, token: personal).status == 200, "personal tokens stay")
        #expect(try await server.http("GET", HTTPAPI.Path.circles, token: "circle_forged").status == 401)
    }

    @Test("admins manage the members of any circle, private ones too, without reading them; members of a circle do not")
    func adminsManageMembers() async throws {
        let server = TestServer()
        defer { server.remove() }
        let admin = try await Self.serverWithAdmin(server)
        defer { Task { await server.stop() } }
        try await server.createCircle("secret", owner: "owner", isPrivate: true)
        let cy = try await Self.signUp(server, invite: try await Self.invite(admin), name: "cy")
        #expect(try await admin.call("POST", HTTPAPI.Path.members("secret"), #"{"user":"cy"}"#).status == 200)
        #expect(try await admin.call("GET", HTTPAPI.Path.members("secret")).body.contains("cy"))
        #expect(try await admin.call("GET", HTTPAPI.Path.messages("secret")).status == 403, "an admin manages, but does not read")
        let refused = try await cy.call("POST", HTTPAPI.Path.members("secret"), #"{"user":"dee"}"#)
        #expect(refused.status == 403 && refused.body.contains("owner (owner) or an admin"))
        #expect(try await admin.call("DELETE", HTTPAPI.Path.member("cy", of: "secret")).status == 200)
        #expect(try await cy.call("GET", HTTPAPI.Path.messages("secret")).status == 403)
    }

    /// Reads until the server closes the connection; returns the close code.
    static func closeCode(of client: TestClient) async throws -> UInt16? {
        while try await client.next(timeout: .seconds(10)) != nil {}
        return await client.socket.closeInfo.code.rawValue
    }
}

@Suite("Sign-in and identity across nodes", .serialized)
struct IdentityNodeTests {
    /// Node A's signals may be lost (muted): B then learns of the ban from the account log.
    @Test("a ban through node A closes the user's connections on node B and refuses them there", arguments: [false, true])
    func banAcrossNodes(muted: Bool) async throws {
        let nodes = try await NodeFanoutTests.Nodes(muteA: muted, pollInterval: .milliseconds(200))
        defer { Task { await nodes.stop() } }
        let link = try #require(nodes.a.server?.setupLink)
        let admin = CookieClient(base: nodes.a.httpBase)
        let token = String(link.split(separator: "#setup=")[1])
        #expect(try await admin.call("POST", HTTPAPI.Path.authSetup, #"{"token":"\#(token)","name":"ada","password":"correct horse battery"}"#).status == 201)
        let invite = try await IdentityLiveTests.invite(admin)
        let bo = try await IdentityLiveTests.signUp(nodes.a, invite: invite, name: "bo")
        // Bo's cookie and an app token work on B too.
        let onB = CookieClient(base: nodes.b.httpBase)
        onB.cookie = bo.cookie
        #expect(try await onB.signedInUser() == "bo")
        let cookieSocket = try await TestClient(url: nodes.b.wsURL, token: nil, headers: [("Cookie", bo.cookie!), ("Origin", nodes.b.httpBase)])
        let tokenSocket = try await TestClient.connect(nodes.b, user: "bo")

        #expect(try await admin.call("PATCH", HTTPAPI.Path.adminUser("bo"), #"{"status":"banned"}"#).status == 200)
        for socket in [cookieSocket, tokenSocket] {
            #expect(try await IdentityLiveTests.closeCode(of: socket) == CircleCloseCode.accessEnded)
        }
        #expect(try await onB.signedInUser() == nil)
        // B refuses the app's token as soon as it has re-read the account (the close above
        // comes from the same signal or poll, so this is bounded, not timed).
        let deadline = ContinuousClock.now + .seconds(20)
        var status = 0
        while ContinuousClock.now < deadline {
            status = try await nodes.b.http("GET", HTTPAPI.Path.circles, token: try await nodes.b.token("bo")).status
            if status == 403 { break }
            try await Task.sleep(for: .milliseconds(50))
        }
        #expect(status == 403, "node B refuses the banned user's token")
    }
}
