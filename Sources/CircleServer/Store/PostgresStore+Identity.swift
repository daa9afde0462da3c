import Foundation
import NIOCore
import PostgresNIO

extension PostgresStore {
    // MARK: - Accounts

    public func accountCount() async throws -> Int {
        try await self.operation("count accounts") {
            for try await count in try await self.client.query("SELECT count(*) FROM accounts", logger: self.logger).decode(Int64.self) {
                return Int(count)
            }
            return 0
        }
    }

    private typealias AccountRow = (String, String, String?, String, String, Int64, Int64?)

    public func account(named name: String) async throws -> Account? {
        try await self.operation("read account") {
            let rows = try await self.client.query(
                "SELECT name, display_name, avatar, role, status, created_at, last_seen_at FROM accounts WHERE name = \(name)",
                logger: self.logger
            )
            for try await row in rows.decode(AccountRow.self) { return try Self.account(row) }
            return nil
        }
    }

    public func accounts() async throws -> [Account] {
        try await self.operation("list accounts") {
            let rows = try await self.client.query(
                "SELECT name, display_name, avatar, role, status, created_at, last_seen_at FROM accounts ORDER BY name",
                logger: self.logger
            )
            var accounts: [Account] = []
            for try await row in rows.decode(AccountRow.self) { accounts.append(try Self.account(row)) }
            return accounts
        }
    }

    public func createAccount(_ account: Account, passwordHash: String?, invite: String?, now: Int64) async throws -> Account {
        try await self.operation("create account") {
            try await self.client.withTransaction(logger: self.logger) { connection in
                var circles: [String] = []
                if let invite {
                    let rows = try await connection.query(
                        """
                        UPDATE invites SET uses = uses + 1
                        WHERE token_hash = \(invite) AND NOT revoked AND uses < max_uses AND expires_at > \(now)
                        RETURNING circles
                        """,
                        logger: self.logger
                    )
                    var found: String?
                    for try await text in rows.decode(String.self) { found = text }
                    guard let found else { throw StoreError(.notFound, "the invite is unknown, revoked, used up or expired") }
                    circles = Invite.circles(stored: found)
                }
                let inserted = try await connection.query(
                    """
                    INSERT INTO accounts (name, display_name, avatar, role, status, password_hash, created_at)
                    VALUES (\(account.name), \(account.displayName), \(account.avatar), \(account.role.rawValue), \(account.status.rawValue),
                            \(passwordHash), \(account.createdAt))
                    ON CONFLICT (name) DO NOTHING RETURNING name
                    """,
                    logger: self.logger
                )
                var created = false
                for try await _ in inserted { created = true }
                guard created else { throw StoreError(.conflict, "the name \"\(account.name)\" is taken") }
                if !circles.isEmpty {
                    try await connection.query(
                        """
                        INSERT INTO members (circle, user_name) SELECT name, \(account.name) FROM circles WHERE name = ANY(\(circles))
                        ON CONFLICT DO NOTHING
                        """,
                        logger: self.logger
                    )
                }
                return account
            }
        }
    }

    public func updateAccount(_ name: String, _ change: AccountChange) async throws -> Account {
        try await self.operation("update account") {
            try await self.client.withTransaction(logger: self.logger) { connection in
                let rows = try await connection.query(
                    "SELECT name, display_name, avatar, role, status, created_at, last_seen_at FROM accounts WHERE name = \(name) FOR UPDATE",
                    logger: self.logger
                )
                var found: Account?
                for try await row in rows.decode(AccountRow.self) { found = try Self.account(row) }
                guard var account = found else { throw StoreError(.notFound, "no account \"\(name)\"") }
                if let displayName = change.displayName { account.displayName = displayName }
                if let avatar = change.avatar { account.avatar = avatar }
                if let role = change.role { account.role = role }
                if let status = change.status { account.status = status }
                try await connection.query(
                    """
                    UPDATE accounts SET display_name = \(account.displayName), avatar = \(account.avatar), role = \(account.role.rawValue),
                        status = \(account.status.rawValue)
                    WHERE name = \(name)
                    """,
                    logger: self.logger
                )
                if account.status != .active {
                    try await connection.query("DELETE FROM sessions WHERE user_name = \(name)", logger: self.logger)
                    try await connection.query(
                        "INSERT INTO account_events (user_name, session, at) VALUES (\(name), NULL, \(Self.nowMilliseconds))",
                        logger: self.logger
                    )
                }
                return account
            }
        }
    }

