"""Search: latency and server CPU per query over a large history, next to SQLite FTS5 itself.

1. **Data.** A fresh data directory's schema is made by `circle serve` itself (started once and
   stopped). This script then writes N posts (default 1,000,000) over C public circles (default
   1,000) straight into its SQLite database in one transaction, with the rows the server keeps
   for its search index (`search_docs`, one per post, and the post's `search_id`; `trigrams = 1`:
   every post is in the trigram index too, as the post writer does), and builds both FTS5
   indexes with FTS5's `rebuild` command: the same index content the commits would have written,
   without posting a million times through the server (the post path with the index is
   `postpath.py`'s to measure). The texts: 6 to 20 words drawn from a Zipf-like vocabulary of
   20,000 made-up words; planted in them, a common word (`deploy`, in about 1 % of posts), a
   phrase (`release notes`, about 0.1 %), a rare word (`zanzibarite`, in 20 posts); 3 % of the
   posts are Japanese, about 1 in 40 of those with `東京タワー`.
2. **Circle.** `circle serve` (the release build) runs pinned to CPU 0 on that data; one client
   (this process, pinned to CPU 1) sends `GET /v1/search` one at a time over a kept-alive
   connection, for each query: warm-up, then `--queries` timed ones. Printed: p50/p99 latency
   (send → whole answer read) and the server's CPU per query (its threads' on-CPU time from schedstat over the run ÷ queries).
3. **The floor.** The server stopped, this process (pinned to CPU 0) runs the same SQL
   statement the server's SQLite store runs for each query (SQLiteSearchStatement: the FTS5
   `MATCH`, BM25 order, `snippet()`, the joins that keep to readable circles and current text,
   the page size + 1), through Python's `sqlite3` API on a SQLite with FTS5 and the `trigram`
   tokenizer's options (`pysqlite3-binary`), on the same database file. Its CPU per query is the
   process's own; `circle ÷ floor` is Circle's cost around SQLite (HTTP, parsing the query,
   JSON, the access checks) plus any difference between the two SQLite builds.

Also printed: the database's size, the posts table's (its `search_id` column included), and the
index's (the `search_docs` table and the FTS5 tables' shadow tables, from `dbstat`).

    python search.py                              # 1,000,000 posts in 1,000 circles
    python search.py --posts 20000 --circles 50 --queries 50   # a quick look

Only 127.0.0.1 is contacted; each wait is bounded.
"""
from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import shutil
import sys
import tempfile
import time
import urllib.parse

import benchlib

try:
    import pysqlite3.dbapi2 as sqlite  # a SQLite whose trigram tokenizer takes remove_diacritics
except ImportError:  # pragma: no cover
    sys.exit("search.py needs pysqlite3-binary (benchmarks/requirements.txt): "
             "benchmarks/.venv/bin/pip install -r benchmarks/requirements.txt")

COMMON, PHRASE, RARE, CJK = "deploy", "release notes", "zanzibarite", "東京タワー"
JAPANESE = ["今日", "会議", "資料", "確認", "お願いします", "ありがとう", "明日", "東京", "大阪", "予定",
            "変更", "リリース", "サーバー", "障害", "対応", "完了", "です", "ます", "の", "を", "に", "は"]

# (label, q, extra parameters): what is timed, in this order.
QUERIES = [
    ("one word", COMMON, {}),
    ("a phrase", f'"{PHRASE}"', {}),
    ("a rare word", RARE, {}),
    ("a CJK term", CJK, {}),
    ("one word, one circle", COMMON, {"circle": "c0007"}),
    ("a substring of the common word", "*" + COMMON[1:], {}),
    ("a substring of the rare word", "*" + RARE[1:-2], {}),
]


def vocabulary(size: int, rng: random.Random) -> list[str]:
    syllables = ["ka", "lo", "mi", "ne", "ru", "ta", "vo", "shi", "den", "mar", "pel", "qua", "ris", "tor", "ub", "zen"]
    words: set[str] = set()
    while len(words) < size:
        words.add("".join(rng.choice(syllables) for _ in range(rng.randint(2, 4))))
    words.discard(RARE)
    return sorted(words)


def texts(count: int, rng: random.Random):
    """Yields (text, is_japanese) for `count` posts."""
    words = vocabulary(20_000, rng)
    weights = [1.0 / (rank + 1) for rank in range(len(words))]  # Zipf, s = 1
    rare_at = set(rng.sample(range(count), min(20, count)))
    batch: list[str] = []
    for index in range(count):
        if index in rare_at:
            yield " ".join(rng.choices(words, weights, k=8) + [RARE]), False
            continue
        if rng.random() < 0.03:
            parts = rng.choices(JAPANESE, k=rng.randint(4, 12))
            if rng.random() < 1 / 40:
                parts.insert(rng.randrange(len(parts) + 1), CJK)
            yield "".join(parts), True
            continue
        if not batch:
            batch = rng.choices(words, weights, k=4096)
        n = rng.randint(6, 20)
        chosen, batch = batch[:n], batch[n:]
        if len(chosen) < n:
            chosen += rng.choices(words, weights, k=n - len(chosen))
        roll = rng.random()
        if roll < 0.01:
            chosen.insert(rng.randrange(len(chosen) + 1), COMMON)
        elif roll < 0.011:
            chosen.insert(rng.randrange(len(chosen) + 1), PHRASE)
        yield " ".join(chosen), False


