import SQLiteNIO

extension SQLiteStore {
    public func createUpload(_ upload: MediaUpload) async throws {
        try await self.exclusive("create upload") { connection in
            _ = try await connection.query(
                "INSERT INTO uploads (id, owner, length, content_type, created_at) VALUES (?, ?, ?, ?, ?)",
                [
                    .text(upload.id), .text(upload.owner), .integer(SQLiteInt64(upload.length)), .text(upload.contentType),
                    .integer(SQLiteInt64(upload.createdAt)),
                ]
            )
        }
    }

    public func upload(id: String) async throws -> MediaUpload? {
        try await self.exclusive("read upload") { connection in
            let rows = try await connection.query(
                "SELECT id, owner, length, content_type, created_at, media FROM uploads WHERE id = ?",
                [.text(id)]
            )
            return try rows.first.map { row in
                MediaUpload(
                    id: try Self.text(row, "id"),
                    owner: try Self.text(row, "owner"),
                    length: try Self.integer(row, "length"),
                    contentType: try Self.text(row, "content_type"),
                    createdAt: try Self.integer(row, "created_at"),
                    media: row.column("media")?.string
                )
            }
        }
    }

    public func deleteUpload(id: String) async throws {
        try await self.exclusive("delete upload") { connection in
            _ = try await connection.query("DELETE FROM uploads WHERE id = ?", [.text(id)])
        }
    }

    public func uploads(createdBefore: Int64) async throws -> [String] {
        try await self.exclusive("list old uploads") { connection in
            let rows = try await connection.query("SELECT id FROM uploads WHERE created_at < ?", [.integer(SQLiteInt64(createdBefore))])
            return try rows.map { try Self.text($0, "id") }
        }
    }

    public func pendingUploadCount(owner: String) async throws -> Int {
        try await self.exclusive("count uploads") { connection in
            let rows = try await connection.query(
                "SELECT COUNT(*) AS pending FROM uploads WHERE owner = ? AND media IS NULL",
                [.text(owner)]
            )
            return Int(try rows.first.map { try Self.integer($0, "pending") } ?? 0)
        }
    }

    public func completeUpload(id: String, media: MediaInfo, uploader: String) async throws -> MediaInfo {
        try await self.exclusive("complete upload") { connection in
            try await Self.transaction(on: connection, logger: self.logger) {
                _ = try await connection.query(
                    "INSERT INTO media (id, size, content_type, created_at) VALUES (?, ?, ?, ?) ON CONFLICT (id) DO NOTHING",
                    [.text(media.id), .integer(SQLiteInt64(media.size)), .text(media.contentType), .integer(SQLiteInt64(media.createdAt))]
                )
                _ = try await connection.query(
                    "INSERT INTO media_uploaders (media, user) VALUES (?, ?) ON CONFLICT DO NOTHING",
                    [.text(media.id), .text(uploader)]
                )
                // Kept, pointing at its media, so a client whose last PATCH lost its answer learns the id.
                _ = try await connection.query("UPDATE uploads SET media = ? WHERE id = ?", [.text(media.id), .text(id)])
                return try await Self.media(media.id, on: connection) ?? media
            }
        }
    }

    public func media(id: String) async throws -> MediaInfo? {
        try await self.exclusive("read media") { connection in
            try await Self.media(id, on: connection)
        }
    }

    public func isUploader(_ user: String, of media: String) async throws -> Bool {
        try await self.exclusive("check uploader") { connection in
            let rows = try await connection.query(
                "SELECT 1 AS found FROM media_uploaders WHERE media = ? AND user = ?",
                [.text(media), .text(user)]
            )
            return !rows.isEmpty
        }
    }

    public func canRead(media id: String, user: String) async throws -> Bool {
        try await self.exclusive("check media access") { connection in
            let rows = try await connection.query(
                """
                SELECT 1 AS found WHERE EXISTS (SELECT 1 FROM media_uploaders WHERE media = ?1 AND user = ?2)
                OR EXISTS (
                    SELECT 1 FROM posts JOIN circles ON circles.name = posts.circle
                    WHERE posts.attachment = ?1 AND (
                        circles.private = 0
                        OR EXISTS (SELECT 1 FROM members WHERE members.circle = circles.name AND members.user = ?2)
                    )
                )
                """,
                [.text(id), .text(user)]
            )
            return !rows.isEmpty
        }
    }

    private static func media(_ id: String, on connection: SQLiteConnection) async throws -> MediaInfo? {
        let rows = try await connection.query(
            "SELECT id, size, content_type, created_at FROM media WHERE id = ?",
            [.text(id)]
        )
        return try rows.first.map { row in
            MediaInfo(
                id: try Self.text(row, "id"),
                size: try Self.integer(row, "size"),
                contentType: try Self.text(row, "content_type"),
                createdAt: try Self.integer(row, "created_at")
            )
        }
    }
}
