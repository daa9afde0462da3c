"""Webhooks against an implementation that is not ours (run by scripts/webhook-test).

A real `circle serve` on loopback delivers to a receiver here that checks every request with
the `standardwebhooks` package (the Standard Webhooks reference library for Python):

1. An admin subscribes the receiver to one circle; 20 posts are each delivered, verified, with
   the entry as data, in `seq` order (a member without an account cannot subscribe).
2. The receiver answers 500 twice, then hangs past the server's timeout once: the server
   retries with the same `webhook-id`, and everything still arrives, in order.
3. The receiver is down (503) while the server is killed with SIGKILL mid-stream; a new server
   on the same data delivers every entry the old one acknowledged: nothing is lost.
4. Rotating the secret: deliveries carry two signatures, each verified by its own secret. An
   answer over 64 KiB and a redirect (to a private address) are failed attempts, retried.
5. A subscription to 127.0.0.1 is refused by a server without --allow-private-outbound.
6. The example bot (examples/bots/ping_bot.py, standard library and standardwebhooks only)
   answers "@pingbot ping": its JSON reply becomes the bot's post in the circle, once.
7. A subscription with a bot and the events member and mention: adding a member brings one
   verified `member` delivery (the system entry: added, the member, who added them), a post
   that mentions the bot one `mention` delivery, and nothing else.
8. Two nodes on one PostgreSQL (a throwaway one from scripts/postgres-test-server): posts to
   both, the receiver slow, one node SIGKILLed mid-stream; every acknowledged post arrives, in
   order, each under one webhook-id, sent by whichever node holds its lease.

Exits non-zero with a message at the first thing that does not hold.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from standardwebhooks.webhooks import Webhook, WebhookVerificationError

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
from benchlib import dev_token, free_port, http_json  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import checklib  # noqa: E402

TIMEOUT = 60.0
PASSWORD = "correct horse battery"


def fail(message: str) -> None:
    checklib.fail("webhook-test", message)


def wait_for(condition, what: str, timeout: float = TIMEOUT) -> None:
    checklib.wait_for("webhook-test", condition, what, timeout)


class Receiver:
    """An endpoint that verifies each delivery with `standardwebhooks` and records it."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.secrets: list[str] = []
        self.accepted: list[dict] = []  # verified and answered 2xx, in arrival order
        self.requests = 0
        self.errors: list[str] = []
        self.script: list[str] = []  # what to do with the next requests: "500", "hang", "down"
        self.down = False
        self.slow = 0.0  # seconds before each answer
        self.hang_seconds = 4.0
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                headers = {k: v for k, v in self.headers.items()}
                with receiver.lock:
                    receiver.requests += 1
                    action = "down" if receiver.down else (receiver.script.pop(0) if receiver.script else "ok")
                    secrets = list(receiver.secrets)
                # Every request must verify with every secret the receiver was given (a rotation
                # sends one signature per secret).
                payload = None
                for secret in secrets:
                    try:
                        payload = Webhook(secret).verify(body, headers)
                    except WebhookVerificationError as error:
                        with receiver.lock:
                            receiver.errors.append(f"{headers.get('webhook-id')}: {error} (secret {secret[:12]}…)")
                if action == "hang":
                    time.sleep(receiver.hang_seconds)
                    return
                if receiver.slow:
                    time.sleep(receiver.slow)
                if action == "huge":
                    # A 2xx whose answer is over the server's 64 KiB limit: a failed attempt.
                    self.send_response(200)
                    self.send_header("Content-Length", str(1 << 20))
                    self.end_headers()
                    try:
                        self.wfile.write(b"x" * (1 << 20))
                    except OSError:
                        pass
                    return
                if action == "redirect":
                    # Redirects are never followed (here, to a private address).
                    self.send_response(307)
                    self.send_header("Location", "http://10.0.0.1/steal")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                status = {"ok": 200, "500": 500, "down": 503}[action]
                if status == 200 and payload is not None:
                    with receiver.lock:
                        receiver.accepted.append({"id": headers.get("webhook-id"), **payload})
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    def seqs(self, type_: str | None = None) -> list[int]:
        with self.lock:
            return [d["data"]["seq"] for d in self.accepted if type_ is None or d["type"] == type_]

    def check_clean(self) -> None:
        with self.lock:
            if self.errors:
                fail(f"deliveries that standardwebhooks refused: {self.errors[:3]}")


