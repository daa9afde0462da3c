"""Post-path benchmark: posts acknowledged per second with durable commits, and ack latency.

`circle serve` runs pinned to CPU 0 on its embedded SQLite store (WAL, synchronous=FULL, group
commit; no post rate limit, see circlev1.setup_server). W writers (circle.v1 connections on
picows, pinned to CPU 1), each joined to a circle of its own, post in a closed loop: send a
post, wait for its ack (sent only after the commit), send the next. The ack latency (send →
ack) goes into an HdrHistogram. Reported per W: acks/s, p50/p99/p99.9 ack latency, server CPU
per post.

    python postpath.py                      # W = 1 and 16
    python postpath.py --writers 1,4,16 --duration 5

Only 127.0.0.1 is contacted; each measurement is bounded.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time

import benchlib
import circlev1


class Writer:
    def __init__(self, conn: circlev1.Conn, circle: str, text: str) -> None:
        self.conn = conn
        self.circle = circle
        self.text = text
        self.n = 0
        self.sent_at = 0
        self.running = True
        self.acked = 0
        self.errors = 0
        self.latencies: list[int] = []
        conn.on_event = self.on_event

    def post(self) -> None:
        self.n += 1
        self.sent_at = time.monotonic_ns()
        self.conn.send({"action": "post", "id": f"w{self.n}", "circle": self.circle, "text": self.text})

    def on_event(self, conn, payload: bytes) -> None:
        if payload.startswith(b'{"id"') and b'"type":"ack"' in payload:  # only acks start with "id"
            self.latencies.append(time.monotonic_ns() - self.sent_at)
            self.acked += 1
            if self.running:
                self.post()
        elif b'"type":"error"' in payload:
            self.errors += 1
            if self.errors <= 3:
                print(f"#   writer got: {payload[:200]!r}", flush=True)
            if self.running:
                self.post()


async def run(args, writers: int) -> dict:
    circles = [f"w{i}" for i in range(writers)]
    server, tokens, _ = circlev1.setup_server(cpu=args.server_cpu, circles=circles)
    try:
        conns = [await circlev1.connect(server.port, tokens[i % len(tokens)]) for i in range(writers)]
        for conn, circle in zip(conns, circles):
            reply = await asyncio.wait_for(conn.request({"action": "join", "circle": circle}), 30)
            assert reply.get("type") == "ack", reply
        text = "x" * args.text_bytes
        ws = [Writer(c, circle, text) for c, circle in zip(conns, circles)]
        for w in ws:
            w.post()
        await asyncio.sleep(args.warmup)
        for w in ws:
            w.latencies = []
        m0 = benchlib.circle_metrics(server.port)
        cpu0, own0, t0 = benchlib.cpu_seconds(server.pid), os.times(), time.monotonic()
        a0 = sum(w.acked for w in ws)
        await asyncio.sleep(args.duration)
        cpu1, own1, t1 = benchlib.cpu_seconds(server.pid), os.times(), time.monotonic()
        a1 = sum(w.acked for w in ws)
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
        return {"writers": writers, "seconds": wall, "acks": acks, "acks_per_s": acks / wall,
                "server_cpu_pct": 100 * server_cpu / wall,
                "server_us_per_post": 1e6 * server_cpu / acks if acks else None,
                "client_cpu_pct": 100 * ((own1.user - own0.user) + (own1.system - own0.system)) / wall,
                "errors": sum(w.errors for w in ws), "commits": commits, "text_bytes": args.text_bytes,
                "latency": circlev1.percentiles(h), "distribution": circlev1.distribution(h)}
    finally:
        server.stop()


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
    parser.add_argument("--writers", default="1,16", help="comma list of concurrent writer counts")
    parser.add_argument("--text-bytes", type=int, default=100, help="bytes of text per post")
    parser.add_argument("--warmup", type=float, default=2.0)
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--server-cpu", type=int, default=0)
    parser.add_argument("--client-cpu", type=int, default=1)
    parser.add_argument("--json", help="write the results to this file")
    args = parser.parse_args()
    if not (0 < args.duration <= 120 and 0 <= args.warmup <= 30):
        parser.error("keep --duration in (0, 120], --warmup in [0, 30]")
    benchlib.pin_self(args.client_cpu)
    loop_name = benchlib.use_uvloop()
    benchlib.exit_on_sigterm()
    print(f"# post path: closed-loop writers, one circle each, {args.text_bytes} B posts; server on CPU "
          f"{args.server_cpu} (SQLite WAL, synchronous=FULL), writers on CPU {args.client_cpu}; "
          f"{args.warmup:g} s warm-up, {args.duration:g} s measured; data dir under {os.environ.get('TMPDIR', '/tmp')}")
    print(f"{'writers':>7} {'acks/s':>9} {'p50 ms':>8} {'p99 ms':>8} {'p99.9ms':>8} {'srvCPU':>7} {'us/post':>8}", flush=True)
    import tempfile
    probe = fsync_probe(tempfile.gettempdir())
    print(f"# fsync of 4 KiB in {tempfile.gettempdir()}: p50 {probe['p50_ms']:.2f} ms, p99 {probe['p99_ms']:.2f} ms, "
          f"max {probe['max_ms']:.2f} ms ({probe['count']} samples)", flush=True)
    results = []
    for w in [int(x) for x in args.writers.split(",") if x]:
        try:
            r = asyncio.run(run(args, w))
        except Exception as error:
            print(f"{w:>7} failed: {error!r}", flush=True)
            continue
        results.append(r)
        lat = r["latency"]
        print(f"{w:>7} {r['acks_per_s']:>9,.0f} {lat['p50_us'] / 1000:>8.2f} {lat['p99_us'] / 1000:>8.2f} "
              f"{lat['p99_9_us'] / 1000:>8.2f} {r['server_cpu_pct']:>6.0f}% {r['server_us_per_post'] or 0:>8.1f}"
              f"   commit: mean {r['commits']['mean_commit_ms'] or 0:.2f} ms, batch {r['commits']['mean_batch'] or 0:.1f}",
              flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"benchmark": "postpath", "loop": loop_name, "args": vars(args), "fsync": probe, "results": results}, f, indent=2)
    return 0 if results else 1


if __name__ == "__main__":
    sys.exit(main())
