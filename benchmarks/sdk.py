"""SDK benchmark: client CPU per post through `CircleClient.post`, build against build.

`circle serve` runs pinned to CPU 0. For each build in --builds, `circle bench posts` (pinned to CPU 1) runs C clients with
F posts each waiting for its ack, and reports acks/s and its own CPU time per post (getrusage,
all threads): the SDK's outbox, requests, timer and socket together. Builds alternate round by
round against the same server, so the machine's drift falls on each alike; the table gives the
median of the rounds and the ratio to the first build.

    python sdk.py --builds base=/tmp/circle-base,new=../.build-release/release/circle
    python sdk.py --rounds 5 --cases 1x16,8x64

Only 127.0.0.1 is contacted; each run is bounded by its warm-up and duration.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

import benchlib


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--builds", help="comma list of NAME=PATH of circle binaries (default: the release build)")
    parser.add_argument("--cases", default="1x1,1x16,8x16", help="comma list of CLIENTSxIN_FLIGHT")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--duration", type=float, default=5)
    parser.add_argument("--warmup", type=float, default=1)
    parser.add_argument("--server-cpu", type=int, default=0)
    parser.add_argument("--client-cpu", type=int, default=1)
    parser.add_argument("--json", help="write the results to this file")
    args = parser.parse_args()
    benchlib.exit_on_sigterm()

    builds = [("circle", str(benchlib.DEFAULT_CIRCLE))]
    if args.builds:
        builds = [tuple(b.split("=", 1)) for b in args.builds.split(",") if b]
        if any(len(b) != 2 for b in builds):
            parser.error("--builds takes NAME=PATH,NAME=PATH")
    cases = []
    for case in args.cases.split(","):
        clients, in_flight = case.split("x")
        cases.append((int(clients), int(in_flight)))

    extra = ["--posts-per-second", "1000000", "--post-burst", "1000000"]
    server = benchlib.circle_server(builds[0][1], extra=extra)
    server.start(args.server_cpu)
    results: dict[str, dict[str, list[dict]]] = {}
    try:
        port = server.port
        token = benchlib.dev_token(port, "writer")
        status, body = benchlib.http_json("POST", port, "/v1/circles", token, {"name": "bench"})
        if status not in (200, 201):
            sys.exit(f"creating the circle: {status} {body}")
        print(f"# sdk: CircleClient.post against one server on CPU {args.server_cpu}; the client on CPU "
              f"{args.client_cpu}; {args.rounds} rounds of {args.duration:g} s, builds alternating", flush=True)
        for round_number in range(args.rounds):
            for clients, in_flight in cases:
                for name, binary in builds:
                    argv = ["taskset", "-c", str(args.client_cpu), binary, "bench", "posts",
                            "--url", f"ws://127.0.0.1:{port}/v1/ws", "--token", token, "--circle", "bench",
                            "--clients", str(clients), "--in-flight", str(in_flight),
                            "--duration", str(args.duration), "--warmup", str(args.warmup)]
                    run = subprocess.run(argv, capture_output=True, text=True, timeout=args.warmup + args.duration + 120)
                    lines = [line for line in run.stdout.splitlines() if line.startswith("{")]
                    if run.returncode != 0 or not lines:
                        sys.exit(f"{name} {clients}x{in_flight}: exit {run.returncode}: {run.stderr[-800:]}")
                    result = json.loads(lines[-1])
                    results.setdefault(f"{clients}x{in_flight}", {}).setdefault(name, []).append(result)
                    print(f"#   round {round_number + 1} {clients}x{in_flight} {name}: "
                          f"{result['posts_per_s']:.0f} posts/s, {result['cpu_us_per_post']:.1f} µs/post", flush=True)
    finally:
        server.stop()

    base = builds[0][0]
    print(f"{'case':>8} {'build':>10} {'posts/s':>9} {'CPU µs/post':>12} {'vs ' + base:>9}")
    summary = {}
    for case, by_build in results.items():
        base_cpu = statistics.median(r["cpu_us_per_post"] for r in by_build[base])
        for name, _ in builds:
            rate = statistics.median(r["posts_per_s"] for r in by_build[name])
            cpu = statistics.median(r["cpu_us_per_post"] for r in by_build[name])
            summary.setdefault(case, {})[name] = {"posts_per_s": rate, "cpu_us_per_post": cpu, "ratio": cpu / base_cpu}
            print(f"{case:>8} {name:>10} {rate:>9.0f} {cpu:>12.1f} {cpu / base_cpu:>8.3f}×")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"benchmark": "sdk", "args": vars(args), "builds": dict(builds), "summary": summary,
                       "rounds": results}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
