"""Idle-connection memory benchmark: server RSS per authenticated connection joined to a circle.

Starts `circle serve` (release build) pinned to CPU 0, mints dev tokens for U users, creates the
circle "general", then in stages opens connections to /v1/ws (subprotocol circle.v1, token in the
query, spread round-robin over the users), has each join "general" and waits for its ack. After
each stage it waits until no frame has arrived for a while plus a settle pause, and reads the
server's VmRSS from /proc. The result is (RSS after - RSS before) / connections, in KB (1 KB =
1024 bytes), for the stage totals (1,000 and 10,000 by default, in one server run) and for the
connections added by each stage.

Joining broadcasts a "joined" event to every member already in the circle, so N joins send about
N^2/2 events; the clients read and count them (they are part of what the server does on join).

    python idle.py                       # 1,000 and 10,000 connections, 100 users
    python idle.py --counts 1000 --users 10 --settle 3
    python idle.py --memprobe            # also read the server's live heap (glibc mallinfo2)
    python idle.py --circles 1000        # analysis: each connection in its own circle (no presence fan-out)
    python idle.py --history 256         # each join resumes with since=0: 256 stored posts replayed first

Only 127.0.0.1 is contacted; every phase has a time limit (--phase-timeout).
"""
from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import sys
import time

from picows import WSFrame, WSListener, WSMsgType, WSTransport, ws_connect

import benchlib


class Stats:
    def __init__(self) -> None:
        self.frames = 0
        self.events = 0
        self.joined_events = 0
        self.errors: list[str] = []
        self.closed_by_server: dict[str, int] = {}
        self.disconnected = 0


class IdleClient(WSListener):
    __slots__ = ("stats", "transport", "pending", "pending_id", "posts")

    def __init__(self, stats: Stats) -> None:
        self.stats = stats
        self.posts = 0
        self.transport: WSTransport | None = None
        self.pending: asyncio.Future | None = None
        self.pending_id = b""

    def on_ws_connected(self, transport: WSTransport) -> None:
        self.transport = transport

    def on_ws_frame(self, transport: WSTransport, frame: WSFrame) -> None:
        stats = self.stats
        stats.frames += 1
        msg_type = frame.msg_type
        if msg_type is WSMsgType.TEXT:
            data = frame.get_payload_as_bytes()
            if data.endswith(b'"type":"post"}'):  # a stored post replayed on join (--history)
                self.posts += 1
                return
            if data.startswith(b'{"circle"'):  # an event (joined/left/typing/post), not a reply
                stats.events += 1
                if b'"type":"joined"' in data:
                    stats.joined_events += 1
                return
            if self.pending is None:
                stats.errors.append(data.decode(errors="replace")[:200])
                return
            reply = json.loads(data)
            if reply.get("id") == self.pending_id and not self.pending.done():
                self.pending.set_result(reply)
        elif msg_type is WSMsgType.CLOSE:
            key = f"{frame.get_close_code()} {frame.get_close_reason()}"
            stats.closed_by_server[key] = stats.closed_by_server.get(key, 0) + 1
            transport.disconnect()

    def on_ws_disconnected(self, transport: WSTransport) -> None:
        self.stats.disconnected += 1
        if self.pending is not None and not self.pending.done():
            self.pending.set_exception(ConnectionError("disconnected"))

    async def request(self, action: dict, timeout: float) -> dict:
        self.pending = asyncio.get_running_loop().create_future()
        self.pending_id = action["id"]
        self.transport.send(WSMsgType.TEXT, json.dumps(action, separators=(",", ":")).encode())
        try:
            return await asyncio.wait_for(self.pending, timeout)
        finally:
            self.pending = None


async def post_history(port: int, token: str, circles: list[str], count: int, timeout: float) -> None:
    """Stores `count` posts of 100 bytes in each circle, one at a time, through one connection."""
    stats = Stats()
    _, client = await ws_connect(lambda: IdleClient(stats), f"ws://127.0.0.1:{port}/v1/ws?token={token}",
                                 extra_headers={"Sec-WebSocket-Protocol": "circle.v1"}, websocket_handshake_timeout=30)
    try:
        for circle in circles:
            reply = await client.request({"action": "join", "id": f"h-{circle}", "circle": circle}, timeout)
            if reply.get("type") != "ack":
                raise RuntimeError(f"join answered {reply}")
            for n in range(count):
                reply = await client.request({"action": "post", "id": f"h-{circle}-{n}", "circle": circle,
                                              "text": f"history {n:05d} " + "x" * 86}, timeout)
                if reply.get("type") != "ack":
                    raise RuntimeError(f"history post answered {reply}")
    finally:
        client.transport.disconnect()


