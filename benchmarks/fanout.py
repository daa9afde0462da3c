"""Chat fan-out benchmark: one circle, one publisher, N subscribers, server on one core.

`circle serve` runs pinned to CPU 0 (no post rate limit, see circlev1.setup_server). This load
generator, pinned to CPU 1, opens N real circle.v1 connections (100 users), joins each to the
circle `bench`, waits until the presence events of the joins have settled, and then connects a
publisher (picows) that joins and posts. Every post's text is the publisher's send time
(time.monotonic_ns(), the same clock the subscribers read: same process), so each delivery's
end-to-end latency is now - sent. Latencies go into an HdrHistogram (µs, 3 digits).

The subscribers are `circlev1.LeanSubscriber`s by default (--subscriber lean): each hands the
complete frames of a read to this script at once, which counts their posts and reads their send
times with one pass each in C. With picows subscribers (--subscriber picows: one Python call
and one payload copy per frame) this generator's core was the limit near 440,000-500,000
deliveries/s, and the server's batches stayed small because the posts came back slowly.

Two phases per N, in this order:
- `rate`: open loop at --rate deliveries/s (posts/s = rate / N), for the latency target.
- `max`: the publisher keeps --window / N posts not yet delivered to every subscriber (closed
  loop on deliveries), so the rate is whatever the server and this generator sustain.

For each: deliveries/s, latency p50/p99/p99.9, server CPU (% of one core and µs per delivery),
this generator's CPU, and the server's peak RSS (VmHWM) at the end.

    python fanout.py                          # N = 100 and 1000
    python fanout.py --subscribers 100 --duration 5

Only 127.0.0.1 is contacted; every phase is bounded in time.
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

class FanOut(circlev1.Deliveries):
    def __init__(self, subscribers: int, lean: bool) -> None:
        super().__init__()
        self.n = subscribers
        self.lean = lean
        self.sent = 0
        self.acked = 0
        self.errors = 0
        self.window = 0

    def set_pump(self, pump) -> None:
        """Runs `pump` (or nothing, with `None`) as deliveries arrive: after each read of a
        lean subscriber, after every N-th delivery of picows ones."""
        if pump is None or self.lean:
            self.on_delivery = pump
        else:
            self.on_delivery = lambda: pump() if self.delivered % self.n == 0 else None


async def run_phase(state: FanOut, publisher: circlev1.Conn, mode: str, warmup: float, duration: float,
                    rate: float, window: int, server: benchlib.Server, circle: str) -> dict:
    loop = asyncio.get_event_loop()
    post_id = [0]

    def post() -> None:
        post_id[0] += 1
        state.sent += 1
        publisher.send({"action": "post", "id": f"{mode}-{post_id[0]}", "circle": circle,
                        "text": str(time.monotonic_ns())})

    running = [True]
    pacer = None
    if mode == "max":
        def pump() -> None:
            while running[0] and state.sent - state.delivered / state.n < window:
                post()
        state.set_pump(pump)
        pump()
    else:
        posts_per_s = rate / state.n

        async def pace() -> None:
            start, done = loop.time(), 0
            while running[0]:
                due = int((loop.time() - start) * posts_per_s)
                while done < due:
                    post()
                    done += 1
                await asyncio.sleep(min(0.001, 1 / posts_per_s))
        pacer = asyncio.create_task(pace())

    await asyncio.sleep(warmup)
    state.latencies = []
    state.record = True
    m0 = benchlib.circle_metrics(server.port)
    w0 = benchlib.write_calls(server.pid)
    cpu0, d0, own0, t0 = benchlib.cpu_seconds(server.pid), state.delivered, os.times(), time.monotonic()
    await asyncio.sleep(duration)
    cpu1, d1, own1, t1 = benchlib.cpu_seconds(server.pid), state.delivered, os.times(), time.monotonic()
    w1 = benchlib.write_calls(server.pid)
    m1 = benchlib.circle_metrics(server.port)
    state.record = False
    running[0] = False
    state.set_pump(None)
    if pacer is not None:
        await pacer
    # let the phase drain before the next one
    target = state.sent * state.n
    deadline = time.monotonic() + 30
    while state.delivered < target and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    wall = t1 - t0
    deliveries = d1 - d0
    h = circlev1.histogram()
    for ns in state.latencies:
        h.record_value(max(1, ns // 1000))
    server_cpu = cpu1 - cpu0
    own = (own1.user - own0.user) + (own1.system - own0.system)
    return {
        "mode": mode, "subscribers": state.n, "seconds": wall, "deliveries": deliveries,
        "deliveries_per_s": deliveries / wall, "posts_per_s": deliveries / wall / state.n,
        "target_rate": rate if mode == "rate" else None, "window": window if mode == "max" else None,
        "server_cpu_pct": 100 * server_cpu / wall,
        "server_us_per_delivery": 1e6 * server_cpu / deliveries if deliveries else None,
        "client_cpu_pct": 100 * own / wall,
        # the server's write system calls (all of them: deliveries, acks, the store's files)
        "deliveries_per_server_write": deliveries / (w1 - w0) if w1 > w0 else None,
        "latency": circlev1.percentiles(h), "distribution": circlev1.distribution(h),
        "undelivered_after_drain": max(0, target - state.delivered),
        # every post counted while recording had its send time read: the two parses agree
        "deliveries_without_latency": deliveries - len(state.latencies),
        "commits": benchlib.commit_stats(m0, m1),
        "mean_fanout_ms": (1000 * (m1.get("circle_fanout_seconds_sum", 0) - m0.get("circle_fanout_seconds_sum", 0))
                           / max(1.0, m1.get("circle_fanout_seconds_count", 0) - m0.get("circle_fanout_seconds_count", 0))),
    }


async def run(args, subscribers: int) -> dict:
    circle = "bench"
    server, tokens, publisher_token = circlev1.setup_server(cpu=args.server_cpu, circles=[circle])
    try:
        state = FanOut(subscribers, lean=args.subscriber == "lean")
        base_rss = benchlib.rss_kb(server.pid)
        t = time.monotonic()
        subs = await state.subscribe(server.port, tokens, subscribers, circle, lean=state.lean)
        join_s = time.monotonic() - t
        settle_s = await circlev1.wait_quiet(subs, 1.0, args.phase_timeout)
        presence_events = sum(c.frames for c in subs)
        print(f"#   {subscribers} subscribers joined in {join_s:.1f} s; presence settled after {settle_s:.1f} s "
              f"more ({presence_events:,} frames); server RSS {benchlib.rss_kb(server.pid):,} KB", flush=True)
        publisher = await circlev1.connect(server.port, publisher_token)
        reply = await asyncio.wait_for(publisher.request({"action": "join", "circle": circle}), 60)
        assert reply.get("type") == "ack", reply

        def on_publisher_event(conn, payload: bytes) -> None:
            if b'"type":"ack"' in payload:
                state.acked += 1
            elif b'"type":"error"' in payload:
                state.errors += 1
                if state.errors <= 3:
                    print(f"#   publisher got: {payload[:200]!r}", flush=True)
        publisher.on_event = on_publisher_event
        await circlev1.wait_quiet(subs, 1.0, 60)
        phases = []
        for mode in ("rate", "max"):  # the fixed rate first, so that no backlog of the max phase skews it
            window = max(4, args.window // subscribers)
            r = await run_phase(state, publisher, mode, args.warmup, args.duration, args.rate, window, server, circle)
            phases.append(r)
            lat = r["latency"]
            print(f"{subscribers:>6} {mode:<5} {r['deliveries_per_s']:>12,.0f} {r['posts_per_s']:>9,.0f} "
                  f"{lat['p50_us'] / 1000:>8.2f} {lat['p99_us'] / 1000:>8.2f} {lat['p99_9_us'] / 1000:>8.2f} "
                  f"{r['server_cpu_pct']:>6.0f}% {r['server_us_per_delivery'] or 0:>7.2f} {r['client_cpu_pct']:>6.0f}%"
                  f"   commit: mean {r['commits']['mean_commit_ms'] or 0:.2f} ms, batch {r['commits']['mean_batch'] or 0:.1f}; "
                  f"hub publish {r['mean_fanout_ms']:.2f} ms; {r['deliveries_per_server_write'] or 0:.1f} deliveries per "
                  f"server write",
                  flush=True)
        closed = sum(1 for c in subs if c.closed.done())
        peak = benchlib.status_kb(server.pid, "VmHWM")
        for c in subs + [publisher]:
            c.close()
        return {"subscribers": subscribers, "join_s": join_s, "presence_settle_s": settle_s,
                "presence_frames": presence_events, "baseline_rss_kb": base_rss, "peak_rss_kb": peak,
                "publisher_errors": state.errors, "subscribers_closed_by_server": closed, "phases": phases}
    finally:
        server.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--subscribers", default="100,1000", help="comma list of subscriber counts")
    parser.add_argument("--rate", type=float, default=50_000, help="deliveries/s of the fixed-rate phase")
    parser.add_argument("--window", type=int, default=32_000,
                        help="deliveries outstanding in the max phase (posts in flight = this / subscribers, at least 4)")
    parser.add_argument("--subscriber", choices=("lean", "picows"), default="lean",
                        help="subscriber client: lean (counts the posts of each read at once; the default) or "
                             "picows (circlev1.Conn, one Python call per frame, the generator of the runs "
                             "before 2026-11-26 18:00 UTC)")
    parser.add_argument("--warmup", type=float, default=2.0)
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--phase-timeout", type=float, default=600, help="limit for the presence storm of the joins")
    parser.add_argument("--server-cpu", type=int, default=0)
    parser.add_argument("--client-cpu", type=int, default=1)
    parser.add_argument("--json", help="write the results to this file")
    args = parser.parse_args()
    if not (0 < args.duration <= 120 and 0 <= args.warmup <= 30):
        parser.error("keep --duration in (0, 120], --warmup in [0, 30]")
    benchlib.pin_self(args.client_cpu)
    benchlib.raise_nofile()
    loop_name = benchlib.use_uvloop()
    benchlib.exit_on_sigterm()
    print(f"# fan-out: one circle, one publisher; server on CPU {args.server_cpu}, load generator on CPU "
          f"{args.client_cpu} ({args.subscriber} subscribers on {loop_name}); {args.warmup:g} s warm-up, {args.duration:g} s measured")
    print(f"{'subs':>6} {'phase':<5} {'deliveries/s':>12} {'posts/s':>9} {'p50 ms':>8} {'p99 ms':>8} {'p99.9ms':>8} "
          f"{'srvCPU':>7} {'us/dlv':>7} {'genCPU':>7}", flush=True)
    results = []
    for n in [int(x) for x in args.subscribers.split(",") if x]:
        try:
            results.append(asyncio.run(run(args, n)))
        except Exception as error:
            print(f"{n:>6} failed: {error!r}", flush=True)
    problems = [f"{r['subscribers']} subscribers, {p['mode']}: {what} {p[key]}"
                for r in results for p in r["phases"]
                for key, what in (("undelivered_after_drain", "posts not delivered after the phase"),
                                  ("deliveries_without_latency", "deliveries without a send time"))
                if p[key]]
    problems += [f"{r['subscribers']} subscribers: {r[key]} {what}" for r in results
                 for key, what in (("publisher_errors", "publisher errors"),
                                   ("subscribers_closed_by_server", "subscribers closed by the server")) if r[key]]
    for problem in problems:
        print(f"# FAILED: {problem}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"benchmark": "fanout", "loop": loop_name, "args": vars(args), "results": results}, f, indent=2)
    return 0 if results and not problems else 1


if __name__ == "__main__":
    sys.exit(main())
