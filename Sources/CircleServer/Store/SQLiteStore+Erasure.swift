import Foundation
import SQLiteNIO

extension SQLiteStore {
    public func livePosts(by author: String, limit: Int) async throws -> [EntryRef] {
        try await self.exclusive("list posts to erase") { connection in
            try await connection.query(
                "SELECT circle, seq FROM posts WHERE author = ? AND change IS NULL AND event IS NULL AND deleted = 0 ORDER BY circle, seq LIMIT ?",
                [.text(author), .integer(SQLiteInt64(limit))]
            ).map { EntryRef(circle: try Self.text($0, "circle"), seq: try Self.integer($0, "seq")) }
        }
    }

    public func reactions(by user: String, limit: Int) async throws -> [ReactionRef] {
        try await self.exclusive("list reactions to erase") { connection in
            try await connection.query(
                "SELECT circle, post, emoji FROM reactions WHERE user = ? ORDER BY circle, post, emoji LIMIT ?",
                [.text(user), .integer(SQLiteInt64(limit))]
            ).map { ReactionRef(circle: try Self.text($0, "circle"), post: try Self.integer($0, "post"), emoji: try Self.text($0, "emoji")) }
        }
    }

    public func eraseAccountData(of user: String, removeAccount: Bool, audit: AuditEntry) async throws -> ErasedFiles {
        try await self.exclusive("erase account data") { connection in
            try await Self.transaction(on: connection, logger: self.logger) {
                for table in ["read_markers", "notification_levels", "mentions"] {
                    _ = try await connection.query("DELETE FROM \(table) WHERE user = ?", [.text(user)])
                }
                let uploads = try await connection.query("DELETE FROM uploads WHERE owner = ? RETURNING id", [.text(user)]).map { try Self.text($0, "id") }
                let uploaded = try await connection.query("DELETE FROM media_uploaders WHERE user = ? RETURNING media", [.text(user)]).map {
                    try Self.text($0, "media")
                }
                var media: [String] = []
                for id in Set(uploaded).sorted() {
                    let orphan = try await connection.query(
                        """
                        DELETE FROM media WHERE id = ?1
                          AND NOT EXISTS (SELECT 1 FROM posts WHERE attachment = ?1)
                          AND NOT EXISTS (SELECT 1 FROM media_uploaders WHERE media = ?1)
                        RETURNING id
                        """,
                        [.text(id)]
                    )
                    if !orphan.isEmpty {
                        _ = try await connection.query("UPDATE uploads SET media = NULL WHERE media = ?", [.text(id)])
                        media.append(id)
                    }
                }
                if removeAccount {
                    _ = try await connection.query("DELETE FROM sessions WHERE user = ?", [.text(user)])
                    _ = try await connection.query("DELETE FROM passkeys WHERE user = ?", [.text(user)])
                    _ = try await connection.query("DELETE FROM accounts WHERE name = ?", [.text(user)])
                } else {
                    _ = try await connection.query(
                        "UPDATE accounts SET display_name = '', avatar = NULL, password_hash = NULL, status = ? WHERE name = ?",
                        [.text(AccountStatus.deactivated.rawValue), .text(user)]
                    )
                }
                _ = try await connection.query(
                    "INSERT INTO audit_log (time, actor, action, subject, detail) VALUES (?, ?, ?, ?, ?)",
                    [.integer(SQLiteInt64(audit.time)), .text(audit.actor), .text(audit.action), .text(audit.subject), .text(audit.detail)]
                )
                return ErasedFiles(media: media, uploads: uploads)
            }
        }
    }

    public func auditLog(before: Int64?, limit: Int) async throws -> [AuditEntry] {
        try await self.exclusive("read audit log") { connection in
            try await connection.query(
                "SELECT id, time, actor, action, subject, detail FROM audit_log WHERE id < ? ORDER BY id DESC LIMIT ?",
                [.integer(SQLiteInt64(before ?? Int64.max)), .integer(SQLiteInt64(limit))]
            ).map {
                AuditEntry(
                    id: try Self.integer($0, "id"), time: try Self.integer($0, "time"), actor: try Self.text($0, "actor"), action: try Self.text($0, "action"),
                    subject: try Self.text($0, "subject"), detail: try Self.text($0, "detail")
                )
            }
        }
    }
}
