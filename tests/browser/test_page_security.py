"""The chat page's security: the headers of the page and its files (over plain HTTP), a page that
runs under its Content-Security-Policy without a single violation, and posts whose markup and
links are rendered as text, never as live HTML or script."""

import os
from html.parser import HTMLParser

from selenium.common.exceptions import NoAlertPresentException
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys

from harness import open_circle, png, post, posts, sign_in, stored_seqs, wait_until

CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' blob: data:; connect-src 'self' ws: wss:; "
       "frame-ancestors 'none'; base-uri 'none'; form-action 'self'")
ASSETS = {
    "/": "text/html; charset=utf-8",
    "/assets/app.js": "text/javascript; charset=utf-8",
    "/assets/markdown.js": "text/javascript; charset=utf-8",
    "/assets/app.css": "text/css; charset=utf-8",
    "/assets/icon.svg": "image/svg+xml",
}


def check_security_headers(headers):
    assert headers["Content-Security-Policy"] == CSP
    assert headers["X-Frame-Options"] == "DENY"
    assert headers["X-Content-Type-Options"] == "nosniff"
    assert headers["Referrer-Policy"] == "no-referrer"


def test_the_page_and_its_files_carry_the_security_headers(server):
    for path, content_type in ASSETS.items():
        status, headers, body = server.http("GET", path)
        assert status == 200, path
        assert headers["Content-Type"] == content_type, path
        check_security_headers(headers)
        assert len(body) > 100, path
        # Revalidation with the ETag answers 304, with the same headers.
        status, again, _ = server.http("GET", path, headers={"If-None-Match": headers["ETag"]})
        assert status == 304, path
        check_security_headers(again)
    status, headers, body = server.http("GET", "/assets/nope.js")
    assert status == 404 and body["error"]["code"] == "not_found"
    check_security_headers(headers)
    # index.html is the page at /, not a second address of it.
    assert server.http("GET", "/assets/index.html")[0] == 404


class InlineFinder(HTMLParser):
    """Collects what a strict CSP would block: inline scripts, style blocks, style and on* attributes."""

    def __init__(self):
        super().__init__()
        self.problems = []

    def handle_starttag(self, tag, attrs):
        names = [name for name, _ in attrs]
        if tag == "script" and "src" not in names:
            self.problems.append("inline <script>")
        if tag == "style":
            self.problems.append("<style> block")
        for name, value in attrs:
            if name == "style" or name.startswith("on"):
                self.problems.append(f"{tag} {name}={value!r}")
            if name in ("href", "src") and value and value.strip().lower().startswith("javascript:"):
                self.problems.append(f"{tag} {name}={value!r}")


def test_the_page_has_no_inline_script_or_style(server):
    _, _, html = server.http("GET", "/")
    finder = InlineFinder()
    finder.feed(html.decode())
    assert finder.problems == []


def test_the_page_runs_without_csp_violations(server, new_page):
    alice = new_page()
    sign_in(alice, server.port, "alice")
    alice.execute_script("""window.__violations = [];
        document.addEventListener('securitypolicyviolation', e => window.__violations.push(e.violatedDirective + ' ' + e.blockedURI));""")
    open_circle(alice, "lounge")
    post(alice, "**hello** with a [link](https://example.com) and `code`")
    wait_until(lambda: stored_seqs(alice) == [1], what="the post stored")
    path = os.path.join(server.data, "green.png")
    with open(path, "wb") as f:
        f.write(png(300, 200))
    alice.find_element(By.ID, "photo").send_keys(path)
    # The preview is a blob: URL, allowed by img-src.
    wait_until(lambda: alice.execute_script("const i = document.getElementById('photothumb'); return i.complete && i.naturalWidth") == 300,
               what="the photo's preview")
    alice.find_element(By.ID, "sendbtn").click()
    wait_until(lambda: stored_seqs(alice) == [1, 2], what="the photo stored")
    alice.find_element(By.CSS_SELECTOR, "#list .photo").click()
    wait_until(lambda: alice.find_element(By.ID, "viewer").is_displayed(), what="the photo viewer")
    alice.find_element(By.ID, "viewerclose").send_keys(Keys.ESCAPE)
    wait_until(lambda: not alice.find_element(By.ID, "viewer").is_displayed(), what="the viewer closed")
    alice.find_element(By.ID, "newbtn").click()
    assert alice.execute_script("return window.__violations") == []
    log = alice.get_log("browser")
    violations = [entry["message"] for entry in log if "Content Security Policy" in entry["message"] or "Refused to" in entry["message"]]
    assert violations == [], violations
    errors = [entry["message"] for entry in log if entry["level"] == "SEVERE"]
    assert errors == [], errors


def test_posts_render_markup_as_text_and_link_only_to_web_addresses(server, new_page):
    hostile = ["<img src=x onerror=alert(1)>", "[x](javascript:alert(1))", "javascript:alert(2) and <b>not bold</b>",
               "[docs](https://example.com/docs) **bold** _it_ `<code>` ~~gone~~"]
    for line in hostile:
        result = server.cli_send("lounge", line, "mallory")
        assert result.returncode == 0, result.stderr
    alice = new_page()
    sign_in(alice, server.port, "alice")
    open_circle(alice, "lounge")
    wait_until(lambda: len(posts(alice)) == 4, what="the four posts")
    assert posts(alice)[:3] == hostile[:3]
    bodies = alice.find_elements(By.CSS_SELECTOR, "#list .post .body")
    # No element came from the text of the first three posts, only text.
    for body in bodies[:3]:
        assert alice.execute_script("return arguments[0].querySelectorAll('*:not(p)').length", body) == 0, body.text
    assert alice.find_elements(By.CSS_SELECTOR, "#list img:not(.photo img)") == []
    assert alice.execute_script("return [...document.querySelectorAll('a')].filter(a => /^\\s*javascript:/i.test(a.getAttribute('href') || '')).length") == 0
    try:
        alice.switch_to.alert
        raise AssertionError("an alert opened")
    except NoAlertPresentException:
        pass
    # The fourth one is Markdown: a real link (new tab, no opener, no referrer) and formatting.
    last = bodies[3]
    link = last.find_element(By.TAG_NAME, "a")
    assert link.get_attribute("href") == "https://example.com/docs" and link.text == "docs"
    assert link.get_attribute("target") == "_blank"
    assert set(link.get_attribute("rel").split()) >= {"noopener", "noreferrer"}
    assert last.find_element(By.TAG_NAME, "strong").text == "bold"
    assert last.find_element(By.TAG_NAME, "em").text == "it"
    assert last.find_element(By.TAG_NAME, "code").text == "<code>"
    assert last.find_element(By.TAG_NAME, "del").text == "gone"
