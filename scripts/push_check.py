"""Web Push against implementations that are not ours (run by scripts/push-test).

A real `circle serve` on loopback (push on, loopback and http:// endpoints allowed) sends to a
fake push service here, which checks every request with the libraries Matrix's push gateway
uses:

1. bob makes a P-256 key pair and an auth secret here (as a browser would), reads the server's
   VAPID key from GET /v1/push/key and registers his subscription (POST /v1/push/subscriptions);
   bad subscriptions (http://, a loopback address without the flag is covered by the Swift
   tests; a short key, a short auth) get 400s.
2. alice mentions bob: one push arrives. Its `Authorization` verifies with py_vapid
   (`Vapid02.verify`), its JWT's `aud` is the push service's origin, `exp` within 24 h, `sub`
   the configured contact; the `k` is the key the server published; its body decrypts with
   http_ece (aes128gcm) and bob's private key to the expected JSON; TTL, Urgency, Topic are set.
3. alice's post that mentions no one, and one by bob himself, push nothing.
4. The push service answers 500, then 201: the push is retried and arrives once accepted.
5. carol, whose level in the circle is "none", is mentioned: no push for her.
6. bob keeps a WebSocket open (the server started with --push-away-after 0s): a mention of him
   pushes nothing (counted in circle_pushes_skipped_connected_total); once it closes, the next
   one reaches him.
7. The push service answers 410 for bob: the server deletes his subscription.
8. Two nodes on one PostgreSQL (a throwaway one from scripts/postgres-test-server): alice
   mentions bob, carol and dave five times on node 1. The push service holds bob's pushes
   unanswered; the node that sent the first one (found from the connection's socket in /proc) is
   SIGKILLed mid-send, and the service then answers. Every mention reaches bob exactly once as
   an accepted push (answered 201 to a sender still connected), sent by the surviving node once
   the dead node's lease ends; carol (level none) and dave (connected to node 2) get none.

Exits non-zero with a message at the first thing that does not hold.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import http_ece
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from py_vapid import Vapid02

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
from benchlib import dev_token, free_port, http_json  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import checklib  # noqa: E402

TIMEOUT = 60.0
CONTACT = "mailto:push-test@example.com"


def fail(message: str) -> None:
    checklib.fail("push-test", message)


def wait_for(condition, what: str, timeout: float = TIMEOUT) -> None:
    checklib.wait_for("push-test", condition, what, timeout)


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def b64url_decode(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class Subscriber:
    """A browser's half: a P-256 key pair and an auth secret."""

    def __init__(self) -> None:
        self.private_key = ec.generate_private_key(ec.SECP256R1())
        self.public = self.private_key.public_key().public_bytes(serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint)
        self.auth = bytes(range(16))

    def subscription(self, endpoint: str) -> dict:
        return {"endpoint": endpoint, "expirationTime": None, "keys": {"p256dh": b64url(self.public), "auth": b64url(self.auth)}}


