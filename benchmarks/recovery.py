"""Recovery benchmark: N subscribed CircleClients while a publisher posts; the server is killed
with SIGKILL and restarted. How long until every client has resumed, and was anything lost or
delivered twice?

`circle serve` runs pinned to CPU 0. `circle bench recovery` (pinned to CPU 1) runs N
subscribers and one publisher on the real SDK (`CircleClient`, default reconnect policy) and
reports phases as JSON lines. This driver waits for "ready" (every subscriber has a post),
waits --before seconds, kills the server with SIGKILL, starts it again at once on the same port
and data directory, and then reads "reconnected" (every client connected again) and "resumed"
(every subscriber got a post newer than anything delivered before the kill). At the end
`circle bench recovery` counts, per subscriber, acknowledged posts never delivered (lost) and
posts delivered more than once (duplicates).

    python recovery.py                        # 1,000 subscribers, 20 posts/s
    python recovery.py --subscribers 100 --rate 10

Only 127.0.0.1 is contacted; the run is bounded by --timeout per phase.
"""
from __future__ import annotations

import argparse
import json
import os
import select
import signal
import subprocess
import sys
import time

import benchlib


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--subscribers", type=int, default=1000)
    parser.add_argument("--rate", type=float, default=20, help="posts per second by the publisher")
    parser.add_argument("--before", type=float, default=3, help="seconds between 'ready' and the kill")
    parser.add_argument("--after", type=float, default=3, help="seconds of posting after every client resumed")
    parser.add_argument("--timeout", type=float, default=120, help="limit for each phase")
    parser.add_argument("--circle", default=str(benchlib.DEFAULT_CIRCLE), help="the circle binary (release build)")
    parser.add_argument("--server-cpu", type=int, default=0)
    parser.add_argument("--client-cpu", type=int, default=1)
    parser.add_argument("--server-args", default="", help="extra arguments for circle serve, e.g. \"--presence-limit 0\"")
    parser.add_argument("--json", help="write the results to this file")
    args = parser.parse_args()
    benchlib.exit_on_sigterm()

    extra = ["--posts-per-second", "1000000", "--post-burst", "1000000",
             "--max-connections-per-user", "100000", "--idle-timeout", "1h"] + args.server_args.split()
    server = benchlib.circle_server(args.circle, extra=extra)
    server.start(args.server_cpu)
    port = server.port
    token = benchlib.dev_token(port, "subscriber")
    publisher_token = benchlib.dev_token(port, "publisher")
    status, body = benchlib.http_json("POST", port, "/v1/circles", publisher_token, {"name": "recovery"})
    if status not in (200, 201):
        sys.exit(f"creating the circle: {status} {body}")

    argv = ["taskset", "-c", str(args.client_cpu), args.circle, "bench", "recovery",
            "--url", f"ws://127.0.0.1:{port}/v1/ws", "--token", token, "--publisher-token", publisher_token,
            "--circle", "recovery", "--subscribers", str(args.subscribers), "--rate", str(args.rate),
            "--after", str(args.after), "--timeout", str(args.timeout)]
    print(f"# recovery: {args.subscribers} CircleClient subscribers + 1 publisher at {args.rate:g} posts/s; "
          f"server on CPU {args.server_cpu}, clients on CPU {args.client_cpu}; SIGKILL {args.before:g} s after "
          f"every subscriber has a post, restart at once", flush=True)
    bench = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1,
                             preexec_fn=benchlib.raise_nofile)
    events: dict[str, dict] = {}
    times: dict[str, float] = {}
    restarted = None
    deadline = time.monotonic() + 6 * args.timeout + 60
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([bench.stdout], [], [], 1.0)
            if not ready:
                if bench.poll() is not None:
                    break
                continue
            line = bench.stdout.readline()
            if not line:
                break
            if not line.startswith("{"):
                continue
            event = json.loads(line)
            name = event["event"]
            events[name] = event
            print(f"#   {name}: {json.dumps({k: v for k, v in event.items() if k != 'event'})}", flush=True)
            if name == "ready":
                time.sleep(args.before)
                rss = benchlib.rss_kb(server.pid)
                times["kill"] = time.time()
                os.kill(server.pid, signal.SIGKILL)
                server.process.wait(10)
                times["killed"] = time.time()
                # same port, same data directory (and so the same token key), at once
                server.process = None
                server._pid = None
                server.data_dir, data = None, server.data_dir  # keep the directory for the restart
                server.start(args.server_cpu, timeout=60)
                server.data_dir = data
                restarted = time.time()
                times["listening"] = restarted
                print(f"#   killed (RSS was {rss:,} KB), restarted and listening after "
                      f"{restarted - times['kill']:.3f} s", flush=True)
            if name in ("result",):
                break
        bench.wait(30)
    finally:
        if bench.poll() is None:
            bench.kill()
        err = bench.stderr.read() if bench.stderr else ""
        server.stop()
    result = events.get("result")
    if not result:
        print(f"no result from circle bench recovery (exit {bench.returncode}): {err[-800:]}")
        return 1
    out = dict(result, subscribers=args.subscribers, rate=args.rate)
    if restarted is not None:
        for phase in ("reconnected", "resumed"):
            if phase in events:
                out[f"{phase}_after_restart_s"] = events[phase]["t"] - restarted
                out[f"{phase}_after_kill_s"] = events[phase]["t"] - times["kill"]
        out["restart_s"] = restarted - times["kill"]
    print(f"{'subs':>6} {'restart s':>9} {'reconnected s':>13} {'resumed s':>9} {'acked':>6} {'lost':>5} {'dups':>5}")
    print(f"{args.subscribers:>6} {out.get('restart_s', float('nan')):>9.2f} "
          f"{out.get('reconnected_after_restart_s', float('nan')):>13.2f} "
          f"{out.get('resumed_after_restart_s', float('nan')):>9.2f} {out['posts_acked']:>6} "
          f"{out['lost']:>5} {out['duplicates']:>5}   (times after the restarted server listens)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"benchmark": "recovery", "args": vars(args), "result": out, "events": events}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
