"""Draws PNG plots from the benchmarks' JSON results (matplotlib, no display needed).

    python plots.py --out DIR echo.json client.json fanout.json postpath.json ...

Writes, for what is present: echo-cpu.png (server µs per message per peer), echo-throughput.png
(round trips/s per peer), client-cpu.png, fanout-latency.png and postpath-latency.png (latency
by percentile, HdrHistogram), fanout-throughput.png.
"""
from __future__ import annotations

import argparse
import json
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

CIRCLE = "#d62728"
OTHERS = ["#1f77b4", "#2ca02c", "#9467bd", "#8c564b", "#7f7f7f", "#17becf"]
FIXED = {"picows": "#2ca02c", "websockets": "#1f77b4", "vapor": "#9467bd", "hummingbird": "#8c564b",
         "picows+uvloop": "#2ca02c", "websockets+uvloop": "#1f77b4"}


def bars(ax, names: list[str], values: list[float], highlight: str, fmt: str) -> None:
    colours = [CIRCLE if n == highlight else FIXED.get(n, OTHERS[i % len(OTHERS)]) for i, n in enumerate(names)]
    ax.barh(names, values, color=colours)
    for i, v in enumerate(values):
        ax.text(v, i, " " + fmt.format(v), va="center", fontsize=8)
    ax.invert_yaxis()
    ax.margins(x=0.25)


def per_size(doc: dict, key: str, who: str, value: str, title: str, xlabel: str, fmt: str, path: str) -> None:
    """One panel per message size (columns) and, when the results have several loads, per number
    of messages in flight (rows)."""
    results = doc["results"]
    sizes = sorted({r["size"] for r in results})
    loads = sorted({r.get("inflight") for r in results}, key=lambda n: -(n or 0))
    fig, axes = plt.subplots(len(loads), len(sizes), figsize=(5.5 * len(sizes), 3.2 * len(loads)), squeeze=False)
    for row, inflight in zip(axes, loads):
        for ax, size in zip(row, sizes):
            rows = sorted([r for r in results if r["size"] == size and r.get("inflight") == inflight],
                          key=lambda r: r[value])
            bars(ax, [r[key] for r in rows], [r[value] for r in rows], who, fmt)
            load = f", {inflight} in flight per connection" if len(loads) > 1 else ""
            ax.set_title(f"{size:,} B messages{load}", fontsize=10)
            ax.set_xlabel(xlabel)
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def latency(series: list[tuple[str, list]], title: str, path: str) -> None:
    fig, ax = plt.subplots(figsize=(7, 4))
    for i, (label, points) in enumerate(series):
        xs = [min(p, 99.9999) for p, _ in points]
        # x axis as "number of nines": 1/(1-p)
        ax.plot([1 / (1 - x / 100) for x in xs], [v / 1000 for _, v in points], marker="o", markersize=3,
                label=label, color=OTHERS[i % len(OTHERS)])
    ax.set_xscale("log")
    ax.set_yscale("log")
    ticks = [2, 10, 100, 1000, 10000, 100000, 1000000]
    ax.set_xticks(ticks)
    ax.set_xticklabels(["50 %", "90 %", "99 %", "99.9 %", "99.99 %", "99.999 %", "max"])
    ax.set_xlabel("percentile")
    ax.set_ylabel("latency, ms")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title(title, fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True)
    parser.add_argument("files", nargs="+")
    args = parser.parse_args()
    docs = {}
    for path in args.files:
        try:
            with open(path) as f:
                doc = json.load(f)
            docs[doc.get("benchmark")] = doc
        except (OSError, ValueError):
            pass
    written = []
    out = lambda name: os.path.join(args.out, name)
    if docs.get("echo", {}).get("results"):
        per_size(docs["echo"], "server", "circle", "server_us_per_msg",
                 "Echo: server CPU per round trip (lower is better)", "µs CPU per message", "{:.2f}", out("echo-cpu.png"))
        per_size(docs["echo"], "server", "circle", "msgs_per_s",
                 "Echo: round trips per second, server on one core", "round trips/s", "{:,.0f}", out("echo-throughput.png"))
        written += ["echo-cpu.png", "echo-throughput.png"]
    if docs.get("client", {}).get("results"):
        per_size(docs["client"], "client", "circlesocket", "client_us_per_msg",
                 "Client: CPU per round trip against one fixed server (lower is better)", "µs CPU per message",
                 "{:.2f}", out("client-cpu.png"))
        written.append("client-cpu.png")
    if docs.get("fanout", {}).get("results"):
        series = []
        for run in docs["fanout"]["results"]:
            for ph in run["phases"]:
                rate = f"{ph['deliveries_per_s']:,.0f}/s"
                label = f"{run['subscribers']:,} subscribers, {'max' if ph['mode'] == 'max' else 'fixed'} rate ({rate})"
                series.append((label, ph["distribution"]))
        latency(series, "Fan-out: end-to-end latency (post sent → delivered)", out("fanout-latency.png"))
        fig, ax = plt.subplots(figsize=(6, 2.8))
        names = [f"{run['subscribers']:,} subs, {ph['mode']}" for run in docs["fanout"]["results"] for ph in run["phases"]]
        values = [ph["deliveries_per_s"] for run in docs["fanout"]["results"] for ph in run["phases"]]
        bars(ax, names, values, "", "{:,.0f}")
        ax.axvline(500_000, color=CIRCLE, linestyle="--", linewidth=1, label="target 500,000/s (1,000 subscribers)")
        ax.legend(fontsize=8)
        ax.set_xlabel("deliveries/s (server on one core)")
        ax.set_title("Fan-out throughput", fontsize=11)
        fig.tight_layout()
        fig.savefig(out("fanout-throughput.png"), dpi=110)
        plt.close(fig)
        written += ["fanout-latency.png", "fanout-throughput.png"]
    if docs.get("postpath", {}).get("results"):
        series = [(f"{r.get('build', 'circle')} {r['writers']}×{r.get('in_flight', 1)} ({r['acks_per_s']:,.0f} acks/s)",
                   r["distribution"]) for r in docs["postpath"]["results"]]
        latency(series, "Post path: ack latency (durable commit)", out("postpath-latency.png"))
        written.append("postpath-latency.png")
    print(f"# plots: {', '.join(written) if written else 'none'} in {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