    public func passwordHash(of name: String) async throws -> String? {
        try await self.operation("read password") {
            for try await hash in try await self.client.query("SELECT password_hash FROM accounts WHERE name = \(name)", logger: self.logger)
                .decode(String?.self)
            {
                return hash
            }
            return nil
        }
    }

    public func setPasswordHash(_ hash: String?, of name: String) async throws {
        try await self.operation("set password") {
            _ = try await self.client.query("UPDATE accounts SET password_hash = \(hash) WHERE name = \(name)", logger: self.logger)
        }
    }

    public func touchAccount(_ name: String, at time: Int64) async throws {
        try await self.operation("touch account") {
            _ = try await self.client.query("UPDATE accounts SET last_seen_at = \(time) WHERE name = \(name)", logger: self.logger)
        }
    }

    // MARK: - Sessions

    private typealias SessionRow = (String, String, String, String, String, String, String, Int64, Int64, Int64)

    public func createSession(_ session: StoredSession) async throws {
        try await self.operation("create session") {
            _ = try await self.client.query(
                """
                INSERT INTO sessions (token_hash, id, user_name, kind, label, address, csrf, created_at, last_used_at, expires_at)
                VALUES (\(session.tokenHash), \(session.id), \(session.user), \(session.kind.rawValue), \(session.label), \(session.address),
                        \(session.csrf), \(session.createdAt), \(session.lastUsedAt), \(session.expiresAt))
                """,
                logger: self.logger
            )
        }
    }

    public func session(tokenHash: String, now: Int64) async throws -> StoredSession? {
        try await self.operation("read session") {
            let rows = try await self.client.query(
                """
                SELECT token_hash, id, user_name, kind, label, address, csrf, created_at, last_used_at, expires_at
                FROM sessions WHERE token_hash = \(tokenHash) AND expires_at > \(now)
                """,
                logger: self.logger
            )
            for try await row in rows.decode(SessionRow.self) { return try Self.session(row) }
            return nil
        }
    }

    public func touchSession(id: String, at time: Int64) async throws {
        try await self.operation("touch session") {
            _ = try await self.client.query(
                """
                WITH touched AS (UPDATE sessions SET last_used_at = \(time) WHERE id = \(id) RETURNING user_name)
                UPDATE accounts SET last_seen_at = \(time) WHERE name IN (SELECT user_name FROM touched)
                """,
                logger: self.logger
            )
        }
    }

    public func sessions(of user: String) async throws -> [StoredSession] {
        try await self.operation("list sessions") {
            let rows = try await self.client.query(
                """
                SELECT token_hash, id, user_name, kind, label, address, csrf, created_at, last_used_at, expires_at
                FROM sessions WHERE user_name = \(user) ORDER BY last_used_at DESC, id
                """,
                logger: self.logger
            )
            var sessions: [StoredSession] = []
            for try await row in rows.decode(SessionRow.self) { sessions.append(try Self.session(row)) }
            return sessions
        }
    }

    @discardableResult
    public func deleteSessions(of user: String, id: String?, kind: SessionKind?) async throws -> [String] {
        try await self.operation("delete sessions") {
            try await self.client.withTransaction(logger: self.logger) { connection in
                let rows = try await connection.query(
                    """
                    DELETE FROM sessions WHERE user_name = \(user) AND (\(id)::text IS NULL OR id = \(id))
                        AND (\(kind?.rawValue)::text IS NULL OR kind = \(kind?.rawValue))
                    RETURNING id
                    """,
                    logger: self.logger
                )
                var ids: [String] = []
                for try await deleted in rows.decode(String.self) { ids.append(deleted) }
                if !ids.isEmpty {
                    try await connection.query(
                        """
                        INSERT INTO account_events (user_name, session, at)
                        SELECT \(user), s, \(Self.nowMilliseconds) FROM unnest(\(ids)::text[]) AS s
                        """,
                        logger: self.logger
                    )
                }
                return ids
            }
        }
    }

