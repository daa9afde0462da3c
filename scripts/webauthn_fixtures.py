#!/usr/bin/env python3
"""Generate the WebAuthn verification fixtures used by Circle's Swift tests.

The fixtures are registrations (attestation objects) and assertions made by
implementations that are not Circle's own, so the Swift verifier is checked
against independent encoders and signers:

* ES256 credentials come from soft-webauthn's SoftWebauthnDevice (its key, its
  credential id, its CBOR). SoftWebauthnDevice never sets the User Verified
  flag, which Circle requires, so the positive fixtures set UV in its output
  and re-sign assertions with the device's own private key; its untouched
  output is kept as the "UV not set" negative fixture.
* RS256, EdDSA, packed and fido-u2f cases are built with `cryptography` and
  python-fido2's CBOR encoder and AuthenticatorData / AttestedCredentialData /
  AttestationObject / CollectedClientData classes.
* Every positive fixture is accepted by python-fido2's server-side Fido2Server
  (register_complete / authenticate_complete with user verification required),
  and a packed self-attestation is checked with python-fido2's PackedAttestation.
  Negative fixtures that Fido2Server also checks (challenge, origin, RP ID, UP,
  UV, signature) are asserted to be refused by it as well; the rest (crossOrigin,
  sign counter, attestation format, algorithm, key size, backup flags) are not
  checked by Fido2Server, so the script only asserts that the signature in them
  is valid, meaning exactly one rule of the Swift verifier can refuse them.

Each negative fixture names the WebAuthnError.Code the Swift verifier must give.

Regenerate (from the repository root):

    python3 -m venv .venv
    .venv/bin/pip install fido2==1.2.0 soft-webauthn==0.1.4 cryptography==44.0.3
    .venv/bin/python scripts/webauthn_fixtures.py --seeds tests/fuzz/webauthn \
        > Tests/CircleServerTests/WebAuthn/Fixtures/webauthn.json

`--seeds DIR` also writes fuzz seeds for the `webauthn` fuzz target (WebAuthnFuzzing):
framed inputs `u16 clientDataJSON length | u16 signature length | clientDataJSON |
signature | attestationObject or authenticatorData` made with the fuzz target's fixed
relying party, challenge and credential key (P-256 scalar 0x11...11), so they pass every
check; and raw attestation objects, authenticator data and COSE keys.

Made with Python 3.11, fido2 1.2.0, soft-webauthn 0.1.4, cryptography 44.0.3.
Keys and challenges are random, so every run gives different (equally valid) bytes.
"""

import base64
import json
import os
import struct
import sys
from hashlib import sha256

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, padding, rsa
from fido2 import cbor
from fido2.attestation import PackedAttestation
from fido2.cose import ES256, RS256, EdDSA
from fido2.server import Fido2Server
from fido2.webauthn import (
    AttestationObject,
    AttestedCredentialData,
    AuthenticatorData,
    CollectedClientData,
)
from soft_webauthn import SoftWebauthnDevice

RP_ID = "chat.example.com"
ORIGIN = "https://chat.example.com"
LOCAL_ORIGIN = "http://localhost:8080"
ORIGINS = [ORIGIN, LOCAL_ORIGIN]
OTHER_RP_ID = "evil.example.com"
OTHER_ORIGIN = "https://evil.example.com"

UP, UV, BE, BS, AT, ED = 0x01, 0x04, 0x08, 0x10, 0x40, 0x80

SERVER = Fido2Server(
    {"id": RP_ID, "name": "Circle"}, verify_origin=lambda origin: origin in ORIGINS
)
USER = {"id": b"user-0001", "name": "ada", "displayName": "Ada"}


