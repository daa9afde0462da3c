"""Black-box probe of the hardening findings (docs/SECURITY.md) against a `circle` binary, to
compare two builds side by side: a far-future token expiry, an idle connection, a 400, duplicate
JSON keys, an oversized frame, the database's mode, and the server's growth for a reader that
sends 1,000 history requests without reading. Prints one line per finding.

    python3 scripts/hardening-probe.py .build/debug/circle

It starts its own servers on free loopback ports, in temporary directories, and stops them.
The Swift tests (Tests/CircleServerTests/AdversarialTests.swift, ResourceExhaustionTests.swift)
are the checks CI runs; this script is for comparing builds from outside.
"""
import base64, hashlib, hmac, json, os, socket, struct, subprocess, sys, tempfile, time, urllib.request

BIN = sys.argv[1]
SECRET = "circle-test-secret-0123456789abcdef-0123"

def b64(b): return base64.urlsafe_b64encode(b).rstrip(b"=").decode()
def token(claims):
    h = b64(json.dumps({"alg": "HS256", "typ": "JWT"}).encode()); p = b64(json.dumps(claims).encode()) if isinstance(claims, dict) else b64(claims.encode())
    s = b64(hmac.new(SECRET.encode(), f"{h}.{p}".encode(), hashlib.sha256).digest())
    return f"{h}.{p}.{s}"

def free_port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p

def start(extra=()):
    port = free_port(); data = tempfile.mkdtemp()
    proc = subprocess.Popen([BIN, "serve", "--port", str(port), "--data", data + "/d", "--jwt-secret", SECRET, "--log-level", "critical", *extra],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(200):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1); break
        except Exception: time.sleep(0.05)
    return proc, port, data + "/d"

def ws_upgrade(port, tok):
    s = socket.create_connection(("127.0.0.1", port)); s.settimeout(5)
    s.sendall((f"GET /v1/ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"
               f"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Protocol: circle.v1\r\nAuthorization: Bearer {tok}\r\n\r\n").encode())
    r = b""
    while b"\r\n\r\n" not in r:
        c = s.recv(4096)
        if not c: break
        r += c
    return s, r

def frame(text, op=1):
    p = text.encode() if isinstance(text, str) else text; m = b"\1\2\3\4"
    n = len(p); h = bytes([0x80 | op])
    h += bytes([0x80 | n]) if n < 126 else (bytes([0x80 | 126]) + struct.pack(">H", n) if n < 65536 else bytes([0x80 | 127]) + struct.pack(">Q", n))
    return h + m + bytes(c ^ m[i % 4] for i, c in enumerate(p))

def closed_within(s, seconds):
    s.settimeout(seconds); t = time.time()
    try:
        while True:
            c = s.recv(65536)
            if not c: return "closed"
    except socket.timeout: return "open"
    except ConnectionResetError: return "reset"

results = {}
proc, port, data = start()
# 1: exp 1e300
s, r = ws_upgrade(port, token('{"sub":"forever","exp":1e300}'))
try: proc.wait(timeout=20)
except subprocess.TimeoutExpired: pass
results["1 exp=1e300 upgrade; server still alive"] = "alive" if proc.poll() is None else f"DIED (exit {proc.returncode})"
if proc.poll() is not None:
    proc, port, data = start()
# 2: idle connection closed within 15 s (default header timeout 10 s)
idle = socket.create_connection(("127.0.0.1", port))
results["2 idle TCP connection, 15 s"] = closed_within(idle, 15)
# 3: parser error
bad = socket.create_connection(("127.0.0.1", port)); bad.sendall(b"BREW / HTTP/1.1\r\nHost: x\r\n\r\n")
results["3 after a 400 for a bad method, 8 s"] = closed_within(bad, 8)
# 5: duplicate keys
tok = token({"sub": "alice", "exp": time.time() + 600})
req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/circles", data=b'{"name":"general"}', headers={"Authorization": f"Bearer {tok}"}, method="POST")
urllib.request.urlopen(req)
s, r = ws_upgrade(port, tok)
s.sendall(frame('{"action":"join","id":"j","circle":"general"}'))
time.sleep(0.5)
long_id = "x" * 60000
s.sendall(frame('{"action":"post","id":"%s","id":"short","circle":"general","text":"hi"}' % long_id))
time.sleep(1)
hist = urllib.request.urlopen(urllib.request.Request(f"http://127.0.0.1:{port}/v1/circles/general/messages", headers={"Authorization": f"Bearer {tok}"})).read()
results["5 60,000-byte duplicate id stored"] = "STORED" if long_id.encode() in hist else "refused"
# lesser: 1009 vs reset, 6 tries
outcomes = []
for _ in range(6):
    s, r = ws_upgrade(port, tok)
    s.sendall(frame(b"a" * 65537))
    got = b""; s.settimeout(5)
    try:
        while True:
            c = s.recv(65536)
            if not c: break
            got += c
        end = "eof"
    except ConnectionResetError: end = "reset"
    except socket.timeout: end = "timeout"
    outcomes.append(("1009" if got[:1] == b"\x88" and got[2:4] == b"\x03\xf1" else "no-close") + "/" + end)
results["lesser: 65,537-byte frame x6"] = ", ".join(outcomes)
results["lesser: circle.sqlite mode"] = oct(os.stat(data + "/circle.sqlite").st_mode & 0o777)
proc.kill()
# 4: reader that stops reading: 300 history requests of 200 x 1 KB posts
proc, port, data = start(["--posts-per-second", "10000", "--post-burst", "10000"])
urllib.request.urlopen(urllib.request.Request(f"http://127.0.0.1:{port}/v1/circles", data=b'{"name":"general"}', headers={"Authorization": f"Bearer {tok}"}, method="POST"))
w, _ = ws_upgrade(port, tok)
w.sendall(frame('{"action":"join","id":"j","circle":"general"}'))
for i in range(200): w.sendall(frame('{"action":"post","id":"p%d","circle":"general","text":"%s"}' % (i, "k" * 1000)))
time.sleep(2)
def rss(): return int([l for l in open(f"/proc/{proc.pid}/status") if l.startswith("VmRSS")][0].split()[1]) // 1024
base = rss()
sponge, _ = ws_upgrade(port, token({"sub": "sponge", "exp": time.time() + 600}))
sponge.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
sponge.setblocking(False)
payload = b"".join(frame('{"action":"history","id":"h%d","circle":"general","limit":200}' % i) for i in range(1000))
sent = 0; t = time.time(); peak = 0
while time.time() - t < 6:
    try: sent += sponge.send(payload[sent:]) if sent < len(payload) else 0
    except BlockingIOError: pass
    peak = max(peak, rss() - base); time.sleep(0.05)
results["4 growth for 1,000 unread history requests (MiB)"] = f"{peak} (requests sent: {sent * 1000 // len(payload)})"
proc.kill()
for k, v in results.items(): print(f"{k}: {v}")
