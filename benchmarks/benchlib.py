"""Shared helpers for the Circle benchmarks: servers under test, /proc readings, loopback HTTP.

Everything here talks to 127.0.0.1 only.
"""
from __future__ import annotations

import atexit
import json
import os
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
DEFAULT_CIRCLE = Path(os.environ.get("CIRCLE_BIN") or REPO / ".build-release" / "release" / "circle")
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
PAGE_KB = os.sysconf("SC_PAGE_SIZE") // 1024


# ---------------------------------------------------------------- /proc


def cpu_seconds(pid: int) -> float:
    """utime + stime of every thread of `pid`, in seconds (from /proc/PID/stat, clock ticks)."""
    with open(f"/proc/{pid}/stat") as f:
        text = f.read()
    # The command name may contain spaces; fields after the closing parenthesis are fixed.
    fields = text[text.rindex(")") + 2:].split()
    utime, stime = int(fields[11]), int(fields[12])  # fields 14 and 15 of proc(5)
    return (utime + stime) / CLOCK_TICKS


def cpu_ns_schedstat(pid: int) -> int:
    """On-CPU time of every thread of `pid` in nanoseconds (sum of /proc/PID/task/*/schedstat).

    Finer-grained than utime+stime; threads that exited before the call are not counted.
    """
    total = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/schedstat") as f:
                total += int(f.read().split()[0])
        except (FileNotFoundError, ProcessLookupError):
            pass
    return total


def status_kb(pid: int, key: str) -> int:
    """A `kB` field of /proc/PID/status, such as VmRSS or VmHWM."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    raise KeyError(key)


def rss_kb(pid: int) -> int:
    return status_kb(pid, "VmRSS")


def write_calls(pid: int) -> int:
    """How many write-family system calls (write, writev, sendmsg, …) every thread of `pid` has
    made: `syscw` of /proc/PID/io."""
    with open(f"/proc/{pid}/io") as f:
        for line in f:
            if line.startswith("syscw:"):
                return int(line.split()[1])
    raise RuntimeError(f"no syscw in /proc/{pid}/io")


def smaps_rollup(pid: int) -> dict[str, int]:
    """/proc/PID/smaps_rollup as {field: kB}."""
    out: dict[str, int] = {}
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                parts = line.split()
                if len(parts) == 3 and parts[2] == "kB":
                    out[parts[0].rstrip(":")] = int(parts[1])
    except FileNotFoundError:
        pass
    return out


def smaps_by_kind(pid: int) -> dict[str, int]:
    """Rss (kB) of /proc/PID/smaps grouped: heap, anonymous mappings, thread stacks, files."""
    groups: dict[str, int] = {}
    current = "?"
    with open(f"/proc/{pid}/smaps") as f:
        for line in f:
            first = line.split(None, 1)[0]
            if "-" in first and not first.endswith(":"):
                parts = line.split()
                name = parts[5] if len(parts) > 5 else ""
                if name == "[heap]":
                    current = "brk heap"
                elif name.startswith("[stack"):
                    current = "main stack"
                elif name.startswith("["):
                    current = name
                elif name == "":
                    current = "anonymous (mmap: malloc arenas, big blocks, thread stacks)"
                else:
                    current = "files: " + Path(name).name
            elif first == "Rss:":
                groups[current] = groups.get(current, 0) + int(line.split()[1])
    return groups


def thread_count(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/task"))


def fd_count(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


# ---------------------------------------------------------------- processes


def children(pid: int) -> list[int]:
    out: list[int] = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as f:
                out += [int(c) for c in f.read().split()]
    except FileNotFoundError:
        pass
    return out


def find_descendant(pid: int, exe: str) -> int:
    """The process below `pid` (or `pid` itself) whose executable is `exe`."""
    target = os.path.realpath(exe)
    queue = [pid]
    while queue:
        current = queue.pop(0)
        try:
            if os.path.realpath(f"/proc/{current}/exe") == target:
                return current
        except OSError:
            pass
        queue += children(current)
    raise LookupError(f"no process running {exe} below {pid}")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(port: int, process: subprocess.Popen, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"server exited with {process.returncode} before listening on {port}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"nothing listens on 127.0.0.1:{port} after {timeout} s")


def raise_nofile() -> int:
    """Raises this process's soft file limit to its hard limit; returns the new soft limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def pin_self(cpu: int | None) -> None:
    if cpu is not None:
        os.sched_setaffinity(0, {cpu})


