#!/usr/bin/env bash
# Why Circle's nodes send NOTIFY after a post's transaction and never inside it.
#
# PostgreSQL takes one database-wide lock at the commit of every transaction that called NOTIFY
# (PreCommit_Notify, src/backend/commands/async.c), so a NOTIFY inside the post's transaction
# makes commits that otherwise touch different rows queue for one another. This runs pgbench on
# a PostgreSQL of its own (scripts/postgres-test-server: fsync on, synchronous_commit on) with a
# node listening, W clients each writing to a circle of its own, the way PostgresStore commits a
# post (lock the circle's counter row, insert the post, update the counter), three ways:
#   plain   no NOTIFY
#   inside  NOTIFY inside the post's transaction
#   after   NOTIFY in a statement of its own after COMMIT (what Circle does, once per batch)
# and prints posts/s and mean latency for each, with the ratios to "plain". The disk's fsync
# time drifts a lot on a shared machine, so the three alternate for several rounds and the
# medians are printed.
#
#   benchmarks/notify.sh                 # W = 1 and 16, 3 rounds of 5 s each
#   benchmarks/notify.sh 1,4,16,64 5 5   # writer counts, seconds per run, rounds
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(dirname "$here")"
writers="${1:-1,16}"
seconds="${2:-5}"
rounds="${3:-3}"
PGBIN="${PGBIN:-/usr/lib/postgresql/15/bin}"
work="$(mktemp -d /tmp/circle-notify.XXXXXX)"
chmod 755 "$work"
started="$("$root/scripts/postgres-test-server" start --watch $$)"
url="$(sed -n 's/^CIRCLE_TEST_POSTGRES_URL=//p' <<<"$started")"
pgdir="$(sed -n 's/^PGDIR=//p' <<<"$started")"
listener=""
cleanup() {
    [[ -n "$listener" ]] && kill "$listener" 2>/dev/null || true
    "$root/scripts/postgres-test-server" stop "$pgdir" >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap cleanup EXIT
export PGCONNECT_TIMEOUT=10

"$PGBIN/psql" "$url" -v ON_ERROR_STOP=1 -q <<'SQL'
CREATE TABLE bench_circles (name text COLLATE "C" PRIMARY KEY, last_seq bigint NOT NULL DEFAULT 0);
CREATE TABLE bench_posts (circle text COLLATE "C" NOT NULL, seq bigint NOT NULL, author bytea NOT NULL,
    client_id bytea NOT NULL, text bytea, time bigint NOT NULL, PRIMARY KEY (circle, seq));
CREATE UNIQUE INDEX bench_posts_key ON bench_posts (circle, author, client_id);
INSERT INTO bench_circles (name) SELECT 'c' || i FROM generate_series(0, 255) AS i;
SQL

# One node listening, as in a deployment: psql reads the notifications queued for it after
# each command, and \watch runs one every 100 ms.
(printf 'LISTEN circle_nodes;\nSELECT 1 \\watch 0.1\n' | "$PGBIN/psql" "$url" -q >/dev/null 2>&1) &
listener=$!

# A post as PostgresStore commits one: lock the circle's counter, insert, advance the counter.
# Each pgbench client writes to a circle of its own (c<client_id>).
post="SELECT last_seq FROM bench_circles WHERE name = 'c' || :client_id FOR UPDATE \gset
INSERT INTO bench_posts VALUES ('c' || :client_id, :last_seq + 1, 'ann'::bytea, ('id-' || :last_seq)::bytea, 'hello'::bytea, 0);
UPDATE bench_circles SET last_seq = :last_seq + 1 WHERE name = 'c' || :client_id;"
notify="SELECT pg_notify('circle_nodes', 'c' || :client_id);"
printf 'BEGIN;\n%s\nCOMMIT;\n' "$post" >"$work/plain.sql"
printf 'BEGIN;\n%s\n%s\nCOMMIT;\n' "$post" "$notify" >"$work/inside.sql"
printf 'BEGIN;\n%s\nCOMMIT;\n%s\n' "$post" "$notify" >"$work/after.sql"
chmod 644 "$work"/*.sql

median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

printf '%-8s %-8s %10s %12s %9s\n' writers variant "posts/s" "latency ms" "÷ plain"
IFS=',' read -ra counts <<<"$writers"
for w in "${counts[@]}"; do
    declare -A tps=() lat=()
    for ((round = 0; round < rounds; round++)); do
        for variant in plain inside after; do
            out="$("$PGBIN/pgbench" "$url" -n -c "$w" -j "$(( w < 2 ? 1 : 2 ))" -T "$seconds" -f "$work/$variant.sql" 2>&1)" || {
                echo "$out" >&2
                exit 1
            }
            tps[$variant]+="$(sed -n 's/^tps = \([0-9.]*\).*/\1/p' <<<"$out" | head -1) "
            lat[$variant]+="$(sed -n 's/^latency average = \([0-9.]*\) ms/\1/p' <<<"$out") "
        done
    done
    plain="$(tr ' ' '\n' <<<"${tps[plain]}" | grep . | median)"
    for variant in plain inside after; do
        t="$(tr ' ' '\n' <<<"${tps[$variant]}" | grep . | median)"
        l="$(tr ' ' '\n' <<<"${lat[$variant]}" | grep . | median)"
        printf '%-8s %-8s %10.0f %12.2f %9.2f\n' "$w" "$variant" "$t" "$l" "$(awk -v a="$t" -v b="$plain" 'BEGIN { print a / b }')"
    done
    unset tps lat
done