class PushService:
    """A push service on loopback: records each request; answers from a script, then 201."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.received: list[dict] = []  # every request, answered or not
        self.script: dict[str, list[int]] = {}  # path -> statuses to answer next
        self.holding: set[str] = set()  # paths whose requests wait for `released`
        self.released = threading.Event()
        service = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                with service.lock:
                    queue = service.script.get(self.path, [])
                    status = queue.pop(0) if queue else 201
                    request = {"path": self.path, "headers": {k.lower(): v for k, v in self.headers.items()}, "body": body, "status": status,
                               "client_port": self.client_address[1]}
                    service.received.append(request)
                    held = self.path in service.holding
                if held:
                    # Answered once released, if the sender is still there to read it.
                    service.released.wait(TIMEOUT)
                    readable, _, _ = select.select([self.connection], [], [], 0)
                    if readable and not self.connection.recv(1, socket.MSG_PEEK):
                        with service.lock:
                            request["status"] = "abandoned"
                        return
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args) -> None:
                pass

        self.httpd = checklib.serve_http(Handler)
        self.port = self.httpd.server_address[1]

    def endpoint(self, name: str) -> str:
        return f"http://127.0.0.1:{self.port}/push/{name}"

    def to(self, name: str) -> list[dict]:
        with self.lock:
            return [r for r in self.received if r["path"] == f"/push/{name}"]


def check_push(request: dict, subscriber: Subscriber, vapid_key: str, origin: str, check_key: bool = True) -> dict:
    """Verifies one push as a push service and a browser would; returns its decrypted JSON
    (`check_key` False: the VAPID key is not compared with a published one)."""
    headers = request["headers"]
    auth = headers.get("authorization", "")
    if not Vapid02.verify(auth):
        fail(f"py_vapid does not verify the Authorization header: {auth[:80]}…")
    params = dict(part.strip().split("=", 1) for part in auth.split(" ", 1)[1].split(","))
    if check_key and params["k"] != vapid_key:
        fail(f"the push's k= {params['k']} is not the published key {vapid_key}")
    claims = json.loads(b64url_decode(params["t"].split(".")[1]))
    if claims.get("aud") != origin:
        fail(f"aud {claims.get('aud')} is not the endpoint's origin {origin}")
    if claims.get("sub") != CONTACT:
        fail(f"sub {claims.get('sub')} is not {CONTACT}")
    if not (time.time() < claims.get("exp", 0) <= time.time() + 24 * 3600):
        fail(f"exp {claims.get('exp')} is not within the next 24 h")
    if headers.get("content-encoding") != "aes128gcm":
        fail(f"Content-Encoding: {headers.get('content-encoding')}")
    if not headers.get("ttl", "").isdigit() or headers.get("urgency") not in ("very-low", "low", "normal", "high"):
        fail(f"TTL/Urgency: {headers.get('ttl')} {headers.get('urgency')}")
    topic = headers.get("topic", "")
    if not (0 < len(topic) <= 32) or any(c not in "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_" for c in topic):
        fail(f"Topic {topic!r} is not at most 32 base64url characters")
    if len(request["body"]) > 4096:
        fail(f"a push of {len(request['body'])} bytes, over 4096")
    plaintext = http_ece.decrypt(request["body"], private_key=subscriber.private_key, auth_secret=subscriber.auth, version="aes128gcm")
    return json.loads(plaintext)


def metric(port: int, name: str) -> float:
    """One unlabelled counter of GET /metrics (0 when absent)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
        conn.sendall(f"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n".encode())
        data = b""
        while chunk := conn.recv(65536):
            data += chunk
    for line in data.decode(errors="replace").splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return 0.0


