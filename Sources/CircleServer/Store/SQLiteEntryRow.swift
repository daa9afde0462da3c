import CircleWire

/// A stored entry's row as both SQLite readers select it — `SQLiteStore` through sqlite-nio and
/// `SQLitePostWriter` through the C API in its commit transaction — and the one decoding of it
/// into a ``CirclePost``, equally strict for both: a required column that is NULL or of another
/// type is a damaged database, reported as `unavailable` with the column's name.
enum SQLiteEntryRow {
    /// The columns, in the order every query selects them.
    static let columns = [
        "circle", "seq", "author", "client_id", "text", "attachment", "time", "change", "target", "emoji",
        "reply_to", "edited_at", "deleted", "mentions", "mentions_everyone", "event", "member",
    ]

    /// The columns as a select list.
    static let list = columns.joined(separator: ", ")

    /// The select list for sqlite-nio, with the text columns read as blobs: sqlite-nio reads TEXT
    /// through a C string, which would end a text at an embedded NUL.
    static func blobList(_ table: String) -> String {
        Self.columns.map { column in
            Self.textColumns.contains(column) ? "CAST(\(table).\(column) AS BLOB) AS \(column)" : "\(table).\(column) AS \(column)"
        }.joined(separator: ", ")
    }

    /// The columns holding user text (`change` and `event` are names this version writes).
    private static let textColumns: Set = ["circle", "author", "client_id", "text", "attachment", "emoji", "mentions", "member"]

    /// The entry on `row`.
    static func post(_ row: some Reader) throws -> CirclePost {
        func text(_ index: Int) throws -> String {
            guard let value = try row.text(index) else { throw Self.damaged(index, "is NULL") }
            return value
        }
        func integer(_ index: Int) throws -> Int64 {
            guard let value = try row.integer(index) else { throw Self.damaged(index, "is NULL") }
            return value
        }
        return CirclePost(
            circle: try text(0),
            seq: try integer(1),
            author: try text(2),
            text: try row.text(4),
            attachment: try row.text(5),
            time: try integer(6),
            id: try text(3),
            change: try StoredPostColumns.change(row.text(7), store: "SQLite"),
            target: try row.integer(8),
            emoji: try row.text(9),
            replyTo: try row.integer(10),
            edited: try row.integer(11),
            deleted: try integer(12) != 0,
            mentions: CommitPlan.mentions(fromColumn: try row.text(13)),
            mentionsEveryone: try integer(14) != 0,
            event: try StoredPostColumns.event(row.text(15), store: "SQLite"),
            member: try row.text(16)
        )
    }

    /// The error for column `index` of a row: `what` is wrong with it.
    static func damaged(_ index: Int, _ what: String) -> StoreError {
        StoreError(.unavailable, "SQLite store: column \(Self.columns[index]) of a post \(what)")
    }

    /// A row's columns by their index in ``SQLiteEntryRow/columns``: `nil` for NULL, an error
    /// for a value of another type.
    protocol Reader {
        func text(_ index: Int) throws -> String?
        func integer(_ index: Int) throws -> Int64?
    }
}
