"""The page as an installable app (docs/PAGE.md, "Installable app and notifications"): the
manifest and the service worker as served, the worker's notification for a push delivered by
DevTools (ServiceWorker.deliverPushMessage, the payload as PushDispatcher's PushPayload.body
writes it), a #circle= link, the worker's "open" message and its notificationclick handler
opening the circle, and the
"Notify me on this device" switch asking for permission only when turned on."""

import json
from urllib.parse import urljoin
import time
import urllib.request

import pytest
import websocket
from selenium.webdriver.common.by import By

from harness import Server, sign_in, wait_until


@pytest.fixture
def push_server():
    s = Server(extra_args=["--push-contact", "mailto:ops@example.com"])
    s.start()
    s.create_circle("lounge", "alice")
    s.create_circle("garden", "alice")
    yield s
    s.cleanup()


class DevTools:
    """A second DevTools client on the page's target (Selenium's execute_cdp_cmd gets no events),
    for the ServiceWorker domain."""

    def __init__(self, page):
        address = page.capabilities["goog:chromeOptions"]["debuggerAddress"]
        with urllib.request.urlopen(f"http://{address}/json", timeout=10) as response:
            targets = json.load(response)
        target = next(t for t in targets if t.get("type") == "page")
        self.ws = websocket.create_connection(target["webSocketDebuggerUrl"], timeout=15, suppress_origin=True)
        self.counter = 0
        self.events = []

    def call(self, method, **params):
        self.counter += 1
        ident = self.counter
        self.ws.send(json.dumps({"id": ident, "method": method, "params": params}))
        deadline = time.time() + 15
        while time.time() < deadline:
            message = json.loads(self.ws.recv())
            if message.get("id") == ident:
                assert "error" not in message, message
                return message.get("result", {})
            self.events.append(message)
        raise AssertionError(f"no answer to {method}")

    def registration_id(self, scope):
        """The id of the active registration with `scope` (from ServiceWorker.enable's events)."""
        self.call("ServiceWorker.enable")
        registrations, active = {}, set()
        deadline = time.time() + 20
        while time.time() < deadline:
            while self.events:
                event = self.events.pop(0)
                params = event.get("params", {})
                if event.get("method") == "ServiceWorker.workerRegistrationUpdated":
                    for registration in params["registrations"]:
                        if not registration.get("isDeleted"):
                            registrations[registration["registrationId"]] = registration["scopeURL"]
                elif event.get("method") == "ServiceWorker.workerVersionUpdated":
                    for version in params["versions"]:
                        if version.get("status") == "activated":
                            active.add(version["registrationId"])
            for ident, url in registrations.items():
                if url == scope and ident in active:
                    return ident
            try:
                self.events.append(json.loads(self.ws.recv()))
            except websocket.WebSocketTimeoutException:
                pass
        raise AssertionError(f"no active service worker registration for {scope}: {registrations}, active {active}")

    def close(self):
        self.ws.close()


def notifications(page):
    shown = page.execute_async_script("""
        const done = arguments[arguments.length - 1];
        navigator.serviceWorker.ready
            .then((r) => r.getNotifications())
            .then((list) => done(list.map((n) => ({title: n.title, body: n.body, tag: n.tag, data: n.data}))))
            .catch((error) => done({error: String(error)}));""")
    assert isinstance(shown, list), shown
    return shown


def worker_badge(page):
    """The unread count the worker keeps and gives navigator.setAppBadge (its Cache Storage entry)."""
    return page.execute_async_script("""
        const done = arguments[arguments.length - 1];
        caches.open("circle-badge").then((c) => c.match("/assets/badge-count"))
            .then((r) => r ? r.text() : null).then((t) => done(t === null ? null : Number(t)))
            .catch((error) => done(String(error)));""")


def toast(page):
    node = page.find_element(By.ID, "toast")
    return node.text if node.is_displayed() else ""


