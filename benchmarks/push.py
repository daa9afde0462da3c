"""Web Push: one post to a circle of N people who are away, each with a push subscription.

`circle serve` runs pinned to CPU 0 on its embedded SQLite store with Web Push on
(`--push-contact`, loopback http:// endpoints allowed, `--push-away-after 0s`,
`--push-burst-interval 0s`). N people (default 10,000) each subscribe one device and set their
notification level in the public circle `big` to `all`; none of them is connected. The push
service is a small asyncio HTTP/1.1 server in a process of its own, pinned to CPU 1, that answers
every push `201` at once (it counts them; it does not decrypt them: scripts/push-test does that
with `http_ece` and `py_vapid`).

1. **Fan-out.** The owner posts once to `big`. The post's transaction queues N pushes (docs/API.md,
   "Push notifications"); its ack time is printed beside a post to a circle that queues none.
   The clock and the server's CPU time (utime+stime) run from the post until the push service has
   counted N pushes: pushes per second, and the server's CPU per push.
2. **Cryptography alone.** `circle bench push-crypto`, pinned to the server's CPU, times the
   server's own RFC 8291 encryption and VAPID signature in a loop: the part of a push's CPU that
   is cryptography. The rest is the store (claim, finish) and HTTP.
3. **The post path, push on and off.** W writers (closed loop, one post in flight each) post for
   D seconds to a circle where one away person at level `all` gets a push for every post (on),
   then to one where nobody is pushed (off), alternating twice; acks per second and the server's
   CPU per post (the dispatcher's work included).

    python push.py                         # 10,000 people, writers 1 and 16
    python push.py --people 2000 --writers 1 --duration 5
    python push.py --builds before=/tmp/circle-old,new=.build-release/release/circle

Only 127.0.0.1 is contacted; each wait is bounded.
"""
from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import json
import subprocess
import sys
import time

import benchlib
import circlev1
import postpath
import webhooks

# The P-256 base point, uncompressed (04 || x || y): a valid public key (of the private key 1)
# for every subscription; the push service here does not decrypt.
P256_G = bytes.fromhex(
    "04"
    "6B17D1F2E12C4247F8BCE6E563A440F277037D812DEB33A0F4A13945D898C296"
    "4FE342E2FE1A7F9B8EE7EB4A7C0F9E162BCE33576B315ECECBB6406837BF51F5")

class PushService(webhooks.Receiver):
    """webhooks.py's receiver, answering 201 at once: a push service that takes every push."""

    def __init__(self, cpu: int | None) -> None:
        super().__init__(cpu, status="201 Created", hold=False)

    def endpoint(self, user: str) -> str:
        return f"http://127.0.0.1:{self.port}/push/{user}"

    def count(self) -> int:
        return self.delivered()


def b64url(data: bytes) -> str:
    import base64
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def check(status: int, body: object, what: str, ok: tuple[int, ...] = (200, 201)) -> None:
    if status not in ok:
        raise RuntimeError(f"{what}: {status} {body}")


def setup_person(port: int, service: PushService, user: str, circle: str) -> None:
    """A person with one device subscribed and level `all` in `circle`; never connected."""
    token = benchlib.dev_token(port, user)
    subscription = {"endpoint": service.endpoint(user), "expirationTime": None,
                    "keys": {"p256dh": b64url(P256_G), "auth": b64url(user.encode()[:16].ljust(16, b"."))}}
    check(*benchlib.http_json("POST", port, "/v1/push/subscriptions", token, subscription), f"subscribing {user}")
    check(*benchlib.http_json("PUT", port, f"/v1/circles/{circle}/notify", token, {"level": "all"}), f"level of {user}")


async def timed_post(conn: circlev1.Conn, circle: str, post_id: str) -> float:
    started = time.monotonic()
    reply = await asyncio.wait_for(conn.request({"action": "post", "circle": circle, "id": post_id, "text": "hello all"}), 60)
    if reply.get("type") != "ack":
        raise RuntimeError(f"post to {circle}: {reply}")
    return time.monotonic() - started


