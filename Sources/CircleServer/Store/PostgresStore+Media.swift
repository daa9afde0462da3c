import PostgresNIO

extension PostgresStore {
    public func createUpload(_ upload: MediaUpload) async throws {
        try await self.operation("create upload") {
            _ = try await self.client.query(
                """
                INSERT INTO uploads (id, owner, length, content_type, created_at)
                VALUES (\(upload.id), \(upload.owner), \(upload.length), \(upload.contentType), \(upload.createdAt))
                """,
                logger: self.logger
            )
        }
    }

    public func upload(id: String) async throws -> MediaUpload? {
        try await self.operation("read upload") {
            let rows = try await self.client.query(
                "SELECT id, owner, length, content_type, created_at, media FROM uploads WHERE id = \(id)",
                logger: self.logger
            )
            for try await row in rows.decode((String, String, Int64, String, Int64, String?).self) {
                return MediaUpload(id: row.0, owner: row.1, length: row.2, contentType: row.3, createdAt: row.4, media: row.5)
            }
            return nil
        }
    }

    public func deleteUpload(id: String) async throws {
        try await self.operation("delete upload") {
            _ = try await self.client.query("DELETE FROM uploads WHERE id = \(id)", logger: self.logger)
        }
    }

    public func uploads(createdBefore: Int64) async throws -> [String] {
        try await self.operation("list expired uploads") {
            let rows = try await self.client.query("SELECT id FROM uploads WHERE created_at < \(createdBefore)", logger: self.logger)
            var ids: [String] = []
            for try await id in rows.decode(String.self) { ids.append(id) }
            return ids
        }
    }

    public func pendingUploadCount(owner: String) async throws -> Int {
        try await self.operation("count uploads") {
            let rows = try await self.client.query(
                "SELECT count(*) FROM uploads WHERE owner = \(owner) AND media IS NULL",
                logger: self.logger
            )
            for try await count in rows.decode(Int64.self) { return Int(count) }
            return 0
        }
    }

    public func completeUpload(id: String, media: MediaInfo, uploader: String) async throws -> MediaInfo {
        try await self.operation("complete upload") {
            try await self.client.withTransaction(logger: self.logger) { connection in
                try await connection.query(
                    """
                    INSERT INTO media (id, size, content_type, created_at)
                    VALUES (\(media.id), \(media.size), \(media.contentType), \(media.createdAt)) ON CONFLICT (id) DO NOTHING
                    """,
                    logger: self.logger
                )
                try await connection.query(
                    "INSERT INTO media_uploaders (media, user_name) VALUES (\(media.id), \(uploader)) ON CONFLICT DO NOTHING",
                    logger: self.logger
                )
                try await connection.query("UPDATE uploads SET media = \(media.id) WHERE id = \(id)", logger: self.logger)
                let rows = try await connection.query(
                    "SELECT id, size, content_type, created_at FROM media WHERE id = \(media.id)",
                    logger: self.logger
                )
                for try await row in rows.decode((String, Int64, String, Int64).self) {
                    return MediaInfo(id: row.0, size: row.1, contentType: row.2, createdAt: row.3)
                }
                throw StoreError(.unavailable, "PostgreSQL store: media \(media.id) vanished while its upload completed")
            }
        }
    }

    public func media(id: String) async throws -> MediaInfo? {
        try await self.operation("read media") {
            let rows = try await self.client.query(
                "SELECT id, size, content_type, created_at FROM media WHERE id = \(id)",
                logger: self.logger
            )
            for try await row in rows.decode((String, Int64, String, Int64).self) {
                return MediaInfo(id: row.0, size: row.1, contentType: row.2, createdAt: row.3)
            }
            return nil
        }
    }

    public func isUploader(_ user: String, of media: String) async throws -> Bool {
        try await self.operation("check uploader") {
            let rows = try await self.client.query(
                "SELECT 1 FROM media_uploaders WHERE media = \(media) AND user_name = \(user)",
                logger: self.logger
            )
            for try await _ in rows { return true }
            return false
        }
    }

    public func canRead(media id: String, user: String) async throws -> Bool {
        try await self.operation("check media access") {
            let rows = try await self.client.query(
                """
                SELECT 1 WHERE EXISTS (SELECT 1 FROM media_uploaders WHERE media = \(id) AND user_name = \(user))
                   OR EXISTS (
                       SELECT 1 FROM posts JOIN circles ON circles.name = posts.circle
                       WHERE posts.attachment = \(id)
                         AND (NOT circles.private
                              OR EXISTS (SELECT 1 FROM members WHERE members.circle = circles.name AND members.user_name = \(user)))
                   )
                """,
                logger: self.logger
            )
            for try await _ in rows { return true }
            return false
        }
    }
}
