"""Passkeys against a real `circle serve`, from an authenticator that is not ours.

The authenticator is built from python-fido2's types (AuthenticatorData, AttestationObject,
CollectedClientData, ES256 COSE keys) and `cryptography`'s P-256 keys, with user presence and
user verification set, as a platform authenticator would answer. It drives the server's HTTP API
the way the page does: the first admin through the setup link with a passkey, sign-out, sign-in
with the passkey, a member's sign-up through an invite with a passkey, and the refusals (a
replayed answer, a counter that went back, another origin, another RP ID, no user verification,
a forged signature, an unknown credential).

Usage: identity_check.py PATH-TO-circle   (scripts/identity-test runs it in its virtualenv)
"""

import base64
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import threading
import urllib.error
import urllib.request
from struct import pack

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from fido2 import cbor
from fido2.cose import ES256
from fido2.webauthn import AttestedCredentialData, AuthenticatorData, AttestationObject

FAILURES = []


def check(condition, what):
    print(("ok   " if condition else "FAIL ") + what)
    if not condition:
        FAILURES.append(what)


def b64u(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def unb64u(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class Browser:
    """Keeps the session cookie and the CSRF token, and sends the page's Origin."""

    def __init__(self, base, origin):
        self.base, self.origin, self.cookie, self.csrf = base, origin, None, None

    def call(self, method, path, body=None, origin=None):
        request = urllib.request.Request(self.base + path, method=method)
        request.add_header("Origin", origin or self.origin)
        if self.cookie:
            request.add_header("Cookie", self.cookie)
        if self.csrf and method != "GET":
            request.add_header("X-Circle-CSRF", self.csrf)
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            request.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(request, data, timeout=20) as response:
                status, raw, headers = response.status, response.read(), response.headers
        except urllib.error.HTTPError as error:
            status, raw, headers = error.code, error.read(), error.headers
        cookie = headers.get("Set-Cookie")
        if cookie:
            pair = cookie.split(";")[0]
            self.cookie = pair if pair.split("=", 1)[1] else None
        answer = json.loads(raw) if raw else {}
        if isinstance(answer, dict) and answer.get("csrf"):
            self.csrf = answer["csrf"]
        return status, answer


class Authenticator:
    """A platform authenticator holding discoverable ES256 credentials, with a counter."""

    def __init__(self):
        self.credentials = {}  # credential id -> (private key, rp id, user handle)
        self.counter = 0

    def create(self, options, origin, uv=True, rp_id=None):
        key = ec.generate_private_key(ec.SECP256R1())
        credential_id = os.urandom(32)
        rp_id = rp_id or options["rp"]["id"]
        self.credentials[credential_id] = (key, rp_id, unb64u(options["user"]["id"]))
        client_data = json.dumps(
            {"type": "webauthn.create", "challenge": options["challenge"], "origin": origin, "crossOrigin": False}
        ).encode()
        flags = AuthenticatorData.FLAG.UP | AuthenticatorData.FLAG.AT | (AuthenticatorData.FLAG.UV if uv else 0)
        attested = AttestedCredentialData.create(b"\0" * 16, credential_id, ES256.from_cryptography_key(key.public_key()))
        auth_data = AuthenticatorData.create(sha256(rp_id.encode()), flags, 0, attested)
        attestation = AttestationObject.create("none", auth_data, {})
        return {
            "id": b64u(credential_id),
            "type": "public-key",
            "response": {"clientDataJSON": b64u(client_data), "attestationObject": b64u(bytes(attestation))},
        }

    def get(self, options, origin, uv=True, counter=None, forge=False, credential_id=None):
        credential_id = credential_id or next(iter(self.credentials))
        key, rp_id, handle = self.credentials[credential_id]
        if counter is None:
            self.counter += 1
            counter = self.counter
        client_data = json.dumps({"type": "webauthn.get", "challenge": options["challenge"], "origin": origin}).encode()
        flags = AuthenticatorData.FLAG.UP | (AuthenticatorData.FLAG.UV if uv else 0)
        auth_data = bytes(AuthenticatorData.create(sha256(rp_id.encode()), flags, counter))
        signer = ec.generate_private_key(ec.SECP256R1()) if forge else key
        signature = signer.sign(auth_data + sha256(client_data), ec.ECDSA(hashes.SHA256()))
        return {
            "id": b64u(credential_id),
            "type": "public-key",
            "response": {
                "clientDataJSON": b64u(client_data),
                "authenticatorData": b64u(auth_data),
                "signature": b64u(signature),
                "userHandle": b64u(handle),
            },
        }


def sha256(data: bytes) -> bytes:
    digest = hashes.Hash(hashes.SHA256())
    digest.update(data)
    return digest.finalize()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(binary, data):
    port = free_port()
    origin = f"http://localhost:{port}"
    process = subprocess.Popen(
        [binary, "serve", "--port", str(port), "--data", data, "--public-url", origin, "--log-level", "notice"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    found = {}
    ready = threading.Event()

    def read():
        for line in process.stdout:
            match = re.search(r"#setup=([A-Za-z0-9_-]+)", line)
            if match:
                found["token"] = match.group(1)
                ready.set()
        ready.set()

    threading.Thread(target=read, daemon=True).start()
    if not ready.wait(60) or "token" not in found:
        process.kill()
        raise SystemExit("the server printed no setup link within 60 s")
    return process, port, origin, found["token"]


def main():
    binary = sys.argv[1]
    with tempfile.TemporaryDirectory() as data:
        process, port, origin, setup = start_server(binary, data)
        try:
            run(f"http://127.0.0.1:{port}", origin, setup)
        finally:
            process.terminate()
            process.wait(20)
    if FAILURES:
        print(f"identity_check: {len(FAILURES)} check(s) failed")
        sys.exit(1)
    print("identity_check: all checks passed")


def run(base, origin, setup):
    laptop = Authenticator()
    admin = Browser(base, origin)
    status, options = admin.call("POST", "/v1/auth/passkeys/register/options", {"setup": setup, "name": "ada", "displayName": "Ada"})
    check(status == 200, f"setup: registration options ({status})")
    public_key = options["publicKey"]
    check(public_key["rp"]["id"] == "localhost", "the RP ID is the public URL's host")
    check(public_key["authenticatorSelection"]["userVerification"] == "required", "user verification is required")
    check({p["alg"] for p in public_key["pubKeyCredParams"]} == {-7, -257}, "ES256 and RS256 are offered")
    check(public_key["attestation"] == "none", "attestation none")
    credential = laptop.create(public_key, origin)
    status, state = admin.call("POST", "/v1/auth/passkeys/register", {"challengeId": options["challengeId"], "name": "laptop", "credential": credential})
    check(status == 201 and state["user"]["role"] == "admin", f"setup with a passkey makes the first admin ({status} {state})")
    check(admin.cookie is not None, "and signs them in")
    status, listed = admin.call("GET", "/v1/auth/passkeys")
    check(status == 200 and [p["name"] for p in listed["passkeys"]] == ["laptop"], "the passkey is listed with its name")
    status, _ = admin.call("POST", "/v1/auth/signout")
    check(status == 204, "sign out")

    # Sign in with the passkey.
    browser = Browser(base, origin)
    status, ceremony = browser.call("POST", "/v1/auth/passkeys/signin/options", {})
    check(status == 200 and ceremony["publicKey"]["rpId"] == "localhost", "sign-in options")
    answer = laptop.get(ceremony["publicKey"], origin)
    status, state = browser.call("POST", "/v1/auth/passkeys/signin", {"challengeId": ceremony["challengeId"], "credential": answer})
    check(status == 200 and state["user"]["name"] == "ada", f"sign-in with the passkey ({status} {state})")
    status, _ = browser.call("POST", "/v1/auth/passkeys/signin", {"challengeId": ceremony["challengeId"], "credential": answer})
    check(status == 400, f"the same answer again: its challenge is used ({status})")

    def attempt(what, expected, **kwargs):
        other = Browser(base, origin)
        status, ceremony = other.call("POST", "/v1/auth/passkeys/signin/options", {})
        answer_origin = kwargs.pop("answer_origin", origin)
        answer = laptop.get(ceremony["publicKey"], answer_origin, **kwargs)
        status, body = other.call("POST", "/v1/auth/passkeys/signin", {"challengeId": ceremony["challengeId"], "credential": answer})
        check(status == expected and other.cookie is None, f"{what}: {status} {body.get('error', {}).get('message', '')}")

    attempt("a counter that went back (a cloned authenticator)", 401, counter=1)
    attempt("an answer made for another origin", 401, answer_origin="https://evil.example")
    attempt("no user verification", 401, uv=False)
    attempt("a signature by another key", 401, forge=True)
    stranger = Authenticator()
    stranger.create({"rp": {"id": "localhost"}, "user": {"id": b64u(b"x" * 16)}, "challenge": b64u(b"y" * 32)}, origin)
    status, ceremony = Browser(base, origin).call("POST", "/v1/auth/passkeys/signin/options", {})
    status, _ = Browser(base, origin).call(
        "POST", "/v1/auth/passkeys/signin", {"challengeId": ceremony["challengeId"], "credential": stranger.get(ceremony["publicKey"], origin)}
    )
    check(status == 401, f"a passkey this server never registered ({status})")
    wrong_rp = Authenticator()
    status, ceremony = browser.call("POST", "/v1/auth/passkeys/register/options", {})
    credential = wrong_rp.create(ceremony["publicKey"], origin, rp_id="evil.example")
    status, body = browser.call("POST", "/v1/auth/passkeys/register", {"challengeId": ceremony["challengeId"], "credential": credential})
    check(status == 400 and "rp" in body["error"]["message"].lower(), f"registration for another RP ID ({status} {body})")
    status, ceremony = browser.call("POST", "/v1/auth/passkeys/register/options", {})
    credential = Authenticator().create(ceremony["publicKey"], origin, uv=False)
    status, body = browser.call("POST", "/v1/auth/passkeys/register", {"challengeId": ceremony["challengeId"], "credential": credential})
    check(status == 400, f"registration without user verification ({status})")
    status, body = Browser(base, "https://evil.example").call("POST", "/v1/auth/passkeys/signin/options", {})
    check(status == 403, f"a ceremony started from another site ({status})")

    # A member signs up through an invite with a passkey of their own.
    status, invite = browser.call("POST", "/v1/admin/invites", {"hours": 1, "uses": 1})
    check(status == 201, f"an invite ({status})")
    phone = Authenticator()
    member = Browser(base, origin)
    status, options = member.call("POST", "/v1/auth/passkeys/register/options", {"invite": invite["token"], "name": "bo"})
    check(status == 200, f"sign-up options through the invite ({status} {options})")
    credential = phone.create(options["publicKey"], origin)
    status, state = member.call("POST", "/v1/auth/passkeys/register", {"challengeId": options["challengeId"], "credential": credential})
    check(status == 201 and state["user"]["name"] == "bo" and state["user"]["role"] == "member", f"sign-up with a passkey ({status})")
    status, _ = Browser(base, origin).call("POST", "/v1/auth/passkeys/register/options", {"invite": invite["token"], "name": "cy"})
    check(status == 404, f"the used-up invite starts no ceremony ({status})")


if __name__ == "__main__":
    main()
