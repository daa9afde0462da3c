"""Shared by the browser tests and tests/browser/screenshots.py: a real `circle serve` process on
loopback, headless Chromium through chromedriver, and small helpers to drive the chat page."""

import json
import os
import shutil
import socket
import struct
import subprocess
import tempfile
import time
import urllib.request
import zlib

import websocket
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CIRCLE = os.environ.get("CIRCLE_BIN") or os.path.join(ROOT, ".build", "debug", "circle")
SECRET = "browser-test-secret-0123456789abcdef"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """`circle serve --dev` on a free loopback port with its own data directory."""

    def __init__(self, secret=SECRET, extra_args=()):
        self.extra_args = list(extra_args)
        self.port = free_port()
        self.data = tempfile.mkdtemp(prefix="circle-browser-")
        self.process = None
        self.secret = secret

    @property
    def url(self):
        return f"http://127.0.0.1:{self.port}"

    def start(self):
        self.process = subprocess.Popen(
            [CIRCLE, "serve", "--port", str(self.port), "--data", self.data, "--dev", "--jwt-secret", self.secret, "--log-level", "warning", *self.extra_args],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        deadline = time.time() + 20
        while time.time() < deadline:
            try:
                urllib.request.urlopen(f"{self.url}/healthz", timeout=1)
                return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("server did not start")

    def stop(self):
        if self.process:
            self.process.terminate()
            self.process.wait(timeout=20)
            self.process = None

    def cleanup(self):
        self.stop()
        shutil.rmtree(self.data, ignore_errors=True)

    def token(self, user, secret=None):
        return subprocess.check_output([CIRCLE, "token", "--user", user, "--jwt-secret", secret or self.secret], text=True).strip()

    def http(self, method, path, user=None, body=None, headers=None):
        """(status, headers, parsed JSON or raw bytes) of one request."""
        all_headers = dict(headers or {})
        if user:
            all_headers["Authorization"] = "Bearer " + self.token(user)
        data = body if isinstance(body, (bytes, type(None))) else json.dumps(body).encode()
        request = urllib.request.Request(self.url + path, method=method, data=data, headers=all_headers)
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                raw = response.read()
                status, response_headers = response.status, response.headers
        except urllib.error.HTTPError as error:
            raw, status, response_headers = error.read(), error.code, error.headers
        try:
            return status, response_headers, json.loads(raw)
        except ValueError:
            return status, response_headers, raw

    def create_circle(self, name, owner, private=False):
        status, _, body = self.http("POST", "/v1/circles", owner, {"name": name, "private": private})
        assert status == 201, body

    def add_member(self, circle, owner, user):
        status, _, body = self.http("POST", f"/v1/circles/{circle}/members", owner, {"user": user})
        assert status == 200, body

    def cli_send(self, circle, text, user):
        return subprocess.run(
            [CIRCLE, "send", circle, text, "--user", user, "--jwt-secret", self.secret, "--server", f"ws://127.0.0.1:{self.port}/v1/ws"],
            capture_output=True, text=True, timeout=60,
        )

    def send_lines(self, circle, lines, user):
        """Posts each line as its own post, in order, from one connection."""
        result = subprocess.run(
            [CIRCLE, "send", circle, "--user", user, "--jwt-secret", self.secret, "--server", f"ws://127.0.0.1:{self.port}/v1/ws"],
            input="".join(line + "\n" for line in lines), capture_output=True, text=True, timeout=120,
        )
        assert result.returncode == 0, result.stderr

    def post_photo(self, circle, path, user, caption=None):
        command = [CIRCLE, "upload", path, "--circle", circle, "--user", user, "--jwt-secret", self.secret, "--server", f"ws://127.0.0.1:{self.port}/v1/ws"]
        if caption:
            command += ["--caption", caption]
        result = subprocess.run(command, capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, result.stderr
        return result.stdout.split()[-1]

    def metric(self, name, **labels):
        """The value of one Prometheus sample (0 when absent)."""
        status, _, body = self.http("GET", "/metrics")
        assert status == 200
        text = body.decode() if isinstance(body, bytes) else str(body)
        total = 0.0
        for line in text.splitlines():
            if line.startswith("#") or not line.strip():
                continue
            head, _, value = line.rpartition(" ")
            if head.split("{", 1)[0] != name:
                continue
            if all(f'{key}="{expected}"' in head for key, expected in labels.items()):
                total += float(value)
        return total


class Raw:
    """One `circle.v1` WebSocket connection of `user` (websocket-client, which Selenium installs),
    answering requests one at a time: for posts, edits and reactions by other users."""

    def __init__(self, server, user):
        self.ws = websocket.create_connection(
            "ws" + server.url[len("http"):] + f"/v1/ws?token={server.token(user)}", subprotocols=["circle.v1"], timeout=15)
        self.counter = 0

    def request(self, message):
        self.counter += 1
        message = {"id": f"raw-{time.time_ns()}-{self.counter}", **message}
        self.ws.send(json.dumps(message))
        deadline = time.time() + 15
        while time.time() < deadline:
            reply = json.loads(self.ws.recv())
            if reply.get("id") == message["id"] and reply.get("type") in ("ack", "error", "circles", "history"):
                assert reply["type"] != "error", reply
                return reply
        raise AssertionError(f"no answer to {message}")

    def close(self):
        self.ws.close()


def wait_until(predicate, timeout=15, what="condition"):
    deadline = time.time() + timeout
    last_error = None
    while time.time() < deadline:
        try:
            if predicate():
                return
        except Exception as error:  # the page may be between states
            last_error = error
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}" + (f" (last error: {last_error})" if last_error else ""))


def holds_for(predicate, seconds, what="condition"):
    """Checks that `predicate` stays true for `seconds` (used only to show that something does
    NOT happen, such as a retry loop; on a slow machine it can only miss a bug, never fail a
    correct page)."""
    deadline = time.time() + seconds
    while time.time() < deadline:
        assert predicate(), f"no longer true: {what}"
        time.sleep(0.05)


def browser(width=1000, height=700, network_log=False):
    """Headless Chromium; with `network_log`, the DevTools performance log records every request
    and WebSocket the page makes (read with `requested_urls`)."""
    options = webdriver.ChromeOptions()
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", f"--window-size={width},{height}", "--disable-gpu",
                     "--force-device-scale-factor=1", "--hide-scrollbars", "--lang=en-GB"):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL", **({"performance": "ALL"} if network_log else {})})
    options.binary_location = shutil.which("chromium") or "/usr/bin/chromium"
    return webdriver.Chrome(service=Service(shutil.which("chromedriver") or "/usr/bin/chromedriver"), options=options)


