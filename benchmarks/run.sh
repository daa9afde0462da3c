#!/usr/bin/env bash
# Runs Circle's benchmarks side by side with its peers on this machine, prints the tables and
# draws the plots. Loopback only; every benchmark stops by itself. See docs/BENCHMARKS.md.
#
#   benchmarks/run.sh --all            # everything (about 33 min on 2 cores), the default
#   benchmarks/run.sh --smoke          # every script for a moment with small counts (about 80 s): do they work?
#   benchmarks/run.sh echo fanout      # only these: echo client sdk fanout idle recovery postpath nodes search push
#   benchmarks/run.sh --build --all    # build circle and the Swift peers (release) first
#   benchmarks/run.sh --publish --all  # also write docs/bench/ (results/*.json, *.png, tables.md)
#
# Extra options per script: ECHO_ARGS, CLIENT_ARGS, SDK_ARGS, FANOUT_ARGS, IDLE_ARGS, RECOVERY_ARGS,
# POSTPATH_ARGS, NODES_ARGS, SEARCH_ARGS, PUSH_ARGS, e.g. IDLE_ARGS="--counts 1000" benchmarks/run.sh idle
# The JSON results go to a fresh /tmp/circle-bench.* directory, or to OUT=dir. CIRCLE_BIN=path
# measures another circle binary (a debug build is fine for --smoke, not for figures).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(dirname "$here")"
out="${OUT:-$(mktemp -d /tmp/circle-bench.XXXXXX)}"
mkdir -p "$out"

build=0 smoke=0 publish=0
names=()
for arg in "$@"; do
    case "$arg" in
        --build) build=1 ;;
        --smoke) smoke=1 ;;
        --publish) publish=1 ;;
        --all) names=(echo client sdk fanout idle recovery postpath nodes search push) ;;
        echo|client|sdk|fanout|idle|recovery|postpath|nodes|search|push) names+=("$arg") ;;
        -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
        *) echo "unknown argument: $arg (see --help)" >&2; exit 64 ;;
    esac
done
[[ ${#names[@]} -eq 0 ]] && names=(echo client sdk fanout idle recovery postpath nodes search push)

if [[ $build == 1 ]]; then
    (cd "$repo" && nice -n 10 swift build -c release --product circle --scratch-path .build-release)
    (cd "$here/peers-swift" && nice -n 10 swift build -c release)
fi
# CIRCLE_BIN=path picks another circle binary (e.g. a debug build for --smoke in CI).
export CIRCLE_BIN="${CIRCLE_BIN:-$repo/.build-release/release/circle}"
if [[ ! -x "$CIRCLE_BIN" ]]; then
    echo "no release build at $CIRCLE_BIN; run: (cd $repo && nice -n 10 swift build -c release --product circle --scratch-path .build-release)" >&2
    exit 1
fi
if [[ ! -x "$here/.venv/bin/python" ]]; then
    python3 -m venv "$here/.venv"
    "$here/.venv/bin/pip" install --quiet -r "$here/requirements.txt"
fi
py="$here/.venv/bin/python"
cd "$here"

servers="circle,hummingbird,vapor,websockets,picows"
if [[ ! -x "$here/peers-swift/.build/release/hummingbird-echo" || ! -x "$here/peers-swift/.build/release/vapor-echo" ]]; then
    echo "# the Swift peers are not built (cd benchmarks/peers-swift && swift build -c release); echo runs without them" >&2
    servers="circle,websockets,picows"
fi

if [[ $smoke == 1 ]]; then
    # A few seconds each, small counts: the scripts work end to end; the figures mean nothing.
    ECHO_ARGS="--servers ${servers/,websockets/} --sizes 64 --warmup 0.3 --duration 1 ${ECHO_ARGS:-}"
    CLIENT_ARGS="--sizes 64 --warmup 0.3 --duration 1 ${CLIENT_ARGS:-}"
    SDK_ARGS="--cases 1x1,1x16 --rounds 1 --warmup 0.3 --duration 1 ${SDK_ARGS:-}"
    FANOUT_ARGS="--subscribers 20 --rate 2000 --warmup 0.3 --duration 1 ${FANOUT_ARGS:-}"
    IDLE_ARGS="--counts 50,100 --settle 0.5 --idle-watch 0.5 ${IDLE_ARGS:-}"
    RECOVERY_ARGS="--subscribers 20 --rate 10 --before 0.5 --after 0.5 --timeout 60 ${RECOVERY_ARGS:-}"
    POSTPATH_ARGS="--writers 1,2 --webhooks off,on --warmup 0.3 --duration 1 --floor-duration 1 ${POSTPATH_ARGS:-}"
    NODES_ARGS="--smoke ${NODES_ARGS:-}"
    SEARCH_ARGS="--posts 3000 --circles 30 --queries 10 --warmup 2 ${SEARCH_ARGS:-}"
    PUSH_ARGS="--people 50 --writers 1 --duration 1 --crypto-count 200 ${PUSH_ARGS:-}"
else
    ECHO_ARGS="--servers $servers --repeat 3 ${ECHO_ARGS:-}"
    CLIENT_ARGS="--repeat 3 ${CLIENT_ARGS:-}"
fi

if [[ $smoke == 1 ]]; then
    # The fan-out generator's own frame walk, cut at random places (no server needed).
    "$py" test_circlev1.py || exit 1
fi

echo "# machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(free -g | awk '/Mem:/{print $2}') GiB; $(uname -sr); load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# commit $(cd "$repo" && git rev-parse --short HEAD 2>/dev/null || echo '?'); circle: $CIRCLE_BIN; results in $out"
failed=()
for name in "${names[@]}"; do
    echo
    echo "== $name"
    var="${name^^}_ARGS"
    start=$(date +%s)
    # shellcheck disable=SC2086
    if ! "$py" "$name.py" --json "$out/$name.json" ${!var:-}; then
        failed+=("$name")
    elif [[ ! -s "$out/$name.json" ]]; then
        failed+=("$name (no JSON)")
    fi
    echo "# $name took $(( $(date +%s) - start )) s"
done
echo
echo "== summary"
"$py" summary.py "$out"/*.json | tee "$out/tables.md"
"$py" plots.py --out "$out" "$out"/*.json
if [[ $publish == 1 && $smoke == 0 ]]; then
    mkdir -p "$repo/docs/bench/results"
    cp "$out"/*.json "$repo/docs/bench/results/"
    # Not every benchmark draws a plot (nodes does not).
    compgen -G "$out/*.png" >/dev/null && cp "$out"/*.png "$repo/docs/bench/"
    # The tables of every benchmark published so far, not only of this run's.
    published=()
    for name in echo client sdk fanout idle recovery postpath nodes search push; do
        [[ -s "$repo/docs/bench/results/$name.json" ]] && published+=("$repo/docs/bench/results/$name.json")
    done
    "$py" summary.py "${published[@]}" >"$repo/docs/bench/tables.md"
    echo "# published to docs/bench/"
fi
if [[ ${#failed[@]} -gt 0 ]]; then
    echo "FAILED: ${failed[*]}" >&2
    exit 1
fi
echo "# all benchmarks ran: ${names[*]}"