def b64u(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def rp_hash(rp_id: str = RP_ID) -> bytes:
    return sha256(rp_id.encode()).digest()


def client_data(kind: str, challenge: bytes, origin: str = ORIGIN, **extra) -> bytes:
    return bytes(CollectedClientData.create(kind, challenge, origin, **extra))


def expect_refused(what: str, call) -> None:
    """Asserts that python-fido2's server refuses a negative fixture too."""
    try:
        call()
    except Exception:  # noqa: BLE001 - any refusal will do
        return
    raise AssertionError(f"Fido2Server accepted the negative fixture {what!r}")


class Signer:
    """A credential key pair with the signing rule of its COSE algorithm."""

    def __init__(self, alg: int, private_key):
        self.alg = alg
        self.private_key = private_key
        public = private_key.public_key()
        if alg == -7:
            self.cose = ES256.from_cryptography_key(public)
        elif alg == -257:
            self.cose = RS256.from_cryptography_key(public)
        elif alg == -8:
            self.cose = EdDSA.from_cryptography_key(public)
        else:
            raise ValueError(alg)

    @classmethod
    def es256(cls):
        return cls(-7, ec.generate_private_key(ec.SECP256R1()))

    @classmethod
    def rs256(cls, bits: int = 2048):
        return cls(-257, rsa.generate_private_key(public_exponent=65537, key_size=bits))

    @classmethod
    def eddsa(cls):
        return cls(-8, ed25519.Ed25519PrivateKey.generate())

    def sign(self, message: bytes) -> bytes:
        if self.alg == -7:
            return self.private_key.sign(message, ec.ECDSA(hashes.SHA256()))
        if self.alg == -257:
            return self.private_key.sign(message, padding.PKCS1v15(), hashes.SHA256())
        return self.private_key.sign(message)


class Credential:
    """One registered credential: its fixture entry and the key that signs for it."""

    def __init__(self, name: str, signer: Signer, credential_id: bytes, counter: int):
        self.name = name
        self.signer = signer
        self.credential_id = credential_id
        self.counter = counter
        self.attested = AttestedCredentialData.create(
            b"\x00" * 16, credential_id, signer.cose
        )


def registration_entry(name, challenge, cdj, att_obj, **extra):
    entry = {
        "name": name,
        "challenge": b64u(challenge),
        "clientDataJSON": b64u(cdj),
        "attestationObject": b64u(att_obj),
    }
    entry.update(extra)
    return entry


def check_registration(challenge, cdj, att_obj) -> AuthenticatorData:
    _, state = SERVER.register_begin(USER, user_verification="required", challenge=challenge)
    return SERVER.register_complete(
        state, CollectedClientData(cdj), AttestationObject(att_obj)
    )


def check_assertion(cred: Credential, challenge, cdj, auth_data, signature):
    _, state = SERVER.authenticate_begin(
        [cred.attested], user_verification="required", challenge=challenge
    )
    SERVER.authenticate_complete(
        state,
        [cred.attested],
        cred.credential_id,
        CollectedClientData(cdj),
        AuthenticatorData(auth_data),
        signature,
    )


def make_registration(
    signer: Signer,
    *,
    counter: int = 0,
    flags: int = UP | UV | AT,
    origin: str = ORIGIN,
    rp_id: str = RP_ID,
    kind: str = "webauthn.create",
    credential_id: bytes = None,
    aaguid: bytes = b"\x00" * 16,
    extensions=None,
    fmt: str = "none",
    att_stmt=None,
    client_extra=None,
    challenge: bytes = None,
):
    challenge = challenge or os.urandom(32)
    credential_id = credential_id if credential_id is not None else os.urandom(32)
    cdj = client_data(kind, challenge, origin, **(client_extra or {}))
    cred_data = AttestedCredentialData.create(aaguid, credential_id, signer.cose)
    if not flags & AT:
        cred_data = b""  # python-fido2 refuses credential data without AT
    auth = AuthenticatorData.create(rp_hash(rp_id), flags, counter, cred_data, extensions)
    if callable(att_stmt):
        att_stmt = att_stmt(bytes(auth), sha256(cdj).digest())
    att = AttestationObject.create(fmt, auth, att_stmt if att_stmt is not None else {})
    return challenge, cdj, bytes(att), bytes(auth), credential_id


def make_assertion(
    cred: Credential,
    counter: int,
    *,
    flags: int = UP | UV,
    origin: str = ORIGIN,
    rp_id: str = RP_ID,
    kind: str = "webauthn.get",
    signer: Signer = None,
    client_extra=None,
):
    challenge = os.urandom(32)
    cdj = client_data(kind, challenge, origin, **(client_extra or {}))
    # Raw bytes, not AuthenticatorData.create: that refuses AT without data, a negative case here.
    auth = rp_hash(rp_id) + struct.pack(">BI", flags, counter)
    signature = (signer or cred.signer).sign(auth + sha256(cdj).digest())
    return challenge, cdj, auth, signature


def assertion_entry(name, challenge, cdj, auth, sig, **extra):
    entry = {
        "name": name,
        "challenge": b64u(challenge),
        "clientDataJSON": b64u(cdj),
        "authenticatorData": b64u(auth),
        "signature": b64u(sig),
    }
    entry.update(extra)
    return entry


FUZZ_CHALLENGE = b"circle-webauthn-fuzz-challenge!!"


def write_seeds(directory: str, registrations) -> None:
    """Writes fuzz seeds for WebAuthnFuzzing.run (see the module docstring)."""
    os.makedirs(directory, exist_ok=True)
    fuzz_key = Signer(-7, ec.derive_private_key(int.from_bytes(b"\x11" * 32, "big"), ec.SECP256R1()))
    fuzz_cred = Credential("fuzz", fuzz_key, os.urandom(16), 1)

    def framed(cdj: bytes, sig: bytes, rest: bytes) -> bytes:
        return struct.pack(">HH", len(cdj), len(sig)) + cdj + sig + rest

    def registration(signer, **kw):
        challenge, cdj, att, _, _ = make_registration(signer, challenge=FUZZ_CHALLENGE, **kw)
        check_registration(challenge, cdj, att)
        return framed(cdj, b"", att)

    def assertion(counter, flags=UP | UV, signer=None):
        _, cdj, auth, sig = make_assertion(fuzz_cred, counter, flags=flags, signer=signer)
        cdj = client_data("webauthn.get", FUZZ_CHALLENGE)
        sig = (signer or fuzz_key).sign(auth + sha256(cdj).digest())
        return framed(cdj, sig, auth)

    seeds = {
        "framed-registration-es256-none": registration(fuzz_key),
        "framed-registration-es256-packed-self": registration(
            fuzz_key, fmt="packed", att_stmt=lambda auth, cdh: {"alg": -7, "sig": fuzz_key.sign(auth + cdh)}),
        "framed-registration-rs256": registration(Signer.rs256(2048), counter=3),
        "framed-registration-extensions-backup": registration(
            Signer.es256(), flags=UP | UV | AT | BE | BS | ED, extensions={"credProtect": 2}),
        "framed-assertion-es256-counter-2": assertion(2),
        "framed-assertion-es256-counter-0": assertion(0),
        "framed-assertion-es256-backup": assertion(7, flags=UP | UV | BE | BS),
        "framed-assertion-rs256-other-key": assertion(5, signer=Signer.rs256(2048)),
    }
    for entry in registrations:
        att = base64.urlsafe_b64decode(entry["attestationObject"] + "==")
        seeds[f"raw-attestation-object-{entry['name']}"] = att
        seeds[f"raw-cose-key-{entry['name']}"] = base64.urlsafe_b64decode(entry["publicKey"] + "==")
        if entry["assertions"]:
            a = entry["assertions"][0]
            seeds[f"raw-authenticator-data-{entry['name']}"] = base64.urlsafe_b64decode(a["authenticatorData"] + "==")
    for name, data in sorted(seeds.items())[:20]:
        with open(os.path.join(directory, name), "wb") as f:
            f.write(data)


def main() -> None:
    registrations = []
    negative_registrations = []
    negative_assertions = []
    credentials = {}

    # --- ES256 from soft-webauthn -------------------------------------------
    device = SoftWebauthnDevice()
    challenge = os.urandom(32)
    options = {
        "publicKey": {
            "rp": {"id": RP_ID, "name": "Circle"},
            "user": {"id": b"user-0001", "name": "ada", "displayName": "Ada"},
            "challenge": challenge,
            "pubKeyCredParams": [{"alg": -7, "type": "public-key"}],
            "attestation": "none",
        }
    }
    created = device.create(options, ORIGIN)
    raw_cdj = created["response"]["clientDataJSON"]
    raw_att = created["response"]["attestationObject"]
    # soft-webauthn's own output has UP but not UV: Circle requires UV.
    expect_refused("soft-webauthn without UV", lambda: check_registration(challenge, raw_cdj, raw_att))
    negative_registrations.append(
        registration_entry("soft-webauthn-no-uv", challenge, raw_cdj, raw_att, expect="userNotVerified")
    )
    decoded = cbor.decode(raw_att)
    auth = bytearray(decoded["authData"])
    auth[32] |= UV
    att = cbor.encode({"fmt": decoded["fmt"], "attStmt": decoded["attStmt"], "authData": bytes(auth)})
    check_registration(challenge, raw_cdj, att)
    signer = Signer(-7, device.private_key)
    soft = Credential("es256-soft", signer, device.credential_id, 0)
    credentials[soft.name] = soft
    assertions = []
    for _ in range(3):
        got = device.get({"publicKey": {"rpId": RP_ID, "challenge": os.urandom(32)}}, ORIGIN)
        resp = got["response"]
        a_cdj = resp["clientDataJSON"]
        a_challenge = CollectedClientData(a_cdj).challenge
        if not assertions:
            expect_refused(
                "soft-webauthn assertion without UV",
                lambda: check_assertion(soft, a_challenge, a_cdj, resp["authenticatorData"], resp["signature"]),
            )
            negative_assertions.append(
                assertion_entry(
                    "soft-webauthn-assertion-no-uv", a_challenge, a_cdj, resp["authenticatorData"],
                    resp["signature"], credential=soft.name, storedSignCount=0, expect="userNotVerified",
                )
            )
        a_auth = bytearray(resp["authenticatorData"])
        a_auth[32] |= UV
        a_auth = bytes(a_auth)
        a_sig = device.private_key.sign(a_auth + sha256(a_cdj).digest(), ec.ECDSA(hashes.SHA256()))
        check_assertion(soft, a_challenge, a_cdj, a_auth, a_sig)
        assertions.append(
            assertion_entry(f"es256-soft-{device.sign_count}", a_challenge, a_cdj, a_auth, a_sig,
                            signCount=device.sign_count)
        )
    registrations.append(
        registration_entry(
            soft.name, challenge, raw_cdj, att, alg=-7, credentialId=b64u(device.credential_id),
            publicKey=b64u(cbor.encode(signer.cose)), signCount=0, aaguid=b64u(b"\x00" * 16),
            backupEligible=False, backedUp=False, assertions=assertions,
        )
    )

    # --- Positive registrations built with python-fido2 ----------------------
    def positive(name, signer, counter, assertion_counters, **kw):
        aaguid = kw.pop("aaguid", os.urandom(16))
        challenge, cdj, att, auth, cred_id = make_registration(
            signer, counter=counter, aaguid=aaguid, **kw
        )
        check_registration(challenge, cdj, att)
        cred = Credential(name, signer, cred_id, counter)
        cred.attested = AttestedCredentialData.create(aaguid, cred_id, signer.cose)
        credentials[name] = cred
        flags = kw.get("flags", UP | UV | AT)
        entry_assertions = []
        for c in assertion_counters:
            a = make_assertion(cred, c, flags=(flags & (BE | BS)) | UP | UV)
            check_assertion(cred, *a)
            entry_assertions.append(assertion_entry(f"{name}-{c}", *a, signCount=c))
        registrations.append(
            registration_entry(
                name, challenge, cdj, att, alg=signer.alg, credentialId=b64u(cred_id),
                publicKey=b64u(cbor.encode(signer.cose)), signCount=counter, aaguid=b64u(aaguid),
                backupEligible=bool(flags & BE), backedUp=bool(flags & BS),
                assertions=entry_assertions,
            )
        )
        return cred

    rs = positive("rs256-2048", Signer.rs256(2048), 5, [6, 7, 9])
    positive("rs256-4096", Signer.rs256(4096), 0, [1])
    es = positive("es256-synced-zero-counter", Signer.es256(), 0, [0, 0],
                  flags=UP | UV | AT | BE | BS, aaguid=b"\x00" * 16)
    positive("es256-localhost-extensions", Signer.es256(), 1, [2],
             flags=UP | UV | AT | ED, origin=LOCAL_ORIGIN, extensions={"credProtect": 2})
    # Packed self attestation: signed by the credential key itself.
    packed_signer = Signer.es256()

    def packed_self(auth, cdh, signer=packed_signer, alg=-7):
        return {"alg": alg, "sig": signer.sign(auth + cdh)}

    p_challenge, p_cdj, p_att, p_auth, p_id = make_registration(
        packed_signer, fmt="packed", att_stmt=packed_self
    )
    PackedAttestation().verify(
        cbor.decode(p_att)["attStmt"], AuthenticatorData(p_auth), sha256(p_cdj).digest()
    )
    check_registration(p_challenge, p_cdj, p_att)
    registrations.append(
        registration_entry(
            "es256-packed-self", p_challenge, p_cdj, p_att, alg=-7, credentialId=b64u(p_id),
            publicKey=b64u(cbor.encode(packed_signer.cose)), signCount=0,
            aaguid=b64u(b"\x00" * 16), backupEligible=False, backedUp=False, assertions=[],
        )
    )

    # --- Negative registrations ----------------------------------------------
    def negative_registration(name, expect, signer=None, fido2_refuses=False, expected_challenge=None, **kw):
        challenge, cdj, att, _, _ = make_registration(signer or Signer.es256(), **kw)
        wanted = expected_challenge or challenge
        if fido2_refuses:
            expect_refused(name, lambda: check_registration(wanted, cdj, att))
        negative_registrations.append(registration_entry(name, wanted, cdj, att, expect=expect))

    negative_registration("reg-wrong-challenge", "challengeMismatch", fido2_refuses=True,
                          expected_challenge=os.urandom(32))
    negative_registration("reg-wrong-origin", "originNotAllowed", fido2_refuses=True, origin=OTHER_ORIGIN)
    negative_registration("reg-wrong-rp-id", "rpIDMismatch", fido2_refuses=True, rp_id=OTHER_RP_ID)
    negative_registration("reg-cross-origin", "crossOrigin", client_extra={"cross_origin": True})
    negative_registration("reg-top-origin", "crossOrigin", client_extra={"topOrigin": OTHER_ORIGIN})
    negative_registration("reg-wrong-type", "wrongType", fido2_refuses=True, kind="webauthn.get")
    negative_registration("reg-no-up", "userNotPresent", fido2_refuses=True, flags=UV | AT)
    negative_registration("reg-no-uv", "userNotVerified", fido2_refuses=True, flags=UP | AT)
    negative_registration("reg-no-at", "missingCredentialData", flags=UP | UV)
    negative_registration("reg-bs-without-be", "inconsistentBackupFlags", flags=UP | UV | AT | BS)
    negative_registration("reg-short-credential-id", "malformedAuthenticatorData", credential_id=os.urandom(8))
    negative_registration("reg-eddsa", "unsupportedAlgorithm", signer=Signer.eddsa())
    negative_registration("reg-rsa-1024", "unsupportedAlgorithm", signer=Signer.rs256(1024))
    negative_registration("reg-fido-u2f", "unsupportedAttestation", fmt="fido-u2f",
                          att_stmt=lambda auth, cdh: {"sig": b"\x30\x00", "x5c": [b"\x30\x00"]})
    negative_registration("reg-packed-x5c", "unsupportedAttestation", fmt="packed",
                          att_stmt=lambda auth, cdh: {"alg": -7, "sig": b"\x30\x00", "x5c": [b"\x30\x00"]})
    negative_registration("reg-none-with-statement", "malformedAttestationObject",
                          att_stmt={"sig": b"\x01"})
    other = Signer.es256()
    negative_registration("reg-packed-self-other-key", "badSignature", fmt="packed",
                          att_stmt=lambda auth, cdh: packed_self(auth, cdh, other))
    negative_registration("reg-packed-self-alg-mismatch", "invalidAttestation", fmt="packed",
                          signer=packed_signer,
                          att_stmt=lambda auth, cdh: packed_self(auth, cdh, packed_signer, -257))

    # --- Negative assertions --------------------------------------------------
    def negative_assertion(name, expect, cred, counter, stored, fido2_refuses=False,
                           expected_challenge=None, tamper=None, **kw):
        challenge, cdj, auth, sig = make_assertion(cred, counter, **kw)
        if tamper:
            cdj = tamper(cdj)
        wanted = expected_challenge or challenge
        if fido2_refuses:
            expect_refused(name, lambda: check_assertion(cred, wanted, cdj, auth, sig))
        negative_assertions.append(
            assertion_entry(name, wanted, cdj, auth, sig, credential=cred.name,
                            storedSignCount=stored, expect=expect)
        )

    negative_assertion("get-wrong-challenge", "challengeMismatch", soft, 10, 3, True,
                       expected_challenge=os.urandom(32))
    negative_assertion("get-wrong-origin", "originNotAllowed", soft, 10, 3, True, origin=OTHER_ORIGIN)
    negative_assertion("get-wrong-rp-id", "rpIDMismatch", soft, 10, 3, True, rp_id=OTHER_RP_ID)
    negative_assertion("get-cross-origin", "crossOrigin", soft, 10, 3,
                       client_extra={"cross_origin": True})
    negative_assertion("get-wrong-type", "wrongType", soft, 10, 3, True, kind="webauthn.create")
    negative_assertion("get-no-up", "userNotPresent", soft, 10, 3, True, flags=UV)
    negative_assertion("get-no-uv", "userNotVerified", soft, 10, 3, True, flags=UP)
    negative_assertion("get-replayed-counter", "signCountNotIncreased", soft, 3, 3)
    negative_assertion("get-lower-counter", "signCountNotIncreased", rs, 8, 9)
    negative_assertion("get-counter-went-to-zero", "signCountNotIncreased", rs, 0, 9)
    negative_assertion("get-other-key", "badSignature", soft, 10, 3, True, signer=Signer.es256())
    negative_assertion("get-rs256-other-key", "badSignature", rs, 10, 9, True, signer=Signer.rs256())
    negative_assertion("get-tampered-client-data", "badSignature", soft, 10, 3, True,
                       tamper=lambda cdj: cdj.replace(b'"crossOrigin":false', b'"crossOrigin":false,"x":1'))
    negative_assertion("get-bs-without-be", "inconsistentBackupFlags", es, 0, 0, flags=UP | UV | BS)
    negative_assertion("get-attested-data-in-assertion", "malformedAuthenticatorData", soft, 10, 3,
                       flags=UP | UV | AT)

    fixtures = {
        "comment": "Generated by scripts/webauthn_fixtures.py; byte fields are base64url without padding.",
        "generator": {
            "python": sys.version.split()[0],
            "fido2": _version("fido2"),
            "soft-webauthn": _version("soft-webauthn"),
            "cryptography": _version("cryptography"),
        },
        "rp": {"id": RP_ID, "origins": ORIGINS},
        "registrations": registrations,
        "negativeRegistrations": negative_registrations,
        "negativeAssertions": negative_assertions,
    }
    if "--seeds" in sys.argv:
        write_seeds(sys.argv[sys.argv.index("--seeds") + 1], registrations[:4])
    json.dump(fixtures, sys.stdout, indent=1, sort_keys=False)
    sys.stdout.write("\n")


def _version(name: str) -> str:
    from importlib.metadata import version

    return version(name)


if __name__ == "__main__":
    main()