async def gather_limited(coros, limit: int, deadline: float, what: str):
    semaphore = asyncio.Semaphore(limit)

    async def run(coro):
        async with semaphore:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                coro.close()
                raise TimeoutError(f"{what}: phase time limit reached")
            return await asyncio.wait_for(coro, remaining)

    return await asyncio.gather(*(run(c) for c in coros), return_exceptions=True)


async def quiesce(stats: Stats, quiet: float, limit: float) -> float:
    """Waits until no frame arrived for `quiet` seconds (at most `limit`); returns the time waited."""
    start = time.monotonic()
    last_count, last_change = stats.frames, time.monotonic()
    while time.monotonic() - start < limit:
        await asyncio.sleep(0.25)
        if stats.frames != last_count:
            last_count, last_change = stats.frames, time.monotonic()
        elif time.monotonic() - last_change >= quiet:
            break
    return time.monotonic() - start


def snapshot(pid: int) -> dict:
    return {
        "rss_kb": benchlib.rss_kb(pid),
        "hwm_kb": benchlib.status_kb(pid, "VmHWM"),
        "anon_kb": benchlib.smaps_rollup(pid).get("Anonymous", 0),
        "threads": benchlib.thread_count(pid),
        "fds": benchlib.fd_count(pid),
        "cpu_s": benchlib.cpu_seconds(pid),
    }


