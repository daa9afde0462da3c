"""What a publish hook adds to a post's round trip (docs/API.md, "Publish hooks").

`circle serve` (embedded SQLite) with two circles: `hooked`, whose publish hook is a receiver on
loopback in this process (Python's ThreadingHTTPServer, answering `{"action":"accept"}` at once),
and `plain`, without a hook. One writer posts over one WebSocket, one post in flight at a time,
alternating between the circles; the round trip (send → ack) is timed for each. Printed: the
median, p90 and p99 of both, and their difference, which is the hook's cost: the signed call,
the receiver's answer, and the hop out of and back into the commit path.

With the `standardwebhooks` package importable (scripts/webhook-test makes .venv-webhooks with
it), every call the receiver gets is verified with it, and the run fails on one that does not
verify.

    python publish_hook.py                  # 500 posts to each circle
    python publish_hook.py --posts 2000 --binary .build/debug/circle

Only 127.0.0.1 is contacted; each wait is bounded.
"""
from __future__ import annotations

import argparse
import asyncio
import re
import statistics
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import benchlib
import circlev1

try:
    from standardwebhooks.webhooks import Webhook  # type: ignore
except ImportError:  # the figures do not need it
    Webhook = None


class Receiver:
    def __init__(self) -> None:
        self.secret: str | None = None
        self.calls = 0
        self.unverified = 0
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # The head and the body leave in two writes: without this, Nagle's algorithm holds
            # the body until the server's delayed ACK (40 ms on Linux), which measures the
            # receiver, not the hook.
            disable_nagle_algorithm = True

            def do_POST(self) -> None:  # noqa: N802
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                ok = True
                if Webhook is not None and receiver.secret:
                    try:
                        Webhook(receiver.secret).verify(body, {k.lower(): v for k, v in self.headers.items()})
                    except Exception:
                        ok = False
                with receiver.lock:
                    receiver.calls += 1
                    receiver.unverified += 0 if ok else 1
                answer = b'{"action":"accept"}'
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/publish"

    def stop(self) -> None:
        self.server.shutdown()


def quantiles(samples: list[float]) -> tuple[float, float, float]:
    ordered = sorted(samples)
    pick = lambda q: ordered[min(len(ordered) - 1, int(q * len(ordered)))]  # noqa: E731
    return statistics.median(ordered), pick(0.90), pick(0.99)


async def run(args) -> int:
    receiver = Receiver()
    server = benchlib.circle_server(binary=args.binary, extra=["--posts-per-second", "1000000", "--post-burst", "1000000", "--allow-private-outbound"])
    server.start(None)
    try:
        # The first admin, through the setup link of the server's banner (as postpath.subscribe does).
        deadline = time.monotonic() + 30
        match = None
        while match is None and time.monotonic() < deadline:
            with open(server.log_path, errors="replace") as log:
                match = re.search(r"#setup=([A-Za-z0-9_\-]+)", log.read())
            time.sleep(0.05)
        if match is None:
            raise RuntimeError("no setup link in the server's output")
        status, body = benchlib.http_json("POST", server.port, "/v1/auth/setup", body={"token": match.group(1), "name": "admin", "password": "benchmark password"})
        if status != 201:
            raise RuntimeError(f"setup: {status} {body}")
        admin = benchlib.dev_token(server.port, "admin")
        for circle in ("hooked", "plain"):
            status, body = benchlib.http_json("POST", server.port, "/v1/circles", admin, {"name": circle})
            if status != 201:
                raise RuntimeError(f"creating {circle}: {status} {body}")
        status, body = benchlib.http_json("PUT", server.port, "/v1/circles/hooked/publish-hook", admin, {"url": receiver.url})
        if status != 201:
            raise RuntimeError(f"setting the hook: {status} {body}")
        receiver.secret = body["secret"]
        conn = await circlev1.connect(server.port, benchlib.dev_token(server.port, "writer"))
        for circle in ("hooked", "plain"):
            reply = await asyncio.wait_for(conn.request({"action": "join", "circle": circle}), 30)
            if reply.get("type") != "ack":
                raise RuntimeError(f"join {circle}: {reply}")
        times: dict[str, list[float]] = {"hooked": [], "plain": []}
        for i in range(args.warmup + args.posts):
            for circle in ("hooked", "plain"):
                started = time.perf_counter()
                reply = await asyncio.wait_for(conn.request({"action": "post", "circle": circle, "text": f"post {i}"}), 30)
                elapsed = time.perf_counter() - started
                if reply.get("type") != "ack":
                    raise RuntimeError(f"{circle}: {reply}")
                if i >= args.warmup:
                    times[circle].append(elapsed * 1000)
        conn.close()
        if receiver.calls != args.warmup + args.posts:
            raise RuntimeError(f"the hook was called {receiver.calls} times for {args.warmup + args.posts} posts")
        if receiver.unverified:
            raise RuntimeError(f"{receiver.unverified} calls did not verify with standardwebhooks")
        hooked, plain = quantiles(times["hooked"]), quantiles(times["plain"])
        print(f"binary: {args.binary}; {args.posts} posts per circle, one in flight; signatures "
              + ("verified with standardwebhooks" if Webhook else "not verified (no standardwebhooks)"))
        print(f"{'circle':<10}{'median ms':>12}{'p90 ms':>10}{'p99 ms':>10}")
        for name, (p50, p90, p99) in (("plain", plain), ("hooked", hooked)):
            print(f"{name:<10}{p50:>12.2f}{p90:>10.2f}{p99:>10.2f}")
        print(f"{'the hook':<10}{hooked[0] - plain[0]:>12.2f}{hooked[1] - plain[1]:>10.2f}{hooked[2] - plain[2]:>10.2f}")
        return 0
    finally:
        server.stop()
        receiver.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--binary", default=str(benchlib.DEFAULT_CIRCLE))
    parser.add_argument("--posts", type=int, default=500)
    parser.add_argument("--warmup", type=int, default=50)
    args = parser.parse_args()
    benchlib.exit_on_sigterm()
    return asyncio.run(run(args))


if __name__ == "__main__":
    sys.exit(main())
