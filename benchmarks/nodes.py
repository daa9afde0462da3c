"""Several nodes on one machine: 1, 2 and 3 `circle serve` processes on one PostgreSQL, and one
on its embedded SQLite for comparison.

This script starts its own PostgreSQL 15 (scripts/postgres-test-server: a temporary directory,
a free loopback port, fsync on) and stops it at the end; each measurement gets a fresh
database. The nodes share one data directory and one token secret, as behind a load balancer.
The nodes AND PostgreSQL are pinned to --server-cpu (default CPU 0), this load generator to
--client-cpu (CPU 1): on a 2-core machine every server-side process shares one core, so the
figures that carry over to other machines are CPU time per post and per delivery, read from
/proc: utime+stime of every node, and of the postmaster with all its processes (live ones plus
the cumulative time of those that exited).

Sections (all by default, or name them with --sections):

- posts:    W closed-loop writers (post, wait for the ack, post again), one circle each, spread
            round-robin over the nodes; durable acks/s, ack latency, CPU µs per post of the nodes
            and of PostgreSQL. SQLite with 1 node, PostgreSQL with 1, 2 and 3; W = 1 and 16.
- latency:  2 nodes; a publisher on node A posts at a fixed rate (--rate); subscribers on node A
            (same node) and on node B (cross node) record post sent → delivered (the text is
            the send time on this process's monotonic clock); p50/p99/p99.9 for each.
- fanout:   one circle, --subscribers spread over 1, 2, 3 nodes, a publisher on node A keeps
            --window deliveries outstanding; deliveries/s and CPU µs per delivery. The subscribers
            are circlev1.LeanSubscribers (--subscriber lean, as in fanout.py), or picows.
- recovery: 3 nodes; `circle bench recovery` runs --recovery-clients CircleClient subscribers
            and a publisher with servers [A, B, C], so all start on A; A is SIGKILLed once every
            subscriber has a post and not restarted: time until every client is connected to
            another node and has resumed, lost and duplicated deliveries.

    python nodes.py                            # everything, about 5 minutes
    python nodes.py --sections posts,latency --duration 5
    python nodes.py --smoke                    # tiny counts, a few seconds each: does it work?

Only 127.0.0.1 is contacted; every phase is bounded in time.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import benchlib
import circlev1

SCRIPT = benchlib.REPO / "scripts" / "postgres-test-server"
PGBIN = os.environ.get("PGBIN", "/usr/lib/postgresql/15/bin")


# ---------------------------------------------------------------- PostgreSQL


class Postgres:
    """A throwaway PostgreSQL from scripts/postgres-test-server, pinned to one CPU."""

    def __init__(self, cpu: int | None) -> None:
        out = subprocess.run([str(SCRIPT), "start", "--watch", str(os.getpid())], check=True,
                             stdout=subprocess.PIPE, text=True, timeout=300).stdout
        values = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
        self.url = values["CIRCLE_TEST_POSTGRES_URL"]
        self.directory = values["PGDIR"]
        with open(os.path.join(self.directory, "data", "postmaster.pid")) as f:
            self.pid = int(f.readline())
        self.port = int(self.url.rsplit(":", 1)[1].split("/")[0])
        self.count = 0
        if cpu is not None:
            # Backends forked later inherit the postmaster's affinity.
            for pid in [self.pid] + benchlib.children(self.pid):
                subprocess.run(["taskset", "-a", "-cp", str(cpu), str(pid)], check=True, stdout=subprocess.DEVNULL)

    def fresh_database(self) -> str:
        self.count += 1
        name = f"bench{self.count}"
        env = dict(os.environ, PGPASSWORD="circle")
        subprocess.run([f"{PGBIN}/psql", "-w", "-q", "-h", "127.0.0.1", "-p", str(self.port), "-U", "circle", "-d", "circle",
                        "-c", f"CREATE DATABASE {name}"], check=True, env=env, timeout=60, stdin=subprocess.DEVNULL)
        return self.url.rsplit("/", 1)[0] + f"/{name}?sslmode=disable"

    def cpu_seconds(self) -> float:
        """The postmaster's own time, its exited children's (cutime+cstime) and its live children's."""
        with open(f"/proc/{self.pid}/stat") as f:
            text = f.read()
        fields = text[text.rindex(")") + 2:].split()
        total = sum(int(x) for x in fields[11:15]) / benchlib.CLOCK_TICKS  # utime stime cutime cstime
        for child in benchlib.children(self.pid):
            try:
                total += benchlib.cpu_seconds(child)
            except (FileNotFoundError, ProcessLookupError):
                pass  # exited between the listing and the read: counted in cutime next time
        return total

    def stop(self) -> None:
        subprocess.run([str(SCRIPT), "stop", self.directory], check=False, timeout=60)


