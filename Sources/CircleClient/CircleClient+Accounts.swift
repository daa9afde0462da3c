import CircleHTTPClient
import CircleSocket
import CircleWire
import Foundation

/// Accounts over the HTTP API (docs/API.md, "Sign-in and identity"), for tools that act for a
/// person: `circle login`, `circle logout`, `circle admin`. Every failure is a
/// ``CircleClientError`` with the server's code and message.
extension CircleClient {
    /// Signs in with a name and password and gets a credential for this device (never a
    /// cookie): send it as a bearer token; ``signOut(credential:server:tls:timeout:)`` ends it.
    ///
    /// - Parameters:
    ///   - device: What the sessions list calls this device (1–60 characters).
    ///   - server: The server's WebSocket URL (`wss://chat.example.com/v1/ws`).
    public static func signIn(
        name: String,
        password: String,
        device: String,
        server: String,
        tls: WebSocketTLSConfiguration = .init(),
        timeout: Duration = .seconds(30)
    ) async throws -> HTTPAPI.Credential {
        try await Self.withAPI(server: server, token: nil, tls: tls, timeout: timeout) { api in
            try await api.call(.POST, HTTPAPI.Path.authSignIn, body: HTTPAPI.SignIn(name: name, password: password, device: device), as: HTTPAPI.Credential.self)
        }
    }

    /// Asks for a code that a person signed in on a page approves (a device-authorization
    /// flow; a terminal cannot use a passkey). Show ``HTTPAPI/DeviceCode/code`` and its `url`,
    /// then call ``pollDeviceSignIn(_:server:tls:timeout:)`` every `interval` seconds.
    public static func startDeviceSignIn(
        device: String,
        server: String,
        tls: WebSocketTLSConfiguration = .init(),
        timeout: Duration = .seconds(30)
    ) async throws -> HTTPAPI.DeviceCode {
        try await Self.withAPI(server: server, token: nil, tls: tls, timeout: timeout) { api in
            try await api.call(.POST, HTTPAPI.Path.deviceStart, body: HTTPAPI.DeviceStart(device: device), as: HTTPAPI.DeviceCode.self)
        }
    }

    /// The device credential once the code was approved; `nil` while it waits. A code that
    /// expired is an error (`invite_invalid`).
    public static func pollDeviceSignIn(
        _ code: HTTPAPI.DeviceCode,
        server: String,
        tls: WebSocketTLSConfiguration = .init(),
        timeout: Duration = .seconds(30)
    ) async throws -> HTTPAPI.Credential? {
        let answer = try await Self.withAPI(server: server, token: nil, tls: tls, timeout: timeout) { api in
            try await api.call(.POST, HTTPAPI.Path.deviceToken, body: HTTPAPI.DevicePoll(code: code.code, pollToken: code.pollToken), as: DevicePollAnswer.self)
        }
        guard let token = answer.token, let user = answer.user, let session = answer.session else { return nil }
        return HTTPAPI.Credential(token: token, user: user, session: session)
    }

    /// A poll's answer: `{"status": "pending"}` (202), or a credential.
    private struct DevicePollAnswer: Decodable, Sendable {
        var status: String?
        var token: String?
        var user: String?
        var session: HTTPAPI.SessionInfo?
    }

    /// Ends the session `credential` belongs to (the server forgets it).
    public static func signOut(credential: String, server: String, tls: WebSocketTLSConfiguration = .init(), timeout: Duration = .seconds(30)) async throws {
        _ = try await Self.withAPI(server: server, token: credential, tls: tls, timeout: timeout) { api in
            try await api.call(.POST, HTTPAPI.Path.authSignOut, as: ServerAPI.NoContent.self)
        }
    }

    /// Who `token` names, as the server sees it.
    public static func authState(token: String, server: String, tls: WebSocketTLSConfiguration = .init(), timeout: Duration = .seconds(30)) async throws
        -> HTTPAPI.AuthState
    {
        try await Self.withAPI(server: server, token: token, tls: tls, timeout: timeout) { api in
            try await api.call(.GET, HTTPAPI.Path.authState, as: HTTPAPI.AuthState.self)
        }
    }