async def post_path(server: benchlib.Server, circle: str, writers: int, duration: float, tag: str) -> dict:
    tokens = [benchlib.dev_token(server.port, f"{tag}writer{i}") for i in range(writers)]
    conns = [await circlev1.connect(server.port, token) for token in tokens]
    try:
        for conn in conns:
            reply = await asyncio.wait_for(conn.request({"action": "join", "circle": circle}), 30)
            assert reply.get("type") == "ack", reply
        ws = [postpath.Writer(c, f"{tag}{i}", circle, "x" * 100, 1) for i, c in enumerate(conns)]
        cpu0, t0 = benchlib.cpu_seconds(server.pid), time.monotonic()
        for w in ws:
            w.post()
        await asyncio.sleep(duration)
        for w in ws:
            w.running = False
        acked = sum(w.acked for w in ws)
        cpu1, t1 = benchlib.cpu_seconds(server.pid), time.monotonic()
        await asyncio.sleep(0.3)  # the last posts in flight are acked before the next case
        return {"acks_per_s": acked / (t1 - t0), "us_per_post": 1e6 * (cpu1 - cpu0) / max(acked, 1), "posts": acked}
    finally:
        for conn in conns:
            conn.close()


async def run(args, binary: str) -> dict:
    service = PushService(args.client_cpu)
    server = benchlib.circle_server(binary=binary, extra=[
        "--posts-per-second", "1000000", "--post-burst", "1000000", "--max-connections-per-user", "100000",
        "--idle-timeout", "1h", "--push-contact", "mailto:bench@example.com", "--push-allow-http",
        "--push-allow-private", "--push-away-after", "0s", "--push-burst-interval", "0s"])
    server.start(args.server_cpu)
    try:
        owner = benchlib.dev_token(server.port, "owner")
        for circle in ("big", "talk", "quiet"):
            check(*benchlib.http_json("POST", server.port, "/v1/circles", owner, {"name": circle}), f"creating {circle}")
        t0 = time.monotonic()
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda i: setup_person(server.port, service, f"m{i}", "big"), range(args.people)))
        setup_person(server.port, service, "bob", "talk")
        setup_seconds = time.monotonic() - t0
        print(f"# {args.people:,} people subscribed at level all in {setup_seconds:.1f} s", flush=True)

        # 1. Fan-out: one post, N pushes.
        conn = await circlev1.connect(server.port, owner)
        for circle in ("big", "quiet"):
            reply = await asyncio.wait_for(conn.request({"action": "join", "circle": circle}), 30)
            assert reply.get("type") == "ack", reply
        quiet_ack = min([await timed_post(conn, "quiet", f"q{i}") for i in range(5)])
        before = service.count()
        cpu0, scpu0, t0 = benchlib.cpu_seconds(server.pid), service.cpu_seconds(), time.monotonic()
        fanout_ack = await timed_post(conn, "big", "everyone")
        deadline = t0 + 600
        while (pushed := service.count() - before) < args.people:
            if time.monotonic() > deadline:
                raise RuntimeError(f"only {pushed} of {args.people} pushes within 10 minutes")
            await asyncio.sleep(0.02)
        cpu1, scpu1, t1 = benchlib.cpu_seconds(server.pid), service.cpu_seconds(), time.monotonic()
        conn.close()
        wall = t1 - t0
        fanout = {"people": args.people, "post_ack_ms": 1e3 * fanout_ack, "quiet_ack_ms": 1e3 * quiet_ack,
                  "seconds": wall, "pushes_per_s": args.people / wall,
                  "server_us_per_push": 1e6 * (cpu1 - cpu0) / args.people,
                  "server_cpu_pct": 100 * (cpu1 - cpu0) / wall, "service_cpu_pct": 100 * (scpu1 - scpu0) / wall}

        # 2. The cryptography alone, on the server's CPU.
        argv = (["taskset", "-c", str(args.server_cpu)] if args.server_cpu is not None else []) + [
            binary, "bench", "push-crypto", "--count", str(args.crypto_count)]
        crypto = json.loads(subprocess.run(argv, check=True, capture_output=True, text=True, timeout=600).stdout.strip().splitlines()[-1])

        # 3. The post path with a push per post and without, alternating.
        path = []
        for writers in args.writers:
            for round_ in range(2):
                for circle, mode in (("talk", "on"), ("quiet", "off")):
                    r = await post_path(server, circle, writers, args.duration, f"{mode}{writers}r{round_}")
                    path.append({"writers": writers, "push": mode, "round": round_, **r})
        return {"fanout": fanout, "crypto": crypto, "post_path": path, "setup_seconds": setup_seconds}
    finally:
        server.stop()
        service.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--people", type=int, default=10_000, help="away people at level all, each with one device")
    parser.add_argument("--writers", default="1,16", help="comma list of writer counts for the post path")
    parser.add_argument("--duration", type=float, default=8.0, help="seconds per post-path case")
    parser.add_argument("--crypto-count", type=int, default=20_000, help="operations of each kind for push-crypto")
    parser.add_argument("--builds", help="comma list of NAME=PATH of circle binaries, each run in turn (default: the release build)")
    parser.add_argument("--server-cpu", type=int, default=0)
    parser.add_argument("--client-cpu", type=int, default=1)
    parser.add_argument("--json", help="write the results to this file")
    args = parser.parse_args()
    if not 1 <= args.people <= 100_000:
        parser.error("--people in [1, 100000]")
    args.writers = [int(w) for w in args.writers.split(",") if w]
    if any(w < 1 or w > 256 for w in args.writers):
        parser.error("writers in [1, 256]")
    benchlib.pin_self(args.client_cpu)
    benchlib.use_uvloop()
    benchlib.exit_on_sigterm()
    print(f"# Web Push: one post to {args.people:,} away people (one device each, level all); server on CPU "
          f"{args.server_cpu} (SQLite), push service (asyncio, answers 201) and writers on CPU {args.client_cpu}", flush=True)
    builds = [("circle", str(benchlib.DEFAULT_CIRCLE))]
    if args.builds:
        builds = [tuple(b.split("=", 1)) for b in args.builds.split(",") if b]
    results = {}
    for name, binary in builds:
        r = results[name] = asyncio.run(run(args, binary))
        f, c = r["fanout"], r["crypto"]
        print(f"[{name}] fan-out: ack of the post {f['post_ack_ms']:.1f} ms (a post that pushes nobody: {f['quiet_ack_ms']:.1f} ms); "
              f"{args.people:,} pushes in {f['seconds']:.2f} s = {f['pushes_per_s']:,.0f}/s; "
              f"server {f['server_us_per_push']:.1f} us CPU per push ({f['server_cpu_pct']:.0f}% CPU), push service {f['service_cpu_pct']:.0f}% CPU")
        print(f"[{name}] cryptography alone: encryption {c['encrypt_us']:.1f} us per push "
              f"({100 * c['encrypt_us'] / f['server_us_per_push']:.0f}% of the server's CPU per push); "
              f"a VAPID signature {c['vapid_us']:.1f} us (made once an hour per push service)")
        print(f"[{name}] {'writers':>7} {'push':>4} {'round':>5} {'acks/s':>8} {'us/post':>8}")
        for p in r["post_path"]:
            print(f"[{name}] {p['writers']:>7} {p['push']:>4} {p['round']:>5} {p['acks_per_s']:>8,.0f} {p['us_per_post']:>8.1f}")
        for writers in args.writers:
            on = [p for p in r["post_path"] if p["writers"] == writers and p["push"] == "on"]
            off = [p for p in r["post_path"] if p["writers"] == writers and p["push"] == "off"]
            ratio_cpu = sum(p["us_per_post"] for p in on) / sum(p["us_per_post"] for p in off)
            ratio_acks = sum(p["acks_per_s"] for p in on) / sum(p["acks_per_s"] for p in off)
            print(f"[{name}] {writers} writer(s): push on / off = {ratio_cpu:.2f}x the CPU per post, {ratio_acks:.2f}x the acks/s", flush=True)
    if len(builds) > 1:
        first = results[builds[0][0]]["fanout"]
        for name, _ in builds[1:]:
            f = results[name]["fanout"]
            print(f"{name} / {builds[0][0]}: {f['pushes_per_s'] / first['pushes_per_s']:.2f}x the pushes/s, "
                  f"{f['server_us_per_push'] / first['server_us_per_push']:.2f}x the CPU per push")
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"benchmark": "push", "args": vars(args), "builds": dict(builds), "results": results}, out, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
