"""A minimal `circle.v1` client on picows for the load generators (fanout.py, postpath.py).

It speaks the real protocol (docs/PROTOCOL.md): a WebSocket to /v1/ws with subprotocol
circle.v1 and the token as ?token=, JSON requests in text frames, acks and events back. It is
deliberately thin so that the load generator spends little CPU per frame: events are handed to
a callback as raw bytes, and only the fields a benchmark needs are picked out.
"""
from __future__ import annotations

import asyncio
import json
from typing import Callable

from hdrh.histogram import HdrHistogram
from picows import WSFrame, WSListener, WSMsgType, WSTransport, ws_connect

import benchlib


class Conn(WSListener):
    """One circle.v1 connection. `on_event(conn, payload: bytes)` gets every server message
    except the replies to requests sent with `request()`, which resolve their futures."""

    def __init__(self, on_event: Callable[["Conn", bytes], None] | None = None) -> None:
        self.transport: WSTransport | None = None
        self.on_event = on_event
        self.pending: dict[str, asyncio.Future] = {}
        self.frames = 0
        self.closed = asyncio.get_event_loop().create_future()
        self.close_code: int | None = None
        self.next_id = 0

    def on_ws_connected(self, transport: WSTransport) -> None:
        self.transport = transport

    def on_ws_disconnected(self, transport: WSTransport) -> None:
        if not self.closed.done():
            self.closed.set_result(self.close_code)

    def on_ws_frame(self, transport: WSTransport, frame: WSFrame) -> None:
        if frame.msg_type is WSMsgType.TEXT:
            self.frames += 1
            payload = frame.get_payload_as_bytes()
            if self.pending and payload.startswith(b'{"') and b'"type":"post"' not in payload:
                # a reply: ack, error or history; match it by id
                reply = json.loads(payload)
                future = self.pending.pop(reply.get("id"), None)
                if future is not None:
                    if not future.done():
                        future.set_result(reply)
                    return
            if self.on_event is not None:
                self.on_event(self, payload)
        elif frame.msg_type is WSMsgType.CLOSE:
            self.close_code = frame.get_close_code()
            transport.send_close(self.close_code)
            transport.disconnect()

    def send(self, request: dict) -> None:
        self.transport.send(WSMsgType.TEXT, json.dumps(request, separators=(",", ":")).encode())

    def request(self, request: dict) -> asyncio.Future:
        if "id" not in request:
            self.next_id += 1
            request["id"] = f"r{self.next_id}"
        future = asyncio.get_event_loop().create_future()
        self.pending[request["id"]] = future
        self.send(request)
        return future

    def close(self) -> None:
        if self.transport is not None:
            try:
                self.transport.send_close()
                self.transport.disconnect()
            except Exception:
                pass


async def connect(port: int, token: str, on_event=None) -> Conn:
    url = f"ws://127.0.0.1:{port}/v1/ws?token={token}"
    _, conn = await ws_connect(lambda: Conn(on_event), url, extra_headers={"Sec-WebSocket-Protocol": "circle.v1"},
                               max_frame_size=1 << 20)
    return conn


async def connect_many(port: int, tokens: list[str], count: int, on_event=None, parallel: int = 100) -> list[Conn]:
    """`count` connections, token i % len(tokens), at most `parallel` handshakes at once."""
    gate = asyncio.Semaphore(parallel)

    async def one(i: int) -> Conn:
        async with gate:
            return await connect(port, tokens[i % len(tokens)], on_event)

    return list(await asyncio.gather(*(one(i) for i in range(count))))


async def join_all(conns: list[Conn], circle: str, parallel: int = 200) -> None:
    gate = asyncio.Semaphore(parallel)

    async def one(conn: Conn) -> None:
        async with gate:
            reply = await asyncio.wait_for(conn.request({"action": "join", "circle": circle}), 120)
            if reply.get("type") != "ack":
                raise RuntimeError(f"join {circle}: {reply}")

    await asyncio.gather(*(one(c) for c in conns))


async def wait_quiet(conns: list[Conn], quiet: float = 1.0, limit: float = 600.0) -> float:
    """Waits until no frame has arrived on any of `conns` for `quiet` seconds; returns the time taken."""
    loop = asyncio.get_event_loop()
    start = loop.time()
    last_total, last_change = -1, start
    while loop.time() - start < limit:
        total = sum(c.frames for c in conns)
        now = loop.time()
        if total != last_total:
            last_total, last_change = total, now
        elif now - last_change >= quiet:
            return now - start
        await asyncio.sleep(0.1)
    raise TimeoutError(f"frames still arriving after {limit} s")


def setup_server(extra: list[str] | None = None, users: int = 100, cpu: int = 0,
                 circles: list[str] = ("bench",)) -> tuple[benchlib.Server, list[str], str]:
    """Starts `circle serve` for a load test (no post rate limit, many connections per user, 1 h
    idle timeout) pinned to `cpu`; returns it, `users` subscriber tokens and a publisher token."""
    server = benchlib.circle_server(extra=["--posts-per-second", "1000000", "--post-burst", "1000000",
                                           "--max-connections-per-user", "100000", "--idle-timeout", "1h"]
                                    + (extra or []))
    server.start(cpu)
    tokens = [benchlib.dev_token(server.port, f"sub{i}") for i in range(users)]
    publisher = benchlib.dev_token(server.port, "publisher")
    for circle in circles:
        status, body = benchlib.http_json("POST", server.port, "/v1/circles", publisher, {"name": circle})
        if status not in (200, 201):
            raise RuntimeError(f"creating {circle}: {status} {body}")
    return server, tokens, publisher


def histogram() -> HdrHistogram:
    """Latencies in microseconds, 1 µs … 10 min, 3 significant digits."""
    return HdrHistogram(1, 600_000_000, 3)


def percentiles(h: HdrHistogram) -> dict:
    return {"count": h.get_total_count(), "min_us": h.get_min_value(), "mean_us": h.get_mean_value(),
            "p50_us": h.get_value_at_percentile(50), "p90_us": h.get_value_at_percentile(90),
            "p99_us": h.get_value_at_percentile(99), "p99_9_us": h.get_value_at_percentile(99.9),
            "max_us": h.get_max_value()}


def distribution(h: HdrHistogram) -> list[tuple[float, int]]:
    """(percentile, value µs) pairs for a latency-by-percentile plot."""
    points = []
    for p in (0, 10, 25, 50, 75, 90, 95, 99, 99.5, 99.9, 99.95, 99.99, 99.999, 100):
        points.append((p, h.get_value_at_percentile(p)))
    return points
