"""Prints Markdown tables from the JSON files the benchmarks wrote, with ratios and the targets.

    python summary.py echo.json client.json fanout.json idle.json recovery.json postpath.json
"""
from __future__ import annotations

import json
import sys

# The targets of issue 14 ("Speed to the limit"); earlier targets (echo ≤ 10 / 18 µs, fan-out
# ≥ 200,000/s) are met by a wide margin and superseded.
TARGET_US = {64: 2.0, 16384: 7.0}     # Circle echo, server CPU per message, at every load
TARGET_KB = 6.0                        # RSS per idle joined connection, at 1,000 and 10,000
TARGET_DELIVERIES = 500_000            # fan-out deliveries/s, 1,000 subscribers, server on one core
TARGET_DELIVERIES_AT = 1000
TARGET_P99_MS = 50.0                   # fan-out p99 at 50,000 deliveries/s
TARGET_RESUME_S = 5.0                  # recovery: every client resumed after the restart
# Post path, server CPU per post ÷ the floor's at the same batch size (1 and 16 writers), and
# acks/s ÷ the floor's posts/s (64 writers × 4 in flight).
TARGET_CPU_VS_FLOOR = {(1, 1): 1.2, (16, 1): 2.0}
TARGET_RATE_VS_FLOOR = {(64, 4): 0.5}


def verdict(ok: bool, miss: str = "") -> str:
    return "met" if ok else f"**MISSED**{' ' + miss if miss else ''}"


def echo(doc: dict) -> None:
    results, args = doc["results"], doc["args"]
    print(f"\n### Echo through the WebSocket layer\n\n{args['connections']} connections, binary frames, "
          f"{args['duration']:g} s measured (median of {args['repeat']}), server pinned to CPU {args['server_cpu']}, "
          f"picows load generator on CPU {args['client_cpu']}. Two loads: 16 messages in flight per connection "
          f"(the server reads many per read) and 1 (one message per read, one write per message).\n")
    print("| server | size | in flight | round trips/s | server CPU | µs CPU/msg | Circle ÷ this | target |")
    print("|---|---:|---:|---:|---:|---:|---:|---|")
    loads = sorted({r.get("inflight", 16) for r in results}, reverse=True)
    for inflight in loads:
        for size in sorted({r["size"] for r in results}):
            rows = sorted([r for r in results if r["size"] == size and r.get("inflight", 16) == inflight],
                          key=lambda r: r["server_us_per_msg"])
            circle = next((r for r in rows if r["server"] == "circle"), None)
            peers = [r for r in rows if r["server"] != "circle"]
            best = peers[0] if peers else None
            for r in rows:
                us = r["server_us_per_msg"]
                ratio = f"{circle['server_us_per_msg'] / us:.2f}" if circle else ""
                target = ""
                if r["server"] == "circle":
                    checks = []
                    if size in TARGET_US:
                        t = TARGET_US[size]
                        checks.append(f"≤ {t:g} µs: {verdict(us <= t, f'by {us - t:.2f} µs ({us / t:.2f}×)')}")
                    if best is not None:
                        b = best["server_us_per_msg"]
                        checks.append(f"below every peer (best: {best['server']}): {verdict(us < b, f'by {us - b:.2f} µs')}")
                    target = "; ".join(checks)
                    ratio = "1.00"
                spread = r.get("us_per_msg_spread")
                spread_s = f" ({', '.join(f'{x:.2f}' for x in spread)})" if spread and len(spread) > 1 else ""
                print(f"| {r['server']} | {size:,} B | {inflight} | {r['msgs_per_s']:,.0f} | {r['server_cpu_pct']:.0f} % | "
                      f"{us:.2f}{spread_s} | {ratio} | {target} |")


def client(doc: dict) -> None:
    results, args = doc["results"], doc["args"]
    print(f"\n### Client\n\nAgainst one fixed server ({args['server']}, CPU {args['server_cpu']}); each client "
          f"on CPU {args['client_cpu']}; {args['connections']} connections × {args['inflight']} in flight, binary, "
          f"{args['duration']:g} s measured (median of {args['repeat']}).\n")
    print("| client | size | round trips/s | client CPU | µs CPU/msg | CircleSocket ÷ this | target |")
    print("|---|---:|---:|---:|---:|---:|---|")
    for size in sorted({r["size"] for r in results}):
        rows = sorted([r for r in results if r["size"] == size], key=lambda r: r["client_us_per_msg"])
        c = next((r for r in rows if r["client"] == "circlesocket"), None)
        p = next((r for r in rows if r["client"] == "picows"), None)
        for r in rows:
            us = r["client_us_per_msg"]
            target = ""
            if r["client"] == "circlesocket" and p:
                b = p["client_us_per_msg"]
                target = f"≤ picows: {verdict(us <= b, f'by {us - b:.2f} µs ({us / b:.1f}×)')}"
            ratio = f"{c['client_us_per_msg'] / us:.2f}" if c else ""
            spread = r.get("us_per_msg_spread")
            spread_s = f" ({', '.join(f'{x:.2f}' for x in spread)})" if spread and len(spread) > 1 else ""
            print(f"| {r['client']} | {size:,} B | {r['msgs_per_s']:,.0f} | {r['client_cpu_pct']:.0f} % | "
                  f"{us:.2f}{spread_s} | {ratio} | {target} |")