# ---------------------------------------------------------------- nodes


class Cluster:
    """N `circle serve` nodes with one data directory and one token secret, on PostgreSQL (or
    one node on SQLite when `database` is None), each pinned to `cpu`."""

    def __init__(self, binary: str, count: int, database: str | None, cpu: int | None, extra: list[str] | None = None) -> None:
        self.data = tempfile.mkdtemp(prefix="circle-nodes-")
        secret = secrets.token_hex(24)
        self.nodes: list[benchlib.Server] = []
        for _ in range(count):
            port = benchlib.free_port()
            argv = [binary, "serve", "--port", str(port), "--data", self.data, "--jwt-secret", secret,
                    "--dev", "--log-level", "warning", "--max-pending-connections-per-address", "0",
                    "--posts-per-second", "1000000", "--post-burst", "1000000",
                    "--max-connections-per-user", "100000", "--idle-timeout", "1h"] + (extra or [])
            if database is not None:
                argv += ["--postgres", database]
            self.nodes.append(benchlib.Server("circle", argv, port))
        for node in self.nodes:
            node.start(cpu, timeout=120)

    @property
    def ports(self) -> list[int]:
        return [node.port for node in self.nodes]

    def cpu_seconds(self) -> float:
        total = 0.0
        for node in self.nodes:
            if node.process is not None and node.process.poll() is None:
                total += benchlib.cpu_seconds(node.pid)
        return total

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()
        shutil.rmtree(self.data, ignore_errors=True)


def readings(cluster: Cluster, pg: Postgres | None) -> tuple[float, float, float]:
    return cluster.cpu_seconds(), pg.cpu_seconds() if pg else 0.0, time.monotonic()


def metrics(cluster: Cluster) -> dict[str, float]:
    """Every node's /metrics (series without labels), added up."""
    total: dict[str, float] = {}
    for port in cluster.ports:
        for key, value in benchlib.circle_metrics(port).items():
            total[key] = total.get(key, 0.0) + value
    return total


def create_circles(port: int, names: list[str]) -> str:
    owner = benchlib.dev_token(port, "publisher")
    for name in names:
        status, body = benchlib.http_json("POST", port, "/v1/circles", owner, {"name": name})
        if status not in (200, 201):
            raise RuntimeError(f"creating {name}: {status} {body}")
    return owner


# ---------------------------------------------------------------- posts


class Writer:
    """Closed loop: post, wait for the ack, post again (as postpath.py)."""

    def __init__(self, conn: circlev1.Conn, circle: str, text: str) -> None:
        self.conn, self.circle, self.text = conn, circle, text
        self.n = self.acked = self.errors = 0
        self.sent_at = 0
        self.running = True
        self.latencies: list[int] = []
        conn.on_event = self.on_event

    def post(self) -> None:
        self.n += 1
        self.sent_at = time.monotonic_ns()
        self.conn.send({"action": "post", "id": f"w{self.n}", "circle": self.circle, "text": self.text})

    def on_event(self, conn, payload: bytes) -> None:
        if payload.startswith(b'{"id"') and b'"type":"ack"' in payload:
            self.latencies.append(time.monotonic_ns() - self.sent_at)
            self.acked += 1
        elif b'"type":"error"' in payload:
            self.errors += 1
            if self.errors <= 3:
                print(f"#   writer got: {payload[:200]!r}", flush=True)
        else:
            return
        if self.running:
            self.post()


