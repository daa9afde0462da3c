"""Tracing against an OTLP receiver that is not ours (run by scripts/tracing-test).

A real `circle serve --otlp-endpoint` on loopback exports its spans over OTLP/HTTP to a receiver
here, which decodes every request with the `opentelemetry-proto` package (the protobuf classes
the OpenTelemetry collector uses): `ExportTraceServiceRequest` from `/v1/traces`.

1. An HTTP post with a W3C `traceparent` header: its request span (`POST
   /v1/circles/{name}/messages`, kind server) continues that trace as the caller's child; under
   it, `circle.post` with the circle and the seq the ack gave, and its events
   `circle.commit.begin`, `circle.commit.end` (with the batch's size) and `circle.fanout.end`, in
   order, within its time.
2. A post over the WebSocket (`circle send`, through the SDK): a `circle.post` trace of its own,
   with the same events.
3. The server's log lines written while a request's span is current carry its `trace_id` (the
   server runs with `--log-level debug`, which logs each request).
4. The resource says `service.name` circle.

Exits non-zero with a message at the first thing that does not hold.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import tempfile
import threading
import urllib.request
from http.server import BaseHTTPRequestHandler
from pathlib import Path

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest, ExportTraceServiceResponse
from opentelemetry.proto.trace.v1.trace_pb2 import Span

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
from benchlib import dev_token, free_port, http_json  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import checklib  # noqa: E402

TIMEOUT = 60.0


def fail(message: str) -> None:
    checklib.fail("tracing-test", message)


def wait_for(condition, what: str, timeout: float = TIMEOUT) -> None:
    checklib.wait_for("tracing-test", condition, what, timeout)


class Receiver:
    """An OTLP/HTTP traces endpoint: decodes each export, keeps its spans and resources."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.spans: list[Span] = []
        self.resources: list[dict] = []
        self.problems: list[str] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                with receiver.lock:
                    if self.path != "/v1/traces" or self.headers.get("Content-Type") != "application/x-protobuf":
                        receiver.problems.append(f"an export to {self.path} as {self.headers.get('Content-Type')}")
                    request = ExportTraceServiceRequest()
                    request.ParseFromString(body)
                    for resource_spans in request.resource_spans:
                        receiver.resources.append({a.key: a.value.string_value for a in resource_spans.resource.attributes})
                        for scope_spans in resource_spans.scope_spans:
                            receiver.spans.extend(scope_spans.spans)
                answer = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args) -> None:
                pass

        self.httpd = checklib.serve_http(Handler)
        self.port = self.httpd.server_address[1]

    def named(self, name: str) -> list[Span]:
        with self.lock:
            return [span for span in self.spans if span.name == name]

    def by_id(self, span_id: bytes) -> Span | None:
        with self.lock:
            return next((span for span in self.spans if span.span_id == span_id), None)


def attributes(span: Span) -> dict:
    values = {}
    for attribute in span.attributes:
        value = attribute.value
        values[attribute.key] = value.string_value if value.HasField("string_value") else value.int_value if value.HasField("int_value") else value.bool_value
    return values


def children(receiver: Receiver, parent: Span) -> dict[str, Span]:
    with receiver.lock:
        return {span.name: span for span in receiver.spans if span.parent_span_id == parent.span_id and span.trace_id == parent.trace_id}


def check_post_span(post: Span, seq: int, how: str) -> None:
    """`circle.post` with its circle and seq, and its commit and fan-out events in order within it."""
    values = attributes(post)
    if values.get("circle.circle") != "lobby" or values.get("circle.seq") != seq:
        fail(f"the {how} circle.post span says {values}, not lobby seq {seq}")
    names = [event.name for event in post.events]
    if names != ["circle.commit.begin", "circle.commit.end", "circle.fanout.end"]:
        fail(f"the {how} post's events are {names}")
    times = [post.start_time_unix_nano] + [event.time_unix_nano for event in post.events] + [post.end_time_unix_nano]
    if times != sorted(times):
        fail(f"the {how} post's events are not in order within it: {times}")
    batch = {a.key: a.value.int_value for a in post.events[1].attributes}.get("circle.batch", 0)
    if batch < 1:
        fail(f"circle.commit.end has no batch size: {post.events[1]}")


