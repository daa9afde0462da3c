"""WebSocket echo benchmark: server CPU time per echoed message.

A picows load generator keeps C connections x F messages in flight against an echo endpoint
(each reply is answered with the next message) for a fixed time after a warm-up. The server's
CPU time (utime+stime of all its threads, /proc/PID/stat) over the measured window divided by
the round trips completed in it is the server's CPU cost per message (one frame in, one out).

The server runs pinned to one CPU (`taskset -c 0`), the load generator to another (CPU 1), so
the two do not steal each other's time. Circle's /v1/echo and peer echo servers written with
Hummingbird 2 and Vapor 4 (peers-swift/, a separate SwiftPM package), Python `websockets` and
`picows` (peers/) run under the same load in the same invocation.

    python echo.py                                   # all five servers; 64 B and 16 KiB; 16 and 1 in flight
    python echo.py --servers circle --sizes 64 --duration 5
    python echo.py --url ws://127.0.0.1:9000/ --pid 1234   # any running server

Two loads by default (`--inflight 16,1`): 16 messages in flight per connection saturates the
server and lets it read many messages per read and write many per flush; 1 in flight gives one
message per read and one write per message, the cost a chat server pays when traffic is light.

Only 127.0.0.1 is contacted. Each measurement is bounded: warm-up + duration + a 5 s drain.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time

from picows import WSFrame, WSListener, WSMsgType, WSTransport, ws_connect

import benchlib


class Load:
    """Counters shared by the connections of one measurement."""

    def __init__(self, payload: bytes, msg_type: WSMsgType) -> None:
        self.payload = payload
        self.msg_type = msg_type
        self.size = len(payload)
        self.received = 0
        self.wrong_size = 0
        self.corrupt = 0
        self.running = True
        self.outstanding = 0
        self.drained = asyncio.Event()


class EchoClient(WSListener):
    def __init__(self, load: Load) -> None:
        self.load = load
        self.transport: WSTransport | None = None

    def on_ws_connected(self, transport: WSTransport) -> None:
        self.transport = transport

    def start(self, inflight: int) -> None:
        load = self.load
        for _ in range(inflight):
            self.transport.send(load.msg_type, load.payload)
        load.outstanding += inflight

    def on_ws_frame(self, transport: WSTransport, frame: WSFrame) -> None:
        load = self.load
        msg_type = frame.msg_type
        if msg_type is WSMsgType.BINARY or msg_type is WSMsgType.TEXT:
            load.received += 1
            if frame.payload_size != load.size:
                load.wrong_size += 1
            elif load.received & 1023 == 1 and frame.get_payload_as_bytes() != load.payload:
                load.corrupt += 1  # every 1024th reply is compared byte for byte
            if load.running:
                transport.send(load.msg_type, load.payload)
            else:
                load.outstanding -= 1
                if load.outstanding == 0:
                    load.drained.set()
        elif msg_type is WSMsgType.CLOSE:
            transport.disconnect()


async def measure(url: str, pid: int, size: int, connections: int, inflight: int,
                  warmup: float, duration: float, text: bool) -> dict:
    if text:
        payload = bytes(0x61 + (i * 7) % 26 for i in range(size))  # ASCII letters, varied
        msg_type = WSMsgType.TEXT
    else:
        payload = os.urandom(size)
        msg_type = WSMsgType.BINARY
    load = Load(payload, msg_type)
    clients: list[tuple[WSTransport, EchoClient]] = []
    try:
        for _ in range(connections):
            transport, client = await ws_connect(lambda: EchoClient(load), url,
                                                 max_frame_size=max(1 << 20, 2 * size))
            clients.append((transport, client))
        for _, client in clients:
            client.start(inflight)
        await asyncio.sleep(warmup)

        cpu0, sched0, n0 = benchlib.cpu_seconds(pid), benchlib.cpu_ns_schedstat(pid), load.received
        own0, t0 = os.times(), time.monotonic()
        await asyncio.sleep(duration)
        cpu1, sched1, n1 = benchlib.cpu_seconds(pid), benchlib.cpu_ns_schedstat(pid), load.received
        own1, t1 = os.times(), time.monotonic()

        load.running = False
        if load.outstanding:
            try:
                await asyncio.wait_for(load.drained.wait(), 5.0)
            except asyncio.TimeoutError:
                pass
    finally:
        for transport, _ in clients:
            transport.send_close()
            transport.disconnect()
        for transport, _ in clients:
            try:
                await asyncio.wait_for(transport.wait_disconnected(), 2.0)
            except asyncio.TimeoutError:
                pass

    wall = t1 - t0
    messages = n1 - n0
    server_cpu = cpu1 - cpu0
    client_cpu = (own1.user - own0.user) + (own1.system - own0.system)
    if messages <= 0:
        raise RuntimeError(f"no round trips completed against {url} in {wall:.1f} s")
    return {
        "size": size,
        "text": text,
        "connections": connections,
        "inflight": inflight,
        "seconds": round(wall, 3),
        "messages": messages,
        "msgs_per_s": messages / wall,
        "server_cpu_s": server_cpu,
        "server_cpu_pct": 100 * server_cpu / wall,
        "server_us_per_msg": 1e6 * server_cpu / messages,
        "server_us_per_msg_schedstat": (sched1 - sched0) / 1e3 / messages,
        "client_cpu_pct": 100 * client_cpu / wall,
        "wrong_size": load.wrong_size,
        "corrupt": load.corrupt,
        "not_drained": load.outstanding,
    }


def start_server(name: str, args) -> tuple[benchlib.Server, str]:
    if name == "circle":
        server = benchlib.circle_server(args.circle)
        url_path = "/v1/echo"
    else:
        server = benchlib.peer_server(name)
        url_path = "/"
    server.start(args.server_cpu)
    return server, f"ws://127.0.0.1:{server.port}{url_path}"


def fmt_row(name: str, r: dict) -> str:
    kind = "text" if r["text"] else "bin"
    return (f"{name:<18} {r['size']:>6} {r['inflight']:>4} {kind:<4} {r['msgs_per_s']:>10,.0f} {r['server_cpu_pct']:>6.0f}% "
            f"{r['server_us_per_msg']:>8.2f} {r['server_us_per_msg_schedstat']:>9.2f} {r['client_cpu_pct']:>7.0f}%")


HEADER = (f"{'server':<18} {'size':>6} {'infl':>4} {'kind':<4} {'msgs/s':>10} {'srvCPU':>7} {'us/msg':>8} "
          f"{'(sched)':>9} {'cliCPU':>8}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--servers", default="circle,hummingbird,vapor,websockets,picows",
                        help="comma list of: circle, " + ", ".join(benchlib.PEERS))
    parser.add_argument("--url", help="measure an already running server at this ws:// URL (needs --pid)")
    parser.add_argument("--pid", type=int, help="PID of the server behind --url")
    parser.add_argument("--circle", default=str(benchlib.DEFAULT_CIRCLE), help="the circle binary (release build)")
    parser.add_argument("--sizes", default="64,16384", help="message sizes in bytes, comma separated")
    parser.add_argument("--connections", type=int, default=8)
    parser.add_argument("--inflight", default="16,1",
                        help="messages in flight per connection, comma separated: one load per value")
    parser.add_argument("--warmup", type=float, default=2.0, help="seconds before measuring")
    parser.add_argument("--duration", type=float, default=10.0, help="seconds measured")
    parser.add_argument("--repeat", type=int, default=1, help="measurements per server and size; the median is reported")
    parser.add_argument("--text", action="store_true", help="send text frames instead of binary")
    parser.add_argument("--server-cpu", type=int, default=0, help="CPU the servers are pinned to")
    parser.add_argument("--client-cpu", type=int, default=1, help="CPU this load generator is pinned to")
    parser.add_argument("--json", help="write the results to this file")
    args = parser.parse_args()

    if not (0 < args.duration <= 120 and 0 <= args.warmup <= 30 and 1 <= args.repeat <= 10):
        parser.error("keep --duration in (0, 120], --warmup in [0, 30], --repeat in [1, 10]")
    sizes = [int(s) for s in args.sizes.split(",") if s]
    loads = [int(n) for n in args.inflight.split(",") if n]
    if not loads or min(loads) < 1:
        parser.error("--inflight needs one or more positive counts")
    benchlib.pin_self(args.client_cpu)
    loop_name = benchlib.use_uvloop()
    benchlib.exit_on_sigterm()
    print(f"# echo: {args.connections} connections x {args.inflight} in flight (one load each), {args.warmup:g} s warm-up, "
          f"{args.duration:g} s measured; server on CPU {args.server_cpu}, load generator on CPU "
          f"{args.client_cpu} (picows on {loop_name}); {'text' if args.text else 'binary'} frames")
    print(f"# load average at start: {os.getloadavg()[0]:.2f} (other work on this machine skews msgs/s more than us/msg)")
    print(HEADER, flush=True)

    results = []
    targets: list[tuple[str, str | None]]
    if args.url:
        if not args.pid:
            parser.error("--url needs --pid")
        targets = [("external", None)]
    else:
        targets = [(name.strip(), None) for name in args.servers.split(",") if name.strip()]
        unknown = [n for n, _ in targets if n != "circle" and n not in benchlib.PEERS]
        if unknown:
            parser.error(f"unknown servers: {unknown}")

    for name, _ in targets:
        server = None
        try:
            if args.url:
                url, pid = args.url, args.pid
            else:
                server, url = start_server(name, args)
                pid = server.pid
            for size, inflight in [(size, inflight) for inflight in loads for size in sizes]:
                runs = []
                for _ in range(args.repeat):
                    runs.append(asyncio.run(measure(url, pid, size, args.connections, inflight,
                                                    args.warmup, args.duration, args.text)))
                best = sorted(runs, key=lambda r: r["server_us_per_msg"])[len(runs) // 2]
                best = dict(best, server=name, url=url, runs=runs,
                            us_per_msg_spread=[round(r["server_us_per_msg"], 2) for r in runs])
                results.append(best)
                print(fmt_row(name, best), flush=True)
                if best["wrong_size"] or best["corrupt"] or best["not_drained"]:
                    print(f"#   warning: {best['wrong_size']} replies of the wrong size, {best['corrupt']} sampled "
                          f"replies with other bytes than sent, {best['not_drained']} not answered after the run",
                          flush=True)
        except Exception as error:  # report and go on with the next server
            print(f"{name:<18} failed: {error}", flush=True)
            if server is not None:
                print(server.log_tail(), file=sys.stderr)
        finally:
            if server is not None:
                server.stop()

    by = {(r["server"], r["size"], r["inflight"]): r for r in results}
    peers = [n for n, _ in targets if n not in ("circle", "external")]
    if "circle" in [n for n, _ in targets] and peers:
        print("# Circle's CPU per message relative to each peer (below 1.00 = cheaper):")
        for inflight in loads:
            for size in sizes:
                c = by.get(("circle", size, inflight))
                if not c:
                    continue
                ratios = ", ".join(f"{p} {c['server_us_per_msg'] / by[(p, size, inflight)]['server_us_per_msg']:.2f}"
                                   for p in peers if (p, size, inflight) in by)
                print(f"#   {size:>6} B, {inflight:>2} in flight: {ratios}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"benchmark": "echo", "loop": loop_name, "args": vars(args), "results": results}, f, indent=2)
    return 0 if results else 1


if __name__ == "__main__":
    sys.exit(main())