def record_permission_requests(page):
    page.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": """
        window.__permissionRequests = 0;
        if (window.Notification) {
            const ask = Notification.requestPermission.bind(Notification);
            Notification.requestPermission = (...args) => { window.__permissionRequests += 1; return ask(...args); };
        }"""})


def test_manifest_and_worker_are_served(push_server):
    status, headers, manifest = push_server.http("GET", "/assets/manifest.webmanifest")
    assert status == 200
    assert headers["Content-Type"] == "application/manifest+json"
    if isinstance(manifest, bytes):
        manifest = json.loads(manifest)
    assert manifest["name"] == "Circle"
    # Relative to the manifest (/assets/manifest.webmanifest), so they hold under a mount path too.
    manifest_url = push_server.url + "/assets/manifest.webmanifest"
    assert urljoin(manifest_url, manifest["start_url"]) == push_server.url + "/"
    assert urljoin(manifest_url, manifest["scope"]) == push_server.url + "/"
    assert manifest["display"] == "standalone"
    assert {"src": "icon.svg", "sizes": "any", "type": "image/svg+xml", "purpose": "any"} in manifest["icons"]
    assert push_server.http("GET", "/assets/icon.svg")[0] == 200
    status, headers, script = push_server.http("GET", "/assets/sw.js")
    assert status == 200
    assert headers["Content-Type"].split(";")[0] == "text/javascript"
    # The worker lives under assets/ but controls the page one level up (/, or /chat/ mounted).
    assert headers["Service-Worker-Allowed"] == "../"
    assert "script-src 'self'" in headers["Content-Security-Policy"]
    assert b'addEventListener("push"' in script
    # The page links the manifest.
    status, _, html = push_server.http("GET", "/")
    assert b'<link rel="manifest" href="assets/manifest.webmanifest">' in html


def test_worker_shows_a_notification_per_circle_for_a_delivered_push(push_server, new_page):
    page = new_page()
    page.execute_cdp_cmd("Browser.grantPermissions", {"origin": push_server.url, "permissions": ["notifications"]})
    sign_in(page, push_server.port, "bob")
    tools = DevTools(page)
    try:
        registration = tools.registration_id(push_server.url + "/")
        wait_until(lambda: page.execute_script("return !!navigator.serviceWorker.controller"), what="the worker controls the page")

        def deliver(payload, shown):
            """Delivers `payload` until `shown(notifications)` holds. Headless Chromium here drops
            a DevTools delivery now and then (seen about one in three just after the worker took
            control of the page): each try waits 3 s, at most 5 tries. Delivering again shows the
            same notification (one tag per circle), so what is checked is unchanged."""
            for _ in range(5):
                tools.call("ServiceWorker.deliverPushMessage", origin=push_server.url, registrationId=registration, data=json.dumps(payload))
                try:
                    wait_until(lambda: shown(notifications(page)), timeout=3, what="the notification")
                    return
                except AssertionError:
                    continue
            raise AssertionError(f"no notification for {payload}: {notifications(page)}")

        # PushPayload.body's JSON for a mention (kind, circle, seq, author, text).
        deliver({"kind": "mention", "circle": "lounge", "seq": 1, "author": "alice", "text": "hi @bob"}, lambda shown: len(shown) == 1)
        assert notifications(page) == [
            {"title": "#lounge · alice", "body": "hi @bob", "tag": "circle:lounge", "data": {"circle": "lounge", "seq": 1}}]
        first_badge = worker_badge(page)
        assert isinstance(first_badge, (int, float)) and first_badge >= 1, first_badge

        # The same circle again: its newest notification replaces the older one (one tag per circle).
        deliver({"kind": "mention", "circle": "lounge", "seq": 2, "author": "carol", "text": "again @bob"},
                lambda shown: [n["body"] for n in shown] == ["again @bob"])
        # The count the worker gives setAppBadge grew with the push (by more if a retried delivery
        # was only slow, not dropped).
        wait_until(lambda: worker_badge(page) >= first_badge + 1, what="the worker's unread count grew")

        # Content-free mode (--push-content-free): no author or text; a direct message.
        deliver({"kind": "dm", "circle": "dm-8f3a", "seq": 3, "direct": True}, lambda shown: len(shown) == 2)
        dm = next(n for n in notifications(page) if n["tag"] == "circle:dm-8f3a")
        assert dm == {"title": "Direct message", "body": "New message", "tag": "circle:dm-8f3a", "data": {"circle": "dm-8f3a", "seq": 3}}
        deliver({"kind": "mention", "circle": "garden", "seq": 4}, lambda shown: any(n["tag"] == "circle:garden" for n in shown))
        garden = next(n for n in notifications(page) if n["tag"] == "circle:garden")
        assert (garden["title"], garden["body"]) == ("#garden", "You were mentioned")
    finally:
        tools.close()


def test_circle_link_and_worker_message_open_the_circle(push_server, new_page):
    page = new_page()
    sign_in(page, push_server.port, "bob")
    # What a notification's click opens when no page is open: /#circle=NAME.
    page.get(f"{push_server.url}/#circle=garden")
    wait_until(lambda: page.find_element(By.ID, "title").text.endswith("garden"), what="garden opened from the link")
    assert page.execute_script("return location.hash") == ""
    # What it does with a page open: the worker posts {type: "open", circle} to it. DevTools cannot
    # click a notification, so the message is dispatched on the page's ServiceWorkerContainer.
    wait_until(lambda: page.execute_script("return !!navigator.serviceWorker.controller"), what="the worker controls the page")
    page.execute_script("navigator.serviceWorker.dispatchEvent(new MessageEvent('message', {data: {type: 'open', circle: 'lounge'}}))")
    wait_until(lambda: page.find_element(By.ID, "title").text.endswith("lounge"), what="lounge opened from the worker's message")


class WorkerDevTools(DevTools):
    """A DevTools client on the page's service worker target (its own entry in /json), to run
    script in the worker itself."""

    def __init__(self, page, scope):
        address = page.capabilities["goog:chromeOptions"]["debuggerAddress"]
        deadline = time.time() + 15
        target = None
        while target is None:
            with urllib.request.urlopen(f"http://{address}/json", timeout=10) as response:
                targets = json.load(response)
            target = next((t for t in targets if t.get("type") == "service_worker" and t.get("url", "").startswith(scope)), None)
            if target is None:
                assert time.time() < deadline, f"no service worker target under {scope}: {targets}"
                time.sleep(0.2)
        self.ws = websocket.create_connection(target["webSocketDebuggerUrl"], timeout=15, suppress_origin=True)
        self.counter = 0
        self.events = []

    def evaluate(self, expression):
        result = self.call("Runtime.evaluate", expression=expression, awaitPromise=True, returnByValue=True)
        assert "exceptionDetails" not in result, result
        return result["result"].get("value")


def test_clicking_a_notification_opens_its_circle_in_the_open_page(push_server, new_page):
    """The worker's own notificationclick handler, run on a notification it showed for a
    delivered push: DevTools cannot click a notification, so the click is dispatched in the
    worker as a NotificationEvent carrying that notification. The handler closes it and asks the
    open page to show the circle."""
    page = new_page()
    page.execute_cdp_cmd("Browser.grantPermissions", {"origin": push_server.url, "permissions": ["notifications"]})
    sign_in(page, push_server.port, "bob")
    page.get(f"{push_server.url}/#circle=lounge")
    wait_until(lambda: page.find_element(By.ID, "title").text.endswith("lounge"), what="lounge open")
    tools = DevTools(page)
    worker = None
    try:
        registration = tools.registration_id(push_server.url + "/")
        wait_until(lambda: page.execute_script("return !!navigator.serviceWorker.controller"), what="the worker controls the page")
        for _ in range(5):  # a DevTools delivery is dropped now and then (see the test above)
            tools.call("ServiceWorker.deliverPushMessage", origin=push_server.url, registrationId=registration,
                       data=json.dumps({"kind": "mention", "circle": "garden", "seq": 7, "author": "alice", "text": "look @bob"}))
            try:
                wait_until(lambda: any(n["tag"] == "circle:garden" for n in notifications(page)), timeout=3, what="the notification")
                break
            except AssertionError:
                continue
        assert any(n["tag"] == "circle:garden" for n in notifications(page)), notifications(page)
        worker = WorkerDevTools(page, push_server.url + "/")
        clicked = worker.evaluate("""(async () => {
            const [notification] = await self.registration.getNotifications({tag: "circle:garden"});
            if (!notification) return "no notification";
            try {
                self.dispatchEvent(new NotificationEvent("notificationclick", {notification}));
            } catch (error) {
                // waitUntil refuses an event the browser did not dispatch; the handler ran up to it.
            }
            return notification.data.circle;
        })()""")
        assert clicked == "garden", clicked
        wait_until(lambda: page.find_element(By.ID, "title").text.endswith("garden"), what="garden opened by the notification's click")
        wait_until(lambda: not any(n["tag"] == "circle:garden" for n in notifications(page)), what="the clicked notification closed")
    finally:
        tools.close()
        if worker:
            worker.close()


def test_switch_asks_for_permission_only_when_turned_on(push_server, new_page):
    page = new_page()
    record_permission_requests(page)
    page.execute_cdp_cmd("Browser.grantPermissions", {"origin": push_server.url, "permissions": ["notifications"]})
    sign_in(page, push_server.port, "bob")
    # The page waits 20 s for a push service that does not answer; 3 s here.
    page.execute_script("sessionStorage.setItem('circle.pushTimeout', '3000')")
    wait_until(lambda: page.execute_script("return !!navigator.serviceWorker.controller"), what="the worker registered at sign-in")
    assert page.execute_script("return window.__permissionRequests") == 0
    switch = page.find_element(By.ID, "menupush")
    assert switch.get_attribute("aria-checked") == "false"
    page.find_element(By.ID, "mebtn").click()
    switch.click()
    wait_until(lambda: page.execute_script("return window.__permissionRequests") == 1, what="the permission asked")
    # Headless Chromium here has no push service to subscribe with (Google's is not reachable,
    # and its subscribe never answers): the page says so and the switch stays off; where it can
    # subscribe, the server gets the subscription.
    wait_until(lambda: "Notifications on this device" in toast(page), timeout=30, what="the outcome shown")
    status, _, listed = push_server.http("GET", "/v1/push/subscriptions", "bob")
    assert status == 200
    failures = ("the browser's push service did not answer in 3 s", "the browser's push service refused to subscribe")
    if any(failure in toast(page) for failure in failures):
        assert switch.get_attribute("aria-checked") == "false"
        assert listed["subscriptions"] == []
    else:
        assert toast(page) == "Notifications on this device are on."
        assert switch.get_attribute("aria-checked") == "true"
        assert len(listed["subscriptions"]) == 1
        page.find_element(By.ID, "mebtn").click()
        switch.click()
        wait_until(lambda: switch.get_attribute("aria-checked") == "false", what="switched off")
        wait_until(lambda: push_server.http("GET", "/v1/push/subscriptions", "bob")[2]["subscriptions"] == [], what="deleted on the server")


def test_switch_on_a_server_without_push_says_so(server, new_page):
    page = new_page()
    record_permission_requests(page)
    sign_in(page, server.port, "bob")
    page.find_element(By.ID, "mebtn").click()
    page.find_element(By.ID, "menupush").click()
    wait_until(lambda: toast(page) == "Notifications on this device: this server sends no push notifications", what="the error shown")
    assert page.find_element(By.ID, "menupush").get_attribute("aria-checked") == "false"
    assert page.execute_script("return window.__permissionRequests") == 0
