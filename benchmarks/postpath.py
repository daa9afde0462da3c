"""Post-path benchmark: posts acknowledged per second with durable commits, next to the floor.

`circle serve` runs pinned to CPU 0 on its embedded SQLite store (WAL, synchronous=FULL, group
commit; no post rate limit). A case is W writers × F posts in flight: W circle.v1 connections
(picows, pinned to CPU 1), each of a user of its own and joined to a circle of its own, keep F
posts outstanding: every ack (sent only after the commit) is answered with the next post. The
ack latency (send → ack) goes into an HdrHistogram. Reported per case: acks/s, p50/p99/p99.9 ack
latency, server CPU per post and the mean commit batch (from the server's /metrics).

**The floor**, measured in the same run right after each case, at that case's mean batch size
(rounded): the same work done by Python's `sqlite3` against a fresh database with the same
schema and indexes (WAL, synchronous=FULL), pinned to the server's CPU: per batch `BEGIN
IMMEDIATE`, per post the idempotency-key probe and the insert, per circle the `last_seq` read
and update, `COMMIT`. Its CPU per post is the process's own utime+stime. `circle ÷ floor` is the
figure that carries over between machines.

    python postpath.py                                   # cases 1x1, 16x1, 64x4
    python postpath.py --cases 1x1,64x4 --duration 5
    python postpath.py --builds base=/path/to/old/circle,new=.build-release/release/circle

`--builds` runs every case on each build in turn (same floor), for a before/after in one run.

`--webhooks off,on` runs every case without and with one webhook subscribed to every circle
(docs/API.md, "Webhooks"): a receiver in this process on loopback answers each delivery at
once, and the table adds the deliveries made per second. The server's CPU per post then
includes recording each delivery with its post and sending it.

    python postpath.py --cases 1x1,16x1 --webhooks off,on --no-floor

`--webhooks held` subscribes the same webhook to a receiver that never answers: the server's
first deliveries wait on it (up to `--webhook-timeout`, set to an hour here) and no others are
sent, so the CPU per post is the post path's own with a webhook subscribed — each post's
delivery recorded in its commit, the dispatcher woken — without the deliveries' HTTP exchanges.

    python postpath.py --cases 1x1,16x1 --webhooks off,held,on --no-floor

`--tracing off,on` runs every case without and with tracing (`--otlp-endpoint`, every post
traced): the spans go over OTLP/HTTP to a sink in a process of its own that answers each export
at once (docs/OPERATIONS.md, "Tracing"). The server's CPU per post then includes making,
batching and exporting its spans.

    python postpath.py --cases 1x1,16x1 --tracing off,on --no-floor

Only 127.0.0.1 is contacted; each measurement is bounded.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import shlex
import sqlite3
import subprocess
import sys
import tempfile
import time
import urllib.request

import benchlib
import circlev1

# The tables and indexes SQLiteStore creates for posts, after all its migrations
# (Sources/CircleServer/Store/SQLiteStore+Schema.swift).
FLOOR_SCHEMA = [
    """CREATE TABLE circles (name TEXT NOT NULL PRIMARY KEY, owner TEXT NOT NULL,
       private INTEGER NOT NULL DEFAULT 0, created_at INTEGER NOT NULL, last_seq INTEGER NOT NULL DEFAULT 0) STRICT""",
    """CREATE TABLE posts (circle TEXT NOT NULL REFERENCES circles (name), seq INTEGER NOT NULL,
       author TEXT NOT NULL, client_id TEXT NOT NULL, text TEXT, attachment TEXT, time INTEGER NOT NULL,
       change TEXT, target INTEGER, emoji TEXT, reply_to INTEGER, edited_at INTEGER, deleted INTEGER NOT NULL DEFAULT 0,
       PRIMARY KEY (circle, seq)) WITHOUT ROWID, STRICT""",
    "CREATE UNIQUE INDEX posts_by_client_id ON posts (circle, author, client_id)",
    "CREATE INDEX posts_by_attachment ON posts (attachment) WHERE attachment IS NOT NULL",
    "CREATE INDEX posts_by_target ON posts (circle, target) WHERE target IS NOT NULL",
]


def post_texts(kind: str, text_bytes: int, seed: int) -> list[str]:
    """What a writer posts, in turn: `x`, one text of `text_bytes` x's (one word: the search
    index's cheapest case); `words`, 1,000 texts of 16 words of 2 to 9 letters drawn from a
    vocabulary of 3,000 (the same for every writer), each cut to `text_bytes`."""
    if kind == "x":
        return ["x" * text_bytes]
    vocabulary_rng = random.Random(1)
    vocabulary = ["".join(vocabulary_rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(vocabulary_rng.randint(2, 9)))
                  for _ in range(3000)]
    rng = random.Random(seed)
    return [" ".join(rng.choice(vocabulary) for _ in range(16))[:text_bytes] for _ in range(1000)]


class Writer:
    def __init__(self, conn: circlev1.Conn, name: str, circle: str, texts: list[str], in_flight: int) -> None:
        self.conn = conn
        self.name = name
        self.circle = circle
        self.texts = texts
        self.in_flight = in_flight
        self.n = 0
        self.sent_at: dict[str, int] = {}
        self.running = True
        self.acked = 0
        self.errors = 0
        self.latencies: list[int] = []
        conn.on_event = self.on_event

    def post(self) -> None:
        self.n += 1
        post_id = f"{self.name}-{self.n}"
        self.sent_at[post_id] = time.monotonic_ns()
        self.conn.send({"action": "post", "id": post_id, "circle": self.circle, "text": self.texts[self.n % len(self.texts)]})

    def on_event(self, conn, payload: bytes) -> None:
        if payload.startswith(b'{"id"') and b'"type":"ack"' in payload:  # only acks start with "id"
            sent = self.sent_at.pop(json.loads(payload).get("id"), None)
            if sent is not None:
                self.latencies.append(time.monotonic_ns() - sent)
            self.acked += 1
            if self.running:
                self.post()
        elif b'"type":"error"' in payload:
            self.errors += 1
            if self.errors <= 3:
                print(f"#   writer got: {payload[:200]!r}", flush=True)
            if self.running:
                self.post()


RECEIVER = r"""
import sys, threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
count = 0
lock = threading.Lock()
hold = threading.Event()
class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_POST(self):
        global count
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        with lock:
            count += 1
        if self.path == "/held":
            hold.wait()  # never set: the delivery waits until the server gives up on it
        self.send_response(204)
        self.send_header("Content-Length", "0")
        self.end_headers()
    def do_GET(self):
        with lock:
            body = str(count).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