def start_server(binary: str, data: Path, port: int, flags: list[str], log: Path) -> subprocess.Popen:
    return checklib.start_server("webhook-test", binary, data, port, flags, log, TIMEOUT)


def send(binary: str, port: int, token: str, circle: str, lines: list[str]) -> list[int]:
    """Posts each line through `circle send` (the SDK: every post acknowledged); returns the seqs."""
    result = subprocess.run(
        [binary, "send", circle, "--token", token, "--server", f"ws://127.0.0.1:{port}/v1/ws"],
        input="".join(line + "\n" for line in lines), capture_output=True, text=True, timeout=120,
    )
    if result.returncode != 0:
        fail(f"circle send exited {result.returncode}: {result.stderr[-1000:]}")
    return [int(line.strip().lstrip("#")) for line in result.stdout.split() if line.strip().startswith("#")]


def in_order(seqs: list[int]) -> bool:
    """First deliveries in increasing order (a retried delivery may come again, never earlier ones after later)."""
    firsts: list[int] = []
    for seq in seqs:
        if seq not in firsts:
            firsts.append(seq)
    return firsts == sorted(firsts)


PGBIN = os.environ.get("PGBIN", "/usr/lib/postgresql/15/bin")
ROOT = Path(__file__).resolve().parent.parent


def setup_admin(port: int, log: Path) -> None:
    """Makes ada, the first admin, through the setup link the server logged."""
    match = None
    deadline = time.monotonic() + TIMEOUT
    while match is None and time.monotonic() < deadline:
        match = re.search(r"#setup=([A-Za-z0-9_\-]+)", log.read_text(errors="replace"))
        time.sleep(0.05)
    if match is None:
        fail(f"no setup link in {log}")
    status, body = http_json("POST", port, "/v1/auth/setup", body={"token": match.group(1), "name": "ada", "password": PASSWORD})
    if status != 201:
        fail(f"setup: {status} {body}")


def ping_bot(binary: str, port: int, admin: str, servers: list) -> None:
    status, body = http_json("POST", port, "/v1/admin/bots", admin, {"name": "pingbot", "displayName": "Ping"})
    if status != 201:
        fail(f"making the bot: {status} {body}")
    status, hook = http_json("POST", port, "/v1/admin/webhooks", admin, {"url": "http://127.0.0.1:9/placeholder", "bot": "nobody"})
    if status != 400:
        fail(f"a webhook for an account that is not a bot: {status} {hook}")
    bot_port = free_port()
    status, hook = http_json("POST", port, "/v1/admin/webhooks", admin,
                             {"url": f"http://127.0.0.1:{bot_port}/", "circle": "general", "events": ["post"], "bot": "pingbot"})
    if status != 201 or hook.get("bot") != "pingbot":
        fail(f"subscribing the bot: {status} {hook}")
    bot = subprocess.Popen(
        [sys.executable, str(ROOT / "examples" / "bots" / "ping_bot.py"), "--port", str(bot_port)],
        env=dict(os.environ, WEBHOOK_SECRET=hook["secret"], BOT_NAME="pingbot"), stdout=subprocess.PIPE, text=True,
    )
    servers.append(bot)
    if "listening" not in (bot.stdout.readline() if bot.stdout else ""):
        fail("the ping bot did not start")
    send(binary, port, admin, "general", ["@pingbot ping", "no bot here", "@PingBot ping again"])

    def pongs() -> list[dict]:
        status, page = http_json("GET", port, "/v1/circles/general/messages?limit=20", admin)
        return [p for p in page.get("posts", []) if p.get("author") == "pingbot"] if status == 200 else []

    wait_for(lambda: len(pongs()) >= 2, "the bot's two answers")
    answers = pongs()
    if [p["text"] for p in answers] != ["pong, @ada", "pong, @ada"]:
        fail(f"the bot's posts: {answers}")
    print("webhook-test: the example ping bot (standard library + standardwebhooks) answered each @pingbot ping once, as pingbot")