def requested_urls(page):
    """The URLs of the requests and WebSockets the page made since the last call (the DevTools
    performance log of a `browser(network_log=True)`)."""
    urls = []
    for entry in page.get_log("performance"):
        message = json.loads(entry["message"])["message"]
        if message["method"] == "Network.requestWillBeSent":
            urls.append(message["params"]["request"]["url"])
        elif message["method"] == "Network.webSocketCreated":
            urls.append(message["params"]["url"])
    return urls


def set_viewport(page, width, height):
    """Sizes the page's viewport (not the window) exactly."""
    page.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": width < 600})


def sign_in(page, port, name):
    page.get(f"http://127.0.0.1:{port}/")
    wait_until(lambda: page.find_element(By.ID, "devrow").is_displayed(), what="dev sign-in")
    page.find_element(By.ID, "devname").send_keys(name)
    page.find_element(By.ID, "signinbtn").click()
    wait_until(lambda: page.find_element(By.ID, "conn").get_attribute("data-state") == "connected", what=f"{name} connected")


def sign_in_with_token(page, port, token):
    page.get(f"http://127.0.0.1:{port}/")
    # The first load's start() settles (the sign-in form or the chat shown) before the token is
    # stored and the page reloaded: otherwise its requests, cut by the reload, can still open a
    # WebSocket or clear the stored token (a race seen under a loaded full suite).
    wait_until(lambda: page.execute_script(
        "return !document.getElementById('signin').classList.contains('hidden') || !document.getElementById('app').classList.contains('hidden')"),
        what="the page settled before storing the token")
    page.execute_script("sessionStorage.setItem('circle.token', arguments[0])", token)
    page.get(f"http://127.0.0.1:{port}/")


