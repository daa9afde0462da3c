import Logging
import SQLiteNIO

extension SQLiteStore {
    /// One step of the schema's history: the statements that take the database from version
    /// `index` to `index + 1` (its position in ``migrations``), run in one transaction.
    ///
    /// Each statement is run on its own: sqlite-nio prepares only the first statement of a string.
    struct Migration: Sendable {
        var summary: String
        var statements: [String]
    }

    /// The schema's history, oldest first. `PRAGMA user_version` records how many have been applied;
    /// append new steps at the end and never change one that has shipped.
    static let migrations: [Migration] = [
        Migration(
            summary: "circles, members, posts",
            statements: [
                """
                CREATE TABLE circles (
                    name TEXT NOT NULL PRIMARY KEY,
                    owner TEXT NOT NULL,
                    private INTEGER NOT NULL DEFAULT 0,
                    created_at INTEGER NOT NULL,
                    last_seq INTEGER NOT NULL DEFAULT 0
                ) STRICT
                """,
                """
                CREATE TABLE members (
                    circle TEXT NOT NULL REFERENCES circles (name) ON DELETE CASCADE,
                    user TEXT NOT NULL,
                    PRIMARY KEY (circle, user)
                ) WITHOUT ROWID, STRICT
                """,
                """
                CREATE TABLE posts (
                    circle TEXT NOT NULL REFERENCES circles (name),
                    seq INTEGER NOT NULL,
                    author TEXT NOT NULL,
                    client_id TEXT NOT NULL,
                    text TEXT,
                    attachment TEXT,
                    time INTEGER NOT NULL,
                    PRIMARY KEY (circle, seq)
                ) WITHOUT ROWID, STRICT
                """,
                // The idempotency key: a retried post finds its original through this index.
                "CREATE UNIQUE INDEX posts_by_client_id ON posts (circle, author, client_id)",
            ]
        ),
        Migration(
            summary: "media, uploaders, resumable uploads",
            statements: [
                """
                CREATE TABLE media (
                    id TEXT NOT NULL PRIMARY KEY,
                    size INTEGER NOT NULL,
                    content_type TEXT NOT NULL,
                    created_at INTEGER NOT NULL
                ) STRICT
                """,
                """
                CREATE TABLE media_uploaders (
                    media TEXT NOT NULL REFERENCES media (id),
                    user TEXT NOT NULL,
                    PRIMARY KEY (media, user)
                ) WITHOUT ROWID, STRICT
                """,
                """
                CREATE TABLE uploads (
                    id TEXT NOT NULL PRIMARY KEY,
                    owner TEXT NOT NULL,
                    length INTEGER NOT NULL,
                    content_type TEXT NOT NULL,
                    created_at INTEGER NOT NULL,
                    media TEXT
                ) STRICT
                """,
                // Who may fetch a media id: the posts that have it as their attachment.
                "CREATE INDEX posts_by_attachment ON posts (attachment) WHERE attachment IS NOT NULL",
            ]
        ),
        Migration(
            summary: "edits, deletes, reactions, replies, read markers",
            statements: [
                // A change entry (edit, delete, react, unreact) names its target post; a post may reply to one.
                "ALTER TABLE posts ADD COLUMN change TEXT",
                "ALTER TABLE posts ADD COLUMN target INTEGER",
                "ALTER TABLE posts ADD COLUMN emoji TEXT",
                "ALTER TABLE posts ADD COLUMN reply_to INTEGER",
                // A post's current state: the time of its last edit, and whether it was deleted.
                "ALTER TABLE posts ADD COLUMN edited_at INTEGER",
                "ALTER TABLE posts ADD COLUMN deleted INTEGER NOT NULL DEFAULT 0",
                // Deleting a post clears the text of the edits made to it.
                "CREATE INDEX posts_by_target ON posts (circle, target) WHERE target IS NOT NULL",
                // A post's current reactions; `seq` is the entry that added one (their order).
                // The primary key serves the reactions of a post, and of a page of posts.
                """
                CREATE TABLE reactions (
                    circle TEXT NOT NULL,
                    post INTEGER NOT NULL,
                    emoji TEXT NOT NULL,
                    user TEXT NOT NULL,
                    seq INTEGER NOT NULL,
                    PRIMARY KEY (circle, post, emoji, user)
                ) WITHOUT ROWID, STRICT
                """,
                """
                CREATE TABLE read_markers (
                    user TEXT NOT NULL,
                    circle TEXT NOT NULL REFERENCES circles (name) ON DELETE CASCADE,
                    seq INTEGER NOT NULL,
                    PRIMARY KEY (user, circle)
                ) WITHOUT ROWID, STRICT
                """,
            ]
        ),
        Migration(
            summary: "reaction emoji keep their place",
            statements: [
                // An emoji's place among a post's reactions: the entry that first used it there
                // since it last had none (CommitPlan.reactionWrites), shared by its reactions.
                "ALTER TABLE reactions ADD COLUMN first_seq INTEGER NOT NULL DEFAULT 0",
                // Reactions stored before kept no such entry: their oldest one stands in for it.
                """
                UPDATE reactions SET first_seq = (
                    SELECT min(r.seq) FROM reactions AS r
                    WHERE r.circle = reactions.circle AND r.post = reactions.post AND r.emoji = reactions.emoji
                )
                """,
            ]
        ),
        Migration(
            summary: "accounts, sessions, invites, passkeys",
            statements: [
                """
                CREATE TABLE accounts (
                    name TEXT NOT NULL PRIMARY KEY,
                    display_name TEXT NOT NULL DEFAULT '',
                    avatar TEXT,
                    role TEXT NOT NULL,
                    status TEXT NOT NULL,
                    password_hash TEXT,
                    created_at INTEGER NOT NULL,
                    last_seen_at INTEGER
                ) STRICT
                """,
                // Only the SHA-256 of a session's secret is kept: a copy of the database signs no one in.
                """
                CREATE TABLE sessions (
                    token_hash TEXT NOT NULL PRIMARY KEY,
                    id TEXT NOT NULL UNIQUE,
                    user TEXT NOT NULL REFERENCES accounts (name) ON DELETE CASCADE,
                    kind TEXT NOT NULL,
                    label TEXT NOT NULL,
                    address TEXT NOT NULL,
                    csrf TEXT NOT NULL,
                    created_at INTEGER NOT NULL,
                    last_used_at INTEGER NOT NULL,
                    expires_at INTEGER NOT NULL
                ) STRICT
                """,
                "CREATE INDEX sessions_by_user ON sessions (user)",
                """
                CREATE TABLE invites (
                    id TEXT NOT NULL PRIMARY KEY,
                    token_hash TEXT NOT NULL UNIQUE,
                    created_by TEXT NOT NULL,
                    created_at INTEGER NOT NULL,
                    expires_at INTEGER NOT NULL,
                    max_uses INTEGER NOT NULL,
                    uses INTEGER NOT NULL DEFAULT 0,
                    circles TEXT NOT NULL,
                    revoked INTEGER NOT NULL DEFAULT 0
                ) STRICT
                """,
                """
                CREATE TABLE passkeys (
                    id TEXT NOT NULL PRIMARY KEY,
                    user TEXT NOT NULL REFERENCES accounts (name) ON DELETE CASCADE,
                    public_key BLOB NOT NULL,
                    algorithm INTEGER NOT NULL,
                    sign_count INTEGER NOT NULL,
                    name TEXT NOT NULL,
                    created_at INTEGER NOT NULL,
                    last_used_at INTEGER
                ) STRICT
                """,
                "CREATE INDEX passkeys_by_user ON passkeys (user)",
                """
                CREATE TABLE auth_challenges (
                    id TEXT NOT NULL PRIMARY KEY,
                    purpose TEXT NOT NULL,
                    user TEXT,
                    challenge BLOB NOT NULL,
                    expires_at INTEGER NOT NULL
                ) STRICT
                """,
                """
                CREATE TABLE sign_in_failures (
                    key TEXT NOT NULL PRIMARY KEY,
                    count INTEGER NOT NULL,
                    last INTEGER NOT NULL
                ) WITHOUT ROWID, STRICT
                """,
            ]
        ),
        Migration(
            summary: "webhooks and their deliveries (an outbox written with the entries)",
            statements: [
                """
                CREATE TABLE webhooks (
                    id TEXT NOT NULL PRIMARY KEY,
                    url TEXT NOT NULL,
                    circle TEXT,
                    events TEXT NOT NULL,
                    secrets TEXT NOT NULL,
                    status TEXT NOT NULL,
                    disabled_reason TEXT,
                    bot TEXT,
                    created_by TEXT NOT NULL,
                    created_at INTEGER NOT NULL
                ) STRICT
                """,
                """
                CREATE TABLE webhook_deliveries (
                    id TEXT NOT NULL PRIMARY KEY,
                    webhook TEXT NOT NULL,
                    circle TEXT NOT NULL,
                    seq INTEGER NOT NULL,
                    event TEXT NOT NULL,
                    status TEXT NOT NULL,
                    attempts INTEGER NOT NULL DEFAULT 0,
                    created_at INTEGER NOT NULL,
                    next_attempt_at INTEGER NOT NULL,
                    last_attempt_at INTEGER,
                    last_status INTEGER,
                    last_error TEXT,
                    claimed_by TEXT,
                    lease_until INTEGER NOT NULL DEFAULT 0
                ) STRICT
                """,
                // Each endpoint's queue per circle, in order: only its first pending delivery may go.
                "CREATE INDEX webhook_deliveries_pending ON webhook_deliveries (webhook, circle, seq) WHERE status = 'pending'",
                "CREATE INDEX webhook_deliveries_by_webhook ON webhook_deliveries (webhook, created_at)",
            ]
        ),
        Migration(
            summary: "full-text search index",
            statements: [
                // FTS5 needs an integer rowid and `posts` has none (WITHOUT ROWID): each indexed post
                // gets an id here. A row exists exactly while the post has current text in the index
                // (SQLitePostWriter writes both in the commit's transaction); `trigrams` says whether
                // the text is in `search_trigrams` too (every post's since step 12).
                """
                CREATE TABLE search_docs (
                    id INTEGER PRIMARY KEY,
                    circle TEXT NOT NULL,
                    seq INTEGER NOT NULL,
                    trigrams INTEGER NOT NULL DEFAULT 0
                ) STRICT
                """,
                "CREATE UNIQUE INDEX search_docs_by_post ON search_docs (circle, seq)",
                // The indexes' external content: the text is stored once, in `posts`; snippets read it here.
                """
                CREATE VIEW search_content (id, text) AS
                SELECT d.id, p.text FROM search_docs AS d JOIN posts AS p ON p.circle = d.circle AND p.seq = d.seq
                """,
                // Words, case and diacritics folded ("Café" finds "cafe"). `columnsize = 0`: no
                // table of each post's token count, one write fewer per post in every commit; BM25
                // ranking counts a hit's tokens when it ranks it instead.
                """
                CREATE VIRTUAL TABLE search_words USING fts5 (
                    text, content = 'search_content', content_rowid = 'id', tokenize = 'unicode61 remove_diacritics 2', columnsize = 0
                )
                """,
                // Substrings of three characters or more, for scripts without spaces (東京タワー) and
                // `*ploy`. Until step 12, only the posts with text in such a script were in it.
                """
                CREATE VIEW search_trigram_content (id, text) AS
                SELECT d.id, p.text FROM search_docs AS d JOIN posts AS p ON p.circle = d.circle AND p.seq = d.seq
                WHERE d.trigrams = 1
                """,
                """
                CREATE VIRTUAL TABLE search_trigrams USING fts5 (
                    text, content = 'search_trigram_content', content_rowid = 'id', tokenize = 'trigram remove_diacritics 1', columnsize = 0
                )
                """,
                // The step indexes no post stored before it: it stays short on a large database. Those
                // posts have no `search_docs` row; the backfill (SQLiteStore+SearchBackfill.swift)
                // indexes them in the background in small write transactions, in (circle, seq) order
                // from where it stopped (this row), beside commits, which index every post they store
                // or change. Searches answer "still indexing" until it is done.
                """
                CREATE TABLE search_backfill (
                    id INTEGER PRIMARY KEY CHECK (id = 1),
                    done INTEGER NOT NULL,
                    circle TEXT NOT NULL DEFAULT '',
                    seq INTEGER NOT NULL DEFAULT 0,
                    indexed INTEGER NOT NULL DEFAULT 0
                ) STRICT
                """,
                "INSERT INTO search_backfill (id, done) SELECT 1, NOT EXISTS (SELECT 1 FROM posts)",
            ]
        ),
        Migration(
            summary: "API keys (stored hashed, scoped, revocable)",
            statements: [
                """
                CREATE TABLE api_keys (
                    id TEXT NOT NULL PRIMARY KEY,
                    name TEXT NOT NULL,
                    secret_hash TEXT NOT NULL,
                    bot TEXT NOT NULL,
                    scopes TEXT NOT NULL,
                    created_by TEXT NOT NULL,
                    created_at INTEGER NOT NULL,
                    last_used_at INTEGER,
                    revoked_at INTEGER
                ) STRICT
                """
            ]
        ),
        Migration(
            summary: "search ids kept with the posts",
            statements: [
                // Each post keeps its search id in its own row, which the commit writes anyway:
                // the writer finds a post's id there, and `search_docs` loses its index by
                // (circle, seq), whose inserts landed on a page of each circle in the batch
                // (measured with the same statements from Python: about 10 of the 36 WAL frames
                // of a batch of 8 posts over 16 circles; docs/bench/postpath.md). `search_docs`
                // stays the map from an index rowid to its post, appended to in id order.
                "ALTER TABLE posts ADD COLUMN search_id INTEGER",
                // Only the posts already indexed: none on a database upgraded from before search.
                "UPDATE posts SET search_id = d.id FROM search_docs AS d WHERE d.circle = posts.circle AND d.seq = posts.seq",
                "DROP INDEX search_docs_by_post",
            ]
        ),
        Migration(
            summary: "publish hooks (one per circle, asked before a post is committed), read-only circles, API key expiry",
            statements: [
                """
                CREATE TABLE publish_hooks (
                    circle TEXT NOT NULL PRIMARY KEY REFERENCES circles (name) ON DELETE CASCADE,
                    url TEXT NOT NULL,
                    secret TEXT NOT NULL,
                    timeout_ms INTEGER NOT NULL,
                    on_failure TEXT NOT NULL,
                    created_by TEXT NOT NULL,
                    created_at INTEGER NOT NULL
                ) STRICT
                """,
                """
                CREATE TABLE read_only_circles (
                    circle TEXT NOT NULL PRIMARY KEY REFERENCES circles (name) ON DELETE CASCADE,
                    set_by TEXT NOT NULL,
                    set_at INTEGER NOT NULL
                ) STRICT
                """,
                "ALTER TABLE api_keys ADD COLUMN expires_at INTEGER",
            ]
        ),
        Migration(
            summary: "mentions, direct messages, notification levels",
            statements: [
                // What an entry's text mentions (CommitPlan): names joined by newlines, and whether
                // it mentions everyone.
                "ALTER TABLE posts ADD COLUMN mentions TEXT",
                "ALTER TABLE posts ADD COLUMN mentions_everyone INTEGER NOT NULL DEFAULT 0",
                // One notification per person per post: `seq` is the entry that mentioned them
                // first (the post, or an edit that added the mention); never removed by an edit.
                """
                CREATE TABLE mentions (
                    circle TEXT NOT NULL,
                    post INTEGER NOT NULL,
                    user TEXT NOT NULL,
                    seq INTEGER NOT NULL,
                    PRIMARY KEY (circle, post, user)
                ) WITHOUT ROWID, STRICT
                """,
                // A circle list counts a user's mentions above each read marker through this.
                "CREATE INDEX mentions_by_user ON mentions (user, circle, seq)",
                // A direct message is a private circle found by its members: their names, sorted
                // by bytes, joined by newlines. NULL for a circle.
                "ALTER TABLE circles ADD COLUMN direct TEXT",
                "CREATE UNIQUE INDEX circles_by_direct ON circles (direct) WHERE direct IS NOT NULL",
                """
                CREATE TABLE notification_levels (
                    user TEXT NOT NULL,
                    circle TEXT NOT NULL REFERENCES circles (name) ON DELETE CASCADE,
                    level TEXT NOT NULL,
                    PRIMARY KEY (user, circle)
                ) WITHOUT ROWID, STRICT
                """,
            ]
        ),
        Migration(
            summary: "every post's substrings in the trigram index",
            statements: [
                // `*ploy` finds "deploy": the trigram index holds every indexed post from now on, not
                // only text in scripts without spaces. The posts indexed before this step
                // (`trigrams = 0`) get theirs from the background backfill, which starts over from
                // the first post when there are any (searches say "still indexing" meanwhile).
                """
                UPDATE search_backfill SET done = 0, circle = '', seq = 0
                WHERE EXISTS (SELECT 1 FROM search_docs WHERE trigrams = 0)
                """
            ]
        ),
        Migration(
            summary: "push notifications",
            statements: [
                // One Web Push subscription per endpoint (a device's browser); a user has a few.
                """
                CREATE TABLE push_subscriptions (
                    endpoint TEXT PRIMARY KEY,
                    user TEXT NOT NULL,
                    p256dh TEXT NOT NULL,
                    auth TEXT NOT NULL,
                    created_at INTEGER NOT NULL
                ) STRICT
                """,
                "CREATE INDEX push_subscriptions_by_user ON push_subscriptions (user, created_at)",
                // The push outbox: one row per subscription per entry to tell it of, written with
                // the entry (CommitPlan.pushWrites), leased by one node's PushDispatcher.
                """
                CREATE TABLE pushes (
                    id INTEGER PRIMARY KEY AUTOINCREMENT,
                    endpoint TEXT NOT NULL,
                    user TEXT NOT NULL,
                    circle TEXT NOT NULL,
                    seq INTEGER NOT NULL,
                    kind TEXT NOT NULL,
                    created_at INTEGER NOT NULL,
                    next_attempt_at INTEGER NOT NULL,
                    attempts INTEGER NOT NULL DEFAULT 0,
                    lease_node TEXT,
                    lease_until INTEGER
                ) STRICT
                """,
                "CREATE INDEX pushes_due ON pushes (next_attempt_at)",
                "CREATE INDEX pushes_by_endpoint ON pushes (endpoint)",
                // Keys the server makes once and keeps with its data (the VAPID key).
                """
                CREATE TABLE server_keys (
                    name TEXT PRIMARY KEY,
                    value TEXT NOT NULL
                ) WITHOUT ROWID, STRICT
                """,
            ]
        ),
        Migration(
            summary: "audit log",
            statements: [
                // Who erased whom, and when (ErasureStore); kept when the account is removed.
                """
                CREATE TABLE audit_log (
                    id INTEGER PRIMARY KEY,
                    time INTEGER NOT NULL,
                    actor TEXT NOT NULL,
                    action TEXT NOT NULL,
                    subject TEXT NOT NULL,
                    detail TEXT NOT NULL
                ) STRICT
                """
            ]
        ),
        Migration(
            summary: "system entries",
            statements: [
                // A system entry (member added, removed, left; circle created) is a stream entry with
                // `event` set and the member it concerns; a circle may turn them off.
                "ALTER TABLE posts ADD COLUMN event TEXT",
                "ALTER TABLE posts ADD COLUMN member TEXT",
                "ALTER TABLE circles ADD COLUMN system_entries INTEGER NOT NULL DEFAULT 1",
            ]
        ),
        Migration(
            summary: "retention policies, who wants every post of a circle",
            statements: [
                // A commit finds who chose `all` in a circle it posts in (CommitPlan+Push) here.
                "CREATE INDEX notification_levels_by_circle ON notification_levels (circle, level)",
                // A circle's retention (RetentionStore): entries older than `max_age_days`, and
                // beyond the newest `keep_newest`, are removed in the background; NULL: no limit.
                """
                CREATE TABLE retention_policies (
                    circle TEXT NOT NULL PRIMARY KEY REFERENCES circles (name) ON DELETE CASCADE,
                    max_age_days INTEGER,
                    keep_newest INTEGER
                ) STRICT
                """
            ]
        ),
        Migration(
            summary: "push only to people who are away",
            statements: [
                // Per user per node: how many connections the user has open there and when that
                // was last true (PushPresence); the push dispatcher of any node reads it.
                """
                CREATE TABLE user_connections (
                    user TEXT NOT NULL,
                    node TEXT NOT NULL,
                    connections INTEGER NOT NULL,
                    seen_at INTEGER NOT NULL,
                    PRIMARY KEY (user, node)
                ) WITHOUT ROWID, STRICT
                """,
                "CREATE INDEX user_connections_by_seen ON user_connections (seen_at)",
                // When a device was last pushed to about a circle (PushBurst): a burst becomes one
                // notification per device per circle per --push-burst-interval.
                """
                CREATE TABLE push_sent (
                    endpoint TEXT NOT NULL,
                    circle TEXT NOT NULL,
                    sent_at INTEGER NOT NULL,
                    PRIMARY KEY (endpoint, circle)
                ) WITHOUT ROWID, STRICT
                """,
                "CREATE INDEX push_sent_by_time ON push_sent (sent_at)",
            ]
        ),
        Migration(
            // A commit's deliveries for a subscribed webhook are written to one tree fewer: the
            // table is its primary key (ids follow the entries' time, so a commit's deliveries
            // are appended to it) instead of a rowid table with an index of its ids.
            summary: "webhook deliveries without a rowid",
            statements: [
                """
                CREATE TABLE webhook_deliveries_keyed (
                    id TEXT NOT NULL PRIMARY KEY,
                    webhook TEXT NOT NULL,
                    circle TEXT NOT NULL,
                    seq INTEGER NOT NULL,
                    event TEXT NOT NULL,
                    status TEXT NOT NULL,
                    attempts INTEGER NOT NULL DEFAULT 0,
                    created_at INTEGER NOT NULL,
                    next_attempt_at INTEGER NOT NULL,
                    last_attempt_at INTEGER,
                    last_status INTEGER,
                    last_error TEXT,
                    claimed_by TEXT,
                    lease_until INTEGER NOT NULL DEFAULT 0
                ) WITHOUT ROWID, STRICT
                """,
                """
                INSERT INTO webhook_deliveries_keyed (id, webhook, circle, seq, event, status, attempts, created_at, next_attempt_at,
                    last_attempt_at, last_status, last_error, claimed_by, lease_until)
                SELECT id, webhook, circle, seq, event, status, attempts, created_at, next_attempt_at,
                    last_attempt_at, last_status, last_error, claimed_by, lease_until FROM webhook_deliveries
                """,
                "DROP TABLE webhook_deliveries",
                "ALTER TABLE webhook_deliveries_keyed RENAME TO webhook_deliveries",
                // Each endpoint's queue per circle, in order: only its first pending delivery may go.
                "CREATE INDEX webhook_deliveries_pending ON webhook_deliveries (webhook, circle, seq) WHERE status = 'pending'",
                "CREATE INDEX webhook_deliveries_by_webhook ON webhook_deliveries (webhook, created_at)",
            ]
        ),
    ]