server.daemon_threads = True
print(server.server_address[1], flush=True)
server.serve_forever()
"""


class Receiver:
    """A webhook endpoint in a process of its own (not sharing this one's interpreter lock with
    the writers) that answers 204 at once and counts the deliveries."""

    def __init__(self, cpu: int | None) -> None:
        argv = (["taskset", "-c", str(cpu)] if cpu is not None else []) + [sys.executable, "-c", RECEIVER]
        self.process = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
        self.port = int(self.process.stdout.readline())

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    @property
    def held_url(self) -> str:
        """Where every delivery is received and never answered."""
        return f"http://127.0.0.1:{self.port}/held"

    def delivered(self) -> int:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/count", timeout=10) as answer:
            return int(answer.read())

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=10)


def subscribe(server: benchlib.Server, url: str) -> None:
    """Makes the first admin through the setup link of the server's banner, then subscribes `url` to every circle."""
    deadline = time.monotonic() + 30
    match = None
    while match is None and time.monotonic() < deadline:
        with open(server.log_path, errors="replace") as log:
            match = re.search(r"#setup=([A-Za-z0-9_\-]+)", log.read())
        time.sleep(0.05)
    if match is None:
        raise RuntimeError("no setup link in the server's output")
    status, body = benchlib.http_json("POST", server.port, "/v1/auth/setup",
                                      body={"token": match.group(1), "name": "admin", "password": "benchmark password"})
    if status != 201:
        raise RuntimeError(f"setup: {status} {body}")
    status, body = benchlib.http_json("POST", server.port, "/v1/admin/webhooks", benchlib.dev_token(server.port, "admin"), {"url": url})
    if status != 201:
        raise RuntimeError(f"subscribing: {status} {body}")


