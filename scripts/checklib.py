"""What the live checks against a real `circle serve` share (scripts/jwks_check.py,
scripts/webhook_check.py): starting a server and bounded waits."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
from benchlib import http_json  # noqa: E402


class CheckFailed(SystemExit):
    pass


def fail(name: str, message: str) -> None:
    raise CheckFailed(f"{name}: FAIL: {message}")


def start_server(name: str, binary: str, data: Path, port: int, flags: list[str], log: Path, timeout: float) -> subprocess.Popen:
    """`circle serve --dev` on loopback, its output appended to `log`; returns once /healthz answers."""
    args = [binary, "serve", "--port", str(port), "--data", str(data), "--dev", "--log-level", "info", *flags]
    server = subprocess.Popen(args, stdout=log.open("a"), stderr=subprocess.STDOUT)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.poll() is not None:
            fail(name, f"the server exited with {server.returncode}: {log.read_text()[-2000:]}")
        try:
            if http_json("GET", port, "/healthz")[0] == 200:
                return server
        except OSError:
            pass
        time.sleep(0.1)
    fail(name, f"the server did not answer /healthz within {timeout:g} s")
    raise AssertionError


def wait_for(name: str, condition, what: str, timeout: float) -> None:
    """Waits (bounded) for a condition that an event outside this process makes true."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            fail(name, f"gave up waiting for {what}")
        time.sleep(0.05)