    public func deleteExpiredSessions(now: Int64, idleBefore: Int64) async throws -> Int {
        try await self.operation("delete expired sessions") {
            let rows = try await self.client.query(
                "DELETE FROM sessions WHERE expires_at <= \(now) OR (kind = 'page' AND last_used_at < \(idleBefore)) RETURNING id",
                logger: self.logger
            )
            var count = 0
            for try await _ in rows { count += 1 }
            return count
        }
    }

    // MARK: - Invites

    private typealias InviteRow = (String, String, String, Int64, Int64, Int32, Int32, String, Bool)

    public func createInvite(_ invite: Invite) async throws {
        try await self.operation("create invite") {
            _ = try await self.client.query(
                """
                INSERT INTO invites (id, token_hash, created_by, created_at, expires_at, max_uses, uses, circles, revoked)
                VALUES (\(invite.id), \(invite.tokenHash), \(invite.createdBy), \(invite.createdAt), \(invite.expiresAt),
                        \(Int32(clamping: invite.maxUses)), \(Int32(clamping: invite.uses)), \(invite.storedCircles),
                        \(invite.revoked))
                """,
                logger: self.logger
            )
        }
    }

    public func invites() async throws -> [Invite] {
        try await self.operation("list invites") {
            let rows = try await self.client.query(
                "SELECT id, token_hash, created_by, created_at, expires_at, max_uses, uses, circles, revoked FROM invites ORDER BY created_at DESC, id",
                logger: self.logger
            )
            var invites: [Invite] = []
            for try await row in rows.decode(InviteRow.self) { invites.append(Self.invite(row)) }
            return invites
        }
    }

    public func invite(tokenHash: String) async throws -> Invite? {
        try await self.operation("read invite") {
            let rows = try await self.client.query(
                """
                SELECT id, token_hash, created_by, created_at, expires_at, max_uses, uses, circles, revoked FROM invites
                WHERE token_hash = \(tokenHash)
                """,
                logger: self.logger
            )
            for try await row in rows.decode(InviteRow.self) { return Self.invite(row) }
            return nil
        }
    }

    public func revokeInvite(id: String) async throws -> Bool {
        try await self.operation("revoke invite") {
            for try await _ in try await self.client.query("UPDATE invites SET revoked = true WHERE id = \(id) RETURNING id", logger: self.logger) {
                return true
            }
            return false
        }
    }

    // MARK: - Sign-in throttling

    public func signInFailures(keys: [String]) async throws -> [String: SignInFailures] {
        try await self.operation("read sign-in failures") {
            var result: [String: SignInFailures] = [:]
            let rows = try await self.client.query("SELECT key, count, last FROM sign_in_failures WHERE key = ANY(\(keys))", logger: self.logger)
            for try await (key, count, last) in rows.decode((String, Int32, Int64).self) {
                result[key] = SignInFailures(count: Int(count), last: last)
            }
            return result
        }
    }

    public func recordSignInFailure(keys: [String], at time: Int64) async throws {
        try await self.operation("record sign-in failure") {
            _ = try await self.client.query(
                """
                INSERT INTO sign_in_failures (key, count, last) SELECT k, 1, \(time) FROM unnest(\(keys)::text[]) AS k
                ON CONFLICT (key) DO UPDATE SET count = sign_in_failures.count + 1, last = excluded.last
                """,
                logger: self.logger
            )
        }
    }

    public func clearSignInFailures(keys: [String]) async throws {
        try await self.operation("clear sign-in failures") {
            _ = try await self.client.query("DELETE FROM sign_in_failures WHERE key = ANY(\(keys))", logger: self.logger)
        }
    }

    // MARK: - Passkeys

    private typealias PasskeyRow = (String, String, ByteBuffer, Int32, Int64, String, Int64, Int64?)

