"""WebSocket client benchmark: client CPU time per round trip, against one fixed fast server.

One echo server (picows on uvloop, peers/picows_echo.py) runs pinned to CPU 0 for the whole run.
Each client under test runs as its own process pinned to CPU 1 and keeps C connections x F
binary messages in flight (every echo answered with the next message), warms up, and measures
its own CPU time (utime+stime of all its threads) and the round trips completed:

- `circlesocket`: Circle's Swift client, `circle bench client` (CircleSocket on SwiftNIO); each
  connection's task prefers the socket's event loop as its executor (`WebSocket.taskExecutor`)
- `circlesocket-default`: the same with `--default-executor` (the tasks on Swift's default
  executor, as code that does not ask for the loop runs)
- `circlesocket-base`: with `--base-circle PATH`, another circle build's client (for example the
  release build of the commit before a change), in the same run
- `picows`: picows on uvloop (the neutral load generator of echo.py)
- `websockets`: Python `websockets` (asyncio client) on uvloop

    python client.py                         # all three, 64 B and 16 KiB
    python client.py --clients circlesocket,picows --sizes 64 --duration 5
    python client.py --base-circle /path/to/old/circle   # adds circlesocket-base

Only 127.0.0.1 is contacted; each measurement is bounded (warm-up + duration + drain).
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time

import benchlib

CLIENTS = ("circlesocket", "circlesocket-default", "picows", "websockets")
EXTRA_CLIENTS = ("circlesocket-base",)


# ---------------------------------------------------------------- workers (run in a child process)


async def picows_worker(url: str, size: int, connections: int, inflight: int, warmup: float, duration: float) -> dict:
    import echo  # the picows load generator of echo.py measures its own CPU too
    result = await echo.measure(url, os.getpid(), size, connections, inflight, warmup, duration, False)
    return {"client": "picows", "msgs_per_s": result["msgs_per_s"], "messages": result["messages"],
            "seconds": result["seconds"], "client_cpu_pct": result["client_cpu_pct"],
            "client_us_per_msg": result["client_cpu_pct"] / 100 * result["seconds"] * 1e6 / result["messages"],
            "wrong_size": result["wrong_size"]}


async def websockets_worker(url: str, size: int, connections: int, inflight: int, warmup: float, duration: float) -> dict:
    from websockets.asyncio.client import connect

    payload = os.urandom(size)
    state = {"received": 0, "running": True, "wrong": 0}

    async def one() -> None:
        async with connect(url, max_size=max(1 << 20, 2 * size), compression=None) as ws:
            for _ in range(inflight):
                await ws.send(payload)
            outstanding = inflight
            async for message in ws:
                state["received"] += 1
                if len(message) != size:
                    state["wrong"] += 1
                if state["running"]:
                    await ws.send(message)
                else:
                    outstanding -= 1
                    if outstanding == 0:
                        break

    tasks = [asyncio.create_task(one()) for _ in range(connections)]
    await asyncio.sleep(warmup)
    own0, t0, n0 = os.times(), time.monotonic(), state["received"]
    await asyncio.sleep(duration)
    own1, t1, n1 = os.times(), time.monotonic(), state["received"]
    state["running"] = False
    await asyncio.wait(tasks, timeout=5)
    for task in tasks:
        task.cancel()
    cpu = (own1.user - own0.user) + (own1.system - own0.system)
    wall, n = t1 - t0, n1 - n0
    return {"client": "websockets", "msgs_per_s": n / wall, "messages": n, "seconds": wall,
            "client_cpu_pct": 100 * cpu / wall, "client_us_per_msg": 1e6 * cpu / n, "wrong_size": state["wrong"]}


def worker_main(args) -> int:
    benchlib.use_uvloop()
    fn = picows_worker if args.worker == "picows" else websockets_worker
    result = asyncio.run(fn(args.url, args.size, args.connections, args.inflight, args.warmup, args.duration))
    print(json.dumps(result), flush=True)
    return 0


# ---------------------------------------------------------------- driver


def run_client(name: str, args, url: str, size: int) -> dict:
    pin = ["taskset", "-c", str(args.client_cpu)]
    common = ["--size", str(size), "--connections", str(args.connections), "--warmup", str(args.warmup),
              "--duration", str(args.duration)]
    if name.startswith("circlesocket"):
        binary = args.base_circle if name == "circlesocket-base" else args.circle
        argv = pin + [binary, "bench", "client", "--url", url, "--in-flight", str(args.inflight), "--json"] + common
        if name == "circlesocket-default":
            argv.append("--default-executor")
    else:
        argv = pin + [sys.executable, __file__, "--worker", name, "--url", url, "--inflight", str(args.inflight)] + common
    limit = args.warmup + args.duration + 60
    done = subprocess.run(argv, capture_output=True, text=True, timeout=limit)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"{name} exited with {done.returncode}: {done.stderr.strip()[-500:]}")
    result = json.loads(lines[-1])
    result["client"] = name
    result["size"] = size
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", default=",".join(CLIENTS), help="comma list of: " + ", ".join(CLIENTS))
    parser.add_argument("--server", default="picows+uvloop", help="the fixed echo server: " + ", ".join(benchlib.PEERS))
    parser.add_argument("--circle", default=str(benchlib.DEFAULT_CIRCLE), help="the circle binary (release build)")
    parser.add_argument("--base-circle", help="another circle binary to measure as circlesocket-base in the same run")
    parser.add_argument("--sizes", default="64,16384")
    parser.add_argument("--connections", type=int, default=8)
    parser.add_argument("--inflight", type=int, default=16)
    parser.add_argument("--warmup", type=float, default=2.0)
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--repeat", type=int, default=1, help="runs per client and size; the median µs/msg is reported")
    parser.add_argument("--server-cpu", type=int, default=0)
    parser.add_argument("--client-cpu", type=int, default=1)
    parser.add_argument("--json", help="write the results to this file")
    # worker mode (internal)
    parser.add_argument("--worker", choices=["picows", "websockets"], help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    parser.add_argument("--size", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker_main(args)
    if not (0 < args.duration <= 120 and 0 <= args.warmup <= 30 and 1 <= args.repeat <= 10):
        parser.error("keep --duration in (0, 120], --warmup in [0, 30], --repeat in [1, 10]")

    benchlib.exit_on_sigterm()
    clients = [c.strip() for c in args.clients.split(",") if c.strip()]
    if args.base_circle and "circlesocket-base" not in clients:
        clients.insert(0, "circlesocket-base")
    unknown = [c for c in clients if c not in CLIENTS + EXTRA_CLIENTS]
    if unknown:
        parser.error(f"unknown clients: {unknown}")
    if "circlesocket-base" in clients and not args.base_circle:
        parser.error("circlesocket-base needs --base-circle PATH")
    sizes = [int(s) for s in args.sizes.split(",") if s]
    server = benchlib.peer_server(args.server).start(args.server_cpu)
    url = f"ws://127.0.0.1:{server.port}/"
    print(f"# client: {args.connections} connections x {args.inflight} in flight, {args.warmup:g} s warm-up, "
          f"{args.duration:g} s measured; server {args.server} on CPU {args.server_cpu}, each client on CPU "
          f"{args.client_cpu}; binary frames")
    print(f"{'client':<21} {'size':>6} {'msgs/s':>10} {'cliCPU':>7} {'us/msg':>8} {'srvCPU~':>7}", flush=True)
    results = []
    try:
        for size in sizes:
            for name in clients:
                runs = []
                for _ in range(args.repeat):
                    try:
                        s0 = benchlib.cpu_seconds(server.pid)
                        r = run_client(name, args, url, size)
                        r["server_cpu_s_total"] = benchlib.cpu_seconds(server.pid) - s0
                        runs.append(r)
                    except Exception as error:
                        print(f"{name:<21} {size:>6} failed: {error}", flush=True)
                if not runs:
                    continue
                best = sorted(runs, key=lambda r: r["client_us_per_msg"])[len(runs) // 2]
                best = dict(best, runs=runs, us_per_msg_spread=[round(r["client_us_per_msg"], 2) for r in runs])
                results.append(best)
                print(f"{name:<21} {size:>6} {best['msgs_per_s']:>10,.0f} {best['client_cpu_pct']:>6.0f}% "
                      f"{best['client_us_per_msg']:>8.2f} {100 * best['server_cpu_s_total'] / (args.warmup + args.duration):>6.0f}%",
                      flush=True)
    finally:
        server.stop()
    by = {(r["client"], r["size"]): r for r in results}
    print("# CircleSocket client CPU per message relative to each peer client (below 1.00 = cheaper):")
    for size in sizes:
        c = by.get(("circlesocket", size))
        if c:
            print(f"#   {size:>6} B: " + ", ".join(
                f"{p} {c['client_us_per_msg'] / by[(p, size)]['client_us_per_msg']:.2f}"
                for p in clients if p != "circlesocket" and (p, size) in by))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"benchmark": "client", "args": vars(args), "results": results}, f, indent=2)
    return 0 if results else 1


if __name__ == "__main__":
    sys.exit(main())
