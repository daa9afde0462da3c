import Foundation
import PostgresNIO

extension PostgresStore {
    public func livePosts(by author: String, limit: Int) async throws -> [EntryRef] {
        try await self.operation("list posts to erase") {
            let rows = try await self.client.query(
                """
                SELECT circle, seq FROM posts WHERE author = \(ByteBuffer(string: author)) AND change IS NULL AND event IS NULL AND NOT deleted
                ORDER BY circle, seq LIMIT \(limit)
                """,
                logger: self.logger
            )
            var found: [EntryRef] = []
            for try await (circle, seq) in rows.decode((String, Int64).self) { found.append(EntryRef(circle: circle, seq: seq)) }
            return found
        }
    }

    public func reactions(by user: String, limit: Int) async throws -> [ReactionRef] {
        try await self.operation("list reactions to erase") {
            let rows = try await self.client.query(
                "SELECT circle, post, emoji FROM reactions WHERE user_name = \(ByteBuffer(string: user)) ORDER BY circle, post, emoji LIMIT \(limit)",
                logger: self.logger
            )
            var found: [ReactionRef] = []
            for try await (circle, post, emoji) in rows.decode((String, Int64, ByteBuffer).self) {
                found.append(ReactionRef(circle: circle, post: post, emoji: String(buffer: emoji)))
            }
            return found
        }
    }

    public func eraseAccountData(of user: String, removeAccount: Bool, audit: AuditEntry) async throws -> ErasedFiles {
        try await self.operation("erase account data") {
            try await self.client.withTransaction(logger: self.logger) { connection in
                try await connection.query("DELETE FROM read_markers WHERE user_name = \(user)", logger: self.logger)
                try await connection.query("DELETE FROM notification_levels WHERE user_name = \(user)", logger: self.logger)
                try await connection.query("DELETE FROM mentions WHERE user_name = \(user)", logger: self.logger)
                var uploads: [String] = []
                for try await id in try await connection.query("DELETE FROM uploads WHERE owner = \(user) RETURNING id", logger: self.logger).decode(String.self) {
                    uploads.append(id)
                }
                var uploaded = Set<String>()
                for try await id in try await connection.query("DELETE FROM media_uploaders WHERE user_name = \(user) RETURNING media", logger: self.logger).decode(
                    String.self
                ) {
                    uploaded.insert(id)
                }
                var media: [String] = []
                for id in uploaded.sorted() {
                    let rows = try await connection.query(
                        """
                        DELETE FROM media WHERE id = \(id)
                          AND NOT EXISTS (SELECT 1 FROM posts WHERE attachment = \(id))
                          AND NOT EXISTS (SELECT 1 FROM media_uploaders WHERE media = \(id))
                        RETURNING id
                        """,
                        logger: self.logger
                    )
                    var removed = false
                    for try await _ in rows.decode(String.self) { removed = true }
                    if removed {
                        try await connection.query("UPDATE uploads SET media = NULL WHERE media = \(id)", logger: self.logger)
                        media.append(id)
                    }
                }
                if removeAccount {
                    try await connection.query("DELETE FROM sessions WHERE user_name = \(user)", logger: self.logger)
                    try await connection.query("DELETE FROM passkeys WHERE user_name = \(user)", logger: self.logger)
                    try await connection.query("DELETE FROM accounts WHERE name = \(user)", logger: self.logger)
                } else {
                    try await connection.query(
                        "UPDATE accounts SET display_name = '', avatar = NULL, password_hash = NULL, status = \(AccountStatus.deactivated.rawValue) WHERE name = \(user)",
                        logger: self.logger
                    )
                }
                try await connection.query(
                    """
                    INSERT INTO audit_log (time, actor, action, subject, detail)
                    VALUES (\(audit.time), \(audit.actor), \(audit.action), \(audit.subject), \(audit.detail))
                    """,
                    logger: self.logger
                )
                return ErasedFiles(media: media, uploads: uploads)
            }
        }
    }

    public func auditLog(before: Int64?, limit: Int) async throws -> [AuditEntry] {
        try await self.operation("read audit log") {
            let rows = try await self.client.query(
                "SELECT id, time, actor, action, subject, detail FROM audit_log WHERE id < \(before ?? Int64.max) ORDER BY id DESC LIMIT \(limit)",
                logger: self.logger
            )
            var entries: [AuditEntry] = []
            for try await (id, time, actor, action, subject, detail) in rows.decode((Int64, Int64, String, String, String, String).self) {
                entries.append(AuditEntry(id: id, time: time, actor: actor, action: action, subject: subject, detail: detail))
            }
            return entries
        }
    }
}
