"""Webhook deliveries: how fast a backlog is delivered, and the server's CPU per delivery.

`circle serve` runs pinned to CPU 0 on its embedded SQLite store, with one webhook subscribed to
every circle (docs/API.md, "Webhooks"). The receiver is a small asyncio HTTP/1.1 server in a
process of its own, pinned to CPU 1, that answers every delivery `204` at once (it reads the
request and counts it; it does not verify signatures: scripts/webhook-test does that).

1. **Fill.** The receiver holds its first requests unanswered, so the dispatcher's queues stop
   at their heads, while W writers post N posts (closed loop, one in flight each, a circle
   each). Every post records one delivery with it.
2. **Drain.** The receiver is released; the clock and the server's CPU time (utime+stime) run
   until the receiver has counted all N deliveries.

Printed per case: deliveries per second during the drain, the server's CPU per delivery, the
receiver's CPU (if it is near 100 %, the receiver was the limit), and the post path during the
fill for reference.

    python webhooks.py                       # 20,000 posts over 16 circles
    python webhooks.py --posts 50000 --circles 1,16
    python webhooks.py --builds base=/path/to/old/circle,new=.build-release/release/circle

Only 127.0.0.1 is contacted; each wait is bounded.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import shlex
import subprocess
import sys
import time
import urllib.request

import benchlib
import circlev1
import postpath

# argv: the status line to answer with, and "hold" to hold requests until POST /release.
RECEIVER = r"""
import asyncio, os, sys
count = 0
held = []
status = sys.argv[1].encode()
holding = sys.argv[2] == "hold"