    /// The schema version this build writes and understands.
    static var schemaVersion: Int { Self.migrations.count }

    /// The schema version just before the search index's step: a database as a server without
    /// search left it (tests of the upgrade).
    static var versionBeforeSearch: Int { Self.migrations.firstIndex { $0.summary == "full-text search index" } ?? Self.migrations.count }

    /// Applies the migrations the database lacks, each in its own `BEGIN IMMEDIATE` transaction that
    /// also bumps `user_version`, so a crash leaves the database at a whole version and a second
    /// process migrating at the same time applies nothing twice.
    ///
    /// - Parameter target: The version to stop at; tests pass an older one to make a database as
    ///   an older server left it.
    static func applyMigrations(on connection: SQLiteConnection, logger: Logger, upTo target: Int = SQLiteStore.schemaVersion) async throws {
        while true {
            let done = try await Self.transaction(on: connection, logger: logger) { () async throws -> Bool in
                let rows = try await connection.query("PRAGMA user_version")
                guard let version = rows.first?.column("user_version")?.integer else {
                    throw StoreError(.unavailable, "SQLite returned no user_version")
                }
                if version == Self.schemaVersion || version == target {
                    return true
                }
                guard version >= 0, version < Self.schemaVersion else {
                    throw StoreError(
                        .unavailable,
                        "the database has schema version \(version), newer than this server's \(Self.schemaVersion)"
                    )
                }
                let migration = Self.migrations[version]
                for statement in migration.statements {
                    _ = try await connection.query(statement)
                }
                // PRAGMA takes no bind parameters; the value is our own integer.
                _ = try await connection.query("PRAGMA user_version = \(version + 1)")
                logger.info(
                    "migrated the database schema",
                    metadata: [
                        "circle.store.schema_version": "\(version + 1)",
                        "circle.store.migration": "\(migration.summary)",
                    ]
                )
                return false
            }
            if done {
                return
            }
        }
    }
}
