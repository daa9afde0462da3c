#!/usr/bin/env bash
# Runs the echo and idle-memory benchmarks against the release build of `circle` and prints a
# table. Loopback only; each benchmark stops by itself (see echo.py and idle.py for the limits).
#
#   benchmarks/run.sh                 # both, default settings
#   benchmarks/run.sh --build         # build the release binary first (10-20 min the first time)
#   ECHO_ARGS="--duration 5" IDLE_ARGS="--counts 1000" benchmarks/run.sh
#
# The JSON results go to a fresh /tmp/circle-bench.* directory, or to OUT=dir.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(dirname "$here")"
out="${OUT:-$(mktemp -d /tmp/circle-bench.XXXXXX)}"
mkdir -p "$out"

if [[ "${1:-}" == "--build" ]]; then
    (cd "$repo" && nice -n 10 swift build -c release --product circle --scratch-path .build-release)
fi
if [[ ! -x "$repo/.build-release/release/circle" ]]; then
    echo "no release build; run: (cd $repo && nice -n 10 swift build -c release --product circle --scratch-path .build-release)" >&2
    exit 1
fi
if [[ ! -x "$here/.venv/bin/python" ]]; then
    python3 -m venv "$here/.venv"
    "$here/.venv/bin/pip" install --quiet -r "$here/requirements.txt"
fi
py="$here/.venv/bin/python"

cd "$here"
echo "== echo (results in $out/echo.json)"
# shellcheck disable=SC2086
"$py" echo.py --json "$out/echo.json" ${ECHO_ARGS:-}
echo
echo "== idle (results in $out/idle.json)"
# shellcheck disable=SC2086
"$py" idle.py --json "$out/idle.json" ${IDLE_ARGS:-}
echo
echo "== summary"
"$py" summary.py "$out/echo.json" "$out/idle.json"
