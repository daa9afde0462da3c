"""Tokens from identity providers, minted by an implementation that is not ours (PyJWT with
`cryptography`), against a real `circle serve --jwt-issuer …` on loopback.

A local JWKS endpoint (http.server in a thread) publishes the issuers' public keys and counts
the fetches. Checks, each against GET /v1/circles (200 or 401 with its code):

- RS256, PS256, ES256 (issuer A, from its JWKS URL) and EdDSA (issuer F, from a JWKS file, user
  in `preferred_username`) tokens are accepted;
- wrong `aud`, missing `aud`, expired (`token_expired`), `nbf` in the future, an invalid user
  name, an unknown issuer, `alg: none`, and HS256 signed with the RSA public key (PEM and the
  raw modulus) as the secret are refused;
- a token claiming issuer A, signed with issuer B's key under a `kid` only B publishes, or
  under a `kid` both publish, is refused (the cache is keyed by issuer and kid);
- rotation in the middle: A's JWKS gains a2 (a token with a2 is accepted after the refresh it
  triggers, a1 still works), then drops a1 (after the next refresh a1 is refused, a2 works);
- a refresh that fails (the JWKS turned malformed) keeps the old keys;
- a slow JWKS (answers after the fetch timeout), a huge one (over 64 KiB) and a malformed one:
  tokens with their kids are refused, the server keeps serving (a dev token still works);
- a second server with the default unknown-kid interval (60 s): twenty tokens with unknown kids
  cause at most one fetch besides the one at start;
- a third server without --allow-private-outbound: its issuer's JWKS on 127.0.0.1 is never
  fetched, and its tokens are refused.

Usage: jwks_check.py PATH_TO_CIRCLE_BINARY. Exits non-zero with a message on failure.
"""
from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from jwt.algorithms import ECAlgorithm, OKPAlgorithm, RSAAlgorithm

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
from benchlib import dev_token, free_port, http_json  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import checklib  # noqa: E402

TIMEOUT = 30.0
FETCH_TIMEOUT = "1s"
SLOW_SECONDS = 3.0
checks = 0


def fail(message: str) -> None:
    sys.exit(f"jwks check FAILED: {message}")


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


class JWKSServer:
    """Serves documents by path, counting fetches; `slow` paths answer after SLOW_SECONDS."""

    def __init__(self) -> None:
        self.documents: dict[str, bytes] = {}
        self.slow: set[str] = set()
        self.fetches: dict[str, int] = {}
        self.lock = threading.Lock()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802
                with owner.lock:
                    owner.fetches[self.path] = owner.fetches.get(self.path, 0) + 1
                    body = owner.documents.get(self.path)
                    slow = self.path in owner.slow
                if slow:
                    time.sleep(SLOW_SECONDS)
                if body is None:
                    self.send_response(404)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                try:
                    self.wfile.write(body)
                except OSError:
                    pass

            def log_message(self, *args) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def publish(self, path: str, keys: list[dict]) -> None:
        self.set(path, json.dumps({"keys": keys}).encode())

    def set(self, path: str, body: bytes) -> None:
        with self.lock:
            self.documents[path] = body

    def count(self, path: str) -> int:
        with self.lock:
            return self.fetches.get(path, 0)

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"


class Key:
    """A private key of PyJWT's kinds with its public JWK."""

    def __init__(self, kind: str, kid: str, alg: str | None = None) -> None:
        self.kid = kid
        if kind == "rsa":
            self.private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
            self.jwk = RSAAlgorithm.to_jwk(self.private.public_key(), as_dict=True)
        elif kind == "ec":
            self.private = ec.generate_private_key(ec.SECP256R1())
            self.jwk = ECAlgorithm.to_jwk(self.private.public_key(), as_dict=True)
        else:
            self.private = ed25519.Ed25519PrivateKey.generate()
            self.jwk = OKPAlgorithm.to_jwk(self.private.public_key(), as_dict=True)
        self.jwk["kid"] = kid
        self.jwk["use"] = "sig"
        if alg:
            self.jwk["alg"] = alg

    def token(self, alg: str, claims: dict, kid: str | None = None) -> str:
        return jwt.encode(claims, self.private, algorithm=alg, headers={"kid": kid or self.kid})