def make_schema(binary: str) -> str:
    """A data directory whose database `circle serve` made (all migrations), the server stopped."""
    server = benchlib.circle_server(binary)
    data = server.data_dir
    server.data_dir = None  # keep it when stopping
    server.start(cpu=0)
    server.stop()
    return data


POST = "INSERT INTO posts (circle, seq, author, client_id, text, time, search_id) VALUES (?, ?, ?, ?, ?, ?, ?)"
DOC = "INSERT INTO search_docs (id, circle, seq, trigrams) VALUES (?, ?, ?, ?)"


def fill(database: str, posts: int, circles: int, seed: int) -> dict[str, float]:
    rng = random.Random(seed)
    db = sqlite.connect(database, isolation_level=None)
    db.execute("PRAGMA journal_mode = WAL")
    db.execute("PRAGMA synchronous = OFF")
    started = time.monotonic()
    base = int(time.time() * 1000) - posts * 1000
    db.execute("BEGIN")
    db.executemany("INSERT INTO circles (name, owner, private, created_at, last_seq) VALUES (?, 'alice', 0, ?, 0)",
                   [(f"c{n:04d}", base) for n in range(circles)])
    last_seq = [0] * circles
    rows, docs = [], []
    for index, (text, _) in enumerate(texts(posts, rng)):
        circle = index % circles
        last_seq[circle] += 1
        name = f"c{circle:04d}"
        rows.append((name, last_seq[circle], f"user{index % 50:02d}", f"p{index}", text, base + index * 1000, index + 1))
        docs.append((index + 1, name, last_seq[circle], 1))
        if len(rows) == 50_000:
            db.executemany(POST, rows)
            db.executemany(DOC, docs)
            rows, docs = [], []
    if rows:
        db.executemany(POST, rows)
        db.executemany(DOC, docs)
    db.executemany("UPDATE circles SET last_seq = ? WHERE name = ?", [(seq, f"c{n:04d}") for n, seq in enumerate(last_seq)])
    db.execute("COMMIT")
    stored = time.monotonic()
    db.execute("INSERT INTO search_words (search_words) VALUES ('rebuild')")
    db.execute("INSERT INTO search_trigrams (search_trigrams) VALUES ('rebuild')")
    db.execute("INSERT INTO search_words (search_words) VALUES ('optimize')")
    db.execute("INSERT INTO search_trigrams (search_trigrams) VALUES ('optimize')")
    indexed = time.monotonic()
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.close()
    # pysqlite3-binary's SQLite has no dbstat; Python's own reads the pages (the FTS5 tables'
    # shadow tables are plain tables).
    import sqlite3
    stats = sqlite3.connect(f"file:{database}?mode=ro", uri=True)
    sizes = dict(stats.execute("SELECT name, sum(pgsize) FROM dbstat GROUP BY name").fetchall())
    stats.close()
    index_bytes = sum(size for name, size in sizes.items()
                      if name.startswith(("search_words", "search_trigrams", "search_docs")))
    return {
        "store_s": stored - started,
        "index_build_s": indexed - stored,
        "database_bytes": os.path.getsize(database),
        "posts_bytes": sum(size for name, size in sizes.items() if name.startswith(("posts", "sqlite_autoindex_posts"))),
        "index_bytes": index_bytes,
    }


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


def measure_circle(binary: str, data: str, queries: int, warmup: int) -> dict[str, dict]:
    server = benchlib.circle_server(binary)
    shutil.rmtree(server.data_dir, ignore_errors=True)
    server.argv[server.argv.index("--data") + 1] = data
    server.data_dir = None
    server.start(cpu=0, timeout=120)
    results: dict[str, dict] = {}
    try:
        token = benchlib.dev_token(server.port, "reader")
        connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
        for label, q, extra in QUERIES:
            path = "/v1/search?" + urllib.parse.urlencode({"q": q, **extra})
            hits = 0

            def ask() -> None:
                nonlocal hits
                connection.request("GET", path, headers={"Authorization": f"Bearer {token}"})
                response = connection.getresponse()
                body = response.read()
                if response.status != 200:
                    raise RuntimeError(f"{path}: {response.status} {body[:300]!r}")
                hits = len(json.loads(body)["hits"])

            for _ in range(warmup):
                ask()
            latencies = []
            cpu_before = benchlib.cpu_ns_schedstat(server.pid)
            for _ in range(queries):
                sent = time.perf_counter()
                ask()
                latencies.append(time.perf_counter() - sent)
            cpu = (benchlib.cpu_ns_schedstat(server.pid) - cpu_before) / 1e9
            results[label] = {"p50_ms": percentile(latencies, 50) * 1e3, "p99_ms": percentile(latencies, 99) * 1e3,
                              "cpu_ms_per_query": cpu / queries * 1e3, "hits": hits}
        connection.close()
    finally:
        server.stop()
    return results