async def posts(args, pg: Postgres | None, nodes: int, writers: int) -> dict:
    cluster = Cluster(args.circle, nodes, pg.fresh_database() if pg else None, args.server_cpu)
    try:
        circles = [f"w{i}" for i in range(writers)]
        create_circles(cluster.ports[0], circles)
        conns = []
        for i, circle in enumerate(circles):
            port = cluster.ports[i % nodes]
            conn = await circlev1.connect(port, benchlib.dev_token(port, f"writer{i}"))
            reply = await asyncio.wait_for(conn.request({"action": "join", "circle": circle}), 30)
            assert reply.get("type") == "ack", reply
            conns.append(conn)
        ws = [Writer(c, circle, "x" * 100) for c, circle in zip(conns, circles)]
        for w in ws:
            w.post()
        await asyncio.sleep(args.warmup)
        for w in ws:
            w.latencies = []
        a0 = sum(w.acked for w in ws)
        m0 = metrics(cluster)
        node0, pg0, t0 = readings(cluster, pg)
        await asyncio.sleep(args.duration)
        node1, pg1, t1 = readings(cluster, pg)
        a1 = sum(w.acked for w in ws)
        m1 = metrics(cluster)
        for w in ws:
            w.running = False
        await asyncio.sleep(0.3)
        for c in conns:
            c.close()
        wall, acks = t1 - t0, a1 - a0
        h = circlev1.histogram()
        for w in ws:
            for ns in w.latencies:
                h.record_value(max(1, ns // 1000))
        per = (lambda seconds: 1e6 * seconds / acks if acks else None)
        return {"store": "postgres" if pg else "sqlite", "nodes": nodes, "writers": writers, "seconds": wall,
                "acks": acks, "acks_per_s": acks / wall, "errors": sum(w.errors for w in ws),
                "node_cpu_pct": 100 * (node1 - node0) / wall, "postgres_cpu_pct": 100 * (pg1 - pg0) / wall,
                "node_us_per_post": per(node1 - node0), "postgres_us_per_post": per(pg1 - pg0),
                "total_us_per_post": per(node1 - node0 + pg1 - pg0), "latency": circlev1.percentiles(h),
                "commits": benchlib.commit_stats(m0, m1),
                "signals_received": m1.get("circle_node_signals_received_total", 0) - m0.get("circle_node_signals_received_total", 0)}
    finally:
        cluster.stop()


# ---------------------------------------------------------------- latency and fan-out

async def subscribe(port: int, users: int, count: int, circle: str, group: circlev1.Deliveries,
                    lean: bool = False) -> list:
    """`count` subscribers joined to `circle`, counted by `group`: ``circlev1.Conn``s, or
    ``circlev1.LeanSubscriber``s with `lean` (the fan-out section's, so that this generator is
    not the limit)."""
    tokens = [benchlib.dev_token(port, f"sub{i}") for i in range(min(users, count))]
    return await group.subscribe(port, tokens, count, circle, lean)


async def publisher_on(port: int, circle: str) -> tuple[circlev1.Conn, list[int]]:
    conn = await circlev1.connect(port, benchlib.dev_token(port, "publisher"))
    reply = await asyncio.wait_for(conn.request({"action": "join", "circle": circle}), 60)
    assert reply.get("type") == "ack", reply
    errors = [0]

    def on_event(c, payload: bytes) -> None:
        if b'"type":"error"' in payload:
            errors[0] += 1
            if errors[0] <= 3:
                print(f"#   publisher got: {payload[:200]!r}", flush=True)
    conn.on_event = on_event
    return conn, errors


async def latency(args, pg: Postgres) -> dict:
    cluster = Cluster(args.circle, 2, pg.fresh_database(), args.server_cpu, ["--presence-limit", "0"])
    try:
        circle = "latency"
        create_circles(cluster.ports[0], [circle])
        same, cross = circlev1.Deliveries(), circlev1.Deliveries()
        subs = (await subscribe(cluster.ports[0], 10, args.latency_subscribers, circle, same)
                + await subscribe(cluster.ports[1], 10, args.latency_subscribers, circle, cross))
        publisher, errors = await publisher_on(cluster.ports[0], circle)
        loop = asyncio.get_event_loop()
        running = [True]
        sent = [0]

        async def pace() -> None:
            start = loop.time()
            while running[0]:
                due = int((loop.time() - start) * args.rate)
                while sent[0] < due:
                    sent[0] += 1
                    publisher.send({"action": "post", "id": f"l{sent[0]}", "circle": circle, "text": str(time.monotonic_ns())})
                await asyncio.sleep(min(0.002, 1 / args.rate))
        pacer = asyncio.create_task(pace())
        await asyncio.sleep(args.warmup)
        same.record = cross.record = True
        node0, pg0, t0 = readings(cluster, pg)
        d0 = same.delivered + cross.delivered
        await asyncio.sleep(args.duration)
        node1, pg1, t1 = readings(cluster, pg)
        d1 = same.delivered + cross.delivered
        same.record = cross.record = False
        running[0] = False
        await pacer
        for c in subs + [publisher]:
            c.close()
        out = {"nodes": 2, "rate": args.rate, "subscribers_per_node": args.latency_subscribers,
               "seconds": t1 - t0, "publisher_errors": errors[0],
               "node_cpu_pct": 100 * (node1 - node0) / (t1 - t0), "postgres_cpu_pct": 100 * (pg1 - pg0) / (t1 - t0),
               "deliveries_per_s": (d1 - d0) / (t1 - t0)}
        for name, group in (("same_node", same), ("cross_node", cross)):
            h = circlev1.histogram()
            for ns in group.latencies:
                h.record_value(max(1, ns // 1000))
            out[name] = circlev1.percentiles(h)
        return out
    finally:
        cluster.stop()


async def fanout(args, pg: Postgres | None, nodes: int) -> dict:
    cluster = Cluster(args.circle, nodes, pg.fresh_database() if pg else None, args.server_cpu, ["--presence-limit", "0"])
    try:
        circle = "fanout"
        create_circles(cluster.ports[0], [circle])
        group = circlev1.Deliveries()
        subs: list[circlev1.Conn] = []
        for i, port in enumerate(cluster.ports):
            share = args.subscribers // nodes + (1 if i < args.subscribers % nodes else 0)
            subs += await subscribe(port, 50, share, circle, group, lean=args.subscriber == "lean")
        n = len(subs)
        publisher, errors = await publisher_on(cluster.ports[0], circle)
        window = max(4, args.window // n)
        sent = [0]
        running = [True]

        def pump() -> None:
            while running[0] and sent[0] - group.delivered / n < window:
                sent[0] += 1
                publisher.send({"action": "post", "id": f"f{sent[0]}", "circle": circle, "text": str(time.monotonic_ns())})
        if args.subscriber == "lean":
            group.on_delivery = pump  # once per read: a read holds several posts
        else:
            group.on_delivery = lambda: pump() if group.delivered % n == 0 else None
        pump()
        await asyncio.sleep(args.warmup)
        group.latencies = []
        group.record = True
        d0, own0 = group.delivered, os.times()
        node0, pg0, t0 = readings(cluster, pg)
        await asyncio.sleep(args.duration)
        node1, pg1, t1 = readings(cluster, pg)
        d1, own1 = group.delivered, os.times()
        group.record = False
        running[0] = False
        for c in subs + [publisher]:
            c.close()
        wall, deliveries = t1 - t0, d1 - d0
        h = circlev1.histogram()
        for ns in group.latencies:
            h.record_value(max(1, ns // 1000))
        per = (lambda seconds: 1e6 * seconds / deliveries if deliveries else None)
        return {"store": "postgres" if pg else "sqlite", "nodes": nodes, "subscribers": n, "window": window,
                "subscriber_client": args.subscriber,
                "seconds": wall, "deliveries_per_s": deliveries / wall, "posts_per_s": deliveries / wall / n,
                "publisher_errors": errors[0],
                "node_cpu_pct": 100 * (node1 - node0) / wall, "postgres_cpu_pct": 100 * (pg1 - pg0) / wall,
                "node_us_per_delivery": per(node1 - node0), "postgres_us_per_delivery": per(pg1 - pg0),
                "client_cpu_pct": 100 * ((own1.user - own0.user) + (own1.system - own0.system)) / wall,
                "latency": circlev1.percentiles(h)}
    finally:
        cluster.stop()


# ---------------------------------------------------------------- recovery


def recovery(args, pg: Postgres) -> dict:
    cluster = Cluster(args.circle, 3, pg.fresh_database(), args.server_cpu)
    bench = None
    try:
        port = cluster.ports[0]
        circle = "recovery"
        create_circles(port, [circle])
        urls = [f"ws://127.0.0.1:{p}/v1/ws" for p in cluster.ports]
        argv = ["taskset", "-c", str(args.client_cpu), args.circle, "bench", "recovery",
                "--url", urls[0], "--failover", urls[1], "--failover", urls[2],
                "--token", benchlib.dev_token(port, "subscriber"), "--publisher-token", benchlib.dev_token(port, "publisher"),
                "--circle", circle, "--subscribers", str(args.recovery_clients), "--rate", str(args.recovery_rate),
                "--after", "2", "--timeout", str(args.timeout)]
        bench = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1,
                                 preexec_fn=benchlib.raise_nofile)
        events: dict[str, dict] = {}
        killed_at = None
        deadline = time.monotonic() + 6 * args.timeout + 60
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
            events[event["event"]] = event
            print(f"#   {event['event']}: {json.dumps({k: v for k, v in event.items() if k != 'event'})}", flush=True)
            if event["event"] == "ready" and killed_at is None:
                time.sleep(1)
                node = cluster.nodes[0]
                killed_at = time.time()
                os.kill(node.pid, signal.SIGKILL)
                node.process.wait(10)
                print(f"#   node A (port {node.port}) killed with SIGKILL; not restarted", flush=True)
            if event["event"] == "result":
                break
        bench.wait(60)
        result = events.get("result")
        if not result:
            raise RuntimeError(f"no result from circle bench recovery (exit {bench.returncode}): {bench.stderr.read()[-800:]}")
        out = dict(result, clients=args.recovery_clients, rate=args.recovery_rate)
        if killed_at is not None:
            for phase in ("reconnected", "resumed"):
                if phase in events:
                    out[f"{phase}_after_kill_s"] = events[phase]["t"] - killed_at
        return out
    finally:
        if bench is not None and bench.poll() is None:
            bench.kill()
        cluster.stop()


# ---------------------------------------------------------------- main


def fmt(value, pattern: str = "{:.1f}") -> str:
    return "—" if value is None else pattern.format(value)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sections", default="posts,latency,fanout,recovery")
    parser.add_argument("--nodes", default="1,2,3", help="node counts for posts and fanout")
    parser.add_argument("--writers", default="1,16")
    parser.add_argument("--rate", type=float, default=200, help="posts/s of the latency section")
    parser.add_argument("--latency-subscribers", type=int, default=10, help="subscribers on each of A and B")
    parser.add_argument("--subscribers", type=int, default=300, help="fan-out subscribers, spread over the nodes")
    parser.add_argument("--window", type=int, default=6000, help="fan-out deliveries outstanding")
    parser.add_argument("--subscriber", choices=("lean", "picows"), default="lean",
                        help="fan-out's subscriber client, as in fanout.py (picows: the runs before 2026-11-26 18:00 UTC)")
    parser.add_argument("--recovery-clients", type=int, default=1000)
    parser.add_argument("--recovery-rate", type=float, default=20)
    parser.add_argument("--warmup", type=float, default=2.0)
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--timeout", type=float, default=120, help="limit for each recovery phase")
    parser.add_argument("--smoke", action="store_true", help="tiny counts and durations: does it work?")
    parser.add_argument("--circle", default=str(benchlib.DEFAULT_CIRCLE), help="the circle binary (release build)")
    parser.add_argument("--server-cpu", type=int, default=0)
    parser.add_argument("--client-cpu", type=int, default=1)
    parser.add_argument("--json", help="write the results to this file")
    args = parser.parse_args()
    if args.smoke:
        args.warmup, args.duration, args.writers, args.nodes = 0.3, 1.0, "2", "2"
        args.subscribers, args.recovery_clients, args.latency_subscribers, args.rate = 20, 20, 2, 50
    if not (0 < args.duration <= 120 and 0 <= args.warmup <= 30):
        parser.error("keep --duration in (0, 120], --warmup in [0, 30]")
    if not os.path.exists(args.circle):
        sys.exit(f"{args.circle} does not exist; build it: nice -n 10 swift build -c release --product circle --scratch-path .build-release")
    sections = [s for s in args.sections.split(",") if s]
    node_counts = [int(x) for x in args.nodes.split(",") if x]
    benchlib.pin_self(args.client_cpu)
    benchlib.raise_nofile()
    loop_name = benchlib.use_uvloop()
    benchlib.exit_on_sigterm()
    print(f"# nodes: circle nodes and PostgreSQL 15 pinned to CPU {args.server_cpu}, load generators on CPU "
          f"{args.client_cpu}; {args.warmup:g} s warm-up, {args.duration:g} s measured; {os.cpu_count()} cores, "
          f"load average {open('/proc/loadavg').read().split()[0]}", flush=True)
    pg = Postgres(args.server_cpu)
    results: dict[str, list] = {s: [] for s in sections}
    try:
        if "posts" in sections:
            print("\n## durable posts: closed-loop writers, one circle each, 100 B posts, spread over the nodes")
            print(f"{'store':<9}{'nodes':>5}{'writers':>8}{'acks/s':>9}{'p50 ms':>8}{'p99 ms':>8}"
                  f"{'node µs/post':>13}{'pg µs/post':>11}{'total µs':>9}{'node CPU':>9}{'pg CPU':>7}{'batch':>6}"
                  f"{'sig/post':>9}", flush=True)
            print("# batch: posts per group commit (all nodes); sig/post: node signals received per post, all nodes")
            configs = [(None, 1)] + [(pg, n) for n in node_counts]
            for store, nodes in configs:
                for w in [int(x) for x in args.writers.split(",") if x]:
                    r = asyncio.run(posts(args, store, nodes, w))
                    results["posts"].append(r)
                    lat = r["latency"]
                    print(f"{r['store']:<9}{nodes:>5}{w:>8}{r['acks_per_s']:>9,.0f}{lat['p50_us'] / 1000:>8.2f}"
                          f"{lat['p99_us'] / 1000:>8.2f}{fmt(r['node_us_per_post']):>13}{fmt(r['postgres_us_per_post']):>11}"
                          f"{fmt(r['total_us_per_post']):>9}{r['node_cpu_pct']:>8.0f}%{r['postgres_cpu_pct']:>6.0f}%"
                          f"{fmt(r['commits']['mean_batch']):>6}{r['signals_received'] / max(1, r['acks']):>9.2f}"
                          + (f"  errors {r['errors']}" if r["errors"] else ""), flush=True)
        if "latency" in sections:
            print(f"\n## delivery latency at {args.rate:g} posts/s: publisher on node A, {args.latency_subscribers} "
                  f"subscribers on A and {args.latency_subscribers} on B (2 nodes, PostgreSQL)")
            r = asyncio.run(latency(args, pg))
            results["latency"].append(r)
            print(f"{'subscribers on':<16}{'p50 ms':>8}{'p99 ms':>8}{'p99.9 ms':>9}{'max ms':>8}{'count':>8}")
            for name, label in (("same_node", "A (same node)"), ("cross_node", "B (cross node)")):
                lat = r[name]
                print(f"{label:<16}{lat['p50_us'] / 1000:>8.2f}{lat['p99_us'] / 1000:>8.2f}{lat['p99_9_us'] / 1000:>9.2f}"
                      f"{lat['max_us'] / 1000:>8.1f}{lat['count']:>8}")
            print(f"# nodes CPU {r['node_cpu_pct']:.0f}%, PostgreSQL CPU {r['postgres_cpu_pct']:.0f}%, "
                  f"publisher errors {r['publisher_errors']}", flush=True)
        if "fanout" in sections:
            print(f"\n## fan-out: one circle, {args.subscribers} subscribers spread over the nodes, publisher on A, "
                  f"closed loop ({args.window} deliveries outstanding)")
            print(f"{'store':<9}{'nodes':>5}{'deliveries/s':>13}{'posts/s':>9}{'p50 ms':>8}{'p99 ms':>8}"
                  f"{'node µs/dlv':>12}{'pg µs/dlv':>10}{'node CPU':>9}{'pg CPU':>7}{'gen CPU':>8}", flush=True)
            for store, nodes in [(None, 1)] + [(pg, n) for n in node_counts]:
                r = asyncio.run(fanout(args, store, nodes))
                results["fanout"].append(r)
                lat = r["latency"]
                print(f"{r['store']:<9}{nodes:>5}{r['deliveries_per_s']:>13,.0f}{r['posts_per_s']:>9,.0f}"
                      f"{lat['p50_us'] / 1000:>8.2f}{lat['p99_us'] / 1000:>8.2f}{fmt(r['node_us_per_delivery'], '{:.2f}'):>12}"
                      f"{fmt(r['postgres_us_per_delivery'], '{:.2f}'):>10}{r['node_cpu_pct']:>8.0f}%"
                      f"{r['postgres_cpu_pct']:>6.0f}%{r['client_cpu_pct']:>7.0f}%", flush=True)
        if "recovery" in sections:
            print(f"\n## recovery: {args.recovery_clients} CircleClient subscribers + 1 publisher at "
                  f"{args.recovery_rate:g} posts/s, servers [A, B, C]; node A SIGKILLed, not restarted")
            r = recovery(args, pg)
            results["recovery"].append(r)
            print(f"{'clients':>8}{'reconnected s':>14}{'resumed s':>10}{'acked':>7}{'failed':>7}{'lost':>6}{'dups':>6}")
            print(f"{args.recovery_clients:>8}{fmt(r.get('reconnected_after_kill_s'), '{:.2f}'):>14}"
                  f"{fmt(r.get('resumed_after_kill_s'), '{:.2f}'):>10}{r['posts_acked']:>7}{r['posts_failed']:>7}"
                  f"{r['lost']:>6}{r['duplicates']:>6}   (seconds after the kill)", flush=True)
    finally:
        pg.stop()
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"benchmark": "nodes", "loop": loop_name, "args": vars(args), "results": results}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
