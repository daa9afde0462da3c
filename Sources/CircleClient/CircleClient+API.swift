import CircleHTTPClient
import CircleSocket
import CircleWire
import Foundation
import NIOHTTP1

/// Circle management over the HTTP API (docs/API.md). These calls do not need ``CircleClient/connect()``:
/// they go to the HTTP side of ``CircleClientConfiguration/servers``' first server (or of
/// ``TransferConfiguration/baseURL``) with a token from the token provider, over the same
/// TLS settings and kept-alive connections as media transfers.
///
/// ```swift
/// let team = try await client.createCircle("team", private: true)
/// try await client.addMember("bob", to: "team")
/// for circle in try await client.circles() { print(circle.name, circle.lastSeq) }
/// ```
///
/// Failures throw ``CircleClientError``: when the server refused, its `code` (`forbidden`,
/// `not_found`, `conflict`, `bad_request`, `unauthorized`, …), `message` and ``CircleClientError/httpStatus``;
/// `not_connected` when the server cannot be reached, `tls_failed`, or `timed_out`. What the
/// token provider throws is passed on unchanged.
extension CircleClient {
    /// The circles this user can see: every public circle and the private ones they are a member of, sorted by name.
    public func circles() async throws -> [HTTPAPI.Circle] {
        try await self.api.call(.GET, HTTPAPI.Path.circles, as: HTTPAPI.CircleList.self).circles
    }

    /// `GET /v1/search`: the page ``search(_:)`` gives when connected, asked over HTTP (no
    /// connection needed; no answer from the offline cache).
    ///
    /// - Parameter request: What to find; `q` is required.
    /// - Returns: A page of hits and the cursor of the next.
    public func searchPage(_ request: HTTPAPI.SearchRequest) async throws -> HTTPAPI.SearchResults {
        var query = URLComponents()
        query.queryItems = request.queryItems.map { URLQueryItem(name: $0.name, value: $0.value) }
        // A literal + in a query string reads as a space (form encoding): send it escaped.
        let encoded = (query.percentEncodedQuery ?? "").replacingOccurrences(of: "+", with: "%2B")
        return try await self.api.call(.GET, HTTPAPI.Path.search + "?" + encoded, as: HTTPAPI.SearchResults.self)
    }

    /// The people with accounts on the server (active ones), with their display names and
    /// photos; empty on a server whose users all come from an app's tokens.
    public func profiles() async throws -> [HTTPAPI.Profile] {
        try await self.api.call(.GET, HTTPAPI.Path.users, as: HTTPAPI.ProfileList.self).users
    }

    /// Creates a circle owned by this user.
    ///
    /// - Parameters:
    ///   - name: 1–64 characters `a`–`z`, `0`–`9`, `.`, `_`, `-`.
    ///   - private: whether only members may see, join and read it.
    /// - Returns: the new circle.
    /// - Throws: ``CircleClientError`` `conflict` when the name is taken, `bad_request` when it is not valid.
    @discardableResult
    public func createCircle(_ name: String, private isPrivate: Bool = false) async throws -> HTTPAPI.Circle {
        try await self.api.call(.POST, HTTPAPI.Path.circles, body: HTTPAPI.CreateCircle(name: name, private: isPrivate), as: HTTPAPI.Circle.self)
    }

    /// Finds or starts the direct message with `people` (2 to 9 people with this user, who is
    /// added): a private circle named by the server (`dm.…`), whose ``HTTPAPI/Circle/direct``
    /// lists its members. Starting it again, by any of them, gives the same one.
    ///
    /// ```swift
    /// let dm = try await client.startDirectMessage(with: ["bob"])
    /// try await client.join(dm.name)
    /// ```
    ///
    /// - Throws: ``CircleClientError`` `bad_request` for an invalid name or too many or too few people.
    public func startDirectMessage(with people: [String]) async throws -> HTTPAPI.Circle {
        try await self.api.call(.POST, HTTPAPI.Path.directMessages, body: HTTPAPI.StartDirectMessage(members: people), as: HTTPAPI.Circle.self)
    }

    /// Sets this user's notification level in `circle` (`nil`: back to the default, `all` for a
    /// direct message and `mentions` for a circle). The user's connections get a
    /// ``CircleEvent/notify(level:)`` event in the circles they joined.
    ///
    /// - Returns: the circle as listed afterwards, with its ``HTTPAPI/Circle/notify``.
    @discardableResult
    public func setNotificationLevel(_ level: NotificationLevel?, in circle: String) async throws -> HTTPAPI.Circle {
        try await self.api.call(.PUT, HTTPAPI.Path.notify(circle), body: HTTPAPI.NotificationSetting(level: level), as: HTTPAPI.Circle.self)
    }