def member_and_mention(port: int, admin: str, binary: str) -> None:
    """A `member` delivery when a member is added, a `mention` one when a post mentions the bot
    of a subscription with `bot` set: both verified by standardwebhooks."""
    receiver = Receiver()
    try:
        status, body = http_json("POST", port, "/v1/admin/bots", admin, {"name": "membot", "displayName": "Members"})
        if status != 201:
            fail(f"making the bot: {status} {body}")
        status, hook = http_json("POST", port, "/v1/admin/webhooks", admin,
                                 {"url": receiver.url(), "circle": "general", "events": ["member", "mention"], "bot": "membot"})
        if status != 201 or hook.get("events") != ["member", "mention"]:
            fail(f"subscribing to member and mention: {status} {hook}")
        receiver.secrets = [hook["secret"]]
        status, body = http_json("POST", port, "/v1/circles/general/members", admin, {"user": "zoe"})
        if status != 200:
            fail(f"adding zoe: {status} {body}")
        wait_for(lambda: receiver.seqs("member"), "the member delivery")
        seqs = send(binary, port, admin, "general", ["@membot are you there?"])
        wait_for(lambda: seqs[0] in receiver.seqs("mention"), "the mention delivery")
        receiver.check_clean()
        with receiver.lock:
            member = next(d for d in receiver.accepted if d["type"] == "member")
            types = [d["type"] for d in receiver.accepted]
        entry = member["data"]["entry"]
        if (entry.get("event"), entry.get("member"), entry.get("author")) != ("added", "zoe", "ada"):
            fail(f"the member delivery's entry: {entry}")
        if types != ["member", "mention"]:
            fail(f"the subscription got {types}, not one member and one mention")
        print("webhook-test: a member added and a mention of a subscription's bot delivered as member and mention, verified")
    finally:
        receiver.httpd.shutdown()


def two_nodes(binary: str, work: Path, receiver: Receiver, servers: list) -> None:
    out = subprocess.run([str(ROOT / "scripts" / "postgres-test-server"), "start", "--watch", str(os.getpid())], check=True,
                         stdout=subprocess.PIPE, text=True, timeout=300).stdout
    values = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
    url = values["CIRCLE_TEST_POSTGRES_URL"]
    port = int(url.rsplit(":", 1)[1].split("/")[0])
    subprocess.run([f"{PGBIN}/psql", "-w", "-q", "-h", "127.0.0.1", "-p", str(port), "-U", "circle", "-d", "circle", "-c", "CREATE DATABASE webhooks"],
                   check=True, env=dict(os.environ, PGPASSWORD="circle"), timeout=60, stdin=subprocess.DEVNULL)
    database = url.rsplit("/", 1)[0] + "/webhooks?sslmode=disable"
    secret = "webhook-test-secret-" + "x" * 32
    flags = ["--postgres", database, "--jwt-secret", secret, "--allow-private-outbound", "--webhook-retry-after", "200ms",
             "--webhook-timeout", "1500ms", "--poll-interval", "100ms"]
    ports = [free_port(), free_port()]
    logs = [work / "node1.log", work / "node2.log"]
    nodes = [start_server(binary, work / f"node{i + 1}", ports[i], flags, logs[i]) for i in range(2)]
    servers.extend(nodes)
    setup_admin(ports[0], logs[0])
    admin = dev_token(ports[0], "ada")
    status, body = http_json("POST", ports[0], "/v1/circles", admin, {"name": "shared"})
    if status not in (200, 201):
        fail(f"creating the circle: {status} {body}")
    status, hook = http_json("POST", ports[1], "/v1/admin/webhooks", admin, {"url": receiver.url(), "circle": "shared"})
    if status != 201:
        fail(f"creating the webhook on node 2: {status} {hook}")
    with receiver.lock:
        receiver.secrets = [hook["secret"]]
        receiver.accepted = []
        receiver.slow = 0.05
    acknowledged = set(send(binary, ports[0], admin, "shared", [f"node one {i}" for i in range(1, 21)]))
    acknowledged |= set(send(binary, ports[1], admin, "shared", [f"node two {i}" for i in range(1, 21)]))
    # Kill node 2 while deliveries are in flight: its leases run out and node 1 sends them.
    wait_for(lambda: len(receiver.seqs("post")) >= 5, "the first deliveries from the nodes")
    nodes[1].send_signal(signal.SIGKILL)
    nodes[1].wait(timeout=30)
    acknowledged |= set(send(binary, ports[0], admin, "shared", [f"after the kill {i}" for i in range(1, 11)]))
    wait_for(lambda: acknowledged <= set(receiver.seqs("post")), "every acknowledged post from the surviving node", timeout=120)
    receiver.check_clean()
    if len(acknowledged) != 50:
        fail(f"expected 50 acknowledged posts, got {len(acknowledged)}")
    if not in_order(receiver.seqs("post")):
        fail(f"deliveries out of order across nodes: {receiver.seqs('post')}")
    by_seq: dict[int, set[str]] = {}
    for delivery in receiver.accepted:
        by_seq.setdefault(delivery["data"]["seq"], set()).add(delivery["id"])
    if any(len(ids) != 1 for ids in by_seq.values()):
        fail("a seq was delivered under two webhook-ids across nodes")
    duplicates = len(receiver.accepted) - len(by_seq)
    print(f"webhook-test: two PostgreSQL nodes, one SIGKILLed mid-stream: all 50 posts delivered in order "
          f"({duplicates} delivered twice, each with its one webhook-id)")


