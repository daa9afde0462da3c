import Foundation
import NIOCore
import SQLiteNIO

extension SQLiteStore {
    // MARK: - Accounts

    public func accountCount() async throws -> Int {
        try await self.exclusive("count accounts") { connection in
            let rows = try await connection.query("SELECT COUNT(*) AS n FROM accounts")
            return Int(try rows.first.map { try Self.integer($0, "n") } ?? 0)
        }
    }

    public func account(named name: String) async throws -> Account? {
        try await self.exclusive("read account") { connection in
            try await Self.account(name, on: connection)
        }
    }

    private static let accountColumns = "name, display_name, avatar, role, status, created_at, last_seen_at"

    private static func account(_ name: String, on connection: SQLiteConnection) async throws -> Account? {
        let rows = try await connection.query("SELECT \(Self.accountColumns) FROM accounts WHERE name = ?", [.text(name)])
        return try rows.first.map(Self.account)
    }

    public func accounts() async throws -> [Account] {
        try await self.exclusive("list accounts") { connection in
            try await connection.query("SELECT \(Self.accountColumns) FROM accounts ORDER BY name").map(Self.account)
        }
    }

    public func createAccount(_ account: Account, passwordHash: String?, invite: String?, now: Int64) async throws -> Account {
        try await self.exclusive("create account") { connection in
            try await Self.transaction(on: connection, logger: self.logger) {
                if try await Self.account(account.name, on: connection) != nil {
                    throw StoreError(.conflict, "the name \"\(account.name)\" is taken")
                }
                var circles: [String] = []
                if let invite {
                    let rows = try await connection.query(
                        """
                        UPDATE invites SET uses = uses + 1
                        WHERE token_hash = ? AND revoked = 0 AND uses < max_uses AND expires_at > ?
                        RETURNING circles
                        """,
                        [.text(invite), .integer(SQLiteInt64(now))]
                    )
                    guard let row = rows.first else { throw StoreError(.notFound, "the invite is unknown, revoked, used up or expired") }
                    circles = Invite.circles(stored: try Self.text(row, "circles"))
                }
                _ = try await connection.query(
                    """
                    INSERT INTO accounts (name, display_name, avatar, role, status, password_hash, created_at)
                    VALUES (?, ?, ?, ?, ?, ?, ?)
                    """,
                    [
                        .text(account.name), .text(account.displayName), Self.optional(account.avatar), .text(account.role.rawValue),
                        .text(account.status.rawValue), Self.optional(passwordHash), .integer(SQLiteInt64(account.createdAt)),
                    ]
                )
                for circle in circles {
                    _ = try await connection.query(
                        "INSERT INTO members (circle, user) SELECT name, ? FROM circles WHERE name = ? ON CONFLICT DO NOTHING",
                        [.text(account.name), .text(circle)]
                    )
                }
                return account
            }
        }
    }

    public func updateAccount(_ name: String, _ change: AccountChange) async throws -> Account {
        try await self.exclusive("update account") { connection in
            try await Self.transaction(on: connection, logger: self.logger) {
                guard var account = try await Self.account(name, on: connection) else {
                    throw StoreError(.notFound, "no account \"\(name)\"")
                }
                if let displayName = change.displayName { account.displayName = displayName }
                if let avatar = change.avatar { account.avatar = avatar }
                if let role = change.role { account.role = role }
                if let status = change.status { account.status = status }
                _ = try await connection.query(
                    "UPDATE accounts SET display_name = ?, avatar = ?, role = ?, status = ? WHERE name = ?",
                    [.text(account.displayName), Self.optional(account.avatar), .text(account.role.rawValue), .text(account.status.rawValue), .text(name)]
                )
                if account.status != .active {
                    _ = try await connection.query("DELETE FROM sessions WHERE user = ?", [.text(name)])
                }
                return account
            }
        }
    }

    public func passwordHash(of name: String) async throws -> String? {
        try await self.exclusive("read password") { connection in
            let rows = try await connection.query("SELECT password_hash FROM accounts WHERE name = ?", [.text(name)])
            return rows.first?.column("password_hash")?.string
        }
    }

    public func setPasswordHash(_ hash: String?, of name: String) async throws {
        try await self.exclusive("set password") { connection in
            _ = try await connection.query("UPDATE accounts SET password_hash = ? WHERE name = ?", [Self.optional(hash), .text(name)])
        }
    }

    public func touchAccount(_ name: String, at time: Int64) async throws {
        try await self.exclusive("touch account") { connection in
            _ = try await connection.query("UPDATE accounts SET last_seen_at = ? WHERE name = ?", [.integer(SQLiteInt64(time)), .text(name)])
        }
    }

    // MARK: - Sessions

    private static let sessionColumns = "token_hash, id, user, kind, label, address, csrf, created_at, last_used_at, expires_at"

