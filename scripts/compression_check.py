"""permessage-deflate on /v1/ws, checked with an independent peer (Python `websockets`).

Starts `circle serve --compression --compression-min-bytes 512` on loopback and connects three
clients: one offering plain permessage-deflate (the server keeps its compression context across
messages), one asking for server_no_context_takeover (every message compressed on its own; the
server's hub compresses a fanned-out post once for all such subscribers), and one without
compression. A fourth client posts a large and a small message. For every received frame, a
recording extension placed before websockets' own inflater notes the RSV1 bit and the size on
the wire. Checks:

- a large post event arrives with RSV1 set and fewer bytes on the wire than its JSON;
- small events and acks (under the threshold) arrive with RSV1 clear;
- every message decodes to the post that was sent (websockets inflates and validates it);
- with context takeover, the same large post sent again is less than half as large on the wire
  the second time; without it, both copies cost about the same;
- the client that did not offer compression gets no compressed frame.

Usage: compression_check.py PATH_TO_CIRCLE_BINARY. Exits non-zero with a message on failure.
"""
from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from websockets.asyncio.client import connect
from websockets.extensions.base import Extension
from websockets.extensions.permessage_deflate import ClientPerMessageDeflateFactory
from websockets.frames import Frame, Opcode

# The benchmarks' helpers (standard library only): free_port, http_json, dev_token.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
from benchlib import dev_token, free_port, http_json  # noqa: E402

THRESHOLD = 512
TIMEOUT = 30.0


class Recorder(Extension):
    """Sees every inbound data frame before the inflater does: (opcode, rsv1, wire bytes)."""

    name = "x-recorder"

    def __init__(self) -> None:
        self.frames: list[tuple[Opcode, bool, int]] = []

    def decode(self, frame: Frame, *, max_size: int | None = None) -> Frame:
        if frame.opcode in (Opcode.TEXT, Opcode.BINARY, Opcode.CONT):
            self.frames.append((frame.opcode, frame.rsv1, len(frame.data)))
        return frame

    def encode(self, frame: Frame) -> Frame:
        return frame


def fail(message: str) -> None:
    sys.exit(f"compression check FAILED: {message}")


def wait_until_up(port: int, server: subprocess.Popen) -> None:
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        if server.poll() is not None:
            fail(f"the server exited with {server.returncode}")
        try:
            if http_json("GET", port, "/healthz")[0] == 200:
                return
        except OSError:
            pass
        time.sleep(0.1)
    fail("the server did not answer /healthz within 30 s")


class Client:
    def __init__(self, name: str, ws, recorder: Recorder | None) -> None:
        self.name = name
        self.ws = ws
        self.recorder = recorder
        self.seen = 0  # how many recorded frames were matched to messages

    async def request(self, request: dict) -> dict:
        await self.ws.send(json.dumps(request))
        return await self.until(lambda m: m.get("id") == request["id"] and m.get("type") in ("ack", "error", "history"))

    async def until(self, match) -> dict:
        """Reads messages until one matches; returns it (with its frame's rsv1 and wire size)."""
        while True:
            raw = await asyncio.wait_for(self.ws.recv(), TIMEOUT)
            message = json.loads(raw)
            if self.recorder is not None:
                opcode, rsv1, wire = self.recorder.frames[self.seen]
                self.seen += 1
                message["_rsv1"], message["_wire"], message["_size"] = rsv1, wire, len(raw.encode())
            if match(message):
                return message


async def open_client(port: int, token: str, name: str, extensions) -> Client:
    ws = await connect(
        f"ws://127.0.0.1:{port}/v1/ws?token={token}",
        subprotocols=["circle.v1"],
        extensions=extensions,
        compression=None,
        max_size=2**20,
        open_timeout=TIMEOUT,
    )
    recorder = Recorder()
    # Decoding runs through the extensions in reverse: the recorder sees the raw frame first.
    ws.protocol.extensions.append(recorder)
    return Client(name, ws, recorder)