    /// What `circle` keeps (docs/OPERATIONS.md, "Retention"): `days` and `keep` are `nil` for no such limit.
    public func retention(of circle: String) async throws -> HTTPAPI.RetentionSetting {
        try await self.api.call(.GET, HTTPAPI.Path.retention(circle), as: HTTPAPI.RetentionSetting.self)
    }

    /// Sets what `circle` keeps: entries older than `days` days and beyond the newest `keep`
    /// are removed in the background; both `nil` keeps everything. The circle's owner, an admin,
    /// or an API key with `manage`.
    ///
    /// - Throws: ``CircleClientError`` `bad_request` for a value out of range (days 1–36,500,
    ///   keep 1–1,000,000,000), `forbidden` for anyone else.
    @discardableResult
    public func setRetention(days: Int64?, keep: Int64?, in circle: String) async throws -> HTTPAPI.RetentionSetting {
        try await self.api.call(.PUT, HTTPAPI.Path.retention(circle), body: HTTPAPI.RetentionSetting(days: days, keep: keep), as: HTTPAPI.RetentionSetting.self)
    }

    /// One circle.
    ///
    /// - Throws: ``CircleClientError`` `not_found`, or `forbidden` for a private circle this user is not a member of.
    public func circle(named name: String) async throws -> HTTPAPI.Circle {
        try await self.api.call(.GET, HTTPAPI.Path.circle(name), as: HTTPAPI.Circle.self)
    }

    /// The members of a circle, sorted.
    public func members(of circle: String) async throws -> [String] {
        try await self.api.call(.GET, HTTPAPI.Path.members(circle), as: HTTPAPI.MemberList.self).members
    }

    /// Adds a member (the circle's owner only); adding a member again changes nothing.
    ///
    /// - Returns: the new member list.
    @discardableResult
    public func addMember(_ user: String, to circle: String) async throws -> [String] {
        try await self.api.call(.POST, HTTPAPI.Path.members(circle), body: HTTPAPI.AddMember(user: user), as: HTTPAPI.MemberList.self).members
    }

    /// Removes a member (the owner removes anyone but themselves; a member may remove
    /// themselves). Removing someone who is not a member changes nothing.
    ///
    /// - Returns: the new member list.
    @discardableResult
    public func removeMember(_ user: String, from circle: String) async throws -> [String] {
        try await self.api.call(.DELETE, HTTPAPI.Path.member(user, of: circle), as: HTTPAPI.MemberList.self).members
    }

    /// Turns the circle's system entries (members added, removed, left; PROTOCOL.md "System
    /// entries") off or on: its owner, an admin, or an API key with `manage`.
    ///
    /// - Returns: the circle afterwards (``HTTPAPI/Circle/systemEntries``).
    @discardableResult
    public func setSystemEntries(_ enabled: Bool, in circle: String) async throws -> HTTPAPI.Circle {
        try await self.api.call(.PUT, HTTPAPI.Path.systemEntries(circle), body: HTTPAPI.SystemEntries(enabled: enabled), as: HTTPAPI.Circle.self)
    }

    /// Asks a server started with `--dev` for a development token (`GET /v1/dev/token`). For
    /// development only: such a server hands anyone a token for any name.
    ///
    /// - Parameters:
    ///   - user: the user name the token is for.
    ///   - server: the server's WebSocket URL (`ws://host:port/v1/ws`; a path before `/v1/ws` is
///     kept as the prefix the server is mounted under) or its HTTP base URL.
    ///   - tls: trust and pins for `wss`/`https`.
    ///   - timeout: for the connection and for the answer.
    /// - Throws: ``CircleClientError``: `not_found` (HTTP 404) when the server does not hand out
    ///   development tokens, `not_connected` when it cannot be reached.
    public static func developmentToken(
        for user: String,
        server: String,
        tls: WebSocketTLSConfiguration = .init(),
        timeout: Duration = .seconds(10)
    ) async throws -> String {
        let base = try MediaTransfers.base(CircleClientConfiguration(servers: [server], tokenProvider: { "" }))
        let http = HTTPClient(configuration: .init(connectTimeout: timeout, idleTimeout: timeout, tls: tls))
        let api = ServerAPI(target: base.target, prefix: base.prefix, http: http, tokenProvider: nil)
        var query = URLComponents()
        query.queryItems = [URLQueryItem(name: "user", value: user)]
        let uri = HTTPAPI.Path.developmentToken + "?" + (query.percentEncodedQuery ?? "")
        let result: Result<String, any Error>
        do {
            result = .success(try await api.call(.GET, uri, as: HTTPAPI.DevelopmentToken.self).token)
        } catch {
            result = .failure(error)
        }
        await http.pool.closeAll()
        return try result.get()
    }
}