def start_server(binary: str, cpu: int, circles: list[str], wrapper: list[str] | None = None, webhook: str | None = None,
                 otlp: str | None = None) -> tuple[benchlib.Server, list[str]]:
    """`circle serve` with no post rate limit, one token per writer (distinct users), the circles
    made; tracing to `otlp` when given."""
    server = benchlib.circle_server(binary=binary, wrapper=wrapper, extra=[
        "--posts-per-second", "1000000", "--post-burst", "1000000",
        "--max-connections-per-user", "100000", "--idle-timeout", "1h"]
        + (["--allow-private-outbound", "--webhook-timeout", "1h"] if webhook else [])
        + (["--otlp-endpoint", otlp] if otlp else []))
    server.start(cpu)
    if webhook:
        subscribe(server, webhook)
    tokens = [benchlib.dev_token(server.port, f"writer{i}") for i in range(len(circles))]
    owner = benchlib.dev_token(server.port, "owner")
    for circle in circles:
        status, body = benchlib.http_json("POST", server.port, "/v1/circles", owner, {"name": circle})
        if status not in (200, 201):
            raise RuntimeError(f"creating {circle}: {status} {body}")
    return server, tokens


async def run(args, binary: str, writers: int, in_flight: int, receiver: Receiver | None = None, sink: Receiver | None = None,
              held: bool = False) -> dict:
    circles = [f"w{i}" for i in range(writers)]
    hook = (receiver.held_url if held else receiver.url) if receiver else None
    server, tokens = start_server(binary, args.server_cpu, circles, shlex.split(args.wrapper) if args.wrapper else None,
                                  hook, f"http://127.0.0.1:{sink.port}" if sink else None)
    try:
        conns = [await circlev1.connect(server.port, token) for token in tokens]
        for conn, circle in zip(conns, circles):
            reply = await asyncio.wait_for(conn.request({"action": "join", "circle": circle}), 30)
            assert reply.get("type") == "ack", reply
        ws = [Writer(c, f"p{i}", circle, post_texts(args.text, args.text_bytes, seed=i), in_flight)
              for i, (c, circle) in enumerate(zip(conns, circles))]
        for w in ws:
            for _ in range(in_flight):
                w.post()
        await asyncio.sleep(args.warmup)
        for w in ws:
            w.latencies = []
        m0 = benchlib.circle_metrics(server.port)
        cpu0, own0, t0 = benchlib.cpu_seconds(server.pid), os.times(), time.monotonic()
        a0 = sum(w.acked for w in ws)
        d0 = receiver.delivered() if receiver else 0
        await asyncio.sleep(args.duration)
        cpu1, own1, t1 = benchlib.cpu_seconds(server.pid), os.times(), time.monotonic()
        a1 = sum(w.acked for w in ws)
        d1 = receiver.delivered() if receiver else 0
        commits = benchlib.commit_stats(m0, benchlib.circle_metrics(server.port))
        for w in ws:
            w.running = False
        samples = [ns for w in ws for ns in w.latencies]
        await asyncio.sleep(0.5)
        for c in conns:
            c.close()
        wall, acks = t1 - t0, a1 - a0
        h = circlev1.histogram()
        for ns in samples:
            h.record_value(max(1, ns // 1000))
        server_cpu = cpu1 - cpu0
        return {"writers": writers, "in_flight": in_flight, "binary": binary, "seconds": wall, "acks": acks,
                "acks_per_s": acks / wall, "server_cpu_pct": 100 * server_cpu / wall,
                "server_us_per_post": 1e6 * server_cpu / acks if acks else None,
                "client_cpu_pct": 100 * ((own1.user - own0.user) + (own1.system - own0.system)) / wall,
                "errors": sum(w.errors for w in ws), "commits": commits, "text_bytes": args.text_bytes, "text": args.text,
                "webhook": ("held" if held else "on") if receiver else "off", "tracing": sink is not None, "deliveries_per_s": (d1 - d0) / wall if receiver else None,
                "latency": circlev1.percentiles(h), "distribution": circlev1.distribution(h)}
    finally:
        server.stop()


def floor_worker(batch: int, circles: int, seconds: float, text_bytes: int) -> dict:
    """The floor, in this process: batches of `batch` posts spread over `circles` circles, for
    `seconds`; returns posts, wall seconds and this process's CPU seconds."""
    directory = tempfile.mkdtemp(prefix="circle-floor-")
    path = os.path.join(directory, "floor.sqlite")
    db = sqlite3.connect(path, isolation_level=None)
    try:
        db.execute("PRAGMA journal_mode = WAL")
        db.execute("PRAGMA synchronous = FULL")
        db.execute("PRAGMA foreign_keys = ON")
        for statement in FLOOR_SCHEMA:
            db.execute(statement)
        names = [f"w{i}" for i in range(circles)]
        db.executemany("INSERT INTO circles (name, owner, created_at) VALUES (?, 'owner', 0)", [(n,) for n in names])
        text = "x" * text_bytes
        n = posts = 0

        def one_batch() -> int:
            nonlocal n
            db.execute("BEGIN IMMEDIATE")
            touched: dict[str, int] = {}
            for i in range(batch):
                n += 1
                circle, author, client_id = names[n % circles], f"writer{n % circles}", f"p-{n}"
                if db.execute("SELECT seq FROM posts WHERE circle = ? AND author = ? AND client_id = ?",
                              (circle, author, client_id)).fetchone() is not None:
                    continue
                if circle not in touched:
                    touched[circle] = db.execute("SELECT last_seq FROM circles WHERE name = ?", (circle,)).fetchone()[0]
                touched[circle] += 1
                db.execute("INSERT INTO posts (circle, seq, author, client_id, text, attachment, time, change, target, "
                           "emoji, reply_to, edited_at, deleted) VALUES (?, ?, ?, ?, ?, NULL, ?, NULL, NULL, NULL, NULL, NULL, 0)",
                           (circle, touched[circle], author, client_id, text, n))
            for circle, last in touched.items():
                db.execute("UPDATE circles SET last_seq = ? WHERE name = ?", (last, circle))
            db.execute("COMMIT")
            return batch

        deadline = time.monotonic() + 0.5  # warm-up
        while time.monotonic() < deadline:
            one_batch()
        own0, t0 = os.times(), time.monotonic()
        deadline = t0 + seconds
        while time.monotonic() < deadline:
            posts += one_batch()
        own1, t1 = os.times(), time.monotonic()
    finally:
        db.close()
        for name in os.listdir(directory):
            os.unlink(os.path.join(directory, name))
        os.rmdir(directory)
    cpu = (own1.user - own0.user) + (own1.system - own0.system)
    return {"batch": batch, "circles": circles, "posts": posts, "seconds": t1 - t0, "cpu_seconds": cpu,
            "posts_per_s": posts / (t1 - t0), "us_per_post": 1e6 * cpu / posts if posts else None}


def floor(args, batch: int, circles: int) -> dict:
    """Runs ``floor_worker`` in a child process pinned to the server's CPU (its CPU time is its own)."""
    argv = ["taskset", "-c", str(args.server_cpu), sys.executable, os.path.abspath(__file__), "--floor-child",
            json.dumps({"batch": batch, "circles": circles, "seconds": args.floor_duration,
                        "text_bytes": args.text_bytes})]
    out = subprocess.run(argv, check=True, capture_output=True, text=True, timeout=args.floor_duration + 60)
    return json.loads(out.stdout)


def fsync_probe(directory: str, count: int = 200) -> dict:
    """Latency of write(4 KiB) + fsync on this machine's disk, in ms: what a durable commit waits for."""
    path = os.path.join(directory, f"fsync-probe-{os.getpid()}")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    times = []
    try:
        for _ in range(count):
            os.write(fd, b"x" * 4096)
            t = time.perf_counter()
            os.fsync(fd)
            times.append((time.perf_counter() - t) * 1000)
    finally:
        os.close(fd)
        os.unlink(path)
    times.sort()
    return {"count": count, "p50_ms": times[count // 2], "p99_ms": times[int(count * 0.99)], "max_ms": times[-1]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", default="1x1,16x1,64x4",
                        help="comma list of WRITERSxIN_FLIGHT (each writer a user and a circle of its own)")
    parser.add_argument("--writers", help="comma list of writer counts, one post in flight each (older form of --cases)")
    parser.add_argument("--builds", help="comma list of NAME=PATH of circle binaries, each run on every case "
                                         "(default: the one release build, as `circle`)")
    parser.add_argument("--text-bytes", type=int, default=100, help="bytes of text per post")
    parser.add_argument("--text", choices=["x", "words"], default="x",
                        help="x: every post the same run of x's; words: 16 words from a 3,000-word vocabulary, "
                             "different posts (what the search index costs with real text)")
    parser.add_argument("--warmup", type=float, default=2.0)
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--floor-duration", type=float, default=5.0, help="seconds the floor runs per batch size")
    parser.add_argument("--no-floor", action="store_true", help="skip the floor")
    parser.add_argument("--server-cpu", type=int, default=0)
    parser.add_argument("--client-cpu", type=int, default=1)
    parser.add_argument("--wrapper", help="run the server under this command, e.g. "
                                          "'perf record -g -o perf.data --' or 'valgrind --tool=callgrind'")
    parser.add_argument("--webhooks", default="off", help="off, on, held, or a list (off,held,on): each case without "
                                                          "and/or with one webhook subscribed to every circle (held: "
                                                          "its receiver never answers)")
    parser.add_argument("--tracing", default="off", help="off, on, or off,on: each case without and/or with tracing to an OTLP sink")
    parser.add_argument("--json", help="write the results to this file")
    parser.add_argument("--floor-child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.floor_child:
        spec = json.loads(args.floor_child)
        print(json.dumps(floor_worker(spec["batch"], spec["circles"], spec["seconds"], spec["text_bytes"])))
        return 0
    if not (0 < args.duration <= 120 and 0 <= args.warmup <= 30 and 0 < args.floor_duration <= 60):
        parser.error("keep --duration in (0, 120], --warmup in [0, 30], --floor-duration in (0, 60]")
    if args.writers:
        cases = [(int(w), 1) for w in args.writers.split(",") if w]
    else:
        cases = []
        for spec in args.cases.split(","):
            w, _, f = spec.partition("x")
            cases.append((int(w), int(f or 1)))
    if any(w < 1 or f < 1 or w > 1000 or f > 64 for w, f in cases):
        parser.error("writers in [1, 1000], in flight in [1, 64]")
    builds = [("circle", str(benchlib.DEFAULT_CIRCLE))]
    if args.builds:
        builds = [tuple(b.split("=", 1)) for b in args.builds.split(",") if b]
        if any(len(b) != 2 for b in builds):
            parser.error("--builds takes NAME=PATH,NAME=PATH")
    webhook_modes = [m for m in args.webhooks.split(",") if m]
    if not webhook_modes or any(m not in ("off", "on", "held") for m in webhook_modes):
        parser.error("--webhooks takes off, on, held or a list of them")
    receiver = Receiver(args.client_cpu) if "on" in webhook_modes or "held" in webhook_modes else None
    tracing_modes = [m for m in args.tracing.split(",") if m]
    if not tracing_modes or any(m not in ("off", "on") for m in tracing_modes):
        parser.error("--tracing takes off, on or off,on")
    # The webhook receiver's kind of endpoint serves as the OTLP sink: it answers every POST at once.
    sink = Receiver(args.client_cpu) if "on" in tracing_modes else None
    benchlib.pin_self(args.client_cpu)
    loop_name = benchlib.use_uvloop()
    benchlib.exit_on_sigterm()
    print(f"# post path: closed-loop writers (a user and a circle each), {args.text_bytes} B posts ({args.text}); server on CPU "
          f"{args.server_cpu} (SQLite WAL, synchronous=FULL), writers on CPU {args.client_cpu}; "
          f"{args.warmup:g} s warm-up, {args.duration:g} s measured; floor (python sqlite3 {sqlite3.sqlite_version}) "
          f"{args.floor_duration:g} s per batch size on CPU {args.server_cpu}; data under {tempfile.gettempdir()}")
    probe = fsync_probe(tempfile.gettempdir())
    print(f"# fsync of 4 KiB in {tempfile.gettempdir()}: p50 {probe['p50_ms']:.2f} ms, p99 {probe['p99_ms']:.2f} ms, "
          f"max {probe['max_ms']:.2f} ms ({probe['count']} samples)", flush=True)
    print(f"{'build':>8} {'case':>6} {'acks/s':>9} {'p50 ms':>7} {'p99 ms':>7} {'p99.9ms':>7} {'srvCPU':>6} "
          f"{'us/post':>8} {'batch':>6} {'hooks/s':>8} | {'floor us':>8} {'floor/s':>9} | {'cpu x':>6} {'rate %':>6}", flush=True)
    results = []
    floors: dict[tuple[int, int], dict] = {}
    runs = [(name, binary, mode, traced) for name, binary in builds for mode in webhook_modes for traced in tracing_modes]
    for writers, in_flight in cases:
        for build_name, binary, mode, traced in runs:
            hook_name = {"on": "+hook", "held": "+held"}.get(mode, "") if len(webhook_modes) > 1 else ""
            name = build_name + hook_name + ("+trace" if traced == "on" and len(tracing_modes) > 1 else "")
            try:
                r = asyncio.run(run(args, binary, writers, in_flight, receiver if mode != "off" else None, sink if traced == "on" else None,
                                    held=mode == "held"))
            except Exception as error:
                print(f"{name:>8} {writers}x{in_flight:<4} failed: {error!r}", flush=True)
                continue
            r["build"] = name
            batch = max(1, round(r["commits"]["mean_batch"] or 1))
            f = None
            if not args.no_floor:
                key = (batch, min(writers, batch))
                if key not in floors:
                    floors[key] = floor(args, *key)
                f = floors[key]
            r["floor"] = f
            if f and r["server_us_per_post"]:
                r["cpu_vs_floor"] = r["server_us_per_post"] / f["us_per_post"]
                r["rate_vs_floor"] = r["acks_per_s"] / f["posts_per_s"]
            results.append(r)
            lat = r["latency"]
            print(f"{name:>8} {f'{writers}x{in_flight}':>6} {r['acks_per_s']:>9,.0f} {lat['p50_us'] / 1000:>7.2f} "
                  f"{lat['p99_us'] / 1000:>7.2f} {lat['p99_9_us'] / 1000:>7.2f} {r['server_cpu_pct']:>5.0f}% "
                  f"{r['server_us_per_post'] or 0:>8.1f} {r['commits']['mean_batch'] or 0:>6.1f} "
                  f"{r['deliveries_per_s'] if r['deliveries_per_s'] is not None else float('nan'):>8,.0f} | "
                  + (f"{f['us_per_post']:>8.1f} {f['posts_per_s']:>9,.0f} | {r.get('cpu_vs_floor', 0):>5.2f}x "
                     f"{100 * r.get('rate_vs_floor', 0):>5.0f}%" if f else f"{'-':>8} {'-':>9} | {'-':>6} {'-':>6}"),
                  flush=True)
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"benchmark": "postpath", "loop": loop_name, "args": vars(args), "fsync": probe,
                       "builds": dict(builds), "results": results}, out, indent=2)
    if receiver:
        receiver.stop()
    if sink:
        sink.stop()
    return 0 if results else 1


if __name__ == "__main__":
    sys.exit(main())
