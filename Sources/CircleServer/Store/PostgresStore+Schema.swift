import Logging
import PostgresNIO

extension PostgresStore {
    /// The schema's history, oldest first; the table `circle_schema` records how many steps have
    /// been applied. Append new steps at the end and never change one that has shipped.
    ///
    /// Names compare by bytes (`COLLATE "C"`), as in ``SQLiteStore``, whatever the database's
    /// default collation: a circle list comes back in the same order from both stores.
    static let migrations: [[PostgresQuery]] = [
        [
            """
            CREATE TABLE circles (
                name text COLLATE "C" PRIMARY KEY,
                owner text COLLATE "C" NOT NULL,
                private boolean NOT NULL DEFAULT false,
                created_at bigint NOT NULL,
                last_seq bigint NOT NULL DEFAULT 0
            )
            """,
            """
            CREATE TABLE members (
                circle text COLLATE "C" NOT NULL REFERENCES circles (name) ON DELETE CASCADE,
                user_name text COLLATE "C" NOT NULL,
                PRIMARY KEY (circle, user_name)
            )
            """,
            """
            CREATE TABLE posts (
                circle text COLLATE "C" NOT NULL REFERENCES circles (name),
                seq bigint NOT NULL,
                author bytea NOT NULL,
                client_id bytea NOT NULL,
                text bytea,
                attachment text COLLATE "C",
                time bigint NOT NULL,
                PRIMARY KEY (circle, seq)
            )
            """,
            // The idempotency key: a retried post finds its original through this index.
            "CREATE UNIQUE INDEX posts_by_client_id ON posts (circle, author, client_id)",
            """
            CREATE TABLE media (
                id text COLLATE "C" PRIMARY KEY,
                size bigint NOT NULL,
                content_type text NOT NULL,
                created_at bigint NOT NULL
            )
            """,
            """
            CREATE TABLE media_uploaders (
                media text COLLATE "C" NOT NULL REFERENCES media (id),
                user_name text COLLATE "C" NOT NULL,
                PRIMARY KEY (media, user_name)
            )
            """,
            """
            CREATE TABLE uploads (
                id text COLLATE "C" PRIMARY KEY,
                owner text COLLATE "C" NOT NULL,
                length bigint NOT NULL,
                content_type text NOT NULL,
                created_at bigint NOT NULL,
                media text COLLATE "C"
            )
            """,
            // Who may fetch a media id: the posts that have it as their attachment.
            "CREATE INDEX posts_by_attachment ON posts (attachment) WHERE attachment IS NOT NULL",
        ],
        [
            // Removed members, for nodes that missed the signal (PostgresStore+Nodes).
            """
            CREATE TABLE member_removals (
                id bigserial PRIMARY KEY,
                circle text COLLATE "C" NOT NULL,
                user_name text COLLATE "C" NOT NULL,
                removed_at bigint NOT NULL
            )
            """
        ],
        [
            // Edits, deletes, reactions, replies: a change entry names its target post; a post may
            // reply to one; a post keeps its current state (last edit time, deleted).
            """
            ALTER TABLE posts
                ADD COLUMN change text COLLATE "C",
                ADD COLUMN target bigint,
                ADD COLUMN emoji bytea,
                ADD COLUMN reply_to bigint,
                ADD COLUMN edited_at bigint,
                ADD COLUMN deleted boolean NOT NULL DEFAULT false
            """,
            // Deleting a post clears the text of the edits made to it.
            "CREATE INDEX posts_by_target ON posts (circle, target) WHERE target IS NOT NULL",
            // A post's current reactions; `seq` is the entry that added one (their order). The
            // primary key serves the reactions of a post, and of a page of posts.
            """
            CREATE TABLE reactions (
                circle text COLLATE "C" NOT NULL,
                post bigint NOT NULL,
                emoji bytea NOT NULL,
                user_name bytea NOT NULL,
                seq bigint NOT NULL,
                PRIMARY KEY (circle, post, emoji, user_name)
            )
            """,
            """
            CREATE TABLE read_markers (
                user_name text COLLATE "C" NOT NULL,
                circle text COLLATE "C" NOT NULL REFERENCES circles (name) ON DELETE CASCADE,
                seq bigint NOT NULL,
                PRIMARY KEY (user_name, circle)
            )
            """,
        ],
        [
            // An emoji's place among a post's reactions: the entry that first used it there since
            // it last had none (CommitPlan.reactionWrites), shared by its reactions.
            "ALTER TABLE reactions ADD COLUMN first_seq bigint NOT NULL DEFAULT 0",
            // Reactions stored before kept no such entry: their oldest one stands in for it.
            """
            UPDATE reactions SET first_seq = f.first_seq
            FROM (SELECT circle, post, emoji, min(seq) AS first_seq FROM reactions GROUP BY circle, post, emoji) AS f
            WHERE reactions.circle = f.circle AND reactions.post = f.post AND reactions.emoji = f.emoji
            """,
        ],
        // Accounts, sessions, invites, passkeys (as in SQLiteStore's fifth step), and the log of
        // "end these connections" that every node polls (accountEvents(after:)).
        [
            """
            CREATE TABLE accounts (
                name text COLLATE "C" PRIMARY KEY,
                display_name text NOT NULL DEFAULT '',
                avatar text COLLATE "C",
                role text NOT NULL,
                status text NOT NULL,
                password_hash text,
                created_at bigint NOT NULL,
                last_seen_at bigint
            )
            """,
            """
            CREATE TABLE sessions (
                token_hash text COLLATE "C" PRIMARY KEY,
                id text COLLATE "C" NOT NULL UNIQUE,
                user_name text COLLATE "C" NOT NULL REFERENCES accounts (name) ON DELETE CASCADE,
                kind text NOT NULL,
                label text NOT NULL,
                address text NOT NULL,
                csrf text NOT NULL,
                created_at bigint NOT NULL,
                last_used_at bigint NOT NULL,
                expires_at bigint NOT NULL
            )
            """,
            "CREATE INDEX sessions_by_user ON sessions (user_name)",
            """
            CREATE TABLE invites (
                id text COLLATE "C" PRIMARY KEY,
                token_hash text COLLATE "C" NOT NULL UNIQUE,
                created_by text COLLATE "C" NOT NULL,
                created_at bigint NOT NULL,
                expires_at bigint NOT NULL,
                max_uses integer NOT NULL,
                uses integer NOT NULL DEFAULT 0,
                circles text NOT NULL,
                revoked boolean NOT NULL DEFAULT false
            )
            """,
            """
            CREATE TABLE passkeys (
                id text COLLATE "C" PRIMARY KEY,
                user_name text COLLATE "C" NOT NULL REFERENCES accounts (name) ON DELETE CASCADE,
                public_key bytea NOT NULL,
                algorithm integer NOT NULL,
                sign_count bigint NOT NULL,
                name text NOT NULL,
                created_at bigint NOT NULL,
                last_used_at bigint
            )
            """,
            "CREATE INDEX passkeys_by_user ON passkeys (user_name)",
            """
            CREATE TABLE auth_challenges (
                id text COLLATE "C" PRIMARY KEY,
                purpose text NOT NULL,
                user_name text COLLATE "C",
                challenge bytea NOT NULL,
                expires_at bigint NOT NULL
            )
            """,
            """
            CREATE TABLE sign_in_failures (
                key text COLLATE "C" PRIMARY KEY,
                count integer NOT NULL,
                last bigint NOT NULL
            )
            """,
            """
            CREATE TABLE account_events (
                id bigserial PRIMARY KEY,
                user_name text COLLATE "C" NOT NULL,
                session text COLLATE "C",
                at bigint NOT NULL
            )
            """,
        ],
        // Webhooks and their deliveries: an outbox written in the transaction of the entries.
        [
            """
            CREATE TABLE webhooks (
                id text COLLATE "C" PRIMARY KEY,
                url text NOT NULL,
                circle text COLLATE "C",
                events text NOT NULL,
                secrets text NOT NULL,
                status text NOT NULL,
                disabled_reason text,
                bot text COLLATE "C",
                created_by text COLLATE "C" NOT NULL,
                created_at bigint NOT NULL
            )
            """,
            """
            CREATE TABLE webhook_deliveries (
                id text COLLATE "C" PRIMARY KEY,
                webhook text COLLATE "C" NOT NULL,
                circle text COLLATE "C" NOT NULL,
                seq bigint NOT NULL,
                event text NOT NULL,
                status text NOT NULL,
                attempts integer NOT NULL DEFAULT 0,
                created_at bigint NOT NULL,
                next_attempt_at bigint NOT NULL,
                last_attempt_at bigint,
                last_status integer,
                last_error text,
                claimed_by text,
                lease_until bigint NOT NULL DEFAULT 0
            )
            """,
            "CREATE INDEX webhook_deliveries_pending ON webhook_deliveries (webhook, circle, seq) WHERE status = 'pending'",
            "CREATE INDEX webhook_deliveries_by_webhook ON webhook_deliveries (webhook, created_at)",
        ],
        // Full-text search: each post's current text as a `tsvector` column kept by a trigger (so
        // every statement that stores or changes a post keeps it in step, in the commit's
        // transaction) and a trigram index for substrings and scripts without spaces. The text
        // configuration is 'simple' (no stemming, no stop words: the same words in every
        // language, as SQLite's unicode61), applied to the text with its diacritics removed by
        // `circle_search_fold`, since the `unaccent` extension is not assumed. Only `pg_trgm` is
        // needed (a trusted extension: a database owner may create it).
        //
        // The step rewrites no row and computes nothing per post: the column is added empty,
        // both indexes hold only rows whose `search` is set (none yet), so it stays short on a
        // large database. The posts stored before it are indexed in the background
        // (PostgresStore+SearchBackfill.swift), a batch per transaction, from where
        // `search_backfill` says it stopped; searches answer "still indexing" until it is done.
        [
            "CREATE EXTENSION IF NOT EXISTS pg_trgm",
            // A post's text as `text`: PostgreSQL's `text` cannot hold the NULs a post may contain.
            """
            CREATE FUNCTION circle_search_plain(body bytea) RETURNS text
            LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $$
            DECLARE
                at integer;
            BEGIN
                LOOP
                    at := position('\\x00'::bytea IN body);
                    EXIT WHEN at = 0;
                    body := overlay(body PLACING ''::bytea FROM at FOR 1);
                END LOOP;
                RETURN convert_from(body, 'UTF8');
            END
            $$
            """,
            // Diacritics removed: decomposed (NFD), then the combining marks dropped ("Café" → "Cafe").
            """
            CREATE FUNCTION circle_search_fold(words text) RETURNS text
            LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
            AS $$ SELECT regexp_replace(normalize(words, NFD), '[\\u0300-\\u036f]', '', 'g') $$
            """,
            // What a post is indexed as: words of its current text; NULL for an edit or reaction
            // entry, a deleted post, a post without text. The one definition, for the trigger and the backfill.
            """
            CREATE FUNCTION circle_search_vector(body bytea, change text, deleted boolean) RETURNS tsvector
            LANGUAGE sql IMMUTABLE PARALLEL SAFE
            AS $$ SELECT CASE WHEN change IS NULL AND NOT deleted AND body IS NOT NULL
                THEN to_tsvector('simple'::regconfig, circle_search_fold(circle_search_plain(body))) END $$
            """,
            "ALTER TABLE posts ADD COLUMN search tsvector",
            """
            CREATE FUNCTION circle_search_index() RETURNS trigger
            LANGUAGE plpgsql AS $$
            BEGIN
                NEW.search := circle_search_vector(NEW.text, NEW.change, NEW.deleted);
                RETURN NEW;
            END
            $$
            """,
            """
            CREATE TRIGGER posts_search BEFORE INSERT OR UPDATE OF text, change, deleted ON posts
            FOR EACH ROW EXECUTE FUNCTION circle_search_index()
            """,
            "CREATE INDEX posts_search ON posts USING gin (search) WHERE search IS NOT NULL",
            """
            CREATE INDEX posts_search_trigrams ON posts USING gin (circle_search_fold(circle_search_plain(text)) gin_trgm_ops)
            WHERE search IS NOT NULL
            """,
            """
            CREATE TABLE search_backfill (
                id integer PRIMARY KEY CHECK (id = 1),
                done boolean NOT NULL,
                circle text COLLATE "C" NOT NULL DEFAULT '',
                seq bigint NOT NULL DEFAULT 0,
                indexed bigint NOT NULL DEFAULT 0
            )
            """,
            "INSERT INTO search_backfill (id, done) SELECT 1, NOT EXISTS (SELECT 1 FROM posts)",
        ],
        // API keys (stored hashed, scoped, revocable).
        [
            """
            CREATE TABLE api_keys (
                id text COLLATE "C" PRIMARY KEY,
                name text NOT NULL,
                secret_hash text NOT NULL,
                bot text COLLATE "C" NOT NULL,
                scopes text NOT NULL,
                created_by text COLLATE "C" NOT NULL,
                created_at bigint NOT NULL,
                last_used_at bigint,
                revoked_at bigint
            )
            """
        ],
        // Publish hooks (one per circle, asked before a post is committed), read-only circles, API key expiry.
        [
            """
            CREATE TABLE publish_hooks (
                circle text COLLATE "C" PRIMARY KEY REFERENCES circles (name) ON DELETE CASCADE,
                url text NOT NULL,
                secret text NOT NULL,
                timeout_ms integer NOT NULL,
                on_failure text NOT NULL,
                created_by text COLLATE "C" NOT NULL,
                created_at bigint NOT NULL
            )
            """,
            """
            CREATE TABLE read_only_circles (
                circle text COLLATE "C" PRIMARY KEY REFERENCES circles (name) ON DELETE CASCADE,
                set_by text COLLATE "C" NOT NULL,
                set_at bigint NOT NULL
            )
            """,
            "ALTER TABLE api_keys ADD COLUMN expires_at bigint",
        ],
        // Mentions, direct messages, notification levels (as SQLite's step of that summary).
        [
            "ALTER TABLE posts ADD COLUMN mentions bytea",
            "ALTER TABLE posts ADD COLUMN mentions_everyone boolean NOT NULL DEFAULT false",
            """
            CREATE TABLE mentions (
                circle text COLLATE "C" NOT NULL,
                post bigint NOT NULL,
                user_name text COLLATE "C" NOT NULL,
                seq bigint NOT NULL,
                PRIMARY KEY (circle, post, user_name)
            )
            """,
            "CREATE INDEX mentions_by_user ON mentions (user_name, circle, seq)",
            "ALTER TABLE circles ADD COLUMN direct text COLLATE \"C\"",
            "CREATE UNIQUE INDEX circles_by_direct ON circles (direct) WHERE direct IS NOT NULL",
            """
            CREATE TABLE notification_levels (
                user_name text COLLATE "C" NOT NULL,
                circle text COLLATE "C" NOT NULL REFERENCES circles (name) ON DELETE CASCADE,
                level text NOT NULL,
                PRIMARY KEY (user_name, circle)
            )
            """,
        ],
        // Push notifications (as SQLite's step of that summary).
        [
            """
            CREATE TABLE push_subscriptions (
                endpoint text COLLATE "C" PRIMARY KEY,
                user_name text COLLATE "C" NOT NULL,
                p256dh text NOT NULL,
                auth text NOT NULL,
                created_at bigint NOT NULL
            )
            """,
            "CREATE INDEX push_subscriptions_by_user ON push_subscriptions (user_name, created_at)",
            """
            CREATE TABLE pushes (
                id bigserial PRIMARY KEY,
                endpoint text COLLATE "C" NOT NULL,
                user_name text COLLATE "C" NOT NULL,
                circle text COLLATE "C" NOT NULL,
                seq bigint NOT NULL,
                kind text NOT NULL,
                created_at bigint NOT NULL,
                next_attempt_at bigint NOT NULL,
                attempts integer NOT NULL DEFAULT 0,
                lease_node text,
                lease_until bigint
            )
            """,
            "CREATE INDEX pushes_due ON pushes (next_attempt_at)",
            "CREATE INDEX pushes_by_endpoint ON pushes (endpoint)",
            """
            CREATE TABLE server_keys (
                name text COLLATE "C" PRIMARY KEY,
                value text NOT NULL
            )
            """,
        ],
        // Audit log (as SQLite's step of that summary).
        [
            """
            CREATE TABLE audit_log (
                id bigserial PRIMARY KEY,
                time bigint NOT NULL,
                actor text COLLATE "C" NOT NULL,
                action text NOT NULL,
                subject text COLLATE "C" NOT NULL,
                detail text NOT NULL
            )
            """
        ],
        // System entries (as SQLite's step of that summary).
        [
            "ALTER TABLE posts ADD COLUMN event text, ADD COLUMN member text COLLATE \"C\"",
            "ALTER TABLE circles ADD COLUMN system_entries boolean NOT NULL DEFAULT true",
        ],
        // Retention policies, who wants every post of a circle (as SQLite's step of that summary).
        [
            "CREATE INDEX notification_levels_by_circle ON notification_levels (circle, level)",
            """
            CREATE TABLE retention_policies (
                circle text COLLATE "C" PRIMARY KEY REFERENCES circles (name) ON DELETE CASCADE,
                max_age_days bigint,
                keep_newest bigint
            )
            """
        ],
        // Push only to people who are away (as SQLite's step of that summary).
        [
            """
            CREATE TABLE user_connections (
                user_name text COLLATE "C" NOT NULL,
                node text COLLATE "C" NOT NULL,
                connections integer NOT NULL,
                seen_at bigint NOT NULL,
                PRIMARY KEY (user_name, node)
            )
            """,
            "CREATE INDEX user_connections_by_seen ON user_connections (seen_at)",
            """
            CREATE TABLE push_sent (
                endpoint text COLLATE "C" NOT NULL,
                circle text COLLATE "C" NOT NULL,
                sent_at bigint NOT NULL,
                PRIMARY KEY (endpoint, circle)
            )
            """,
            "CREATE INDEX push_sent_by_time ON push_sent (sent_at)",
        ],
    ]