def main() -> None:
    binary = sys.argv[1]
    receiver = Receiver()
    with tempfile.TemporaryDirectory(prefix="circle-tracing-test-") as work_dir:
        work = Path(work_dir)
        port = free_port()
        log = work / "server.log"
        # Export every 200 ms (the OpenTelemetry variable the exporter honours) rather than 5 s.
        os.environ["OTEL_BSP_SCHEDULE_DELAY"] = "200"
        flags = ["--otlp-endpoint", f"http://127.0.0.1:{receiver.port}", "--log-level", "debug"]
        with checklib.running_server("tracing-test", binary, work / "data", port, flags, log, TIMEOUT):
            run(binary, port, receiver, log)


def run(binary: str, port: int, receiver: Receiver, log: Path) -> None:
    alice = dev_token(port, "alice")
    status, body = http_json("POST", port, "/v1/circles", alice, {"name": "lobby"})
    if status not in (200, 201):
        fail(f"creating the circle: {status} {body}")

    # 1. An HTTP post that continues the caller's trace.
    trace_id, caller = secrets.token_bytes(16), secrets.token_bytes(8)
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/circles/lobby/messages", method="POST",
        data=b'{"text": "traced over HTTP", "id": "http-1"}',
        headers={"Authorization": f"Bearer {alice}", "Content-Type": "application/json",
                 "traceparent": f"00-{trace_id.hex()}-{caller.hex()}-01"},
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        ack = __import__("json").loads(response.read())
    seq = int(ack.get("seq") or ack.get("post", {}).get("seq"))

    def http_span() -> Span | None:
        return next((s for s in receiver.named("/v1/circles/{name}/messages") if s.trace_id == trace_id), None)

    wait_for(lambda: http_span() is not None, "the HTTP request's span in the caller's trace")
    route = http_span()
    if route.parent_span_id != caller or route.kind != Span.SPAN_KIND_SERVER:
        fail(f"the request span's parent is {route.parent_span_id.hex()} (kind {route.kind}), not the caller's {caller.hex()}")
    values = attributes(route)
    if values.get("http.request.method") != "POST" or values.get("http.response.status_code") not in (200, 201):
        fail(f"the request span says {values}")
    wait_for(lambda: children(receiver, route).get("circle.post") is not None, "circle.post under the request's span")
    check_post_span(children(receiver, route)["circle.post"], seq, "HTTP")
    print(f"tracing-test: an HTTP post continued the caller's trace {trace_id.hex()}: request span, circle.post (seq {seq}) "
          "with its commit and fan-out events in order")

    # 2. A post over the WebSocket, through the SDK.
    sent = subprocess.run(
        [binary, "send", "lobby", "traced over the WebSocket", "--server", f"ws://127.0.0.1:{port}/v1/ws", "--token", alice],
        capture_output=True, text=True, timeout=TIMEOUT,
    )
    if sent.returncode != 0 or not sent.stdout.strip().startswith("#"):
        fail(f"circle send: {sent.returncode} {sent.stdout} {sent.stderr}")
    ws_seq = int(sent.stdout.strip().lstrip("#"))

    def ws_post() -> Span | None:
        return next((s for s in receiver.named("circle.post") if attributes(s).get("circle.seq") == ws_seq), None)

    wait_for(lambda: ws_post() is not None, "the WebSocket post's span")
    post = ws_post()
    check_post_span(post, ws_seq, "WebSocket")
    if post.trace_id == trace_id:
        fail("the WebSocket post joined the HTTP post's trace")
    print(f"tracing-test: a WebSocket post (seq {ws_seq}) was traced from its frame to its fan-out")

    # 3. Trace ids in the log lines of a request.
    wait_for(lambda: f"trace_id={trace_id.hex()}" in log.read_text(errors="replace"), "a log line with the HTTP request's trace id")
    # 4. The resource.
    with receiver.lock:
        if not receiver.resources or any(r.get("service.name") != "circle" for r in receiver.resources):
            fail(f"resources: {receiver.resources[:2]}")
        if receiver.problems:
            fail(f"the receiver saw: {receiver.problems}")
        total = len(receiver.spans)
    print(f"tracing-test: the log line of the request carries trace_id={trace_id.hex()}; {total} spans decoded with opentelemetry-proto, "
          "service.name circle")
    print("tracing-test: OK")


if __name__ == "__main__":
    main()
