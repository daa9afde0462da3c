"""The search index's share of a commit, in SQLite alone, by the shape of the posts' text.

`postpath.py` measures the post path with the index against the same build without it, with
posts of one repeated letter (`"x" * 100`): one word, and one trigram repeated 98 times. Real
posts have a dozen different words and about a hundred different trigrams, and FTS5's work
grows with the number of distinct terms. This script measures that difference where it
happens, in SQLite, without the server: it runs the statements the server's post writer runs
for each commit (SQLitePostWriter: a batch of posts over 16 circles in one write transaction;
each post's row with its search id, its `search_docs` row, then every text given to both FTS5
indexes at the end of the transaction) on a database file in WAL mode with `synchronous=FULL`,
through Python's `sqlite3` API on the SQLite of `pysqlite3-binary` (FTS5 with the trigram
tokenizer's `remove_diacritics`, as the server's), and prints the process's CPU per post for:

- `none`: the rows only (the post path without the index);
- `words`: plus the word index (`unicode61 remove_diacritics 2`);
- `trigrams`: plus the trigram index (`trigram remove_diacritics 1`);
- `both`: both, as the server writes every post;

for two texts: `x100` (postpath.py's) and `words` (16 words of 2 to 9 letters drawn from a
vocabulary of 3,000, cut to 100 bytes). Each case runs `--rounds` times in turn; the median is
printed with `÷ none`. It measures SQLite's share only: the server's own work per post
(WebSocket, JSON, the committer, the fan-out) is not in these figures, so the server's ratio is
smaller than the one printed here (see docs/bench/search.md).

    benchmarks/.venv/bin/python benchmarks/search_writes.py            # 40,000 posts a case, 3 rounds
    benchmarks/.venv/bin/python benchmarks/search_writes.py --posts 8000 --rounds 1   # a quick look
"""
from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time

try:
    import pysqlite3.dbapi2 as sqlite3  # the SQLite with the trigram tokenizer's options
except ImportError:  # pragma: no cover - the benchmarks' venv has it (requirements.txt)
    sys.exit("search_writes.py needs pysqlite3-binary (benchmarks/requirements.txt)")

SCHEMA = [
    """CREATE TABLE posts (circle TEXT NOT NULL, seq INTEGER NOT NULL, author TEXT NOT NULL,
       client_id TEXT NOT NULL, text TEXT, time INTEGER NOT NULL, search_id INTEGER,
       PRIMARY KEY (circle, seq)) WITHOUT ROWID, STRICT""",
    "CREATE UNIQUE INDEX posts_by_client_id ON posts (circle, author, client_id)",
    "CREATE TABLE search_docs (id INTEGER PRIMARY KEY, circle TEXT NOT NULL, seq INTEGER NOT NULL, trigrams INTEGER NOT NULL DEFAULT 0) STRICT",
    """CREATE VIEW search_content (id, text) AS SELECT d.id, p.text FROM search_docs AS d
       JOIN posts AS p ON p.circle = d.circle AND p.seq = d.seq""",
    """CREATE VIRTUAL TABLE search_words USING fts5 (text, content = 'search_content', content_rowid = 'id',
       tokenize = 'unicode61 remove_diacritics 2', columnsize = 0)""",
    """CREATE VIRTUAL TABLE search_trigrams USING fts5 (text, content = 'search_content', content_rowid = 'id',
       tokenize = 'trigram remove_diacritics 1', columnsize = 0)""",
]

INDEXES = {"none": (), "words": ("search_words",), "trigrams": ("search_trigrams",), "both": ("search_words", "search_trigrams")}


def texts(shape: str, count: int, seed: int) -> list[str]:
    if shape == "x100":
        return ["x" * 100] * count
    rng = random.Random(seed)
    vocabulary = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(2, 9))) for _ in range(3000)]
    return [" ".join(rng.choice(vocabulary) for _ in range(16))[:100] for _ in range(count)]


def run(directory: str, indexes: tuple[str, ...], posts: list[str], batch: int, circles: int) -> float:
    path = os.path.join(directory, "writes.sqlite")
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(path + suffix):
            os.remove(path + suffix)
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode = WAL")
    db.execute("PRAGMA synchronous = FULL")
    for statement in SCHEMA:
        db.execute(statement)
    seqs = [0] * circles
    rng = random.Random(1)
    next_id = 1
    started = time.process_time()
    for first in range(0, len(posts), batch):
        db.execute("BEGIN IMMEDIATE")
        adds = []
        if indexes:
            # The server reads the next search id once per commit.
            next_id = db.execute("SELECT coalesce(max(id), 0) + 1 FROM search_docs").fetchone()[0]
        for offset, text in enumerate(posts[first:first + batch]):
            circle = rng.randrange(circles)
            seqs[circle] += 1
            name = f"c{circle}"
            search_id = next_id if indexes else None
            db.execute("INSERT INTO posts VALUES (?, ?, ?, ?, ?, ?, ?)",
                       (name, seqs[circle], f"p{circle}", f"id-{first + offset}", text, 1_795_000_000_000 + first, search_id))
            if indexes:
                db.execute("INSERT INTO search_docs (id, circle, seq, trigrams) VALUES (?, ?, ?, 1)", (search_id, name, seqs[circle]))
                adds.append((search_id, text))
                next_id += 1
        for table in indexes:
            for add in adds:
                db.execute(f"INSERT INTO {table} (rowid, text) VALUES (?, ?)", add)
        db.execute("COMMIT")
    cpu = time.process_time() - started
    db.close()
    return cpu / len(posts) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--posts", type=int, default=40_000, help="posts per case")
    parser.add_argument("--batch", type=int, default=8, help="posts per commit (the server's 16x1 commits hold about 8)")
    parser.add_argument("--circles", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=3, help="each case this many times, in turn; the median is printed")
    parser.add_argument("--json", help="also write the figures here")
    args = parser.parse_args()
    print(f"# SQLite {sqlite3.sqlite_version}; {args.posts:,} posts a case, {args.batch} a commit over {args.circles} circles; "
          f"WAL, synchronous=FULL; process CPU per post, median of {args.rounds}", flush=True)
    results = []
    with tempfile.TemporaryDirectory(prefix="circle-search-writes-") as directory:
        for shape in ("x100", "words"):
            posts = texts(shape, args.posts, seed=2)
            figures: dict[str, list[float]] = {name: [] for name in INDEXES}
            for _ in range(args.rounds):
                for name, indexes in INDEXES.items():
                    figures[name].append(run(directory, indexes, posts, args.batch, args.circles))
            base = statistics.median(figures["none"])
            for name in INDEXES:
                median = statistics.median(figures[name])
                results.append({"text": shape, "index": name, "us_cpu_per_post": round(median, 2),
                                "runs": [round(f, 2) for f in figures[name]], "ratio": round(median / base, 2)})
                print(f"text {shape:5}  index {name:8}  {median:7.1f} µs CPU/post  ÷ none {median / base:5.2f}", flush=True)
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"sqlite": sqlite3.sqlite_version, "posts": args.posts, "batch": args.batch, "circles": args.circles,
                       "rounds": args.rounds, "results": results}, out, indent=1)


if __name__ == "__main__":
    main()
