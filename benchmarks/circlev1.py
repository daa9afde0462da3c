"""A minimal `circle.v1` client on picows for the load generators (fanout.py, postpath.py).

It speaks the real protocol (docs/PROTOCOL.md): a WebSocket to /v1/ws with subprotocol
circle.v1 and the token as ?token=, JSON requests in text frames, acks and events back. It is
deliberately thin so that the load generator spends little CPU per frame: events are handed to
a callback as raw bytes, and only the fields a benchmark needs are picked out. ``LeanSubscriber``
goes further for fan-out's subscribers: no per-frame Python call at all.
"""
from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import os
import re
import time
from typing import Callable

from hdrh.histogram import HdrHistogram
from picows import WSFrame, WSListener, WSMsgType, WSTransport, ws_connect

import benchlib


class Requests:
    """`request()` for a connection class with `send(dict)`, `pending` and `next_id`: sends a
    request with an id and returns the future its reply resolves."""

    def request(self, request: dict) -> asyncio.Future:
        if "id" not in request:
            self.next_id += 1
            request["id"] = f"r{self.next_id}"
        future = asyncio.get_event_loop().create_future()
        self.pending[request["id"]] = future
        self.send(request)
        return future


class Conn(Requests, WSListener):
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

    def close(self) -> None:
        if self.transport is not None:
            try:
                self.transport.send_close()
                self.transport.disconnect()
            except Exception:
                pass


class Deliveries:
    """Counts the post deliveries to a group of subscribers and, while `record`, their latency
    (now − the send time that the publisher put in the post's text, as time.monotonic_ns()).
    `on_event` takes one message of a ``Conn``; `on_posts` one read of a ``LeanSubscriber``.
    `on_delivery`, if set, runs after each (once per read for lean subscribers)."""

    MARK = b'"text":"'
    TEXT = re.compile(rb'"text":"(\d+)"')

    def __init__(self) -> None:
        self.delivered = 0
        self.record = False
        self.latencies: list[int] = []  # ns, appended while recording
        self.on_delivery: Callable[[], None] | None = None

    def on_event(self, conn, payload: bytes) -> None:
        i = payload.find(self.MARK)
        if i < 0 or b'"type":"post"' not in payload:
            return
        self.delivered += 1
        if self.record:
            start = i + len(self.MARK)
            self.latencies.append(time.monotonic_ns() - int(payload[start:payload.index(b'"', start)]))
        if self.on_delivery is not None:
            self.on_delivery()

    def on_posts(self, conn, count: int, chunk: bytes) -> None:
        if not count:
            return
        self.delivered += count
        if self.record:
            now = time.monotonic_ns()
            self.latencies.extend([now - int(sent) for sent in self.TEXT.findall(chunk)])
        if self.on_delivery is not None:
            self.on_delivery()

    async def subscribe(self, port: int, tokens: list[str], count: int, circle: str, lean: bool) -> list:
        """`count` subscribers (token i % len(tokens)) joined to `circle` and counted here:
        ``LeanSubscriber``s with `lean`, else ``Conn``s."""
        if lean:
            conns = await connect_many(port, tokens, count, self.on_posts, connector=connect_lean)
        else:
            conns = await connect_many(port, tokens, count, self.on_event)
        await join_all(conns, circle)
        return conns


async def connect(port: int, token: str, on_event=None) -> Conn:
    url = f"ws://127.0.0.1:{port}/v1/ws?token={token}"
    _, conn = await ws_connect(lambda: Conn(on_event), url, extra_headers={"Sec-WebSocket-Protocol": "circle.v1"},
                               max_frame_size=1 << 20)
    return conn


async def connect_many(port: int, tokens: list[str], count: int, on_event=None, parallel: int = 100,
                       connector=None) -> list:
    """`count` connections, token i % len(tokens), at most `parallel` handshakes at once, made
    by `connector(port, token, on_event)` (``connect`` unless given)."""
    gate = asyncio.Semaphore(parallel)
    connector = connector or connect

    async def one(i: int):
        async with gate:
            return await connector(port, tokens[i % len(tokens)], on_event)

    return list(await asyncio.gather(*(one(i) for i in range(count))))