def claims(iss: str, user: str = "alice", aud: str | None = "circle-app", ttl: int = 600, **extra) -> dict:
    now = int(time.time())
    body = {"iss": iss, "sub": user, "iat": now, "exp": now + ttl, **extra}
    if aud is not None:
        body["aud"] = aud
    return body


def hs256(header: dict, payload: dict, secret: bytes) -> str:
    signing_input = b64url(json.dumps(header).encode()) + "." + b64url(json.dumps(payload).encode())
    signature = hmac.new(secret, signing_input.encode(), hashlib.sha256).digest()
    return signing_input + "." + b64url(signature)


def unsigned(header: dict, payload: dict) -> str:
    return b64url(json.dumps(header).encode()) + "." + b64url(json.dumps(payload).encode()) + "."


def get_circles(port: int, token: str) -> tuple[int, object]:
    return http_json("GET", port, "/v1/circles", token=token, timeout=TIMEOUT)


def expect_ok(port: int, token: str, what: str) -> None:
    global checks
    status, body = get_circles(port, token)
    if status != 200:
        fail(f"{what}: expected 200, got {status} {body}")
    checks += 1
    print(f"  ok: {what}")


def expect_refused(port: int, token: str, what: str, code: str = "unauthorized", quiet: bool = False) -> str:
    global checks
    status, body = get_circles(port, token)
    got = body.get("error", {}).get("code") if isinstance(body, dict) else None
    if status != 401 or got != code:
        fail(f"{what}: expected 401 {code}, got {status} {body}")
    checks += 1
    message = body["error"]["message"]
    if not quiet:
        print(f"  refused ({code}): {what} — {message}")
    return message


def start_server(binary: str, data: Path, port: int, flags: list[str], log: Path) -> subprocess.Popen:
    return checklib.start_server("jwks check", binary, data, port, flags, log, TIMEOUT)


def wait_for(condition, what: str) -> None:
    checklib.wait_for("jwks check", condition, what, TIMEOUT)


