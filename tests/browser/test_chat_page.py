"""The chat page in a real browser (headless Chromium through chromedriver), against a real
`circle serve` process: two pages and a CLI client exchange posts, typing shows, and the page
recovers after the server restarts without losing or repeating a post.

Run by scripts/browser-test (which installs Chromium, chromedriver and Selenium)."""

import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.request

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CIRCLE = os.path.join(ROOT, ".build", "debug", "circle")
SECRET = "browser-test-secret-0123456789abcdef"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self):
        self.port = free_port()
        self.data = tempfile.mkdtemp(prefix="circle-browser-")
        self.process = None

    def start(self):
        self.process = subprocess.Popen(
            [CIRCLE, "serve", "--port", str(self.port), "--data", self.data, "--dev", "--jwt-secret", SECRET, "--log-level", "warning"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        deadline = time.time() + 20
        while time.time() < deadline:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{self.port}/healthz", timeout=1)
                return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("server did not start")

    def stop(self):
        if self.process:
            self.process.terminate()
            self.process.wait(timeout=20)
            self.process = None

    def token(self, user):
        return subprocess.check_output([CIRCLE, "token", "--user", user, "--jwt-secret", SECRET], text=True).strip()

    def create_circle(self, name, owner):
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.port}/v1/circles", method="POST",
            data=json.dumps({"name": name}).encode(), headers={"Authorization": "Bearer " + self.token(owner)},
        )
        urllib.request.urlopen(request, timeout=5)

    def cli_send(self, circle, text, user):
        return subprocess.run(
            [CIRCLE, "send", circle, text, "--user", user, "--jwt-secret", SECRET, "--server", f"ws://127.0.0.1:{self.port}/v1/ws"],
            capture_output=True, text=True, timeout=60,
        )


def wait_until(predicate, timeout=15, what="condition"):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            if predicate():
                return
        except Exception:
            pass
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def browser():
    options = webdriver.ChromeOptions()
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1000,700", "--disable-gpu"):
        options.add_argument(argument)
    options.binary_location = shutil.which("chromium") or "/usr/bin/chromium"
    return webdriver.Chrome(service=Service(shutil.which("chromedriver") or "/usr/bin/chromedriver"), options=options)


def sign_in(page, port, name):
    page.get(f"http://127.0.0.1:{port}/")
    wait_until(lambda: page.find_element(By.ID, "devrow").is_displayed(), what="dev sign-in")
    page.find_element(By.ID, "devname").send_keys(name)
    page.find_element(By.CSS_SELECTOR, "#signin button").click()
    wait_until(lambda: page.find_element(By.ID, "conn").text == "connected", what=f"{name} connected")


def open_circle(page, name):
    wait_until(lambda: any(li.text.startswith("# " + name) for li in page.find_elements(By.CSS_SELECTOR, "#circles li")), what="circle listed")
    next(li for li in page.find_elements(By.CSS_SELECTOR, "#circles li") if li.text.startswith("# " + name)).click()
    wait_until(lambda: page.find_element(By.ID, "title").text == "# " + name, what="circle open")


def post(page, text):
    box = page.find_element(By.ID, "text")
    box.send_keys(text)
    page.find_element(By.ID, "sendbtn").click()


def posts(page):
    return [node.text for node in page.find_elements(By.CSS_SELECTOR, "#list .post > div:last-child")]


@pytest.fixture
def setup():
    server = Server()
    server.start()
    server.create_circle("lounge", "alice")
    pages = [browser(), browser()]
    yield server, pages
    for page in pages:
        page.quit()
    server.stop()
    shutil.rmtree(server.data, ignore_errors=True)