def open_websocket(port: int, token: str) -> socket.socket:
    """A `circle.v1` WebSocket of `token`'s user, handshake done, kept open (its frames unread)."""
    conn = socket.create_connection(("127.0.0.1", port), timeout=10)
    key = base64.b64encode(os.urandom(16)).decode()
    conn.sendall(
        (f"GET /v1/ws?token={token} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
         f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: circle.v1\r\n\r\n").encode())
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = conn.recv(4096)
        if not chunk:
            fail("the WebSocket handshake was cut")
        head += chunk
    if not head.startswith(b"HTTP/1.1 101"):
        fail(f"the WebSocket handshake: {head[:200]!r}")
    return conn


def main() -> None:
    binary = sys.argv[1]
    service = PushService()
    with tempfile.TemporaryDirectory(prefix="circle-push-test-") as work_dir:
        work = Path(work_dir)
        port = free_port()
        log = work / "server.log"
        flags = ["--push-contact", CONTACT, "--push-allow-http", "--push-allow-private", "--push-away-after", "0s", "--push-burst-interval", "0s"]
        with checklib.running_server("push-test", binary, work / "data", port, flags, log, TIMEOUT):
            run(port, service)
        two_nodes(binary, work, service, flags)
    print("push-test: OK")


def sender_pid(client_port: int, service_port: int, pids: list[int]) -> int | None:
    """Which of `pids` holds the TCP connection from `client_port` to the push service (/proc)."""
    inode = None
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as lines:
            for line in list(lines)[1:]:
                fields = line.split()
                local, remote = fields[1], fields[2]
                if int(local.rsplit(":", 1)[1], 16) == client_port and int(remote.rsplit(":", 1)[1], 16) == service_port:
                    inode = fields[9]
    if inode is None:
        return None
    for pid in pids:
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                if os.readlink(f"/proc/{pid}/fd/{fd}") == f"socket:[{inode}]":
                    return pid
        except OSError:
            continue
    return None


def two_nodes(binary: str, work: Path, service: PushService, flags: list[str]) -> None:
    root = Path(__file__).resolve().parent.parent
    out = subprocess.run([str(root / "scripts" / "postgres-test-server"), "start", "--watch", str(os.getpid())], check=True,
                         stdout=subprocess.PIPE, text=True, timeout=300).stdout
    values = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
    url = values["CIRCLE_TEST_POSTGRES_URL"]
    pg_port = int(url.rsplit(":", 1)[1].split("/")[0])
    pgbin = os.environ.get("PGBIN", "/usr/lib/postgresql/15/bin")
    subprocess.run([f"{pgbin}/psql", "-w", "-q", "-h", "127.0.0.1", "-p", str(pg_port), "-U", "circle", "-d", "circle", "-c", "CREATE DATABASE pushes"],
                   check=True, env=dict(os.environ, PGPASSWORD="circle"), timeout=60, stdin=subprocess.DEVNULL)
    database = url.rsplit("/", 1)[0] + "/pushes?sslmode=disable"
    node_flags = flags + ["--postgres", database, "--jwt-secret", "push-test-secret-" + "x" * 32]
    ports = [free_port(), free_port()]
    logs = [work / "node1.log", work / "node2.log"]
    with contextlib.ExitStack() as stack:
        nodes = [stack.enter_context(checklib.running_server("push-test", binary, work / f"node{i + 1}", ports[i], node_flags, logs[i], TIMEOUT))
                 for i in range(2)]
        alice, bob, carol, dave = (dev_token(ports[0], name) for name in ("alice", "bob", "carol", "dave"))
        devices = {name: Subscriber() for name in ("kbob", "kcarol", "kdave")}
        for token, name in ((bob, "kbob"), (carol, "kcarol"), (dave, "kdave")):
            status, body = http_json("POST", ports[1], "/v1/push/subscriptions", token, devices[name].subscription(service.endpoint(name)))
            if status != 201:
                fail(f"{name}'s subscription on node 2: {status} {body}")
        status, body = http_json("POST", ports[0], "/v1/circles", alice, {"name": "shared"})
        if status not in (200, 201):
            fail(f"creating the circle: {status} {body}")
        for token, who in ((bob, "bob"), (carol, "carol"), (dave, "dave")):
            status, body = http_json("POST", ports[1], "/v1/circles/shared/messages", token, {"text": f"hello from {who}", "id": f"hello-{who}"})
            if status not in (200, 201):
                fail(f"{who}'s first post: {status} {body}")
        status, body = http_json("PUT", ports[1], "/v1/circles/shared/notify", carol, {"level": "none"})
        if status != 200:
            fail(f"carol's level: {status} {body}")
        marks = metric(ports[1], "circle_connection_marks_written_total")
        connection = open_websocket(ports[1], dave)
        wait_for(lambda: metric(ports[1], "circle_connection_marks_written_total") > marks, "dave's connection recorded on node 2")
        with service.lock:
            service.holding.add("/push/kbob")
        seqs = []
        for i in range(5):
            status, body = http_json("POST", ports[0], "/v1/circles/shared/messages", alice, {"text": f"@bob @carol @dave number {i}", "id": f"n-{i}"})
            if status not in (200, 201):
                fail(f"mention {i}: {status} {body}")
            seqs.append(int(body.get("seq") or body.get("post", {}).get("seq")))
        wait_for(lambda: len(service.to("kbob")) >= 1, "bob's first push, held")
        first = service.to("kbob")[0]
        pid = sender_pid(first["client_port"], service.port, [node.pid for node in nodes])
        if pid is None:
            fail("no node holds the connection of bob's first push")
        killed = next(i for i, node in enumerate(nodes) if node.pid == pid)
        nodes[killed].send_signal(signal.SIGKILL)
        nodes[killed].wait(timeout=30)
        with service.lock:
            service.holding.clear()
        service.released.set()

        def accepted() -> list[int]:
            return [check_push(r, devices["kbob"], "", f"http://127.0.0.1:{service.port}", check_key=False)["seq"]
                    for r in service.to("kbob") if r["status"] == 201]

        # The dead node's lease (the push timeout, 10 s, plus 10 s) ends before the survivor sends its pushes.
        wait_for(lambda: set(seqs) <= set(accepted()), "every mention accepted after the SIGKILL", timeout=90)
        counts = {seq: accepted().count(seq) for seq in seqs}
        if any(count != 1 for count in counts.values()):
            fail(f"mentions accepted more than once: {counts}")
        abandoned = sum(1 for r in service.to("kbob") if r["status"] == "abandoned")
        if service.to("kcarol") or service.to("kdave"):
            fail(f"carol (level none) got {len(service.to('kcarol'))} pushes, dave (connected) {len(service.to('kdave'))}")
        connection.close()
        print(f"push-test: two PostgreSQL nodes, node {killed + 1} SIGKILLed while sending: each of the {len(seqs)} mentions accepted "
              f"exactly once from the surviving node ({abandoned} send(s) abandoned by the dead node); none for carol (level none) or "
              "dave (connected to node 2)")


def run(port: int, service: PushService) -> None:
    alice, bob, carol = (dev_token(port, name) for name in ("alice", "bob", "carol"))
    origin = f"http://127.0.0.1:{service.port}"

    status, key = http_json("GET", port, "/v1/push/key", bob)
    if status != 200 or not key.get("enabled") or len(b64url_decode(key.get("publicKey", ""))) != 65:
        fail(f"GET /v1/push/key: {status} {key}")
    vapid_key = key["publicKey"]

    bob_device, carol_device = Subscriber(), Subscriber()
    for bad, why in [
        ({**bob_device.subscription(service.endpoint("bob")), "keys": {"p256dh": "BBBB", "auth": b64url(bob_device.auth)}}, "a short key"),
        ({**bob_device.subscription(service.endpoint("bob")), "keys": {"p256dh": b64url(bob_device.public), "auth": "AAAA"}}, "a short auth"),
        ({**bob_device.subscription("ftp://127.0.0.1/x")}, "an ftp:// endpoint"),
    ]:
        status, body = http_json("POST", port, "/v1/push/subscriptions", bob, bad)
        if status != 400:
            fail(f"subscribing with {why}: {status} {body}")
    status, body = http_json("POST", port, "/v1/push/subscriptions", bob, bob_device.subscription(service.endpoint("bob")))
    if status != 201:
        fail(f"bob's subscription: {status} {body}")
    status, body = http_json("POST", port, "/v1/push/subscriptions", carol, carol_device.subscription(service.endpoint("carol")))
    if status != 201:
        fail(f"carol's subscription: {status} {body}")
    status, listed = http_json("GET", port, "/v1/push/subscriptions", bob)
    if status != 200 or [s["endpoint"] for s in listed.get("subscriptions", [])] != [service.endpoint("bob")]:
        fail(f"bob's subscriptions: {status} {listed}")

    status, body = http_json("POST", port, "/v1/circles", alice, {"name": "lobby"})
    if status not in (200, 201):
        fail(f"creating the circle: {status} {body}")
    # bob and carol post once: in a public circle, a name that has posted there is mentionable.
    for token, who in ((bob, "bob"), (carol, "carol")):
        status, body = http_json("POST", port, "/v1/circles/lobby/messages", token, {"text": f"hello from {who}", "id": f"hello-{who}"})
        if status not in (200, 201):
            fail(f"{who}'s first post: {status} {body}")
    status, body = http_json("PUT", port, "/v1/circles/lobby/notify", carol, {"level": "none"})
    if status != 200:
        fail(f"carol's level: {status} {body}")

    def post(token: str, text: str, key: str) -> int:
        status, body = http_json("POST", port, "/v1/circles/lobby/messages", token, {"text": text, "id": key})
        if status not in (200, 201):
            fail(f"posting {text!r}: {status} {body}")
        return int(body.get("seq") or body.get("post", {}).get("seq"))

    # 2. A mention: one push, verified and decrypted.
    seq = post(alice, "@bob and @carol, look at this", "m1")
    wait_for(lambda: len(service.to("bob")) >= 1, "bob's push")
    payload = check_push(service.to("bob")[0], bob_device, vapid_key, origin)
    expected = {"kind": "mention", "circle": "lobby", "seq": seq, "author": "alice", "text": "@bob and @carol, look at this"}
    if payload != expected:
        fail(f"the decrypted push is {payload}, not {expected}")
    print(f"push-test: a mention arrived; py_vapid verified its VAPID JWT (aud {origin}, sub {CONTACT}), http_ece decrypted {payload}")

    # 3 and 5: nothing for a post without mentions, for bob's own post, nor for carol (level none).
    post(alice, "no one in particular", "m2")
    post(bob, "talking to myself @bob", "m3")
    # 4. 500, then 201: retried. Its arrival also shows the posts before it queued nothing.
    with service.lock:
        service.script["/push/bob"] = [500]
    seq = post(alice, "again, @bob", "m4")
    wait_for(lambda: len(service.to("bob")) >= 3, "bob's push, retried after a 500")
    attempts = service.to("bob")[1:]
    if [r["status"] for r in attempts] != [500, 201]:
        fail(f"the push service answered {[r['status'] for r in attempts]} to bob's pushes")
    for request in attempts:
        if check_push(request, bob_device, vapid_key, origin)["seq"] != seq:
            fail("the retried push is not the post that mentioned bob")
    if service.to("carol"):
        fail(f"carol (level none) got {len(service.to('carol'))} pushes")
    print("push-test: a 500 was retried until the push service took the push; nothing for posts without a mention, the author's own, or a level of none")

    # Level all: carol now wants every post of the lobby, a post with no mention included.
    status, body = http_json("PUT", port, "/v1/circles/lobby/notify", carol, {"level": "all"})
    if status != 200:
        fail(f"carol's level all: {status} {body}")
    seq = post(alice, "the lobby opens at nine", "a1")
    wait_for(lambda: len(service.to("carol")) >= 1, "carol's push at level all")
    payload = check_push(service.to("carol")[0], carol_device, vapid_key, origin)
    expected = {"kind": "post", "circle": "lobby", "seq": seq, "author": "alice", "text": "the lobby opens at nine"}
    if payload != expected:
        fail(f"carol's push at level all is {payload}, not {expected}")
    print("push-test: at level all, a post without a mention was pushed as kind post")

    # 6. Connected: no push. A bare WebSocket handshake is enough (the connection is open).
    marks = metric(port, "circle_connection_marks_written_total")
    connection = open_websocket(port, bob)
    wait_for(lambda: metric(port, "circle_connection_marks_written_total") > marks, "bob's connection recorded")
    before = len(service.to("bob"))
    skipped = metric(port, "circle_pushes_skipped_connected_total")
    post(alice, "while you are here @bob", "m-connected")
    wait_for(lambda: metric(port, "circle_pushes_skipped_connected_total") == skipped + 1, "bob's push skipped while connected")
    if len(service.to("bob")) != before:
        fail("bob got a push while connected")
    marks = metric(port, "circle_connection_marks_written_total")
    connection.close()
    wait_for(lambda: metric(port, "circle_connection_marks_written_total") > marks, "bob's disconnection recorded")
    seq = post(alice, "now that you left @bob", "m-away")
    wait_for(lambda: len(service.to("bob")) > before, "bob's push once away")
    if check_push(service.to("bob")[-1], bob_device, vapid_key, origin)["seq"] != seq:
        fail("the push after bob left is not the post that mentioned him")
    print("push-test: no push to bob while his WebSocket was open; one as soon as it closed")

    # 7. 410: the subscription goes.
    with service.lock:
        service.script["/push/bob"] = [410]
    post(alice, "are you there @bob", "m5")
    wait_for(lambda: len(service.to("bob")) >= before + 2, "bob's push answered 410")

    def subscriptions() -> list:
        status, listed = http_json("GET", port, "/v1/push/subscriptions", bob)
        return listed.get("subscriptions", []) if status == 200 else ["?"]

    wait_for(lambda: subscriptions() == [], "bob's subscription to go after the 410")
    print("push-test: a 410 deleted the subscription")


if __name__ == "__main__":
    main()
