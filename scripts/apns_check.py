"""APNs against implementations that are not ours (run by scripts/apns-test).

A real `circle serve` on loopback, with APNs on and `--apns-url` pointing here, sends to a fake
APNs: an HTTP/2 server built on the `h2` package, over TLS with ALPN `h2` only (a certificate
from a CA made here, given to the server with `--apns-ca-file`). Every request is checked
against Apple's documented contract ("Sending notification requests to APNs"):

- `:method` POST, `:scheme` https, `:path` /3/device/<the registered hex token>;
- `authorization: bearer <JWT>` verified with PyJWT and the public half of the .p8 key made
  here: ES256, header `kid` the key id, `iss` the team id, `iat` within the last hour;
- `apns-topic` the bundle id, `apns-push-type: alert`, `apns-priority` 10 (a mention),
  `apns-expiration` in the future, `apns-collapse-id` the circle (at most 64 bytes), `apns-id`
  a UUID;
- a JSON body of at most 4096 bytes with `aps.alert.title`, `aps.alert.body`, `aps.thread-id`,
  and the circle and seq.

Then: bob registers a device (a bad token gets a 400); alice mentions him: one push, the text in
the alert; a second mention reuses the provider token; APNs answers `403 ExpiredProviderToken`:
the server signs a new token and sends again at once; `503`: retried after backoff; `410
Unregistered`: the device is deleted. Exits non-zero with a message at the first thing that
does not hold.
"""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
import json
import re
import ssl
import sys
import tempfile
import threading
import time
from pathlib import Path

import jwt
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from h2.config import H2Configuration
from h2.connection import H2Connection
from h2.events import ConnectionTerminated, DataReceived, RequestReceived, StreamEnded

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
from benchlib import dev_token, free_port, http_json  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import checklib  # noqa: E402

TIMEOUT = 60.0
KEY_ID = "ABC123DEFG"
TEAM_ID = "DEF123GHIJ"
TOPIC = "com.example.circle"
UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


def fail(message: str) -> None:
    checklib.fail("apns-test", message)


def wait_for(condition, what: str, timeout: float = TIMEOUT) -> None:
    checklib.wait_for("apns-test", condition, what, timeout)