@dataclass
class Server:
    """A server under test, started pinned to one CPU with `taskset`."""

    name: str
    argv: list[str]
    port: int
    process: subprocess.Popen | None = None
    data_dir: str | None = None
    log_path: str | None = None
    env: dict[str, str] | None = None
    #: With a wrapper (heaptrack, valgrind) the server is a descendant of the started process:
    #: its PID is found by this executable path.
    exe: str | None = None
    _log: object = field(default=None, repr=False)
    _pid: int | None = None

    @property
    def pid(self) -> int:
        assert self.process is not None
        if self._pid is None:
            self._pid = self.process.pid if self.exe is None else find_descendant(self.process.pid, self.exe)
        return self._pid

    def start(self, cpu: int | None, timeout: float = 30.0) -> "Server":
        argv = (["taskset", "-c", str(cpu)] if cpu is not None else []) + self.argv
        self.log_path = tempfile.mktemp(prefix=f"bench-{self.name}-", suffix=".log")
        self._log = open(self.log_path, "w")
        # taskset execs the command, so the PID is the server's own.
        env = dict(os.environ, **self.env) if self.env else None
        self.process = subprocess.Popen(argv, stdout=self._log, stderr=subprocess.STDOUT, env=env,
                                        preexec_fn=raise_nofile, start_new_session=True)
        _started.append(self)
        wait_for_port(self.port, self.process, timeout)
        return self

    def stop(self, timeout: float = 10.0) -> None:
        if self.process is not None and self.process.poll() is None:
            if self.exe is not None:
                # Under a wrapper: stop the server itself; the wrapper then finishes on its own.
                try:
                    os.kill(self.pid, signal.SIGTERM)
                except (LookupError, ProcessLookupError):
                    pass
            else:
                self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
        if self._log is not None:
            self._log.close()
        if self.data_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def log_tail(self, lines: int = 20) -> str:
        if not self.log_path or not os.path.exists(self.log_path):
            return ""
        with open(self.log_path, errors="replace") as f:
            return "".join(f.readlines()[-lines:])

    def __enter__(self) -> "Server":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


_started: list[Server] = []


@atexit.register
def _stop_all() -> None:
    """Stops every server this process started, also when it exits on an error or SIGTERM."""
    for server in _started:
        try:
            server.stop()
        except Exception:
            pass


def circle_server(binary: str | os.PathLike = DEFAULT_CIRCLE, extra: list[str] | None = None,
                  wrapper: list[str] | None = None, env: dict[str, str] | None = None) -> Server:
    binary = Path(binary)
    if not binary.exists():
        sys.exit(f"{binary} does not exist; build it first:\n"
                 f"  cd {REPO} && nice -n 10 swift build -c release --product circle --scratch-path .build-release")
    port = free_port()
    data = tempfile.mkdtemp(prefix="circle-bench-")
    argv = (wrapper or []) + [str(binary), "serve", "--port", str(port), "--data", data,
                              "--echo", "--dev", "--log-level", "warning",
                              # every load generator connects from 127.0.0.1: no per-address bound
                              "--max-pending-connections-per-address", "0"] + (extra or [])
    return Server("circle", argv, port, data_dir=data, env=env, exe=str(binary) if wrapper else None)


PEERS = {
    # name: (script, extra args)
    "websockets": ("websockets_echo.py", []),
    "picows": ("picows_echo.py", []),
    "websockets+uvloop": ("websockets_echo.py", ["--uvloop"]),
    "picows+uvloop": ("picows_echo.py", ["--uvloop"]),
    # Swift peers from the separate package peers-swift/ (release build, see SWIFT_PEERS_DIR)
    "hummingbird": ("hummingbird-echo", []),
    "vapor": ("vapor-echo", []),
}

SWIFT_PEERS = {"hummingbird", "vapor"}
SWIFT_PEERS_DIR = HERE / "peers-swift" / ".build" / "release"


def swift_peers_available() -> bool:
    return all((SWIFT_PEERS_DIR / PEERS[name][0]).exists() for name in SWIFT_PEERS)