def presence_timing(page, port, settle_ms, away_ms):
    """Shortens the page's presence rules for a test (docs/PAGE.md, "Presence notices"): joins
    within `settle_ms` of the page's own join are not said, a leave is said after `away_ms`.
    Kept in the tab's sessionStorage, so it holds across sign-in and reloads."""
    page.get(f"http://127.0.0.1:{port}/")
    page.execute_script("sessionStorage.setItem('circle.presence', JSON.stringify({settle: arguments[0], away: arguments[1]}))", settle_ms, away_ms)


def record_presence_events(page):
    """Records every `joined`/`left` event the page's WebSockets receive in window.__presence
    ("joined bob", "left bob"), from before the page's own script runs and across reloads, so a
    test can wait for events the page chose not to show."""
    page.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": """
        window.__presence = [];
        const Native = window.WebSocket;
        window.WebSocket = class extends Native {
            constructor(...args) {
                super(...args);
                this.addEventListener('message', (event) => {
                    try {
                        const m = JSON.parse(event.data);
                        if (m.type === 'joined' || m.type === 'left') window.__presence.push(m.type + ' ' + m.user);
                    } catch (error) { /* not JSON */ }
                });
            }
        };"""})


def presence_events(page):
    return page.execute_script("return window.__presence || []")


def notices(page):
    """The presence and other notices in the open circle's timeline, oldest first."""
    return page.execute_script("return [...document.querySelectorAll('#list .notice .notice-text')].map(n => n.textContent)")


def circle_button(page, name):
    return page.find_element(By.CSS_SELECTOR, f'#circles li[data-name="{name}"] button')


def open_circle(page, name):
    wait_until(lambda: circle_button(page, name).is_displayed(), what=f"circle {name} listed")
    circle_button(page, name).click()
    wait_until(lambda: page.find_element(By.ID, "title").text.endswith(name) and page.execute_script(
        "return !document.getElementById('older').textContent.startsWith('Loading')"), what=f"circle {name} open")


def post(page, text):
    box = page.find_element(By.ID, "text")
    box.send_keys(text)
    page.find_element(By.ID, "sendbtn").click()


def posts(page):
    """The text of every post in the open circle, oldest first."""
    return page.execute_script(
        "return [...document.querySelectorAll('#list .post')].map(p => { const b = p.querySelector('.body'); return b ? b.innerText : ''; })")


def stored_seqs(page):
    return page.execute_script("return [...document.querySelectorAll('#list .post[data-seq]')].map(p => Number(p.dataset.seq))")


def distance_from_bottom(page):
    return page.execute_script("const m = document.getElementById('messages'); return m.scrollHeight - m.scrollTop - m.clientHeight")


def console_errors(page):
    return [entry for entry in page.get_log("browser") if entry.get("level") in ("SEVERE", "WARNING")]


def png(width, height, pattern="solid"):
    """A valid RGB PNG, so the browser really decodes it: one colour, or (pattern="scene") a
    sky-and-sea picture for screenshots."""

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    if pattern == "solid":
        rows = b"".join(b"\x00" + b"\x3b\x6c\xf6" * width for _ in range(height))
    else:
        out = bytearray()
        horizon = int(height * 0.62)
        sun_x, sun_y, sun_r = int(width * 0.7), int(height * 0.42), int(height * 0.11)
        for y in range(height):
            out.append(0)
            if y < horizon:
                t = y / horizon
                base = (int(250 - 60 * t), int(170 + 10 * t), int(120 + 90 * t))
            else:
                t = (y - horizon) / (height - horizon)
                base = (int(40 + 20 * (1 - t)), int(90 + 30 * (1 - t)), int(140 + 30 * (1 - t)))
            row = bytearray(bytes(base) * width)
            dy = y - sun_y
            if abs(dy) < sun_r:
                half = int((sun_r * sun_r - dy * dy) ** 0.5)
                for x in range(max(0, sun_x - half), min(width, sun_x + half)):
                    row[3 * x:3 * x + 3] = b"\xff\xe2\x9a"
            elif y >= horizon and (y - horizon) % 9 < 2:
                left, right = max(0, sun_x - sun_r - (y - horizon)), min(width, sun_x + sun_r + (y - horizon))
                for x in range(left, right, 1):
                    row[3 * x:3 * x + 3] = b"\xf0\xb8\x7a"
            out += row
        rows = bytes(out)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(rows, 6)) + chunk(b"IEND", b""))