def test_two_pages_and_the_cli_chat_and_survive_a_restart(setup):
    server, (alice, bob) = setup
    sign_in(alice, server.port, "alice")
    sign_in(bob, server.port, "bob")
    open_circle(alice, "lounge")
    open_circle(bob, "lounge")
    time.sleep(0.3)  # both joins acknowledged

    post(alice, "hello from alice")
    wait_until(lambda: "hello from alice" in posts(bob), what="bob sees alice")
    wait_until(lambda: "#1" in alice.find_element(By.ID, "list").text, what="alice's post acked with #1")

    result = server.cli_send("lounge", "hello from the cli", "carol")
    assert result.returncode == 0, result.stderr
    for page in (alice, bob):
        wait_until(lambda page=page: "hello from the cli" in posts(page), what="cli post shown")

    bob.find_element(By.ID, "text").send_keys("typ")
    wait_until(lambda: "bob is typing" in alice.find_element(By.ID, "typing").text, what="typing shown")
    bob.find_element(By.ID, "text").clear()

    os.makedirs(os.path.join(ROOT, "reports"), exist_ok=True)
    alice.save_screenshot(os.path.join(ROOT, "reports", "chat-page.png"))

    # The server goes away: the pages say so, and a post made meanwhile waits.
    server.stop()
    wait_until(lambda: "reconnecting" in alice.find_element(By.ID, "conn").text, what="alice reconnecting")
    post(bob, "posted while the server was down")
    wait_until(lambda: "sending" in bob.find_element(By.ID, "list").text, what="bob's post waiting")
    server.start()
    wait_until(lambda: alice.find_element(By.ID, "conn").text == "connected", timeout=40, what="alice back")
    wait_until(lambda: bob.find_element(By.ID, "conn").text == "connected", timeout=40, what="bob back")
    wait_until(lambda: "posted while the server was down" in posts(alice), timeout=20, what="queued post delivered")
    result = server.cli_send("lounge", "after the restart", "carol")
    assert result.returncode == 0, result.stderr
    wait_until(lambda: "after the restart" in posts(alice), what="post after restart")

    expected = ["hello from alice", "hello from the cli", "posted while the server was down", "after the restart"]
    for page in (alice, bob):
        wait_until(lambda page=page: posts(page) == expected, what="every post once, in order")


def test_older_posts_load_and_phone_width_renders(setup):
    server, (alice, _) = setup
    lines = "\n".join(f"old {index}" for index in range(60)) + "\n"
    result = subprocess.run(
        [CIRCLE, "send", "lounge", "--user", "carol", "--jwt-secret", SECRET, "--server", f"ws://127.0.0.1:{server.port}/v1/ws"],
        input=lines, capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 0, result.stderr
    alice.set_window_size(390, 800)
    sign_in(alice, server.port, "alice")
    open_circle(alice, "lounge")
    wait_until(lambda: posts(alice)[-1:] == ["old 59"], what="newest posts shown")
    assert "old 0" not in posts(alice)  # only the newest page at first
    alice.execute_script("document.getElementById('messages').scrollTop = 0")
    wait_until(lambda: posts(alice)[:1] == ["old 0"], what="older posts loaded by scrolling up")
    assert posts(alice) == [f"old {index}" for index in range(60)]
    assert alice.find_element(By.ID, "text").is_displayed()
    assert alice.find_element(By.ID, "side").size["width"] <= 390


def png(width, height):
    """A valid RGB PNG of one colour, so the browser really decodes it."""
    import struct
    import zlib

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    rows = b"".join(b"\x00" + b"\x3b\x6c\xf6" * width for _ in range(height))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))


def test_a_photo_is_attached_posted_and_shown_to_others(setup):
    server, (alice, bob) = setup
    sign_in(alice, server.port, "alice")
    sign_in(bob, server.port, "bob")
    open_circle(alice, "lounge")
    open_circle(bob, "lounge")
    time.sleep(0.3)  # both joins acknowledged

    path = os.path.join(server.data, "blue.png")
    with open(path, "wb") as f:
        f.write(png(40, 30))
    alice.find_element(By.ID, "text").send_keys("a blue square")
    alice.find_element(By.ID, "photo").send_keys(path)

    def loaded_photos(page):
        return page.execute_script(
            "return [...document.querySelectorAll('#list .post img.photo')].filter(i => i.complete && i.naturalWidth > 0).map(i => i.naturalWidth + 'x' + i.naturalHeight)")

    for page in (alice, bob):
        wait_until(lambda page=page: loaded_photos(page) == ["40x30"], what="the photo shown")
        wait_until(lambda page=page: posts(page) == ["a blue square"], what="the caption shown")
    wait_until(lambda: "#1" in alice.find_element(By.ID, "list").text, what="alice's photo post acked with #1")
    alice.save_screenshot(os.path.join(ROOT, "reports", "chat-page-photo.png")) if os.path.isdir(os.path.join(ROOT, "reports")) else None

    # A file that is not an image is refused, and the page says so.
    bogus = os.path.join(server.data, "not-really.png")
    with open(bogus, "wb") as f:
        f.write(b"hello, not a png at all")
    bob.find_element(By.ID, "photo").send_keys(bogus)
    wait_until(lambda: "not posted" in bob.find_element(By.ID, "list").text, what="the bogus photo refused")