def fanout(doc: dict) -> None:
    args = doc["args"]
    subscribers = {"lean": "lean circle.v1 clients that count the posts of each read at once",
                   "picows": "circle.v1 clients on picows"}[args.get("subscriber", "picows")]
    print(f"\n### Chat fan-out\n\nOne circle, one publisher, N subscribers ({subscribers}, "
          f"100 users); server on CPU {args['server_cpu']}, load generator on CPU {args['client_cpu']}; "
          f"{args['duration']:g} s measured per phase. `max`: closed loop, {args['window']:,} deliveries outstanding "
          f"({args['window']:,} ÷ N posts in flight); `rate`: open loop at {args['rate']:,.0f} deliveries/s.\n")
    print("| subscribers | phase | deliveries/s | posts/s | p50 ms | p99 ms | p99.9 ms | server CPU | µs CPU/delivery | "
          "deliveries/s at 100 % of the core | deliveries per server write | generator CPU | peak RSS MB | target |")
    print("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for run in doc["results"]:
        for ph in run["phases"]:
            lat = ph["latency"]
            us = ph["server_us_per_delivery"] or 0
            capacity = f"{1e6 / us:,.0f}" if us else "–"
            per_write = f"{ph['deliveries_per_server_write']:.1f}" if ph.get("deliveries_per_server_write") else "–"
            if ph["mode"] == "max":
                d = ph["deliveries_per_s"]
                target = ""
                if run["subscribers"] == TARGET_DELIVERIES_AT:
                    target = (f"≥ {TARGET_DELIVERIES:,}/s: {verdict(d >= TARGET_DELIVERIES, f'by {TARGET_DELIVERIES - d:,.0f}/s ({d / TARGET_DELIVERIES:.2f}×)')}")
            else:
                p99 = lat["p99_us"] / 1000
                target = f"p99 ≤ 50 ms: {verdict(p99 <= TARGET_P99_MS, f'by {p99 - TARGET_P99_MS:.1f} ms')}"
            print(f"| {run['subscribers']:,} | {ph['mode']} | {ph['deliveries_per_s']:,.0f} | {ph['posts_per_s']:,.1f} | "
                  f"{lat['p50_us'] / 1000:.2f} | {lat['p99_us'] / 1000:.2f} | {lat['p99_9_us'] / 1000:.2f} | "
                  f"{ph['server_cpu_pct']:.0f} % | {us:.2f} | {capacity} | {per_write} | {ph['client_cpu_pct']:.0f} % | "
                  f"{run['peak_rss_kb'] / 1024:.0f} | {target} |")
    for run in doc["results"]:
        print(f"\n{run['subscribers']:,} subscribers: joins took {run['join_s']:.1f} s, the presence events of the "
              f"joins settled {run['presence_settle_s']:.1f} s later ({run['presence_frames']:,} frames); "
              f"publisher errors {run['publisher_errors']}, subscribers closed by the server "
              f"{run['subscribers_closed_by_server']}.")


def idle(doc: dict) -> None:
    base = doc["baseline"]["rss_kb"]
    print(f"\n### Idle connections\n\nAuthenticated, joined to one circle ({doc['users']} users); baseline RSS "
          f"{base:,} KB.\n")
    print("| connections | RSS KB | KB/conn over baseline | KB/conn of the stage | connect+auth only | join+presence s | target |")
    print("|---:|---:|---:|---:|---:|---:|---|")
    for s in doc["stages"]:
        k = s["kb_per_conn"]
        print(f"| {s['connections']:,} | {s['joined']['rss_kb']:,} | {k:.2f} | {s['stage_kb_per_conn']:.2f} | "
              f"{s['connect_only_kb_per_conn']:.2f} | {s['join_and_presence_s']:.1f} | "
              f"≤ {TARGET_KB:g} KB: {verdict(k <= TARGET_KB, f'by {k - TARGET_KB:.2f} KB ({k / TARGET_KB:.1f}×)')} |")


def recovery(doc: dict) -> None:
    r = doc["result"]
    print(f"\n### Recovery\n\n{r['subscribers']:,} CircleClient subscribers and one publisher at {r['rate']:g} posts/s; "
          f"server killed with SIGKILL and restarted at once.\n")
    print("| subscribers | restart (kill → listening) s | all reconnected s | all resumed s | posts acked | lost | duplicates | target |")
    print("|---:|---:|---:|---:|---:|---:|---:|---|")
    res = r.get("resumed_after_restart_s")
    checks = [f"resumed ≤ 5 s: {verdict(res is not None and res <= TARGET_RESUME_S, f'by {res - TARGET_RESUME_S:.2f} s' if res is not None else 'never')}",
              f"0 lost: {verdict(r['lost'] == 0)}", f"0 duplicated: {verdict(r['duplicates'] == 0)}"]
    fmt = lambda x: f"{x:.2f}" if isinstance(x, (int, float)) else "—"
    print(f"| {r['subscribers']:,} | {fmt(r.get('restart_s'))} | {fmt(r.get('reconnected_after_restart_s'))} | "
          f"{fmt(res)} | {r['posts_acked']:,} | {r['lost']} | {r['duplicates']} | {'; '.join(checks)} |")
    print(f"\nTimes are counted from the moment the restarted server listens. Posts that failed: {r['posts_failed']}; "
          f"acks marked duplicate (retries the server recognised): {r['acks_marked_duplicate']}; deliveries: "
          f"{r['deliveries']:,}.")


def postpath(doc: dict) -> None:
    args = doc["args"]
    print(f"\n### Post path\n\nClosed-loop writers (W writers × F posts in flight, a user and a circle each), "
          f"{args['text_bytes']} B posts; embedded SQLite (WAL, synchronous=FULL, group commit); server on CPU "
          f"{args['server_cpu']}. The floor: the same statements from Python's sqlite3 at the case's mean batch "
          f"size, in the same run."
          + (f" fsync of 4 KiB on this disk before the run: p50 {doc['fsync']['p50_ms']:.2f} ms, p99 "
             f"{doc['fsync']['p99_ms']:.2f} ms." if doc.get("fsync") else "") + "\n")
    print("| build | W×F | posts acked/s | p50 ms | p99 ms | p99.9 ms | server CPU | µs CPU/post | batch | "
          "floor µs/post | floor posts/s | CPU ÷ floor | acks/s ÷ floor | target |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for r in doc["results"]:
        lat, f = r["latency"], r.get("floor")
        floor_cells = (f"{f['us_per_post']:.1f} | {f['posts_per_s']:,.0f} | {r.get('cpu_vs_floor', 0):.2f} | "
                       f"{100 * r.get('rate_vs_floor', 0):.0f} %" if f else "– | – | – | –")
        case = (r["writers"], r.get("in_flight", 1))
        target = ""
        if f and case in TARGET_CPU_VS_FLOOR:
            t, x = TARGET_CPU_VS_FLOOR[case], r.get("cpu_vs_floor", 0)
            over = (r["server_us_per_post"] or 0) - t * f["us_per_post"]
            target = f"CPU ≤ {t:g}× floor: {verdict(x <= t, f'({x:.2f}×; {over:.1f} µs/post over)')}"
        elif f and case in TARGET_RATE_VS_FLOOR:
            t, x = TARGET_RATE_VS_FLOOR[case], r.get("rate_vs_floor", 0)
            target = f"acks/s ≥ {100 * t:.0f} % of floor: {verdict(x >= t, f'({100 * x:.0f} %)')}"
        print(f"| {r.get('build', 'circle')} | {r['writers']}×{r.get('in_flight', 1)} | {r['acks_per_s']:,.0f} | "
              f"{lat['p50_us'] / 1000:.2f} | {lat['p99_us'] / 1000:.2f} | {lat['p99_9_us'] / 1000:.2f} | "
              f"{r['server_cpu_pct']:.0f} % | {r['server_us_per_post'] or 0:.1f} | "
              f"{r['commits']['mean_batch'] or 0:.1f} | {floor_cells} | {target} |")


def main(paths: list[str]) -> int:
    order = ["echo", "client", "fanout", "idle", "recovery", "postpath"]
    docs = {}
    for path in paths:
        try:
            with open(path) as f:
                doc = json.load(f)
            docs[doc.get("benchmark")] = doc
        except (OSError, ValueError) as error:
            print(f"(no results in {path}: {error})")
    for name in order:
        if name in docs:
            try:
                globals()[name](docs[name])
            except (KeyError, TypeError, ZeroDivisionError) as error:
                print(f"\n({name}: incomplete results: {error!r})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