async def run(args) -> dict:
    counts = sorted({int(c) for c in args.counts.split(",") if c})
    per_user = math.ceil(counts[-1] / args.users)
    env = None
    probe_out = None
    if args.memprobe:
        probe_so = benchlib.build_memprobe()
        if probe_so is None:
            sys.exit("--memprobe needs a C compiler (cc)")
        probe_out = probe_so + ".txt"
        env = {"LD_PRELOAD": probe_so, "MEMPROBE_OUT": probe_out}
    extra = ["--max-connections-per-user", str(per_user), "--idle-timeout", args.idle_timeout]
    if args.history:
        extra += ["--posts-per-second", "1000000", "--post-burst", "1000000"]
    server = benchlib.circle_server(args.circle, env=env, wrapper=args.server_wrapper.split() or None, extra=extra)
    server.start(args.server_cpu)
    pid = server.pid
    stats = Stats()
    clients: list[IdleClient] = []
    report: dict = {"benchmark": "idle", "users": args.users, "max_connections_per_user": per_user,
                    "idle_timeout": args.idle_timeout, "history": args.history, "server_argv": server.argv, "stages": []}
    try:
        users = [f"user{i:03d}" for i in range(args.users)]
        tokens = [benchlib.dev_token(server.port, u) for u in users]
        circles = ["general"] if args.circles == 1 else [f"c{i:05d}" for i in range(args.circles)]
        for name in circles:
            status, body = benchlib.http_json("POST", server.port, "/v1/circles", tokens[0], {"name": name})
            if status not in (200, 201):
                raise RuntimeError(f"POST /v1/circles: {status} {body}")
        if args.history:
            await post_history(server.port, tokens[0], circles, args.history, args.phase_timeout)
        await asyncio.sleep(args.settle)
        if probe_out:
            report["baseline_probe"] = benchlib.memprobe(pid, probe_out)
        base = snapshot(pid)
        report["baseline"] = base
        print(f"# server pid {pid}: baseline RSS {base['rss_kb']:,} KB ({base['threads']} threads) after "
              f"{args.users} tokens, {len(circles)} circle(s) and {args.settle:g} s settle"
              + (f"; live heap {report['baseline_probe']['in_use'] // 1024:,} KB" if probe_out else ""), flush=True)
        print(f"{'conns':>7} {'RSS KB':>10} {'+KB':>10} {'KB/conn':>8} {'stage KB/conn':>14} "
              f"{'connect KB/conn':>16} {'join s':>7} {'events':>11} {'HWM KB':>10}", flush=True)

        previous = base
        join_id = 0
        for target in counts:
            started = time.monotonic()
            deadline = started + args.phase_timeout
            fresh: list[IdleClient] = []

            async def connect(i: int):
                token = tokens[i % len(tokens)]
                url = f"ws://127.0.0.1:{server.port}/v1/ws?token={token}"
                _, client = await ws_connect(lambda: IdleClient(stats), url,
                                             extra_headers={"Sec-WebSocket-Protocol": "circle.v1"},
                                             websocket_handshake_timeout=30)
                return client

            results = await gather_limited((connect(i) for i in range(len(clients), target)),
                                           args.concurrency, deadline, "connect")
            failures = [r for r in results if isinstance(r, BaseException)]
            fresh = [r for r in results if not isinstance(r, BaseException)]
            clients.extend(fresh)
            if failures:
                raise RuntimeError(f"{len(failures)} of {len(results)} connections failed, first: {failures[0]!r}")
            connect_s = time.monotonic() - started
            await quiesce(stats, 1.0, 10.0)
            connected = snapshot(pid)

            join_started = time.monotonic()

            async def join(client: IdleClient, n: int):
                action = {"action": "join", "id": f"j{n}", "circle": circles[n % len(circles)]}
                if args.history:
                    action["since"] = 0
                reply = await client.request(action, timeout=max(1.0, deadline - time.monotonic()))
                if reply.get("type") != "ack":
                    raise RuntimeError(f"join answered {reply}")

            results = await gather_limited((join(c, join_id + n) for n, c in enumerate(fresh)),
                                           args.concurrency, deadline, "join")
            join_id += len(fresh)
            failures = [r for r in results if isinstance(r, BaseException)]
            if failures:
                raise RuntimeError(f"{len(failures)} of {len(results)} joins failed, first: {failures[0]!r}")
            joins_acked_s = time.monotonic() - join_started
            waited = await quiesce(stats, 2.0, max(5.0, deadline - time.monotonic()))
            join_s = time.monotonic() - join_started
            wrong = [c.posts for c in fresh if c.posts != args.history]
            if wrong:
                raise RuntimeError(f"{len(wrong)} connections got other than {args.history} replayed posts, "
                                   f"first counts: {wrong[:5]}")
            await asyncio.sleep(args.settle)
            joined = snapshot(pid)
            if stats.disconnected:
                raise RuntimeError(f"{stats.disconnected} connections were closed: {stats.closed_by_server}")

            added = target - (report["stages"][-1]["connections"] if report["stages"] else 0)
            stage = {
                "connections": target,
                "added": added,
                "connect_s": round(connect_s, 2),
                "joins_acked_s": round(joins_acked_s, 2),
                "join_and_presence_s": round(join_s, 2),
                "events_received_total": stats.events,
                "connected": connected,
                "joined": joined,
                "kb_per_conn": (joined["rss_kb"] - base["rss_kb"]) / target,
                "stage_kb_per_conn": (joined["rss_kb"] - previous["rss_kb"]) / added,
                "connect_only_kb_per_conn": (connected["rss_kb"] - previous["rss_kb"]) / added,
                "join_kb_per_conn": (joined["rss_kb"] - connected["rss_kb"]) / added,
                "server_cpu_s_stage": joined["cpu_s"] - previous["cpu_s"],
                "joined_events_received_total": stats.joined_events,
            }
            if probe_out:
                probe = benchlib.memprobe(pid, probe_out)
                stage["probe"] = probe
                stage["live_heap_kb_per_conn"] = (probe["in_use"] - report["baseline_probe"]["in_use"]) / 1024 / target
                stage["trimmed_rss_kb_per_conn"] = (probe["trimmed_rss_kb"] - base["rss_kb"]) / target
            report["stages"].append(stage)
            # With --memprobe the heap was just trimmed: the next stage starts from the trimmed RSS.
            previous = dict(joined, rss_kb=stage["probe"]["trimmed_rss_kb"]) if probe_out else joined
            print(f"{target:>7,} {joined['rss_kb']:>10,} {joined['rss_kb'] - base['rss_kb']:>10,} "
                  f"{stage['kb_per_conn']:>8.2f} {stage['stage_kb_per_conn']:>14.2f} "
                  f"{stage['connect_only_kb_per_conn']:>16.2f} {join_s:>7.1f} {stats.events:>11,} "
                  f"{joined['hwm_kb']:>10,}", flush=True)
            if probe_out:
                print(f"#   live heap {probe['in_use'] // 1024:,} KB = {stage['live_heap_kb_per_conn']:.2f} KB/conn over "
                      f"baseline; glibc held {probe['free'] // 1024:,} KB free; RSS after malloc_trim(0) "
                      f"{probe['trimmed_rss_kb']:,} KB = {stage['trimmed_rss_kb_per_conn']:.2f} KB/conn", flush=True)

        # Idle for a while: what do idle connections cost in CPU?
        cpu0 = benchlib.cpu_seconds(pid)
        await asyncio.sleep(args.idle_watch)
        report["idle_cpu_pct"] = 100 * (benchlib.cpu_seconds(pid) - cpu0) / args.idle_watch
        report["smaps_by_kind_kb"] = benchlib.smaps_by_kind(pid)
        last = report["stages"][-1]
        print(f"# {last['connections']:,} idle joined connections: server CPU {report['idle_cpu_pct']:.2f}% "
              f"over {args.idle_watch:g} s; {last['joined']['threads']} threads; "
              f"connect+auth only {last['connect_only_kb_per_conn']:.2f} KB/conn, join {last['join_kb_per_conn']:.2f} KB/conn "
              f"(last stage); events received: {stats.events:,} ({stats.joined_events:,} joined)", flush=True)
        if args.close:
            close_started = time.monotonic()
            for client in clients:
                client.transport.disconnect(graceful=False)
            while stats.disconnected < len(clients) and time.monotonic() - close_started < 30:
                await asyncio.sleep(0.1)
            await asyncio.sleep(args.settle)
            after = snapshot(pid)
            report["after_close"] = after
            print(f"# all closed: RSS {after['rss_kb']:,} KB ({after['rss_kb'] - base['rss_kb']:+,} KB "
                  f"over baseline)", flush=True)
            if probe_out:
                probe = benchlib.memprobe(pid, probe_out)
                report["after_close_probe"] = probe
                print(f"#   live heap {probe['in_use'] // 1024:,} KB "
                      f"({(probe['in_use'] - report['baseline_probe']['in_use']) // 1024:+,} KB over baseline); "
                      f"RSS after malloc_trim(0) {probe['trimmed_rss_kb']:,} KB", flush=True)
    finally:
        for client in clients:
            if client.transport is not None and not client.transport.is_disconnected:
                client.transport.disconnect(graceful=False)
        if args.kill_server:
            os.kill(pid, 9)  # for heaptrack: what is still allocated at this point is reported as "leaked"
            time.sleep(2)
        server.stop()
    return report


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--counts", default="1000,10000", help="connection totals to measure at, in one server run")
    parser.add_argument("--users", type=int, default=100, help="users the connections are spread over")
    parser.add_argument("--concurrency", type=int, default=200, help="connects/joins in progress at once")
    parser.add_argument("--settle", type=float, default=5.0, help="pause before each RSS reading, seconds")
    parser.add_argument("--idle-watch", type=float, default=5.0, help="seconds to watch idle CPU at the end")
    parser.add_argument("--idle-timeout", default="1h",
                        help="server --idle-timeout, long so that slow stages do not close early connections")
    parser.add_argument("--phase-timeout", type=float, default=900.0, help="time limit per stage, seconds")
    parser.add_argument("--circles", type=int, default=1,
                        help="spread the joins over this many circles (1: all in \"general\", as specified)")
    parser.add_argument("--history", type=int, default=0,
                        help="store this many posts in each circle first, and join with since=0, so that every "
                             "connection replays them before it idles (the server replays 256 per page)")
    parser.add_argument("--memprobe", action="store_true",
                        help="preload tools/memprobe.c into the server to read its live heap (mallinfo2) after each "
                             "stage; it then calls malloc_trim(0), so later RSS readings start from a trimmed heap")
    parser.add_argument("--close", action="store_true", help="close every connection at the end and read RSS again")
    parser.add_argument("--circle", default=str(benchlib.DEFAULT_CIRCLE), help="the circle binary (release build)")
    parser.add_argument("--server-wrapper", default="",
                        help="analysis: run the server under this command, e.g. \"heaptrack -o /tmp/ht\"")
    parser.add_argument("--kill-server", action="store_true",
                        help="analysis: SIGKILL the server at the end (under heaptrack, its \"leaks\" are then the live heap)")
    parser.add_argument("--server-cpu", type=int, default=0)
    parser.add_argument("--client-cpu", type=int, default=1)
    parser.add_argument("--json", help="write the results to this file")
    args = parser.parse_args()

    counts = [int(c) for c in args.counts.split(",") if c]
    limit = benchlib.raise_nofile()
    if max(counts) + 100 > limit:
        parser.error(f"{max(counts)} connections need more than this process's file limit {limit}; "
                     "split the count or raise the hard limit")
    if not 0 < args.phase_timeout <= 3600:
        parser.error("--phase-timeout must be in (0, 3600]")
    benchlib.pin_self(args.client_cpu)
    loop_name = benchlib.use_uvloop()
    benchlib.exit_on_sigterm()
    print(f"# idle: {', '.join(f'{c:,}' for c in counts)} connections over {args.users} users, joined to "
          f"\"general\"; server on CPU {args.server_cpu}, clients on CPU {args.client_cpu} (picows on {loop_name}); "
          f"KB = 1024 bytes" + (f"; each join replays {args.history} stored posts" if args.history else ""), flush=True)
    report = asyncio.run(run(args))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
