import SQLiteNIO

extension SQLiteStore {
    public func retentionPolicy(of circle: String) async throws -> RetentionPolicy? {
        try await self.exclusive("read a retention policy") { connection in
            try await connection.query("SELECT max_age_days, keep_newest FROM retention_policies WHERE circle = ?", [.text(circle)]).first.map(Self.policy)
        }
    }

    public func setRetentionPolicy(_ policy: RetentionPolicy?, of circle: String) async throws {
        try await self.exclusive("set a retention policy") { connection in
            guard let policy else {
                _ = try await connection.query("DELETE FROM retention_policies WHERE circle = ?", [.text(circle)])
                return
            }
            func value(_ number: Int64?) -> SQLiteData { number.map { .integer(SQLiteInt64($0)) } ?? .null }
            _ = try await connection.query(
                """
                INSERT INTO retention_policies (circle, max_age_days, keep_newest) VALUES (?1, ?2, ?3)
                ON CONFLICT (circle) DO UPDATE SET max_age_days = ?2, keep_newest = ?3
                """,
                [.text(circle), value(policy.maxAgeDays), value(policy.keepNewest)]
            )
        }
    }

    public func retentionPolicies() async throws -> [String: RetentionPolicy] {
        try await self.exclusive("read retention policies") { connection in
            var policies: [String: RetentionPolicy] = [:]
            for row in try await connection.query("SELECT circle, max_age_days, keep_newest FROM retention_policies") {
                policies[try Self.text(row, "circle")] = try Self.policy(row)
            }
            return policies
        }
    }

    public func oldestEntries(in circle: String, limit: Int) async throws -> [RetainedEntry] {
        try await self.exclusive("read a circle's oldest entries") { connection in
            try await connection.query(
                "SELECT seq, time FROM posts WHERE circle = ? ORDER BY seq LIMIT ?",
                [.text(circle), .integer(SQLiteInt64(limit))]
            ).map { RetainedEntry(seq: try Self.integer($0, "seq"), time: try Self.integer($0, "time")) }
        }
    }

    public func startCircle(_ circle: String, after seq: Int64) async throws {
        try await self.exclusive("start a circle's numbering") { connection in
            _ = try await connection.query(
                "UPDATE circles SET last_seq = ? WHERE name = ? AND last_seq = 0",
                [.integer(SQLiteInt64(seq)), .text(circle)]
            )
        }
    }

    public func trimEntries(in circle: String, through seq: Int64) async throws -> TrimmedEntries {
        try await self.exclusive("remove a circle's oldest entries") { connection in
            try await Self.transaction(on: connection, logger: self.logger) {
                let bind: [SQLiteData] = [.text(circle), .integer(SQLiteInt64(seq))]
                // The search index first: FTS5's external content needs the very text it
                // indexed to take its tokens out (as SQLitePostWriter does for one post).
                for index in ["search_words", "search_trigrams"] {
                    let trigramsOnly = index == "search_trigrams" ? "AND d.trigrams = 1" : ""
                    _ = try await connection.query(
                        """
                        INSERT INTO \(index) (\(index), rowid, text)
                        SELECT 'delete', d.id, p.text FROM posts AS p JOIN search_docs AS d ON d.id = p.search_id
                        WHERE p.circle = ?1 AND p.seq <= ?2 \(trigramsOnly)
                        """,
                        bind
                    )
                }
                _ = try await connection.query(
                    "DELETE FROM search_docs WHERE id IN (SELECT search_id FROM posts WHERE circle = ?1 AND seq <= ?2 AND search_id IS NOT NULL)",
                    bind
                )
                for table in ["reactions", "mentions"] {
                    _ = try await connection.query("DELETE FROM \(table) WHERE circle = ?1 AND post <= ?2", bind)
                }
                let attachments = try await connection.query(
                    "SELECT DISTINCT attachment FROM posts WHERE circle = ?1 AND seq <= ?2 AND attachment IS NOT NULL",
                    bind
                ).map { try Self.text($0, "attachment") }
                let removed = try await connection.query("DELETE FROM posts WHERE circle = ?1 AND seq <= ?2 RETURNING seq", bind).count
                var media: [String] = []
                for id in Set(attachments).sorted() {
                    // Gone with its last post: nobody may fetch it any more.
                    guard try await connection.query("SELECT 1 FROM posts WHERE attachment = ? LIMIT 1", [.text(id)]).isEmpty else { continue }
                    _ = try await connection.query("DELETE FROM media_uploaders WHERE media = ?", [.text(id)])
                    _ = try await connection.query("UPDATE uploads SET media = NULL WHERE media = ?", [.text(id)])
                    if try await !connection.query("DELETE FROM media WHERE id = ? RETURNING id", [.text(id)]).isEmpty {
                        media.append(id)
                    }
                }
                return TrimmedEntries(entries: removed, media: media)
            }
        }
    }

    private static func policy(_ row: SQLiteRow) throws -> RetentionPolicy {
        RetentionPolicy(maxAgeDays: try Self.optionalInteger(row, "max_age_days"), keepNewest: try Self.optionalInteger(row, "keep_newest"))
    }
}
