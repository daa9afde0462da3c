"""Prints one table from the JSON files that echo.py and idle.py wrote, with the issue's targets.

    python summary.py echo.json idle.json
"""
from __future__ import annotations

import json
import sys

TARGET_US = {64: 10.0, 16384: 18.0}  # Circle echo, server CPU per message
TARGET_KB = 8.0                       # Circle, RSS per idle joined connection


def main(paths: list[str]) -> int:
    docs = []
    for path in paths:
        try:
            with open(path) as f:
                docs.append(json.load(f))
        except (OSError, ValueError) as error:
            print(f"(no results in {path}: {error})")
    for doc in docs:
        if doc.get("benchmark") == "echo":
            results = doc["results"]
            args = doc["args"]
            print(f"\nEcho: {args['connections']} connections x {args['inflight']} in flight, "
                  f"{args['duration']:g} s measured, server pinned to CPU {args['server_cpu']}")
            print(f"| server | size | msgs/s | server CPU | µs CPU/msg | target |")
            print(f"|---|---:|---:|---:|---:|---|")
            sizes = sorted({r["size"] for r in results})
            for size in sizes:
                rows = [r for r in results if r["size"] == size]
                peers = [r for r in rows if r["server"] != "circle"]
                best = min(peers, key=lambda r: r["server_us_per_msg"]) if peers else None
                for r in rows:
                    target = ""
                    if r["server"] == "circle":
                        us = r["server_us_per_msg"]
                        checks = []
                        if size in TARGET_US:
                            checks.append(f"≤ {TARGET_US[size]:g}: {'met' if us <= TARGET_US[size] else 'MISSED'}")
                        if best is not None:
                            b = best["server_us_per_msg"]
                            checks.append(f"< {best['server']} {b:.2f}: {'met' if us < b else 'MISSED'}")
                        target = "; ".join(checks)
                    print(f"| {r['server']} | {size} B | {r['msgs_per_s']:,.0f} | {r['server_cpu_pct']:.0f}% | "
                          f"{r['server_us_per_msg']:.2f} | {target} |")
        elif doc.get("benchmark") == "idle":
            base = doc["baseline"]["rss_kb"]
            print(f"\nIdle joined connections ({doc['users']} users), baseline RSS {base:,} KB")
            print("| connections | RSS KB | KB/conn over baseline | KB/conn of the stage | stage: connect+auth only | join s | target |")
            print("|---:|---:|---:|---:|---:|---:|---|")
            for s in doc["stages"]:
                ok = s["kb_per_conn"] <= TARGET_KB
                print(f"| {s['connections']:,} | {s['joined']['rss_kb']:,} | {s['kb_per_conn']:.2f} | "
                      f"{s['stage_kb_per_conn']:.2f} | {s['connect_only_kb_per_conn']:.2f} | "
                      f"{s['join_and_presence_s']:.1f} | ≤ {TARGET_KB:g}: {'met' if ok else 'MISSED'} |")
            if doc.get("idle_cpu_pct") is not None:
                print(f"server CPU while idle: {doc['idle_cpu_pct']:.2f}%")
            if doc.get("after_close"):
                print(f"after closing all connections: RSS {doc['after_close']['rss_kb']:,} KB")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
