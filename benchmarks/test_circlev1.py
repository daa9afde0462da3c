"""Self-test of circlev1.LeanSubscriber's frame walk (run by `run.sh --smoke`, so by CI).

Feeds a made-up server stream (the 101 response, then post events of every frame-length form,
other events, and pings) to a LeanSubscriber in pieces cut at random places, and checks that it
counts every post once, hands over every post's text, answers every ping with a pong, and
refuses what it does not handle (a fragment) by closing instead of miscounting.

    .venv/bin/python test_circlev1.py
"""
from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import random
import re
import sys

import circlev1

TEXT = re.compile(rb'"text":"(\d+)"')


class FakeTransport:
    def __init__(self) -> None:
        self.out: list[bytes] = []
        self.closed = False

    def write(self, data: bytes) -> None:
        self.out.append(data)

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed


def frame(first_byte: int, payload: bytes) -> bytes:
    n = len(payload)
    if n < 126:
        return bytes((first_byte, n)) + payload
    if n < 1 << 16:
        return bytes((first_byte, 126)) + n.to_bytes(2, "big") + payload
    return bytes((first_byte, 127)) + n.to_bytes(8, "big") + payload


def upgraded(conn: circlev1.LeanSubscriber) -> bytes:
    accept = base64.b64encode(hashlib.sha1(conn.key + conn.GUID).digest())
    return (b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            b"Sec-WebSocket-Accept: " + accept + b"\r\nSec-WebSocket-Protocol: circle.v1\r\n\r\n")


def subscriber(sink: list) -> tuple[circlev1.LeanSubscriber, FakeTransport]:
    def on_posts(conn, count: int, chunk: bytes) -> None:
        sink.append((count, [int(t) for t in TEXT.findall(chunk)]))
    conn = circlev1.LeanSubscriber(on_posts, "127.0.0.1:1", "/v1/ws?token=t")
    transport = FakeTransport()
    conn.connection_made(transport)
    return conn, transport


def feed(conn: circlev1.LeanSubscriber, stream: bytes, rng: random.Random) -> None:
    i = 0
    while i < len(stream):
        j = min(len(stream), i + rng.choice((1, 2, 3, 7, 100, 5000, 100_000)))
        conn.data_received(stream[i:j])
        i = j


async def main() -> int:
    rng = random.Random(14)
    for trial in range(100):
        sink: list = []
        conn, transport = subscriber(sink)
        stream, sent, pings = upgraded(conn), [], 0
        for seq in range(200):
            r = rng.random()
            if r < 0.05:
                pings += 1
                stream += frame(0x89, b"p%d" % seq)
                continue
            if r < 0.10:
                stream += frame(0x81, json.dumps({"type": "presence", "user": "x" * rng.randint(0, 300)}).encode())
                continue
            text = rng.randint(0, 10**12)
            sent.append(text)
            pad = "y" * rng.choice((0, 10, 200, 70_000))  # every length form: 7 bits, 16 bits, 64 bits
            stream += frame(0x81, (f'{{"author":"a","circle":"bench","id":"x{seq}","pad":"{pad}","seq":{seq},'
                                   f'"text":"{text}","time":1,"type":"post"}}').encode())
        feed(conn, stream, rng)
        counted = sum(count for count, _ in sink)
        texts = [t for _, ts in sink for t in ts]
        assert conn.upgraded.done() and conn.upgraded.exception() is None, f"trial {trial}: not upgraded"
        assert counted == len(sent), f"trial {trial}: counted {counted} posts of {len(sent)}"
        assert texts == sent, f"trial {trial}: the posts' texts differ"
        pongs = [out for out in transport.out[1:] if out[0] == 0x8A]
        assert len(pongs) == pings, f"trial {trial}: {len(pongs)} pongs for {pings} pings"
        assert conn.buffer == b"" and not transport.closed, f"trial {trial}: left over or closed"

    # A fragment (FIN clear) is refused: the connection is closed and nothing is counted.
    sink = []
    conn, transport = subscriber(sink)
    conn.data_received(upgraded(conn) + frame(0x01, b'{"text":"1","type":"post"'))
    assert transport.closed and conn.error and not sink, "a fragment was not refused"
    # A wrong Sec-WebSocket-Accept fails the handshake.
    conn, transport = subscriber([])
    conn.data_received(b"HTTP/1.1 101 Switching Protocols\r\nSec-WebSocket-Accept: x\r\n"
                       b"Sec-WebSocket-Protocol: circle.v1\r\n\r\n")
    assert transport.closed and isinstance(conn.upgraded.exception(), ConnectionError), "a bad accept was taken"
    print("circlev1.LeanSubscriber: 100 streams cut at random places, every post counted once; fragments "
          "and a bad handshake refused")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
