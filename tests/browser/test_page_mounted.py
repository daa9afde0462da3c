"""The chat page with Circle served under a path (`circle serve --path-prefix /chat`, as behind a
reverse proxy that keeps the path, or an app that mounts Circle under /chat): the page at
/chat/ signs in, posts, receives a post from another client, and asks for nothing outside /chat/
(its API calls, WebSocket, assets, manifest and service worker are all relative to where it was
served; docs/PAGE.md, "Served under a path")."""

import http.client
from urllib.parse import urlsplit

import pytest
from selenium.webdriver.common.by import By

from harness import Raw, Server, browser, open_circle, post, posts, requested_urls, stored_seqs, wait_until

PREFIX = "/chat"


class MountedServer(Server):
    """`circle serve --dev --path-prefix /chat`: every route, the WebSocket included, under /chat."""

    def __init__(self):
        super().__init__(extra_args=["--path-prefix", PREFIX])

    @property
    def url(self):
        return f"http://127.0.0.1:{self.port}{PREFIX}"


@pytest.fixture
def mounted():
    server = MountedServer()
    server.start()  # waits for /chat/healthz
    server.create_circle("lounge", "alice")
    yield server
    server.cleanup()


def raw_get(port, path):
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        response.read()
        return response.status, response.getheader("Location")
    finally:
        connection.close()


def test_page_under_chat_asks_only_for_chat_urls(mounted):
    # Nothing is served outside the prefix, and /chat sends the browser to /chat/ (the page's
    # relative URLs need the slash).
    assert raw_get(mounted.port, "/healthz")[0] == 404
    assert raw_get(mounted.port, "/")[0] == 404
    assert raw_get(mounted.port, "/chat") == (308, "./chat/")

    page = browser(network_log=True)
    try:
        page.get(mounted.url)  # no trailing slash: redirected
        wait_until(lambda: page.current_url == mounted.url + "/", what="redirect to /chat/")
        wait_until(lambda: page.find_element(By.ID, "devrow").is_displayed(), what="dev sign-in")
        page.find_element(By.ID, "devname").send_keys("alice")
        page.find_element(By.ID, "signinbtn").click()
        wait_until(lambda: page.find_element(By.ID, "conn").get_attribute("data-state") == "connected", what="alice connected")
        open_circle(page, "lounge")

        post(page, "hello under chat")
        wait_until(lambda: stored_seqs(page) == [1], what="alice's post stored as seq 1")

        # Another client, on the mounted WebSocket, posts; the page shows it.
        bob = Raw(mounted, "bob")
        try:
            bob.request({"action": "join", "circle": "lounge"})
            bob.request({"action": "post", "circle": "lounge", "text": "hello from bob"})
        finally:
            bob.close()
        wait_until(lambda: "hello from bob" in posts(page), what="bob's post shown")
        assert posts(page) == ["hello under chat", "hello from bob"]

        # The service worker registered with the page's own scope.
        wait_until(lambda: page.execute_script(
            "return navigator.serviceWorker.getRegistration().then(r => r ? r.scope : null)") == mounted.url + "/",
            what="service worker scoped to /chat/")

        urls = requested_urls(page)
        ours = [url for url in urls if urlsplit(url).port == mounted.port]
        paths = {urlsplit(url).path for url in ours}
        # What the page needs, all under /chat/ ...
        for expected in ("/chat/", "/chat/assets/app.js", "/chat/assets/app.css", "/chat/assets/manifest.webmanifest",
                         "/chat/v1/config", "/chat/v1/dev/token", "/chat/v1/circles", "/chat/v1/ws"):
            assert expected in paths, (expected, sorted(paths))
        # ... and nothing else: the redirect from /chat is the one request outside /chat/.
        outside = sorted(url for url in ours if not urlsplit(url).path.startswith(PREFIX + "/") and urlsplit(url).path != PREFIX)
        assert outside == [], outside
        assert all(urlsplit(url).port == mounted.port for url in urls if url.startswith(("http:", "ws:"))), urls
    finally:
        page.quit()