class LeanSubscriber(Requests, asyncio.Protocol):
    """A `circle.v1` connection for a subscriber that only counts posts, with far less CPU per
    delivery than ``Conn``: it reads whole TCP chunks and hands each run of complete frames to
    `on_posts(conn, count, chunk)` at once, with `count` the post events in it.

    Why it exists: with ``Conn`` on picows (one Python call and one payload copy per frame), the
    fan-out generator ran its core at 100 % near 440,000 deliveries/s, so it, not the server,
    set the pace and the size of the server's batches. This class still speaks the protocol: the
    WebSocket handshake is checked (101, subprotocol, Sec-WebSocket-Accept), every frame header is
    parsed, pings are answered, a close is answered, and requests (`request()`, used to join) are
    masked frames matched to their replies by id. It refuses what the benchmark never sees
    (fragments, compression, masked server frames) by closing the connection with an error
    instead of miscounting."""

    POST = b'"type":"post"'
    GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

    def __init__(self, on_posts: Callable[["LeanSubscriber", int, bytes], None] | None, host: str, path: str) -> None:
        loop = asyncio.get_event_loop()
        self.on_posts = on_posts
        self.transport: asyncio.Transport | None = None
        self.key = base64.b64encode(os.urandom(16))
        self.request_line = (f"GET {path} HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                             f"Sec-WebSocket-Key: {self.key.decode()}\r\nSec-WebSocket-Version: 13\r\n"
                             "Sec-WebSocket-Protocol: circle.v1\r\n\r\n").encode()
        self.upgraded = loop.create_future()
        self.closed = loop.create_future()
        self.close_code: int | None = None
        self.pending: dict[str, asyncio.Future] = {}
        self.buffer = b""
        self.handshake = True
        self.frames = 0
        self.next_id = 0
        self.error: str | None = None

    # asyncio.Protocol

    def connection_made(self, transport) -> None:
        self.transport = transport
        transport.write(self.request_line)

    def connection_lost(self, exc) -> None:
        if not self.upgraded.done():
            self.upgraded.set_exception(ConnectionError(f"closed during the handshake: {exc!r}"))
        if not self.closed.done():
            self.closed.set_result(self.close_code)
        for future in self.pending.values():
            if not future.done():
                future.set_exception(ConnectionError(self.error or "connection closed"))
        self.pending.clear()

    def data_received(self, data: bytes) -> None:
        buf = self.buffer + data if self.buffer else data
        if self.handshake:
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                self.buffer = buf
                return
            head, buf = buf[:end].decode("latin-1"), buf[end + 4:]
            self.handshake = False
            problem = self._check_upgrade(head)
            if problem:
                return self._fail(problem)
            self.upgraded.set_result(None)
        # Walk the complete frames; `start` is where the current run of plain text frames began.
        i, n, start, posts = 0, len(buf), 0, 0
        while n - i >= 2:
            b0, length = buf[i], buf[i + 1]
            if length < 126:
                header = 2
            elif length == 126:
                if n - i < 4:
                    break
                length, header = (buf[i + 2] << 8) | buf[i + 3], 4
            else:
                if n - i < 10:
                    break
                length, header = int.from_bytes(buf[i + 2:i + 10], "big"), 10
            end = i + header + length
            if end > n:
                break
            self.frames += 1
            if b0 != 0x81 or self.pending:  # not a whole unmasked, uncompressed text frame, or a reply is awaited
                if start < i:
                    self._run(buf[start:i])
                if not self._single(b0, buf[i + header:end]):
                    return
                start = end
            i = end
        if start < i:
            self._run(buf[start:i] if start or i < n else buf)
        self.buffer = buf[i:] if i < n else b""

    # helpers

    def _run(self, chunk: bytes) -> None:
        count = chunk.count(self.POST)
        if self.on_posts is not None:
            self.on_posts(self, count, chunk)

    def _single(self, b0: int, payload: bytes) -> bool:
        """One frame off the fast path; `False` when the connection was closed."""
        opcode = b0 & 0x0F
        if b0 & 0x70 or not b0 & 0x80 or opcode == 0:
            return self._fail(f"unexpected frame 0x{b0:02x} (fragmented or compressed)")
        if opcode == 0x1:
            if self.pending and payload.startswith(b'{"') and self.POST not in payload:
                reply = json.loads(payload)
                future = self.pending.pop(reply.get("id"), None)
                if future is not None:
                    if not future.done():
                        future.set_result(reply)
                    return True
            self._run(payload)
        elif opcode == 0x9:
            self._send(0xA, payload)
        elif opcode == 0x8:
            self.close_code = int.from_bytes(payload[:2], "big") if len(payload) >= 2 else 1005
            self._send(0x8, payload[:2])
            self.transport.close()
            return False
        return True

    def _check_upgrade(self, head: str) -> str | None:
        lines = head.split("\r\n")
        if not lines[0].startswith("HTTP/1.1 101"):
            return f"handshake refused: {lines[0]}"
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        accept = base64.b64encode(hashlib.sha1(self.key + self.GUID).digest()).decode()
        if headers.get("sec-websocket-accept") != accept:
            return "handshake: wrong Sec-WebSocket-Accept"
        if headers.get("sec-websocket-protocol") != "circle.v1":
            return "handshake: subprotocol circle.v1 not selected"
        return None

    def _fail(self, problem: str) -> bool:
        self.error = problem
        if not self.upgraded.done():
            self.upgraded.set_exception(ConnectionError(problem))
        self.transport.close()
        return False

    def _send(self, opcode: int, payload: bytes) -> None:
        mask = os.urandom(4)
        length = len(payload)
        if length < 126:
            header = bytes((0x80 | opcode, 0x80 | length))
        elif length < 1 << 16:
            header = bytes((0x80 | opcode, 0x80 | 126)) + length.to_bytes(2, "big")
        else:
            header = bytes((0x80 | opcode, 0x80 | 127)) + length.to_bytes(8, "big")
        masked = bytes(b ^ mask[k & 3] for k, b in enumerate(payload))
        self.transport.write(header + mask + masked)

    # the Conn interface that fanout.py uses

    def send(self, request: dict) -> None:
        self._send(0x1, json.dumps(request, separators=(",", ":")).encode())

    def close(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            try:
                self._send(0x8, (1000).to_bytes(2, "big"))
            except Exception:
                pass
            self.transport.close()


async def connect_lean(port: int, token: str, on_posts=None) -> LeanSubscriber:
    """A ``LeanSubscriber`` on `circle serve` at 127.0.0.1:`port`, upgraded."""
    loop = asyncio.get_event_loop()
    _, conn = await loop.create_connection(
        lambda: LeanSubscriber(on_posts, f"127.0.0.1:{port}", f"/v1/ws?token={token}"), "127.0.0.1", port)
    await asyncio.wait_for(conn.upgraded, 30)
    return conn


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