def make_tls(work: Path) -> tuple[Path, ssl.SSLContext]:
    """A CA (its certificate written for --apns-ca-file) and a server certificate for 127.0.0.1 it signed."""
    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "apns-test CA")])
    ca = (
        x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    leaf = (
        x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
        .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    ca_file, cert_file, key_file = work / "ca.pem", work / "server.pem", work / "server-key.pem"
    ca_file.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    cert_file.write_bytes(leaf.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(cert_file, key_file)
    context.set_alpn_protocols(["h2"])  # APNs speaks HTTP/2 only
    return ca_file, context


class FakeAPNs:
    """An HTTP/2 server on loopback: records each request; answers from a script, then 200."""

    def __init__(self, context: ssl.SSLContext, public_key) -> None:
        self.public_key = public_key
        self.lock = threading.Lock()
        self.received: list[dict] = []
        self.script: list[tuple[int, str | None]] = []  # (status, reason) to answer next
        self.alpn: list[str | None] = []
        self.problems: list[str] = []
        self.port = free_port()
        self.loop = asyncio.new_event_loop()
        ready = threading.Event()

        async def serve() -> None:
            await asyncio.start_server(self.connection, "127.0.0.1", self.port, ssl=context)
            ready.set()

        threading.Thread(target=lambda: (self.loop.run_until_complete(serve()), self.loop.run_forever()), daemon=True).start()
        if not ready.wait(TIMEOUT):
            fail("the fake APNs did not start")

    async def connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with self.lock:
            self.alpn.append(writer.get_extra_info("ssl_object").selected_alpn_protocol())
        conn = H2Connection(config=H2Configuration(client_side=False, header_encoding="utf-8"))
        conn.initiate_connection()
        writer.write(conn.data_to_send())
        streams: dict[int, dict] = {}
        try:
            while data := await reader.read(65536):
                for event in conn.receive_data(data):
                    if isinstance(event, RequestReceived):
                        streams[event.stream_id] = {"headers": dict(event.headers), "header_list": list(event.headers), "body": b""}
                    elif isinstance(event, DataReceived):
                        streams[event.stream_id]["body"] += event.data
                        conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
                    elif isinstance(event, StreamEnded):
                        self.answer(conn, event.stream_id, streams.pop(event.stream_id))
                    elif isinstance(event, ConnectionTerminated):
                        break
                writer.write(conn.data_to_send())
                await writer.drain()
        except Exception as error:  # a connection's end; a broken request is recorded below
            with self.lock:
                self.problems.append(f"the connection failed: {error!r}")
        finally:
            writer.close()

    def answer(self, conn: H2Connection, stream: int, request: dict) -> None:
        with self.lock:
            status, reason = self.script.pop(0) if self.script else (200, None)
            problems = self.check(request)
            request.update(status=status, problems=problems)
            self.received.append(request)
        headers = [(":status", str(status)), ("apns-id", request["headers"].get("apns-id", ""))]
        body = json.dumps({"reason": reason, "timestamp": int(time.time() * 1000)}).encode() if reason else b""
        if body:
            headers += [("content-type", "application/json"), ("content-length", str(len(body)))]
        conn.send_headers(stream, headers, end_stream=not body)
        if body:
            conn.send_data(stream, body, end_stream=True)

    def check(self, request: dict) -> list[str]:
        """Apple's request contract: the problems of one request (none: it holds)."""
        headers, problems = request["headers"], []
        if headers.get(":method") != "POST" or headers.get(":scheme") != "https":
            problems.append(f":method {headers.get(':method')} :scheme {headers.get(':scheme')}")
        path = headers.get(":path", "")
        if not re.fullmatch(r"/3/device/[0-9a-f]{64,200}", path):
            problems.append(f":path {path}")
        authorization = headers.get("authorization", "")
        if not authorization.startswith("bearer "):
            problems.append(f"authorization {authorization[:40]}")
        else:
            token = authorization[len("bearer "):]
            try:
                header = jwt.get_unverified_header(token)
                claims = jwt.decode(token, self.public_key, algorithms=["ES256"], options={"require": ["iss", "iat"]}, issuer=TEAM_ID)
                if header.get("kid") != KEY_ID or header.get("alg") != "ES256":
                    problems.append(f"the JWT header {header}")
                if not (time.time() - 3600 < claims["iat"] <= time.time() + 60):
                    problems.append(f"iat {claims['iat']} is not within the last hour")
                request["jwt"] = token
            except jwt.PyJWTError as error:
                problems.append(f"PyJWT refused the provider token: {error}")
        expected = {"apns-topic": TOPIC, "apns-push-type": "alert", "apns-priority": "10"}
        for name, value in expected.items():
            if headers.get(name) != value:
                problems.append(f"{name}: {headers.get(name)!r}, not {value!r}")
        if not headers.get("apns-expiration", "").isdigit() or int(headers["apns-expiration"]) <= time.time():
            problems.append(f"apns-expiration {headers.get('apns-expiration')!r}")
        if not (0 < len(headers.get("apns-collapse-id", "").encode()) <= 64):
            problems.append(f"apns-collapse-id {headers.get('apns-collapse-id')!r}")
        if not UUID.match(headers.get("apns-id", "")):
            problems.append(f"apns-id {headers.get('apns-id')!r}")
        if len(request["body"]) > 4096:
            problems.append(f"a body of {len(request['body'])} bytes")
        try:
            payload = json.loads(request["body"])
            alert = payload["aps"]["alert"]
            if not (isinstance(alert["title"], str) and isinstance(alert["body"], str) and payload["aps"]["thread-id"] == payload["circle"]):
                problems.append(f"the alert {payload['aps']}")
            request["payload"] = payload
        except (ValueError, KeyError, TypeError) as error:
            problems.append(f"the body is not an alert payload: {error!r} {request['body'][:200]!r}")
        return problems

    def requests(self) -> list[dict]:
        with self.lock:
            return list(self.received)


def main() -> None:
    binary = sys.argv[1]
    with tempfile.TemporaryDirectory(prefix="circle-apns-test-") as work_dir:
        work = Path(work_dir)
        ca_file, context = make_tls(work)
        signing = ec.generate_private_key(ec.SECP256R1())
        key_file = work / f"AuthKey_{KEY_ID}.p8"
        key_file.write_bytes(signing.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
        apns = FakeAPNs(context, signing.public_key())
        port = free_port()
        log = work / "server.log"
        flags = [
            "--apns-key-file", str(key_file), "--apns-key-id", KEY_ID, "--apns-team-id", TEAM_ID, "--apns-topic", TOPIC,
            "--apns-url", f"https://127.0.0.1:{apns.port}", "--apns-ca-file", str(ca_file),
            "--push-away-after", "0s", "--push-burst-interval", "0s",
        ]
        with checklib.running_server("apns-test", binary, work / "data", port, flags, log, TIMEOUT):
            run(port, apns)


def run(port: int, apns: FakeAPNs) -> None:
    alice, bob = dev_token(port, "alice"), dev_token(port, "bob")
    token = "a1b2c3d4" * 8

    for bad in ({"token": "abc"}, {"token": token, "environment": "beta"}, {"token": "zz" * 32}):
        status, body = http_json("POST", port, "/v1/push/apns", bob, bad)
        if status != 400:
            fail(f"registering {bad}: {status} {body}")
    status, body = http_json("POST", port, "/v1/push/apns", bob, {"token": token.upper(), "environment": "development"})
    if status != 201 or body.get("endpoint") != f"apns:development:{token}":
        fail(f"bob's device: {status} {body}")

    status, body = http_json("POST", port, "/v1/circles", alice, {"name": "lobby"})
    if status not in (200, 201):
        fail(f"creating the circle: {status} {body}")
    status, body = http_json("POST", port, "/v1/circles/lobby/messages", bob, {"text": "hello", "id": "hello-bob"})
    if status not in (200, 201):
        fail(f"bob's first post: {status} {body}")

    def post(text: str, key: str) -> int:
        status, body = http_json("POST", port, "/v1/circles/lobby/messages", alice, {"text": text, "id": key})
        if status not in (200, 201):
            fail(f"posting {text!r}: {status} {body}")
        return int(body.get("seq") or body.get("post", {}).get("seq"))

    def verified(index: int, seq: int) -> dict:
        request = apns.requests()[index]
        if request["problems"]:
            fail(f"request {index} breaks Apple's contract: {request['problems']}")
        if request["headers"][":path"] != f"/3/device/{token}":
            fail(f"request {index} went to {request['headers'][':path']}")
        if request["payload"]["seq"] != seq or request["payload"]["circle"] != "lobby" or request["payload"]["kind"] != "mention":
            fail(f"request {index} is about {request['payload']}, not lobby seq {seq}")
        return request

    # A mention: one push over HTTP/2, the alert with alice's text.
    seq = post("@bob lunch at noon?", "m1")
    wait_for(lambda: len(apns.requests()) >= 1, "bob's push")
    first = verified(0, seq)
    if first["payload"]["aps"]["alert"] != {"title": "#lobby", "body": "alice: @bob lunch at noon?"}:
        fail(f"the alert is {first['payload']['aps']['alert']}")
    if apns.alpn != ["h2"] * len(apns.alpn) or not apns.alpn:
        fail(f"ALPN: {apns.alpn}")
    print(f"apns-test: a mention arrived over HTTP/2 (ALPN h2); PyJWT verified the ES256 provider token (kid {KEY_ID}, iss {TEAM_ID}); "
          f"headers and payload as Apple documents: {first['payload']['aps']['alert']}")

    # A second mention reuses the provider token.
    seq = post("@bob and dessert?", "m2")
    wait_for(lambda: len(apns.requests()) >= 2, "bob's second push")
    if verified(1, seq)["jwt"] != first["jwt"]:
        fail("the second push was signed with a new provider token: Apple refuses renewals within 20 minutes")

    # 403 ExpiredProviderToken: a new token, sent again at once.
    with apns.lock:
        apns.script = [(403, "ExpiredProviderToken")]
    seq = post("@bob still there?", "m3")
    wait_for(lambda: len(apns.requests()) >= 4, "the push sent again with a new provider token")
    expired, again = verified(2, seq), verified(3, seq)
    if expired["status"] != 403 or again["status"] != 200 or again["jwt"] == expired["jwt"]:
        fail(f"after ExpiredProviderToken: statuses {expired['status']} {again['status']}, the same token: {again['jwt'] == expired['jwt']}")
    if again["headers"]["apns-id"] != expired["headers"]["apns-id"]:
        fail("the retry of one push has another apns-id")
    print("apns-test: 403 ExpiredProviderToken made the server sign a new provider token and send again at once, with the same apns-id")

    # 503: retried after backoff, same apns-id.
    with apns.lock:
        apns.script = [(503, "ServiceUnavailable")]
    seq = post("@bob one more", "m4")
    wait_for(lambda: len(apns.requests()) >= 6, "the push retried after a 503")
    unavailable, retried = verified(4, seq), verified(5, seq)
    if (unavailable["status"], retried["status"]) != (503, 200) or unavailable["headers"]["apns-id"] != retried["headers"]["apns-id"]:
        fail(f"after a 503: {unavailable['status']} then {retried['status']}")
    print("apns-test: a 503 was retried with backoff until APNs took the push")

    # 410 Unregistered: the device goes.
    with apns.lock:
        apns.script = [(410, "Unregistered")]
    post("@bob goodbye", "m5")
    wait_for(lambda: len(apns.requests()) >= 7, "the push answered 410")

    def devices() -> list:
        status, listed = http_json("GET", port, "/v1/push/subscriptions", bob)
        return listed.get("subscriptions", []) if status == 200 else ["?"]

    wait_for(lambda: devices() == [], "bob's device to go after 410 Unregistered")
    if apns.problems:
        fail(f"the fake APNs saw: {apns.problems}")
    print("apns-test: 410 Unregistered deleted the device")
    print("apns-test: OK")


if __name__ == "__main__":
    main()