    /// The schema version this build writes and understands.
    static var schemaVersion: Int { Self.migrations.count }

    /// The schema version just before the search step (tests of the upgrade).
    static var versionBeforeSearch: Int { Self.migrations.firstIndex { $0.contains { $0.sql.contains("pg_trgm") } } ?? Self.migrations.count }

    /// A fixed key for `pg_advisory_xact_lock`: nodes that start at once migrate one after another.
    static let migrationLockKey: Int64 = 0x4369_7263_6C65  // "Circle"

    /// Applies the steps the database lacks, each in one transaction that holds the migration
    /// lock and records the new version, so several nodes starting at once apply nothing twice
    /// and a crash leaves a whole version.
    ///
    /// - Parameter target: The version to stop at; tests pass an older one to make a database as
    ///   an older server left it.
    static func applyMigrations(client: PostgresClient, logger: Logger, upTo target: Int = PostgresStore.schemaVersion) async throws {
        while true {
            let done = try await client.withTransaction(logger: logger) { connection -> Bool in
                try await connection.query("SELECT pg_advisory_xact_lock(\(Self.migrationLockKey))", logger: logger)
                try await connection.query("CREATE TABLE IF NOT EXISTS circle_schema (version integer NOT NULL)", logger: logger)
                var version: Int?
                for try await value in try await connection.query("SELECT version FROM circle_schema", logger: logger).decode(Int.self) {
                    version = value
                }
                let current = version ?? 0
                if current == Self.schemaVersion || current == target {
                    return true
                }
                guard current >= 0, current < Self.schemaVersion else {
                    throw StoreError(
                        .unavailable,
                        "the database has schema version \(current), newer than this server's \(Self.schemaVersion)"
                    )
                }
                for statement in Self.migrations[current] {
                    try await connection.query(statement, logger: logger)
                }
                if version == nil {
                    try await connection.query("INSERT INTO circle_schema (version) VALUES (\(current + 1))", logger: logger)
                } else {
                    try await connection.query("UPDATE circle_schema SET version = \(current + 1)", logger: logger)
                }
                logger.info("migrated the database schema", metadata: ["circle.store.schema_version": "\(current + 1)"])
                return false
            }
            if done { return }
        }
    }
}