    /// Admins: makes an invite link.
    public static func createInvite(
        _ invite: HTTPAPI.CreateInvite,
        token: String,
        server: String,
        tls: WebSocketTLSConfiguration = .init(),
        timeout: Duration = .seconds(30)
    ) async throws -> HTTPAPI.InviteInfo {
        try await Self.withAPI(server: server, token: token, tls: tls, timeout: timeout) { api in
            try await api.call(.POST, HTTPAPI.Path.adminInvites, body: invite, as: HTTPAPI.InviteInfo.self)
        }
    }

    /// Admins: makes a bot account and returns its first credential (shown once).
    public static func createBot(
        _ bot: HTTPAPI.CreateBot,
        token: String,
        server: String,
        tls: WebSocketTLSConfiguration = .init(),
        timeout: Duration = .seconds(30)
    ) async throws -> HTTPAPI.Credential {
        try await Self.withAPI(server: server, token: token, tls: tls, timeout: timeout) { api in
            try await api.call(.POST, HTTPAPI.Path.adminBots, body: bot, as: HTTPAPI.Credential.self)
        }
    }

    /// Admins: every invite, newest first.
    public static func invites(token: String, server: String, tls: WebSocketTLSConfiguration = .init(), timeout: Duration = .seconds(30)) async throws
        -> [HTTPAPI.InviteInfo]
    {
        try await Self.withAPI(server: server, token: token, tls: tls, timeout: timeout) { api in
            try await api.call(.GET, HTTPAPI.Path.adminInvites, as: HTTPAPI.InviteList.self).invites
        }
    }

    /// Admins: revokes an invite.
    public static func revokeInvite(id: String, token: String, server: String, tls: WebSocketTLSConfiguration = .init(), timeout: Duration = .seconds(30))
        async throws
    {
        _ = try await Self.withAPI(server: server, token: token, tls: tls, timeout: timeout) { api in
            try await api.call(.DELETE, HTTPAPI.Path.adminInvite(id), as: ServerAPI.NoContent.self)
        }
    }

    /// Admins: every account.
    public static func users(token: String, server: String, tls: WebSocketTLSConfiguration = .init(), timeout: Duration = .seconds(30)) async throws
        -> [HTTPAPI.UserInfo]
    {
        try await Self.withAPI(server: server, token: token, tls: tls, timeout: timeout) { api in
            try await api.call(.GET, HTTPAPI.Path.adminUsers, as: HTTPAPI.UserList.self).users
        }
    }

    /// Admins: changes a user's role or status (`banned` and `deactivated` end their sessions
    /// and close their connections on every node).
    public static func updateUser(
        _ name: String,
        _ update: HTTPAPI.UpdateUser,
        token: String,
        server: String,
        tls: WebSocketTLSConfiguration = .init(),
        timeout: Duration = .seconds(30)
    ) async throws -> HTTPAPI.UserInfo {
        try await Self.withAPI(server: server, token: token, tls: tls, timeout: timeout) { api in
            try await api.call(.PATCH, HTTPAPI.Path.adminUser(name), body: update, as: HTTPAPI.UserInfo.self)
        }
    }

    /// One HTTP client for one call, closed after it.
    static func withAPI<Answer: Sendable>(
        server: String,
        token: String?,
        tls: WebSocketTLSConfiguration,
        timeout: Duration,
        _ body: (ServerAPI) async throws -> Answer
    ) async throws -> Answer {
        let base = try MediaTransfers.base(CircleClientConfiguration(servers: [server], tokenProvider: { "" }))
        let http = HTTPClient(configuration: .init(connectTimeout: timeout, idleTimeout: timeout, tls: tls))
        var provider: (@Sendable () async throws -> String)?
        if let token { provider = { @Sendable in token } }
        let api = ServerAPI(target: base.target, prefix: base.prefix, http: http, tokenProvider: provider)
        let result: Result<Answer, any Error>
        do {
            result = .success(try await body(api))
        } catch {
            result = .failure(error)
        }
        await http.pool.closeAll()
        return try result.get()
    }
}