def main() -> None:
    binary = sys.argv[1]
    work = Path(tempfile.mkdtemp(prefix="circle-jwks-"))
    servers: list[subprocess.Popen] = []
    jwks = JWKSServer()
    try:
        a1 = Key("rsa", "a1")
        a_ps = Key("rsa", "a-ps", alg="PS256")
        a_ec = Key("ec", "a-ec", alg="ES256")
        a2 = Key("rsa", "a2")
        b1 = Key("rsa", "b1")
        b_shared = Key("rsa", "shared")
        a_shared = Key("rsa", "shared")
        f1 = Key("okp", "f1", alg="EdDSA")
        m1 = Key("ec", "m1")
        jwks.publish("/a.json", [a1.jwk, a_ps.jwk, a_ec.jwk, a_shared.jwk])
        jwks.publish("/b.json", [b1.jwk, b_shared.jwk])
        jwks.publish("/m.json", [m1.jwk])
        jwks.publish("/slow.json", [Key("ec", "s1").jwk])
        jwks.slow.add("/slow.json")
        huge_keys = [Key("ec", f"h{i}").jwk for i in range(3)]
        huge = json.dumps({"keys": huge_keys, "padding": "x" * (70 * 1024)}).encode()
        jwks.set("/huge.json", huge)
        jwks.set("/malformed.json", b'{"keys": [{"kty": "RSA", "kid": "x1", "n": ')
        file_jwks = work / "f.json"
        file_jwks.write_text(json.dumps({"keys": [f1.jwk]}))

        A, B, F, M = "https://a.example", "https://b.example", "https://f.example", "https://m.example"
        port = free_port()
        flags = [
            "--allow-private-outbound",
            "--jwks-fetch-timeout", FETCH_TIMEOUT,
            "--jwks-unknown-key-interval", "0s",
            "--jwt-issuer", f"iss={A},jwks={jwks.url('/a.json')},aud=circle-app,aud=other-app",
            "--jwt-issuer", f"iss={B},jwks={jwks.url('/b.json')}",
            "--jwt-issuer", f"iss={F},jwks={file_jwks},user-claim=preferred_username",
            "--jwt-issuer", f"iss={M},jwks={jwks.url('/m.json')}",
            "--jwt-issuer", f"iss=https://slow.example,jwks={jwks.url('/slow.json')}",
            "--jwt-issuer", f"iss=https://huge.example,jwks={jwks.url('/huge.json')}",
            "--jwt-issuer", f"iss=https://malformed.example,jwks={jwks.url('/malformed.json')}",
        ]
        log = work / "server.log"
        servers.append(start_server(binary, work / "data", port, flags, log))
        canary = dev_token(port, "canary")

        print("== algorithms and claims")
        expect_ok(port, a1.token("RS256", claims(A)), "RS256 from issuer A's JWKS")
        expect_ok(port, a1.token("PS256", claims(A)), "PS256 with an RSA key whose JWK names no alg")
        expect_ok(port, a_ps.token("PS256", claims(A, aud="other-app")), "PS256, second audience")
        expect_ok(port, a_ec.token("ES256", claims(A, aud=["x", "circle-app"])), "ES256, aud as an array")
        expect_ok(port, f1.token("EdDSA", claims(F, user="nobody", aud=None, preferred_username="fiona")), "EdDSA from a JWKS file, user from preferred_username")
        expect_ok(port, b1.token("RS256", claims(B, user="bob", aud=None)), "issuer B without audiences")
        expect_refused(port, a_ps.token("RS256", claims(A)), "RS256 with a key whose JWK says PS256")
        expect_refused(port, a1.token("RS256", claims(A, aud="someone-else")), "wrong aud")
        expect_refused(port, a1.token("RS256", claims(A, aud=None)), "no aud where one is required")
        expect_refused(port, a1.token("RS256", claims(A, ttl=-30)), "expired", code="token_expired")
        expect_refused(port, a1.token("RS256", claims(A, nbf=int(time.time()) + 3600)), "nbf an hour ahead")
        expect_refused(port, a1.token("RS256", claims(A, user="bad user!")), "sub not a valid user name")
        expect_refused(port, f1.token("EdDSA", claims(F, aud=None)), "user claim missing (preferred_username)")
        expect_refused(port, a1.token("RS256", claims("https://unknown.example")), "unknown issuer")
        expect_refused(port, a1.token("RS256", {k: v for k, v in claims(A).items() if k != "exp"}), "no exp")

        print("== alg confusion")
        pem = a1.private.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        header = {"alg": "HS256", "typ": "JWT", "kid": "a1"}
        expect_refused(port, hs256(header, claims(A), pem), "HS256 signed with issuer A's RSA public key (PEM) as the secret")
        modulus = base64.urlsafe_b64decode(a1.jwk["n"] + "==")
        expect_refused(port, hs256(header, claims(A), modulus), "HS256 signed with the RSA modulus as the secret")
        expect_refused(port, unsigned({"alg": "none", "kid": "a1"}, claims(A)), "alg none")
        expect_refused(port, a_ec.token("ES256", claims(A), kid="a1"), "ES256 signature under an RSA key's kid")

        print("== issuers do not share keys")
        expect_refused(port, b1.token("RS256", claims(A)), "iss A, signed with B's key under B's kid b1")
        expect_refused(port, b_shared.token("RS256", claims(A)), "iss A, signed with B's key under the kid both publish")
        expect_ok(port, a_shared.token("RS256", claims(A)), "iss A, A's own key under that kid")
        expect_refused(port, a_shared.token("RS256", claims(B, aud=None)), "iss B, signed with A's key under the kid both publish")

        print("== rotation")
        before = jwks.count("/a.json")
        jwks.publish("/a.json", [a1.jwk, a2.jwk, a_ps.jwk, a_ec.jwk, a_shared.jwk])
        expect_ok(port, a1.token("RS256", claims(A)), "a1 before any refresh")
        expect_ok(port, a2.token("RS256", claims(A)), "a2 (new kid) after the refresh it triggers")
        if jwks.count("/a.json") != before + 1:
            fail(f"expected one fetch for the new kid, saw {jwks.count('/a.json') - before}")
        expect_ok(port, a1.token("RS256", claims(A)), "a1 still listed, still accepted")
        jwks.publish("/a.json", [a2.jwk, a_ps.jwk, a_ec.jwk, a_shared.jwk])
        expect_ok(port, a1.token("RS256", claims(A)), "a1 removed from the JWKS, not refreshed yet: still accepted")
        expect_refused(port, Key("rsa", "a3").token("RS256", claims(A)), "unknown kid a3 (triggers the next refresh)")
        expect_refused(port, a1.token("RS256", claims(A)), "a1 after the refresh that dropped it")
        expect_ok(port, a2.token("RS256", claims(A)), "a2 after a1 was dropped")

        print("== a failed refresh keeps the old keys")
        expect_ok(port, m1.token("ES256", claims(M, aud=None)), "issuer M's key m1")
        jwks.set("/m.json", b"<html>not a JWKS</html>")
        fetched = jwks.count("/m.json")
        expect_refused(port, Key("ec", "m2").token("ES256", claims(M, aud=None)), "unknown kid while M's JWKS is malformed")
        if jwks.count("/m.json") != fetched + 1:
            fail("the unknown kid did not refresh M's JWKS")
        expect_ok(port, m1.token("ES256", claims(M, aud=None)), "m1 after the failed refresh")

        print("== slow, huge and malformed JWKS")
        started = time.monotonic()
        expect_refused(port, Key("ec", "s1").token("ES256", claims("https://slow.example", aud=None)), "slow JWKS (answers after the fetch timeout)")
        slow_seconds = time.monotonic() - started
        print(f"  the slow JWKS's token was answered after {slow_seconds:.2f} s (fetch timeout {FETCH_TIMEOUT}, JWKS answers after {SLOW_SECONDS} s)")
        expect_ok(port, canary, "a dev token while the slow JWKS hangs")
        message = expect_refused(port, Key("ec", "h0").token("ES256", claims("https://huge.example", aud=None)), "huge JWKS (over 64 KiB)")
        expect_refused(port, Key("ec", "x1").token("ES256", claims("https://malformed.example", aud=None)), "malformed JWKS")
        expect_ok(port, canary, "a dev token after the bad JWKS documents")
        text = log.read_text()
        for needle in ["more than the limit of 65536", "the JWKS is not valid JSON", "no answer from"]:
            if needle not in text:
                fail(f"the server log does not say \"{needle}\"")
        del message

        print("== the unknown-kid refresh is rate limited")
        port2 = free_port()
        jwks.publish("/r.json", [Key("ec", "r1").jwk])
        servers.append(start_server(binary, work / "data2", port2, ["--allow-private-outbound", "--jwt-issuer", f"iss=https://r.example,jwks={jwks.url('/r.json')}"], work / "server2.log"))
        wait_for(lambda: jwks.count("/r.json") >= 1, "the fetch at start")
        started = time.monotonic()
        for _ in range(20):
            expect_refused(port2, Key("ec", f"u-{uuid.uuid4()}").token("ES256", claims("https://r.example", aud=None)), "random unknown kid", quiet=True)
        elapsed = time.monotonic() - started
        allowed = 2 + int(elapsed // 60)
        if jwks.count("/r.json") > allowed:
            fail(f"{jwks.count('/r.json')} fetches of /r.json for twenty unknown kids in {elapsed:.1f} s")
        print(f"  twenty unknown kids in {elapsed:.2f} s: {jwks.count('/r.json')} fetches in all (at start included)")

        print("== outbound address policy")
        port3 = free_port()
        p1 = Key("ec", "p1")
        jwks.publish("/p.json", [p1.jwk])
        servers.append(start_server(binary, work / "data3", port3, ["--jwt-issuer", f"iss=https://p.example,jwks={jwks.url('/p.json')}"], work / "server3.log"))
        expect_refused(port3, p1.token("ES256", claims("https://p.example", aud=None)), "JWKS on 127.0.0.1 without --allow-private-outbound")
        if jwks.count("/p.json") != 0:
            fail("the JWKS on 127.0.0.1 was fetched although the policy refuses loopback addresses")
        wait_for(lambda: "refused by the outbound address policy" in (work / "server3.log").read_text(), "the policy's log line")
        print(f"jwks check passed: {checks} checks")
    finally:
        for server in servers:
            server.terminate()
            try:
                server.wait(timeout=10)
            except subprocess.TimeoutExpired:
                server.kill()
        jwks.httpd.shutdown()
        if os.environ.get("CIRCLE_KEEP_JWKS_LOGS") != "1":
            shutil.rmtree(work, ignore_errors=True)
        else:
            print(f"logs in {work}")


if __name__ == "__main__":
    main()