    public func addPasskey(_ passkey: StoredPasskey) async throws {
        try await self.operation("add passkey") {
            let rows = try await self.client.query(
                """
                INSERT INTO passkeys (id, user_name, public_key, algorithm, sign_count, name, created_at, last_used_at)
                VALUES (\(passkey.id), \(passkey.user), \(ByteBuffer(bytes: passkey.publicKey)), \(Int32(clamping: passkey.algorithm)),
                        \(passkey.signCount), \(passkey.name), \(passkey.createdAt), \(passkey.lastUsedAt))
                ON CONFLICT (id) DO NOTHING RETURNING id
                """,
                logger: self.logger
            )
            for try await _ in rows { return }
            throw StoreError(.conflict, "this passkey is registered already")
        }
    }

    public func passkeys(of user: String) async throws -> [StoredPasskey] {
        try await self.operation("list passkeys") {
            let rows = try await self.client.query(
                """
                SELECT id, user_name, public_key, algorithm, sign_count, name, created_at, last_used_at FROM passkeys
                WHERE user_name = \(user) ORDER BY created_at, id
                """,
                logger: self.logger
            )
            var passkeys: [StoredPasskey] = []
            for try await row in rows.decode(PasskeyRow.self) { passkeys.append(Self.passkey(row)) }
            return passkeys
        }
    }

    public func passkey(id: String) async throws -> StoredPasskey? {
        try await self.operation("read passkey") {
            let rows = try await self.client.query(
                "SELECT id, user_name, public_key, algorithm, sign_count, name, created_at, last_used_at FROM passkeys WHERE id = \(id)",
                logger: self.logger
            )
            for try await row in rows.decode(PasskeyRow.self) { return Self.passkey(row) }
            return nil
        }
    }

    public func usePasskey(id: String, signCount: Int64, at time: Int64) async throws {
        try await self.operation("use passkey") {
            _ = try await self.client.query(
                "UPDATE passkeys SET sign_count = \(signCount), last_used_at = \(time) WHERE id = \(id)",
                logger: self.logger
            )
        }
    }

    public func deletePasskey(id: String, of user: String) async throws -> Bool {
        try await self.operation("delete passkey") {
            for try await _ in try await self.client.query(
                "DELETE FROM passkeys WHERE id = \(id) AND user_name = \(user) RETURNING id",
                logger: self.logger
            ) {
                return true
            }
            return false
        }
    }

    // MARK: - Challenges

    public func createChallenge(_ challenge: StoredChallenge, now: Int64, outstandingLimit: Int) async throws -> Bool {
        try await self.operation("create challenge") {
            try await self.client.withTransaction(logger: self.logger) { connection in
                try await connection.query("DELETE FROM auth_challenges WHERE expires_at <= \(now)", logger: self.logger)
                // Under READ COMMITTED, nodes starting ceremonies at the same moment may each see
                // one fewer than there will be: the limit can be passed by as many; it bounds a
                // flood, not an exact count.
                var outstanding: Int64 = 0
                for try await count in try await connection.query("SELECT count(*) FROM auth_challenges", logger: self.logger).decode(Int64.self) {
                    outstanding = count
                }
                guard outstanding < Int64(outstandingLimit) else { return false }
                try await connection.query(
                    """
                    INSERT INTO auth_challenges (id, purpose, user_name, challenge, expires_at)
                    VALUES (\(challenge.id), \(challenge.purpose), \(challenge.user), \(ByteBuffer(bytes: challenge.challenge)), \(challenge.expiresAt))
                    """,
                    logger: self.logger
                )
                return true
            }
        }
    }

    public func takeChallenge(id: String, now: Int64) async throws -> StoredChallenge? {
        try await self.operation("take challenge") {
            let rows = try await self.client.query(
                "DELETE FROM auth_challenges WHERE id = \(id) RETURNING id, purpose, user_name, challenge, expires_at",
                logger: self.logger
            )
            for try await (id, purpose, user, challenge, expires) in rows.decode((String, String, String?, ByteBuffer, Int64).self) {
                return expires > now
                    ? StoredChallenge(id: id, purpose: purpose, user: user, challenge: Array(challenge.readableBytesView), expiresAt: expires)
                    : nil
            }
            return nil
        }
    }

