"""What the live checks against a real `circle serve` share (scripts/*_check.py): starting a
server, loopback HTTP endpoints for it to call, and bounded waits."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import threading
import time
from http.server import ThreadingHTTPServer
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


def serve_http(handler: type) -> ThreadingHTTPServer:
    """`handler` on a free loopback port, served from a daemon thread (its port: `server_address[1]`)."""
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd


@contextlib.contextmanager
def running_server(name: str, binary: str, data: Path, port: int, flags: list[str], log: Path, timeout: float):
    """`start_server` for a `with` block: a failure inside prints the end of the server's log; the
    server is stopped (SIGTERM) on the way out."""
    server = start_server(name, binary, data, port, flags, log, timeout)
    try:
        yield server
    except BaseException:
        sys.stderr.write(log.read_text(errors="replace")[-3000:])
        raise
    finally:
        server.terminate()
        server.wait(timeout=30)