class Endpoint(asyncio.Protocol):
    def connection_made(self, transport):
        self.transport = transport
        self.buffer = b""

    def data_received(self, data):
        global count
        self.buffer += data
        while True:
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            head = self.buffer[:end].decode("latin-1")
            length = 0
            for line in head.split("\r\n")[1:]:
                name, _, value = line.partition(":")
                if name.strip().lower() == "content-length":
                    length = int(value.strip())
            if len(self.buffer) < end + 4 + length:
                return
            self.buffer = self.buffer[end + 4 + length:]
            request = head.split(" ", 2)
            if request[0] == "GET" and request[1] == "/count":
                self.answer(b"200 OK", str(count).encode())
            elif request[0] == "POST" and request[1] == "/release":
                release()
                self.answer(b"200 OK", b"released")
            elif request[0] == "GET" and request[1] == "/cpu":
                t = os.times()
                self.answer(b"200 OK", str(t.user + t.system).encode())
            elif holding:
                held.append(self)
            else:
                count += 1
                self.answer(status, b"")

    def answer(self, status, body):
        self.transport.write(b"HTTP/1.1 " + status + b"\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)

def release():
    global holding, count
    holding = False
    for endpoint in held:
        count += 1
        endpoint.answer(status, b"")
    held.clear()

async def main():
    server = await asyncio.get_running_loop().create_server(Endpoint, "127.0.0.1", 0)
    print(server.sockets[0].getsockname()[1], flush=True)
    await server.serve_forever()

asyncio.run(main())
"""


class Receiver:
    def __init__(self, cpu: int | None, status: str = "204 No Content", hold: bool = True) -> None:
        argv = (["taskset", "-c", str(cpu)] if cpu is not None else []) + [
            sys.executable, "-c", RECEIVER, status, "hold" if hold else "answer"]
        self.process = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
        self.port = int(self.process.stdout.readline())

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    def _call(self, method: str, path: str) -> str:
        request = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}", method=method)
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.read().decode()

    def delivered(self) -> int:
        return int(self._call("GET", "/count"))

    def cpu_seconds(self) -> float:
        return float(self._call("GET", "/cpu"))

    def release(self) -> None:
        self._call("POST", "/release")

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=10)


async def run(args, binary: str, circles_count: int) -> dict:
    receiver = Receiver(args.client_cpu)
    circles = [f"w{i}" for i in range(circles_count)]
    server = benchlib.circle_server(binary=binary, wrapper=shlex.split(args.wrapper) if args.wrapper else None, extra=[
        "--posts-per-second", "1000000", "--post-burst", "1000000", "--max-connections-per-user", "100000",
        "--idle-timeout", "1h", "--allow-private-outbound", "--webhook-timeout", "10m"])
    server.start(args.server_cpu)
    try:
        postpath.subscribe(server, receiver.url)
        owner = benchlib.dev_token(server.port, "owner")
        for circle in circles:
            status, body = benchlib.http_json("POST", server.port, "/v1/circles", owner, {"name": circle})
            if status not in (200, 201):
                raise RuntimeError(f"creating {circle}: {status} {body}")
        writers = max(circles_count, args.writers)
        tokens = [benchlib.dev_token(server.port, f"writer{i}") for i in range(writers)]
        conns = [await circlev1.connect(server.port, token) for token in tokens]
        for i, conn in enumerate(conns):
            reply = await asyncio.wait_for(conn.request({"action": "join", "circle": circles[i % circles_count]}), 30)
            assert reply.get("type") == "ack", reply
        ws = [postpath.Writer(c, f"p{i}", circles[i % circles_count], "x" * args.text_bytes, 1) for i, c in enumerate(conns)]
        # 1. Fill: every post records a delivery; the receiver holds the queues' heads.
        t0, cpu0 = time.monotonic(), benchlib.cpu_seconds(server.pid)
        for w in ws:
            w.post()
        deadline = time.monotonic() + 600
        while sum(w.acked for w in ws) < args.posts:
            if time.monotonic() > deadline:
                raise RuntimeError("the posts were not acknowledged within 10 minutes")
            await asyncio.sleep(0.01)
        for w in ws:
            w.running = False
        fill_wall, fill_cpu = time.monotonic() - t0, benchlib.cpu_seconds(server.pid) - cpu0
        await asyncio.sleep(0.5)  # the last acks' successors, if any, land
        posted = sum(w.acked for w in ws)
        for c in conns:
            c.close()
        # 2. Drain.
        cpu1, rcpu1, t1 = benchlib.cpu_seconds(server.pid), receiver.cpu_seconds(), time.monotonic()
        receiver.release()
        deadline = t1 + 600
        while (delivered := receiver.delivered()) < posted:
            if time.monotonic() > deadline:
                raise RuntimeError(f"only {delivered} of {posted} deliveries within 10 minutes")
            await asyncio.sleep(0.02)
        cpu2, rcpu2, t2 = benchlib.cpu_seconds(server.pid), receiver.cpu_seconds(), time.monotonic()
        wall = t2 - t1
        return {"circles": circles_count, "writers": writers, "binary": binary, "posts": posted,
                "fill_posts_per_s": posted / fill_wall, "fill_us_per_post": 1e6 * fill_cpu / posted,
                "drain_seconds": wall, "deliveries_per_s": posted / wall,
                "server_us_per_delivery": 1e6 * (cpu2 - cpu1) / posted, "server_cpu_pct": 100 * (cpu2 - cpu1) / wall,
                "receiver_cpu_pct": 100 * (rcpu2 - rcpu1) / wall}
    finally:
        server.stop()
        receiver.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--posts", type=int, default=20_000, help="posts (so deliveries) per case")
    parser.add_argument("--circles", default="16", help="comma list of circle counts (queues), one case each")
    parser.add_argument("--writers", type=int, default=16, help="writers during the fill (at least one per circle)")
    parser.add_argument("--builds", help="comma list of NAME=PATH of circle binaries, each run on every case")
    parser.add_argument("--text-bytes", type=int, default=100)
    parser.add_argument("--server-cpu", type=int, default=0)
    parser.add_argument("--client-cpu", type=int, default=1)
    parser.add_argument("--wrapper", help="run the server under this command, e.g. 'perf record -g -o perf.data --'")
    parser.add_argument("--json", help="write the results to this file")
    args = parser.parse_args()
    if not 1 <= args.posts <= 1_000_000:
        parser.error("--posts in [1, 1000000]")
    cases = [int(c) for c in args.circles.split(",") if c]
    if any(c < 1 or c > 1000 for c in cases):
        parser.error("circles in [1, 1000]")
    builds = [("circle", str(benchlib.DEFAULT_CIRCLE))]
    if args.builds:
        builds = [tuple(b.split("=", 1)) for b in args.builds.split(",") if b]
    benchlib.pin_self(args.client_cpu)
    benchlib.use_uvloop()
    benchlib.exit_on_sigterm()
    print(f"# webhook deliveries: {args.posts:,} posts recorded behind a held receiver, then drained; server on CPU "
          f"{args.server_cpu} (SQLite), writers and receiver (asyncio, answers 204) on CPU {args.client_cpu}")
    print(f"{'build':>8} {'circles':>7} {'posts':>7} {'fill/s':>8} {'us/post':>8} | {'drain s':>7} {'deliv/s':>8} "
          f"{'us/deliv':>8} {'srvCPU':>6} {'rcvCPU':>6}", flush=True)
    results = []
    for circles in cases:
        for name, binary in builds:
            try:
                r = asyncio.run(run(args, binary, circles))
            except Exception as error:
                print(f"{name:>8} {circles:>7} failed: {error!r}", flush=True)
                continue
            r["build"] = name
            results.append(r)
            print(f"{name:>8} {circles:>7} {r['posts']:>7,} {r['fill_posts_per_s']:>8,.0f} {r['fill_us_per_post']:>8.1f} | "
                  f"{r['drain_seconds']:>7.2f} {r['deliveries_per_s']:>8,.0f} {r['server_us_per_delivery']:>8.1f} "
                  f"{r['server_cpu_pct']:>5.0f}% {r['receiver_cpu_pct']:>5.0f}%", flush=True)
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"benchmark": "webhooks", "args": vars(args), "builds": dict(builds), "results": results}, out, indent=2)
    return 0 if results else 1


if __name__ == "__main__":
    sys.exit(main())