    public func challenge(id: String, now: Int64) async throws -> StoredChallenge? {
        try await self.operation("read challenge") {
            let rows = try await self.client.query(
                "SELECT id, purpose, user_name, challenge, expires_at FROM auth_challenges WHERE id = \(id) AND expires_at > \(now)",
                logger: self.logger
            )
            for try await (id, purpose, user, challenge, expires) in rows.decode((String, String, String?, ByteBuffer, Int64).self) {
                return StoredChallenge(id: id, purpose: purpose, user: user, challenge: Array(challenge.readableBytesView), expiresAt: expires)
            }
            return nil
        }
    }

    public func approveChallenge(id: String, user: String, now: Int64) async throws -> Bool {
        try await self.operation("approve challenge") {
            for try await _ in try await self.client.query(
                "UPDATE auth_challenges SET user_name = \(user) WHERE id = \(id) AND user_name IS NULL AND expires_at > \(now) RETURNING id",
                logger: self.logger
            ) {
                return true
            }
            return false
        }
    }

    // MARK: - The account log

    /// Entries of the account log (``AccountEvent``) with an id above `after`, oldest first, and
    /// the newest id (with `after == nil`: none, and the newest id).
    public func accountEvents(after: Int64?) async throws -> (events: [AccountEvent], newest: Int64) {
        try await self.operation("read the account log") {
            guard let after else {
                for try await id in try await self.client.query("SELECT coalesce(max(id), 0) FROM account_events", logger: self.logger).decode(Int64.self) {
                    return ([], id)
                }
                return ([], 0)
            }
            var events: [AccountEvent] = []
            var newest = after
            let rows = try await self.client.query(
                "SELECT id, user_name, session FROM account_events WHERE id > \(after) ORDER BY id LIMIT 10000",
                logger: self.logger
            )
            for try await (id, user, session) in rows.decode((Int64, String, String?).self) {
                events.append(AccountEvent(user: user, session: session))
                newest = id
            }
            return (events, newest)
        }
    }

    // MARK: - Rows

    private static var nowMilliseconds: Int64 { Int64(Date().timeIntervalSince1970 * 1000) }

    private static func account(_ row: AccountRow) throws -> Account {
        guard let role = AccountRole(rawValue: row.3), let status = AccountStatus(rawValue: row.4) else {
            throw StoreError(.unavailable, "PostgreSQL store: unknown role \"\(row.3)\" or status \"\(row.4)\"")
        }
        return Account(name: row.0, displayName: row.1, avatar: row.2, role: role, status: status, createdAt: row.5, lastSeenAt: row.6)
    }

    private static func session(_ row: SessionRow) throws -> StoredSession {
        guard let kind = SessionKind(rawValue: row.3) else { throw StoreError(.unavailable, "PostgreSQL store: unknown session kind \"\(row.3)\"") }
        return StoredSession(
            id: row.1,
            tokenHash: row.0,
            user: row.2,
            kind: kind,
            label: row.4,
            address: row.5,
            csrf: row.6,
            createdAt: row.7,
            lastUsedAt: row.8,
            expiresAt: row.9
        )
    }

    private static func invite(_ row: InviteRow) -> Invite {
        Invite(
            id: row.0,
            tokenHash: row.1,
            createdBy: row.2,
            createdAt: row.3,
            expiresAt: row.4,
            maxUses: Int(row.5),
            uses: Int(row.6),
            circles: Invite.circles(stored: row.7),
            revoked: row.8
        )
    }

    private static func passkey(_ row: PasskeyRow) -> StoredPasskey {
        StoredPasskey(
            id: row.0,
            user: row.1,
            publicKey: Array(row.2.readableBytesView),
            algorithm: Int(row.3),
            signCount: row.4,
            name: row.5,
            createdAt: row.6,
            lastUsedAt: row.7
        )
    }
}
