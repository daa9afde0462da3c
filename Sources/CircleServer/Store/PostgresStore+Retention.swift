import PostgresNIO

extension PostgresStore {
    public func retentionPolicy(of circle: String) async throws -> RetentionPolicy? {
        try await self.operation("read a retention policy") {
            let rows = try await self.client.query(
                "SELECT max_age_days, keep_newest FROM retention_policies WHERE circle = \(circle)",
                logger: self.logger
            )
            for try await (days, keep) in rows.decode((Int64?, Int64?).self) {
                return RetentionPolicy(maxAgeDays: days, keepNewest: keep)
            }
            return nil
        }
    }

    public func setRetentionPolicy(_ policy: RetentionPolicy?, of circle: String) async throws {
        try await self.operation("set a retention policy") {
            guard let policy else {
                try await self.client.query("DELETE FROM retention_policies WHERE circle = \(circle)", logger: self.logger)
                return
            }
            try await self.client.query(
                """
                INSERT INTO retention_policies (circle, max_age_days, keep_newest) VALUES (\(circle), \(policy.maxAgeDays), \(policy.keepNewest))
                ON CONFLICT (circle) DO UPDATE SET max_age_days = EXCLUDED.max_age_days, keep_newest = EXCLUDED.keep_newest
                """,
                logger: self.logger
            )
        }
    }

    public func retentionPolicies() async throws -> [String: RetentionPolicy] {
        try await self.operation("read retention policies") {
            let rows = try await self.client.query("SELECT circle, max_age_days, keep_newest FROM retention_policies", logger: self.logger)
            var policies: [String: RetentionPolicy] = [:]
            for try await (circle, days, keep) in rows.decode((String, Int64?, Int64?).self) {
                policies[circle] = RetentionPolicy(maxAgeDays: days, keepNewest: keep)
            }
            return policies
        }
    }

    public func oldestEntries(in circle: String, limit: Int) async throws -> [RetainedEntry] {
        try await self.operation("read a circle's oldest entries") {
            let rows = try await self.client.query(
                "SELECT seq, time FROM posts WHERE circle = \(circle) ORDER BY seq LIMIT \(limit)",
                logger: self.logger
            )
            var entries: [RetainedEntry] = []
            for try await (seq, time) in rows.decode((Int64, Int64).self) { entries.append(RetainedEntry(seq: seq, time: time)) }
            return entries
        }
    }

    public func startCircle(_ circle: String, after seq: Int64) async throws {
        try await self.operation("start a circle's numbering") {
            _ = try await self.client.query("UPDATE circles SET last_seq = \(seq) WHERE name = \(circle) AND last_seq = 0", logger: self.logger)
        }
    }

    /// The search index needs nothing of its own here: a post's words and trigrams are indexed
    /// from its own row (`posts.search`, and the trigram index over `posts.text`).
    public func trimEntries(in circle: String, through seq: Int64) async throws -> TrimmedEntries {
        try await self.operation("remove a circle's oldest entries") {
            try await self.client.withTransaction(logger: self.logger) { connection in
                try await connection.query("DELETE FROM reactions WHERE circle = \(circle) AND post <= \(seq)", logger: self.logger)
                try await connection.query("DELETE FROM mentions WHERE circle = \(circle) AND post <= \(seq)", logger: self.logger)
                var attachments = Set<String>()
                var removed = 0
                let rows = try await connection.query(
                    "DELETE FROM posts WHERE circle = \(circle) AND seq <= \(seq) RETURNING attachment",
                    logger: self.logger
                )
                for try await attachment in rows.decode(String?.self) {
                    removed += 1
                    if let attachment { attachments.insert(attachment) }
                }
                var media: [String] = []
                for id in attachments.sorted() {
                    // Gone with its last post: nobody may fetch it any more.
                    var stillUsed = false
                    for try await _ in try await connection.query("SELECT 1 FROM posts WHERE attachment = \(id) LIMIT 1", logger: self.logger).decode(Int32.self) {
                        stillUsed = true
                    }
                    guard !stillUsed else { continue }
                    try await connection.query("DELETE FROM media_uploaders WHERE media = \(id)", logger: self.logger)
                    try await connection.query("UPDATE uploads SET media = NULL WHERE media = \(id)", logger: self.logger)
                    var deleted = false
                    for try await _ in try await connection.query("DELETE FROM media WHERE id = \(id) RETURNING id", logger: self.logger).decode(String.self) {
                        deleted = true
                    }
                    if deleted { media.append(id) }
                }
                return TrimmedEntries(entries: removed, media: media)
            }
        }
    }
}