async def check(port: int) -> None:
    tokens = {user: dev_token(port, user) for user in ("ann", "bob", "cat", "dan")}
    status, body = http_json("POST", port, "/v1/circles", tokens["ann"], {"name": "squeeze"})
    if status not in (200, 201):
        fail(f"creating the circle: {status} {body}")

    takeover = await open_client(port, tokens["bob"], "context takeover", [ClientPerMessageDeflateFactory()])
    independent = await open_client(
        port, tokens["cat"], "server_no_context_takeover", [ClientPerMessageDeflateFactory(server_no_context_takeover=True)]
    )
    plain = await open_client(port, tokens["dan"], "no compression", None)
    poster = await open_client(port, tokens["ann"], "poster", [ClientPerMessageDeflateFactory()])
    agreed = {c.name: c.ws.response.headers.get("Sec-WebSocket-Extensions") for c in (takeover, independent, plain)}
    if not agreed["context takeover"] or "permessage-deflate" not in agreed["context takeover"]:
        fail(f"the server did not accept permessage-deflate: {agreed}")
    if "server_no_context_takeover" not in (agreed["server_no_context_takeover"] or ""):
        fail(f"the server did not accept server_no_context_takeover: {agreed}")
    if agreed["no compression"]:
        fail(f"the server answered extensions that were not offered: {agreed}")

    for client in (takeover, independent, plain, poster):
        reply = await client.request({"action": "join", "id": "j", "circle": "squeeze"})
        if reply["type"] != "ack":
            fail(f"{client.name}: join answered {reply}")
        if client is not plain and reply["_rsv1"]:
            fail(f"{client.name}: a {reply['_size']}-byte ack came compressed (threshold {THRESHOLD})")

    large = " ".join(f"word{i % 37} and some repeated prose about circles" for i in range(80))
    small = "hi"
    texts = [large, small, large]
    for index, text in enumerate(texts):
        reply = await poster.request({"action": "post", "id": f"p{index}", "circle": "squeeze", "text": text})
        if reply["type"] != "ack":
            fail(f"post {index} answered {reply}")

    for client in (takeover, independent, plain):
        events = []
        for index, text in enumerate(texts):
            event = await client.until(lambda m: m.get("type") == "post")
            if event["text"] != text or event["author"] != "ann":
                fail(f"{client.name}: event {index} decoded to {event!r:.200}")
            events.append(event)
        big1, tiny, big2 = events
        print(
            f"{client.name:28} large post: {big1['_size']} B JSON -> {big1['_wire']} B then {big2['_wire']} B on the wire"
            f" (RSV1 {big1['_rsv1']}); small post {tiny['_size']} B -> {tiny['_wire']} B (RSV1 {tiny['_rsv1']})"
        )
        if tiny["_rsv1"] or tiny["_wire"] != tiny["_size"]:
            fail(f"{client.name}: the {tiny['_size']}-byte event was compressed (threshold {THRESHOLD})")
        if client is plain:
            if big1["_rsv1"] or big2["_rsv1"]:
                fail("a client that did not offer compression got a compressed frame")
            continue
        for big in (big1, big2):
            if not big["_rsv1"]:
                fail(f"{client.name}: the {big['_size']}-byte post event arrived uncompressed (RSV1 clear)")
            if big["_wire"] >= big["_size"]:
                fail(f"{client.name}: {big['_wire']} bytes on the wire for a {big['_size']}-byte message")
        # The two copies differ only in seq, id and time: with the context kept, the second one
        # refers back to the first and shrinks to a fraction; without it, it costs about the same.
        if client is takeover and big2["_wire"] * 2 >= big1["_wire"]:
            fail(f"context takeover: the repeated post was not much smaller ({big1['_wire']} then {big2['_wire']} bytes)")
        if client is independent and big2["_wire"] * 2 < big1["_wire"]:
            fail(f"no context takeover: the repeated post shrank from {big1['_wire']} to {big2['_wire']} bytes")

    # A history reply over the threshold is compressed too (a reply, not a fanned-out event).
    reply = await takeover.request({"action": "history", "id": "h", "circle": "squeeze", "limit": 3})
    if reply["type"] != "history" or [p["text"] for p in reply["posts"]] != texts:
        fail(f"history decoded to {reply!r:.200}")
    if not reply["_rsv1"] or reply["_wire"] >= reply["_size"]:
        fail(f"a {reply['_size']}-byte history reply went {reply['_wire']} bytes, RSV1 {reply['_rsv1']}")
    for client in (takeover, independent, plain, poster):
        await client.ws.close()
    print("compression check passed")


def main() -> None:
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    binary = sys.argv[1]
    port = free_port()
    data = tempfile.mkdtemp(prefix="circle-compression-")
    server = subprocess.Popen(
        [binary, "serve", "--port", str(port), "--data", data, "--dev", "--log-level", "warning",
         "--compression", "--compression-min-bytes", str(THRESHOLD)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
    )
    try:
        wait_until_up(port, server)
        asyncio.run(asyncio.wait_for(check(port), 120))
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        shutil.rmtree(data, ignore_errors=True)


if __name__ == "__main__":
    main()