    public func createSession(_ session: StoredSession) async throws {
        try await self.exclusive("create session") { connection in
            _ = try await connection.query(
                "INSERT INTO sessions (\(Self.sessionColumns)) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    .text(session.tokenHash), .text(session.id), .text(session.user), .text(session.kind.rawValue), .text(session.label),
                    .text(session.address), .text(session.csrf), .integer(SQLiteInt64(session.createdAt)),
                    .integer(SQLiteInt64(session.lastUsedAt)), .integer(SQLiteInt64(session.expiresAt)),
                ]
            )
        }
    }

    public func session(tokenHash: String, now: Int64) async throws -> StoredSession? {
        try await self.exclusive("read session") { connection in
            let rows = try await connection.query(
                "SELECT \(Self.sessionColumns) FROM sessions WHERE token_hash = ? AND expires_at > ?",
                [.text(tokenHash), .integer(SQLiteInt64(now))]
            )
            return try rows.first.map(Self.session)
        }
    }

    public func touchSession(id: String, at time: Int64) async throws {
        try await self.exclusive("touch session") { connection in
            _ = try await connection.query(
                "UPDATE sessions SET last_used_at = ? WHERE id = ?",
                [.integer(SQLiteInt64(time)), .text(id)]
            )
            _ = try await connection.query(
                "UPDATE accounts SET last_seen_at = ? WHERE name = (SELECT user FROM sessions WHERE id = ?)",
                [.integer(SQLiteInt64(time)), .text(id)]
            )
        }
    }

    public func sessions(of user: String) async throws -> [StoredSession] {
        try await self.exclusive("list sessions") { connection in
            try await connection.query(
                "SELECT \(Self.sessionColumns) FROM sessions WHERE user = ? ORDER BY last_used_at DESC, id",
                [.text(user)]
            ).map(Self.session)
        }
    }

    @discardableResult
    public func deleteSessions(of user: String, id: String?, kind: SessionKind?) async throws -> [String] {
        try await self.exclusive("delete sessions") { connection in
            let rows = try await connection.query(
                "DELETE FROM sessions WHERE user = ? AND (? IS NULL OR id = ?) AND (? IS NULL OR kind = ?) RETURNING id",
                [.text(user), Self.optional(id), Self.optional(id), Self.optional(kind?.rawValue), Self.optional(kind?.rawValue)]
            )
            return try rows.map { try Self.text($0, "id") }
        }
    }

    public func deleteExpiredSessions(now: Int64, idleBefore: Int64) async throws -> Int {
        try await self.exclusive("delete expired sessions") { connection in
            let rows = try await connection.query(
                "DELETE FROM sessions WHERE expires_at <= ? OR (kind = 'page' AND last_used_at < ?) RETURNING id",
                [.integer(SQLiteInt64(now)), .integer(SQLiteInt64(idleBefore))]
            )
            return rows.count
        }
    }

    // MARK: - Invites

    private static let inviteColumns = "id, token_hash, created_by, created_at, expires_at, max_uses, uses, circles, revoked"

    public func createInvite(_ invite: Invite) async throws {
        try await self.exclusive("create invite") { connection in
            _ = try await connection.query(
                "INSERT INTO invites (\(Self.inviteColumns)) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    .text(invite.id), .text(invite.tokenHash), .text(invite.createdBy), .integer(SQLiteInt64(invite.createdAt)),
                    .integer(SQLiteInt64(invite.expiresAt)), .integer(invite.maxUses), .integer(invite.uses),
                    .text(invite.storedCircles), .integer(invite.revoked ? 1 : 0),
                ]
            )
        }
    }

    public func invites() async throws -> [Invite] {
        try await self.exclusive("list invites") { connection in
            try await connection.query("SELECT \(Self.inviteColumns) FROM invites ORDER BY created_at DESC, id").map(Self.invite)
        }
    }

    public func invite(tokenHash: String) async throws -> Invite? {
        try await self.exclusive("read invite") { connection in
            try await connection.query("SELECT \(Self.inviteColumns) FROM invites WHERE token_hash = ?", [.text(tokenHash)]).first.map(Self.invite)
        }
    }

    public func revokeInvite(id: String) async throws -> Bool {
        try await self.exclusive("revoke invite") { connection in
            !(try await connection.query("UPDATE invites SET revoked = 1 WHERE id = ? RETURNING id", [.text(id)])).isEmpty
        }
    }

    // MARK: - Sign-in throttling

    public func signInFailures(keys: [String]) async throws -> [String: SignInFailures] {
        try await self.exclusive("read sign-in failures") { connection in
            var result: [String: SignInFailures] = [:]
            for key in keys {
                if let row = try await connection.query("SELECT count, last FROM sign_in_failures WHERE key = ?", [.text(key)]).first {
                    result[key] = SignInFailures(count: Int(try Self.integer(row, "count")), last: try Self.integer(row, "last"))
                }
            }
            return result
        }
    }

    public func recordSignInFailure(keys: [String], at time: Int64) async throws {
        try await self.exclusive("record sign-in failure") { connection in
            for key in keys {
                _ = try await connection.query(
                    """
                    INSERT INTO sign_in_failures (key, count, last) VALUES (?, 1, ?)
                    ON CONFLICT (key) DO UPDATE SET count = count + 1, last = excluded.last
                    """,
                    [.text(key), .integer(SQLiteInt64(time))]
                )
            }
        }
    }

    public func clearSignInFailures(keys: [String]) async throws {
        try await self.exclusive("clear sign-in failures") { connection in
            for key in keys {
                _ = try await connection.query("DELETE FROM sign_in_failures WHERE key = ?", [.text(key)])
            }
        }
    }

    // MARK: - Passkeys

    private static let passkeyColumns = "id, user, public_key, algorithm, sign_count, name, created_at, last_used_at"

    public func addPasskey(_ passkey: StoredPasskey) async throws {
        try await self.exclusive("add passkey") { connection in
            if !(try await connection.query("SELECT 1 AS one FROM passkeys WHERE id = ?", [.text(passkey.id)])).isEmpty {
                throw StoreError(.conflict, "this passkey is registered already")
            }
            _ = try await connection.query(
                "INSERT INTO passkeys (\(Self.passkeyColumns)) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    .text(passkey.id), .text(passkey.user), .blob(ByteBuffer(bytes: passkey.publicKey)), .integer(passkey.algorithm),
                    .integer(SQLiteInt64(passkey.signCount)), .text(passkey.name), .integer(SQLiteInt64(passkey.createdAt)),
                    passkey.lastUsedAt.map { .integer(SQLiteInt64($0)) } ?? .null,
                ]
            )
        }
    }

    public func passkeys(of user: String) async throws -> [StoredPasskey] {
        try await self.exclusive("list passkeys") { connection in
            try await connection.query("SELECT \(Self.passkeyColumns) FROM passkeys WHERE user = ? ORDER BY created_at, id", [.text(user)])
                .map(Self.passkey)
        }
    }

    public func passkey(id: String) async throws -> StoredPasskey? {
        try await self.exclusive("read passkey") { connection in
            try await connection.query("SELECT \(Self.passkeyColumns) FROM passkeys WHERE id = ?", [.text(id)]).first.map(Self.passkey)
        }
    }

    public func usePasskey(id: String, signCount: Int64, at time: Int64) async throws {
        try await self.exclusive("use passkey") { connection in
            _ = try await connection.query(
                "UPDATE passkeys SET sign_count = ?, last_used_at = ? WHERE id = ?",
                [.integer(SQLiteInt64(signCount)), .integer(SQLiteInt64(time)), .text(id)]
            )
        }
    }

    public func deletePasskey(id: String, of user: String) async throws -> Bool {
        try await self.exclusive("delete passkey") { connection in
            !(try await connection.query("DELETE FROM passkeys WHERE id = ? AND user = ? RETURNING id", [.text(id), .text(user)])).isEmpty
        }
    }

    // MARK: - Challenges

    public func createChallenge(_ challenge: StoredChallenge, now: Int64, outstandingLimit: Int) async throws -> Bool {
        try await self.exclusive("create challenge") { connection in
            // Expired ones go as new ones come: the table stays as small as the ceremonies in flight.
            _ = try await connection.query("DELETE FROM auth_challenges WHERE expires_at <= ?", [.integer(SQLiteInt64(now))])
            let rows = try await connection.query("SELECT count(*) AS n FROM auth_challenges")
            guard (rows.first?.column("n")?.integer ?? 0) < outstandingLimit else { return false }
            _ = try await connection.query(
                "INSERT INTO auth_challenges (id, purpose, user, challenge, expires_at) VALUES (?, ?, ?, ?, ?)",
                [
                    .text(challenge.id), .text(challenge.purpose), Self.optional(challenge.user), .blob(ByteBuffer(bytes: challenge.challenge)),
                    .integer(SQLiteInt64(challenge.expiresAt)),
                ]
            )
            return true
        }
    }

    public func takeChallenge(id: String, now: Int64) async throws -> StoredChallenge? {
        try await self.exclusive("take challenge") { connection in
            let rows = try await connection.query(
                "DELETE FROM auth_challenges WHERE id = ? RETURNING id, purpose, user, challenge, expires_at",
                [.text(id)]
            )
            guard let row = rows.first else { return nil }
            let challenge = StoredChallenge(
                id: try Self.text(row, "id"),
                purpose: try Self.text(row, "purpose"),
                user: row.column("user")?.string,
                challenge: try Self.bytes(row, "challenge"),
                expiresAt: try Self.integer(row, "expires_at")
            )
            return challenge.expiresAt > now ? challenge : nil
        }
    }

    public func challenge(id: String, now: Int64) async throws -> StoredChallenge? {
        try await self.exclusive("read challenge") { connection in
            let rows = try await connection.query(
                "SELECT id, purpose, user, challenge, expires_at FROM auth_challenges WHERE id = ? AND expires_at > ?",
                [.text(id), .integer(SQLiteInt64(now))]
            )
            return try rows.first.map { row in
                StoredChallenge(
                    id: try Self.text(row, "id"),
                    purpose: try Self.text(row, "purpose"),
                    user: row.column("user")?.string,
                    challenge: try Self.bytes(row, "challenge"),
                    expiresAt: try Self.integer(row, "expires_at")
                )
            }
        }
    }

    public func approveChallenge(id: String, user: String, now: Int64) async throws -> Bool {
        try await self.exclusive("approve challenge") { connection in
            !(try await connection.query(
                "UPDATE auth_challenges SET user = ? WHERE id = ? AND user IS NULL AND expires_at > ? RETURNING id",
                [.text(user), .text(id), .integer(SQLiteInt64(now))]
            )).isEmpty
        }
    }

    // MARK: - Rows

    private static func optional(_ text: String?) -> SQLiteData {
        text.map { .text($0) } ?? .null
    }

    private static func optionalInt(_ row: SQLiteRow, _ column: String) throws -> Int64? {
        switch row.column(column) {
        case .null, nil: return nil
        case .integer(let value): return Int64(value)
        default: throw StoreError(.unavailable, "SQLite store: column \(column) is not an integer")
        }
    }

    private static func bytes(_ row: SQLiteRow, _ column: String) throws -> [UInt8] {
        guard case .blob(let buffer) = row.column(column) else {
            throw StoreError(.unavailable, "SQLite store: column \(column) is not a blob")
        }
        return Array(buffer.readableBytesView)
    }

    private static func account(_ row: SQLiteRow) throws -> Account {
        let role = try Self.text(row, "role")
        let status = try Self.text(row, "status")
        guard let knownRole = AccountRole(rawValue: role), let knownStatus = AccountStatus(rawValue: status) else {
            throw StoreError(.unavailable, "SQLite store: unknown role \"\(role)\" or status \"\(status)\"")
        }
        return Account(
            name: try Self.text(row, "name"),
            displayName: try Self.text(row, "display_name"),
            avatar: row.column("avatar")?.string,
            role: knownRole,
            status: knownStatus,
            createdAt: try Self.integer(row, "created_at"),
            lastSeenAt: try Self.optionalInt(row, "last_seen_at")
        )
    }

    private static func session(_ row: SQLiteRow) throws -> StoredSession {
        let kind = try Self.text(row, "kind")
        guard let known = SessionKind(rawValue: kind) else { throw StoreError(.unavailable, "SQLite store: unknown session kind \"\(kind)\"") }
        return StoredSession(
            id: try Self.text(row, "id"),
            tokenHash: try Self.text(row, "token_hash"),
            user: try Self.text(row, "user"),
            kind: known,
            label: try Self.text(row, "label"),
            address: try Self.text(row, "address"),
            csrf: try Self.text(row, "csrf"),
            createdAt: try Self.integer(row, "created_at"),
            lastUsedAt: try Self.integer(row, "last_used_at"),
            expiresAt: try Self.integer(row, "expires_at")
        )
    }

    private static func invite(_ row: SQLiteRow) throws -> Invite {
        Invite(
            id: try Self.text(row, "id"),
            tokenHash: try Self.text(row, "token_hash"),
            createdBy: try Self.text(row, "created_by"),
            createdAt: try Self.integer(row, "created_at"),
            expiresAt: try Self.integer(row, "expires_at"),
            maxUses: Int(try Self.integer(row, "max_uses")),
            uses: Int(try Self.integer(row, "uses")),
            circles: Invite.circles(stored: try Self.text(row, "circles")),
            revoked: try Self.integer(row, "revoked") != 0
        )
    }

    private static func passkey(_ row: SQLiteRow) throws -> StoredPasskey {
        StoredPasskey(
            id: try Self.text(row, "id"),
            user: try Self.text(row, "user"),
            publicKey: try Self.bytes(row, "public_key"),
            algorithm: Int(try Self.integer(row, "algorithm")),
            signCount: try Self.integer(row, "sign_count"),
            name: try Self.text(row, "name"),
            createdAt: try Self.integer(row, "created_at"),
            lastUsedAt: try Self.optionalInt(row, "last_used_at")
        )
    }
}