def main() -> None:
    binary = sys.argv[1]
    work = Path(tempfile.mkdtemp(prefix="circle-webhooks-"))
    data = work / "data"
    log = work / "server.log"
    port = free_port()
    flags = ["--allow-private-outbound", "--webhook-retry-after", "200ms", "--webhook-timeout", "1500ms"]
    server = start_server(binary, data, port, flags, log)
    servers = [server]
    receiver = Receiver()
    try:
        setup_admin(port, log)
        admin = dev_token(port, "ada")
        status, body = http_json("POST", port, "/v1/circles", admin, {"name": "general"})
        if status not in (200, 201):
            fail(f"creating the circle: {status} {body}")

        # 1. Subscribe; every entry is delivered, verified, in order.
        status, hook = http_json("POST", port, "/v1/admin/webhooks", admin, {"url": receiver.url(), "circle": "general"})
        if status != 201 or not str(hook.get("secret", "")).startswith("whsec_"):
            fail(f"creating the webhook: {status} {hook}")
        receiver.secrets = [hook["secret"]]
        status, body = http_json("POST", port, "/v1/admin/webhooks", dev_token(port, "mallory"), {"url": receiver.url()})
        if status != 403:
            fail(f"a member (no account) created a webhook: {status} {body}")
        seqs = send(binary, port, admin, "general", [f"post {i}" for i in range(1, 21)])
        if seqs != list(range(1, 21)):
            fail(f"unexpected seqs {seqs}")
        wait_for(lambda: len(set(receiver.seqs("post"))) == 20, "20 post deliveries")
        receiver.check_clean()
        if not in_order(receiver.seqs()):
            fail(f"deliveries out of order: {receiver.seqs()}")
        first = receiver.accepted[0]
        if first["data"]["entry"]["text"] != "post 1" or first["data"]["circle"] != "general" or first["type"] != "post":
            fail(f"the first delivery's body: {first}")
        print(f"webhook-test: 20 posts delivered and verified by standardwebhooks ({receiver.requests} requests)")

        # 2. Failures and a hang: retried with the same webhook-id, in order.
        with receiver.lock:
            receiver.script = ["500", "500", "hang"]
        before = receiver.requests
        seqs = send(binary, port, admin, "general", [f"retry {i}" for i in range(1, 6)])
        wait_for(lambda: set(range(21, 26)) <= set(receiver.seqs("post")), "the posts after failures")
        receiver.check_clean()
        ids = [d["id"] for d in receiver.accepted if d["data"]["seq"] == 21]
        if len(ids) != 1:
            fail(f"seq 21 accepted {len(ids)} times: {ids}")
        if receiver.requests - before < 8:
            fail(f"expected 3 failed attempts and 5 deliveries, saw {receiver.requests - before} requests")
        if not in_order(receiver.seqs()):
            fail(f"deliveries out of order after retries: {receiver.seqs()}")
        status, deliveries = http_json("GET", port, f"/v1/admin/webhooks/{hook['id']}/deliveries?limit=200", admin)
        tried = [d for d in deliveries["deliveries"] if d["seq"] == 21]
        if status != 200 or not tried or tried[0]["attempts"] != 4 or tried[0]["status"] != "delivered":
            fail(f"the delivery of seq 21 as the admin API shows it: {status} {tried}")
        print(f"webhook-test: 500, 500 and a hang retried; seq 21 delivered on attempt {tried[0]['attempts']}")

        # 3. Receiver down, server SIGKILLed mid-stream, a new server delivers all.
        with receiver.lock:
            receiver.down = True
            before_down = receiver.requests
        seqs = send(binary, port, admin, "general", [f"storm {i}" for i in range(1, 31)])
        acknowledged = set(seqs)
        wait_for(lambda: receiver.requests >= before_down + 3, "attempts while the receiver is down")
        server.send_signal(signal.SIGKILL)
        server.wait(timeout=30)
        with receiver.lock:
            receiver.down = False
        server = start_server(binary, data, port, flags, log)
        servers.append(server)
        wait_for(lambda: acknowledged <= set(receiver.seqs("post")), "every acknowledged post after the SIGKILL")
        receiver.check_clean()
        if not in_order(receiver.seqs()):
            fail(f"deliveries out of order after the restart: {receiver.seqs()}")
        by_seq: dict[int, set[str]] = {}
        for delivery in receiver.accepted:
            by_seq.setdefault(delivery["data"]["seq"], set()).add(delivery["id"])
        if any(len(ids) != 1 for ids in by_seq.values()):
            fail("a seq was delivered under two webhook-ids")
        duplicates = len(receiver.accepted) - len(by_seq)
        print(f"webhook-test: SIGKILL while the receiver was down: all {len(acknowledged)} posts delivered after the restart "
              f"({duplicates} delivered twice, each with its one webhook-id)")

        admin = dev_token(port, "ada")
        # 4. Rotation: two signatures, each verified.
        status, rotated = http_json("POST", port, f"/v1/admin/webhooks/{hook['id']}/rotate", admin, {})
        if status != 200 or rotated.get("secrets") != 2:
            fail(f"rotating: {status} {rotated}")
        receiver.secrets = [rotated["secret"], hook["secret"]]
        seqs = send(binary, port, admin, "general", ["after the rotation"])
        wait_for(lambda: seqs[0] in receiver.seqs("post"), "the post after the rotation")
        receiver.check_clean()
        print("webhook-test: after rotating, both secrets verify")

        with receiver.lock:
            receiver.script = ["huge", "redirect"]
        seqs = send(binary, port, admin, "general", ["huge and redirected"])
        wait_for(lambda: seqs[0] in receiver.seqs("post"), "the post after a huge answer and a redirect")
        status, deliveries = http_json("GET", port, f"/v1/admin/webhooks/{hook['id']}/deliveries?limit=1", admin)
        last = deliveries["deliveries"][0]
        if last["seq"] != seqs[0] or last["attempts"] != 3 or last["status"] != "delivered":
            fail(f"a huge answer and a redirect should be two failed attempts: {last}")
        print("webhook-test: an answer over 64 KiB and a redirect counted as failed attempts (delivered on attempt 3)")

        # 5. No private addresses without the flag.
        port2 = free_port()
        server2 = start_server(binary, work / "data2", port2, [], work / "server2.log")
        servers.append(server2)
        setup_admin(port2, work / "server2.log")
        for url in [receiver.url(), "http://[::1]/hook", "http://10.0.0.1/hook", "http://169.254.169.254/latest", "ftp://example.com/x"]:
            status, body = http_json("POST", port2, "/v1/admin/webhooks", dev_token(port2, "ada"), {"url": url})
            if status != 400:
                fail(f"{url} accepted without --allow-private-outbound: {status} {body}")
        print("webhook-test: loopback, private and link-local endpoints refused without --allow-private-outbound")

        ping_bot(binary, port, admin, servers)
        member_and_mention(port, admin, binary)

        two_nodes(binary, work, receiver, servers)
        print("webhook-test: OK")
    finally:
        for process in servers:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
                try:
                    process.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    process.kill()
        receiver.httpd.shutdown()


if __name__ == "__main__":
    main()