def floor_sql(driver: str, circle: bool) -> str:
    """SQLiteSearchStatement's statement for one term (or phrase) in `driver`, relevance order."""
    return f"""
        SELECT d.circle, d.seq, p.author, p.time, snippet({driver}, 0, char(57344), char(57345), '…', 24)
        FROM {driver} JOIN search_docs AS d ON d.id = {driver}.rowid
        JOIN posts AS p ON p.circle = d.circle AND p.seq = d.seq
        JOIN circles AS c ON c.name = d.circle
        WHERE {driver} MATCH ?1
          AND p.change IS NULL AND p.deleted = 0 AND p.text IS NOT NULL
          AND (c.private = 0 OR EXISTS (SELECT 1 FROM members AS m WHERE m.circle = c.name AND m.user = ?2))
          {"AND p.circle IN (?5)" if circle else ""}
        ORDER BY bm25({driver}), p.time DESC, d.circle DESC, d.seq DESC
        LIMIT ?3 OFFSET ?4"""


def measure_floor(database: str, queries: int, warmup: int) -> dict[str, dict]:
    benchlib.pin_self(0)
    db = sqlite.connect(f"file:{database}?mode=ro", uri=True)
    results: dict[str, dict] = {}
    for label, q, extra in QUERIES:
        driver = "search_trigrams" if q == CJK or q.startswith("*") else "search_words"
        match = '"' + q.strip('"*') + '"'
        params = ["reader", 21, 0] if not extra else ["reader", 21, 0, extra["circle"]]
        sql = floor_sql(driver, bool(extra))
        hits = 0
        for _ in range(warmup):
            db.execute(sql, [match] + params).fetchall()
        latencies = []
        cpu_before = time.process_time()
        for _ in range(queries):
            started = time.perf_counter()
            hits = len(db.execute(sql, [match] + params).fetchall())
            latencies.append(time.perf_counter() - started)
        cpu = time.process_time() - cpu_before
        results[label] = {"p50_ms": percentile(latencies, 50) * 1e3, "p99_ms": percentile(latencies, 99) * 1e3,
                          "cpu_ms_per_query": cpu / queries * 1e3, "hits": min(hits, 20)}
    db.close()
    benchlib.pin_self(None)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--posts", type=int, default=1_000_000)
    parser.add_argument("--circles", type=int, default=1_000)
    parser.add_argument("--queries", type=int, default=200, help="timed queries per kind")
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--circle", default=str(benchlib.DEFAULT_CIRCLE), help="the circle binary")
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args()
    benchlib.exit_on_sigterm()

    data = make_schema(args.circle)
    try:
        database = os.path.join(data, "circle.sqlite")
        print(f"# {args.posts:,} posts in {args.circles:,} circles; SQLite for the floor {sqlite.sqlite_version}")
        sizes = fill(database, args.posts, args.circles, args.seed)
        print(f"# stored in {sizes['store_s']:.1f} s, indexed (FTS5 rebuild) in {sizes['index_build_s']:.1f} s")
        print(f"database {sizes['database_bytes'] / 2**20:,.1f} MiB: posts {sizes['posts_bytes'] / 2**20:,.1f} MiB, "
              f"search index {sizes['index_bytes'] / 2**20:,.1f} MiB "
              f"({sizes['index_bytes'] / max(1, sizes['posts_bytes']):.2f}× the posts)")
        circle = measure_circle(args.circle, data, args.queries, args.warmup)
        floor = measure_floor(database, args.queries, args.warmup)
    finally:
        shutil.rmtree(data, ignore_errors=True)

    print()
    print(f"| query | hits (page) | circle p50 ms | p99 ms | CPU ms/query | floor p50 ms | p99 ms | CPU ms/query | circle ÷ floor (CPU) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for label, _, _ in QUERIES:
        c, f = circle[label], floor[label]
        ratio = c["cpu_ms_per_query"] / f["cpu_ms_per_query"] if f["cpu_ms_per_query"] > 0 else float("nan")
        print(f"| {label} | {c['hits']} | {c['p50_ms']:.2f} | {c['p99_ms']:.2f} | {c['cpu_ms_per_query']:.2f} | "
              f"{f['p50_ms']:.2f} | {f['p99_ms']:.2f} | {f['cpu_ms_per_query']:.2f} | {ratio:.2f}× |")
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"benchmark": "search", "posts": args.posts, "circles": args.circles, "queries": args.queries,
                       "sizes": sizes, "circle": circle, "floor": floor}, out, indent=2)


if __name__ == "__main__":
    main()