def build_swift_peers() -> None:
    """Release build of peers-swift/ (hummingbird-echo, vapor-echo); several minutes the first time."""
    subprocess.run(["nice", "-n", "10", "swift", "build", "-c", "release"], cwd=HERE / "peers-swift", check=True)


def peer_server(name: str) -> Server:
    script, extra = PEERS[name]
    port = free_port()
    if name in SWIFT_PEERS:
        binary = SWIFT_PEERS_DIR / script
        if not binary.exists():
            raise FileNotFoundError(f"{binary} is missing; build it: (cd {HERE / 'peers-swift'} && swift build -c release)")
        return Server(name, [str(binary), str(port)], port)
    return Server(name, [sys.executable, str(HERE / "peers" / script), "--port", str(port)] + extra, port)


# ---------------------------------------------------------------- loopback HTTP


def http_json(method: str, port: int, path: str, token: str | None = None, body: object = None,
              timeout: float = 10.0) -> tuple[int, object]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data, method=method)
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    if data is not None:
        request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, json.loads(response.read() or b"null")
    except urllib.error.HTTPError as error:
        payload = error.read()
        try:
            return error.code, json.loads(payload)
        except ValueError:
            return error.code, payload.decode(errors="replace")


def dev_token(port: int, user: str) -> str:
    status, body = http_json("GET", port, f"/v1/dev/token?user={user}")
    if status != 200:
        raise RuntimeError(f"GET /v1/dev/token?user={user}: {status} {body}")
    return body["token"]


def exit_on_sigterm() -> None:
    """Turns SIGTERM (e.g. from `timeout`) into SystemExit, so that `finally` blocks stop the servers."""
    def handler(signum, frame):
        raise SystemExit(128 + signum)
    signal.signal(signal.SIGTERM, handler)


def use_uvloop() -> str:
    """Installs uvloop's event loop policy when available; returns the loop's name."""
    try:
        import uvloop  # noqa: F401
    except ImportError:
        return "asyncio"
    import asyncio
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    return "uvloop"


# ---------------------------------------------------------------- memprobe (live heap of a server)


def build_memprobe() -> str | None:
    """Compiles tools/memprobe.c into a temporary .so; returns its path, or None without a C compiler."""
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if not cc:
        return None
    out = os.path.join(tempfile.mkdtemp(prefix="memprobe-"), "memprobe.so")
    subprocess.run([cc, "-O2", "-shared", "-fPIC", "-o", out, str(HERE / "tools" / "memprobe.c"), "-lpthread"],
                   check=True)
    return out


def memprobe(pid: int, out_path: str, timeout: float = 10.0) -> dict[str, int]:
    """Asks a server started with memprobe.so for mallinfo2 figures (it then calls malloc_trim(0)).

    The answer is one line appended to `out_path`; the request is the file `out_path`.req.
    """
    before = 0
    if os.path.exists(out_path):
        with open(out_path) as f:
            before = len(f.readlines())
    open(out_path + ".req", "w").close()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        time.sleep(0.05)
        if os.path.exists(out_path):
            with open(out_path) as f:
                lines = f.readlines()
            if len(lines) > before:
                return {k: int(v) for k, v in (item.split("=") for item in lines[-1].split())}
    raise TimeoutError("memprobe did not answer")


# ---------------------------------------------------------------- Circle's /metrics


def circle_metrics(port: int) -> dict[str, float]:
    """The server's Prometheus text (/metrics) as {series: value}; series without labels only."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#") and "{" not in line:
            name, _, value = line.rpartition(" ")
            try:
                out[name.strip()] = float(value)
            except ValueError:
                pass
    return out


def commit_stats(before: dict[str, float], after: dict[str, float]) -> dict[str, float | None]:
    """Mean commit time (ms) and batch size between two /metrics readings."""
    def delta(key: str) -> float:
        return after.get(key, 0.0) - before.get(key, 0.0)
    commits = delta("circle_commit_seconds_count")
    batches = delta("circle_commit_batch_size_count")
    return {"commits": commits,
            "mean_commit_ms": 1000 * delta("circle_commit_seconds_sum") / commits if commits else None,
            "mean_batch": delta("circle_commit_batch_size_sum") / batches if batches else None}
