#!/usr/bin/env python3
"""Two circle builds side by side, in one run: the figures issue gates are stated in.

    benchmarks/versus.py --base OLD/circle --new NEW/circle [--rounds 3]

For each round it runs, alternating A and B so that drift on a shared machine hits both alike:
  echo.py --servers circle   server CPU µs per echoed message, 64 B and 16 KiB (binary frames),
                             16 and 1 messages in flight per connection
  idle.py                    server RSS KB per idle joined connection, at 1,000 and 10,000
Then it prints the median of each figure per build and the ratio new / base (1.00 = the same;
below 1 is better for both figures). Both binaries should be release builds.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def run_json(script: str, args: list[str]) -> dict:
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as handle:
        path = handle.name
    try:
        command = [sys.executable, os.path.join(HERE, script), *args, "--json", path]
        print("$", " ".join(command), flush=True)
        subprocess.run(command, check=True)
        with open(path) as f:
            return json.load(f)
    finally:
        os.unlink(path)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", required=True, help="the circle binary to compare against")
    parser.add_argument("--new", required=True, help="the circle binary under test")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--duration", type=float, default=8.0, help="echo seconds measured per size")
    parser.add_argument("--counts", default="1000,10000", help="idle connection counts")
    parser.add_argument("--skip-idle", action="store_true")
    parser.add_argument("--skip-echo", action="store_true")
    args = parser.parse_args()
    if not 1 <= args.rounds <= 9:
        parser.error("--rounds is 1 to 9")
    builds = {"base": args.base, "new": args.new}
    figures: dict[tuple[str, str], list[float]] = {}
    for round_index in range(args.rounds):
        order = ["base", "new"] if round_index % 2 == 0 else ["new", "base"]
        for label in order:
            binary = builds[label]
            if not args.skip_echo:
                echo = run_json("echo.py", ["--servers", "circle", "--circle", binary, "--sizes", "64,16384",
                                            "--duration", str(args.duration)])
                for result in echo["results"]:
                    name = f"echo µs/msg {result['size']} B, {result['inflight']} in flight"
                    figures.setdefault((name, label), []).append(result["server_us_per_msg"])
            if not args.skip_idle:
                idle = run_json("idle.py", ["--circle", binary, "--counts", args.counts, "--idle-watch", "1"])
                for stage in idle["stages"]:
                    figures.setdefault((f"idle KB/conn at {stage['connections']:,}", label), []).append(stage["kb_per_conn"])
    names = sorted({name for name, _ in figures}, key=lambda n: (not n.startswith("echo"), n))
    print()
    print(f"# {args.rounds} rounds, alternating; medians. base = {args.base}, new = {args.new}")
    print(f"{'figure':<38} {'base':>10} {'new':>10} {'new/base':>9}   runs (base | new)")
    for name in names:
        base = figures.get((name, "base"), [])
        new = figures.get((name, "new"), [])
        if not base or not new:
            continue
        b, n = statistics.median(base), statistics.median(new)
        runs = f"{', '.join(f'{v:.2f}' for v in base)} | {', '.join(f'{v:.2f}' for v in new)}"
        print(f"{name:<38} {b:>10.2f} {n:>10.2f} {n / b:>9.2f}   {runs}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
