#!/usr/bin/env bash
# Discovery figures, measured across network namespaces (root; see scripts/discovery-netns.sh):
#   1. time from `circle discover --first` start to its first result (a new process each run,
#      so process start is included), RUNS times, with the server announcing in namespace A;
#   2. mDNS traffic on the A–B link, counted by a listener in B: the first minute after
#      `circle serve --announce` starts (probes, announcements), the next minute with nobody
#      asking, and a minute with one `circle discover` browsing all along (queries and answers).
#
#   benchmarks/discovery.sh                 # RUNS=20, WINDOW=60 (about 4 minutes)
#   CIRCLE_BIN=.build/release/circle RUNS=50 benchmarks/discovery.sh
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(dirname "$here")"
cd "$repo"
bin="${CIRCLE_BIN:-$repo/.build/debug/circle}"
runs="${RUNS:-20}"
window="${WINDOW:-60}"
python="${PYTHON:-python3}"
[[ "$(id -u)" == 0 ]] || { echo "needs root (network namespaces)"; exit 1; }
[[ -x "$bin" ]] || { echo "no circle binary at $bin (swift build first, or CIRCLE_BIN=...)"; exit 1; }

work="$(mktemp -d /tmp/circle-discovery-bench.XXXXXX)"
source scripts/discovery-netns.sh
trap 'discovery_netns_down; rm -rf "$work"' EXIT
discovery_netns_up "bench$$"
helpers="$repo/scripts/discovery_helpers.py"
secret=discovery-bench-secret-0123456789abcdef

count() { # seconds -> JSON tally per sender, from a listener on cb0 in B
    rm -f "$work/count.out"  # a stale "ready" must not pass for the new listener's
    ip netns exec "$B" "$python" "$helpers" mdns-count cb0 "$1" > "$work/count.out" &
    local pid=$!
    until grep -q ready "$work/count.out" 2>/dev/null; do sleep 0.05; done
    wait "$pid"
    tail -n 1 "$work/count.out"
}
summary() { # JSON tally -> "A: p packets, b bytes; B: ..."
    "$python" -c '
import json, sys
tally = json.loads(sys.argv[1])
names = {"169.254.10.1": "server (A)", "fe80::a:1": "server (A)", "169.254.10.2": "browser (B)", "fe80::b:1": "browser (B)"}
out = {}
for address, entry in tally.items():
    name = names.get(address, address)
    total = out.setdefault(name, [0, 0])
    total[0] += entry["packets"]; total[1] += entry["bytes"]
print("; ".join(f"{name}: {p} packets, {b} bytes" for name, (p, b) in sorted(out.items())) or "nothing")
' "$1"
}

echo "== mDNS traffic on the A-B link, UDP payload (IPv4 and IPv6 together), ${window}s windows"
rm -f "$work/count.out"
ip netns exec "$B" "$python" "$helpers" mdns-count cb0 "$window" > "$work/count.out" &
listener=$!
until grep -q ready "$work/count.out" 2>/dev/null; do sleep 0.05; done
ip netns exec "$A" "$bin" serve --host :: --port 18080 --data "$work/data" --jwt-secret "$secret" --announce "Bench Circle" \
    --log-level warning > "$work/serve.log" 2>&1 &
disown $!  # ended with the namespaces at exit
wait "$listener"
echo "first ${window}s after serve --announce starts:  $(summary "$(tail -n 1 "$work/count.out")")"
echo "next ${window}s, nobody asking:                 $(summary "$(count "$window")")"
rm -f "$work/count.out"
ip netns exec "$B" "$python" "$helpers" mdns-count cb0 "$window" > "$work/count.out" &
listener=$!
until grep -q ready "$work/count.out" 2>/dev/null; do sleep 0.05; done
ip netns exec "$B" "$bin" discover --timeout "$((window - 1))s" --interface cb0 > /dev/null &
wait "$listener"
echo "${window}s with one circle discover browsing:   $(summary "$(tail -n 1 "$work/count.out")")"

echo "== circle discover --first: start to first result ($runs runs, process start included)"
times=()
for _ in $(seq "$runs"); do
    start=$(date +%s%N)
    ip netns exec "$B" "$bin" discover --first --timeout 10s --interface cb0 > /dev/null
    end=$(date +%s%N)
    times+=($(( (end - start) / 1000000 )))
done
printf '%s\n' "${times[@]}" | sort -n | "$python" -c '
import sys
values = [int(line) for line in sys.stdin]
n = len(values)
print(f"milliseconds: min {values[0]}, median {values[n // 2]}, p90 {values[min(n - 1, (n * 9) // 10)]}, max {values[-1]}")
'
echo "== binary: $bin"
