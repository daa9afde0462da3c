"""One test per bug of the chat page reported in issue 16; each failed on the page before the fix."""

import os
import subprocess

from selenium.common.exceptions import NoAlertPresentException
from selenium.webdriver.common.by import By

from harness import (CIRCLE, Server, distance_from_bottom, holds_for, open_circle, png, post, posts, presence_timing, sign_in,
                     sign_in_with_token, stored_seqs, wait_until)


def no_alert(page):
    try:
        page.switch_to.alert
    except NoAlertPresentException:
        return True
    return False


def newest_visible(page, text):
    """Whether the post with `text` is inside the timeline's visible area."""
    return page.execute_script("""
        const box = document.getElementById('messages').getBoundingClientRect();
        const post = [...document.querySelectorAll('#list .post')].find(p => p.innerText.includes(arguments[0]));
        if (!post) return false;
        const r = post.getBoundingClientRect();
        return r.top >= box.top - 1 && r.bottom <= box.bottom + 1;""", text)


def test_returning_to_a_circle_lands_where_the_reader_left_it(server, new_page):
    server.send_lines("lounge", [f"line {index}" for index in range(60)], "carol")
    server.create_circle("other", "carol")
    server.send_lines("other", ["over here"], "carol")
    alice = new_page()
    sign_in(alice, server.port, "alice")
    open_circle(alice, "lounge")
    wait_until(lambda: newest_visible(alice, "line 59"), what="the newest post in view")
    open_circle(alice, "other")
    wait_until(lambda: posts(alice) == ["over here"], what="the other circle shown")
    open_circle(alice, "lounge")
    wait_until(lambda: newest_visible(alice, "line 59") and distance_from_bottom(alice) < 4, what="back at the newest post")

    # Scrolled up into the history, a reader comes back to the same place.
    alice.execute_script("const m = document.getElementById('messages'); m.scrollTop = m.scrollHeight - m.clientHeight - 700")
    wait_until(lambda: 650 < distance_from_bottom(alice) < 750, what="scrolled up")
    before = distance_from_bottom(alice)
    open_circle(alice, "other")
    open_circle(alice, "lounge")
    wait_until(lambda: abs(distance_from_bottom(alice) - before) < 4, what="the same place again")


def test_a_circle_with_photos_lands_on_the_newest_post(server, new_page):
    for index in range(3):
        path = os.path.join(server.data, f"photo{index}.png")
        with open(path, "wb") as f:
            f.write(png(800 + index, 600))
        server.post_photo("lounge", path, "bob", caption=f"photo {index}")
    server.send_lines("lounge", ["the newest words"], "bob")
    alice = new_page()
    sign_in(alice, server.port, "alice")
    open_circle(alice, "lounge")

    def photos_in_view_loaded():
        return alice.execute_script("""
            const box = document.getElementById('messages').getBoundingClientRect();
            const imgs = [...document.querySelectorAll('#list .photo img')];
            return imgs.length === 3 && imgs.filter(i => { const r = i.getBoundingClientRect(); return r.bottom > box.top && r.top < box.bottom; })
                                     .every(i => i.complete && i.naturalWidth > 0);""")
    wait_until(photos_in_view_loaded, what="the photos in view loaded")
    wait_until(lambda: newest_visible(alice, "the newest words") and distance_from_bottom(alice) < 4, what="the newest post in view")
    # Drawn again (a new post arrives), the boxes keep their size: still at the bottom.
    server.send_lines("lounge", ["one more"], "bob")
    wait_until(lambda: newest_visible(alice, "one more") and distance_from_bottom(alice) < 4, what="following the newest post")


def test_a_long_address_or_word_does_not_scroll_the_pane_sideways(server, new_page):
    long_url = "https://example.com/" + "a" * 400 + "?q=" + "b" * 200
    server.send_lines("lounge", [f"see {long_url} please", "x" * 500], "carol")
    for width in (1000, 390):
        page = new_page(width, 700)
        sign_in(page, server.port, "alice")
        open_circle(page, "lounge")
        wait_until(lambda page=page: len(posts(page)) == 2, what="both posts shown")
        sizes = page.execute_script("""
            const m = document.getElementById('messages');
            return [m.scrollWidth, m.clientWidth, document.documentElement.scrollWidth, window.innerWidth];""")
        assert sizes[0] <= sizes[1], f"the timeline scrolls sideways at {width} px: {sizes}"
        assert sizes[2] <= sizes[3], f"the page scrolls sideways at {width} px: {sizes}"
        link = page.find_element(By.CSS_SELECTOR, "#list .post .body a")
        assert link.get_attribute("href") == long_url


def test_the_new_circle_name_is_checked_in_the_page_without_an_alert(server, new_page):
    alice = new_page()
    sign_in(alice, server.port, "alice")
    alice.get_log("browser")  # start from an empty console
    alice.find_element(By.ID, "newbtn").click()
    field = alice.find_element(By.ID, "newcircle")
    field.send_keys("Bad Name!")
    alice.find_element(By.ID, "createbtn").click()
    wait_until(lambda: alice.find_element(By.ID, "createerr").is_displayed(), what="the inline error")
    assert "lower-case letters" in alice.find_element(By.ID, "createerr").text
    assert field.get_attribute("aria-invalid") == "true"
    assert no_alert(alice)
    assert alice.execute_script("return document.getElementById('newcircle').validity.patternMismatch") is True
    problems = [entry["message"] for entry in alice.get_log("browser") if "pattern" in entry["message"].lower()]
    assert problems == [], problems
    status, _, body = server.http("GET", "/v1/circles", "alice")
    assert [c["name"] for c in body["circles"]] == ["lounge"]

    field.clear()
    field.send_keys("book-club")
    alice.find_element(By.ID, "createbtn").click()
    wait_until(lambda: alice.find_element(By.ID, "title").text == "# book-club", what="the new circle open")

    # The server's refusal (the name is taken) shows the same way.
    alice.find_element(By.ID, "newbtn").click()
    alice.find_element(By.ID, "newcircle").send_keys("lounge")
    alice.find_element(By.ID, "createbtn").click()
    wait_until(lambda: "already a circle" in alice.find_element(By.ID, "createerr").text, what="the conflict shown inline")
    assert no_alert(alice)


def ws_refusals(server):
    return server.metric("circle_http_requests_total", route="GET /v1/ws", status="401")


def test_a_token_signed_with_another_key_is_refused_without_retrying(server, new_page):
    forged = server.token("mallory", secret="some-other-secret-0123456789abcdefgh")
    page = new_page()
    page.get(server.url + "/")
    wait_until(lambda: page.find_element(By.ID, "tokenin").is_displayed(), what="sign-in form")
    page.find_element(By.ID, "tokenin").send_keys(forged)
    page.find_element(By.ID, "signinbtn").click()
    wait_until(lambda: "not signed by this server's key" in page.find_element(By.ID, "signinerr").text, what="the refusal shown")

    def still_refused():
        return (not page.find_element(By.ID, "app").is_displayed() and page.find_element(By.ID, "signin").is_displayed()
                and page.find_element(By.ID, "me").get_attribute("textContent") == ""
                and "reconnecting" not in page.find_element(By.TAG_NAME, "body").text.lower())
    holds_for(still_refused, 1.5, "signed out, no user shown, no reconnecting")
    assert ws_refusals(server) == 0, "the page tried the WebSocket with a refused token"

    # The same token left in the tab's storage from earlier: refused the same way on load.
    sign_in_with_token(page, server.port, forged)
    wait_until(lambda: "not signed by this server's key" in page.find_element(By.ID, "signinerr").text, what="the stored token refused")
    holds_for(still_refused, 1.5, "signed out after a reload")
    assert ws_refusals(server) == 0
    assert page.execute_script("return sessionStorage.getItem('circle.token')") is None


def test_a_token_refused_after_a_restart_with_another_key_ends_the_session(new_page):
    server = Server()
    server.start()
    try:
        server.create_circle("lounge", "alice")
        page = new_page()
        sign_in(page, server.port, "alice")
        server.stop()
        server.secret = "a-new-secret-after-the-restart-0123456789"
        server.start()
        wait_until(lambda: page.find_element(By.ID, "signin").is_displayed(), timeout=40, what="back at the sign-in form")
        assert "not signed by this server's key" in page.find_element(By.ID, "signinerr").text
        refusals = ws_refusals(server)
        assert refusals <= 1
        holds_for(lambda: not page.find_element(By.ID, "app").is_displayed(), 1.5, "stays signed out")
        assert ws_refusals(server) == refusals, "the page kept retrying the WebSocket"
    finally:
        server.cleanup()


def test_no_connection_badge_before_sign_in(server, new_page):
    page = new_page()
    page.get(server.url + "/")
    wait_until(lambda: page.find_element(By.ID, "signin").is_displayed(), what="sign-in form")
    assert "offline" not in page.find_element(By.TAG_NAME, "body").text.lower()
    assert not page.find_element(By.ID, "conn").is_displayed()


def test_presence_notices_stay_when_the_timeline_is_drawn_again(server, new_page):
    alice, bob = new_page(), new_page()
    # Bob's join right after alice's is said, and his leave 1 s after it (docs/PAGE.md).
    presence_timing(alice, server.port, 0, 1000)
    sign_in(alice, server.port, "alice")
    open_circle(alice, "lounge")
    sign_in(bob, server.port, "bob")
    open_circle(bob, "lounge")

    def notices():
        return [n.text.split("\n")[0] for n in alice.find_elements(By.CSS_SELECTOR, "#list .notice .notice-text")]
    wait_until(lambda: notices() == ["bob joined"], what="bob's join shown")
    post(alice, "a post that redraws the timeline")
    wait_until(lambda: stored_seqs(alice) == [1], what="the post stored")
    assert notices() == ["bob joined"]
    bob.quit()
    wait_until(lambda: notices() == ["bob joined", "bob left"], what="bob's leaving shown")
    post(alice, "another redraw")
    wait_until(lambda: stored_seqs(alice) == [1, 2], what="the second post stored")
    assert notices() == ["bob joined", "bob left"]
    # In order: the join before alice's post, the leave after it.
    order = alice.execute_script("return [...document.querySelectorAll('#list .post, #list .notice')].map(n => n.classList.contains('post') ? 'post' : 'notice')")
    assert order == ["notice", "post", "notice", "post"], order


def test_an_expiring_token_is_renewed_on_a_dev_server(server, new_page):
    page = new_page()
    page.get(server.url + "/")
    wait_until(lambda: page.find_element(By.ID, "tokenin").is_displayed(), what="sign-in form")
    short = subprocess.check_output([CIRCLE, "token", "--user", "alice", "--ttl", "3s", "--jwt-secret", server.secret], text=True).strip()
    page.find_element(By.ID, "tokenin").send_keys(short)
    page.find_element(By.ID, "signinbtn").click()
    wait_until(lambda: page.find_element(By.ID, "conn").get_attribute("data-state") == "connected", what="connected")
    open_circle(page, "lounge")
    # The server closes the connection with 4001 when the token expires; the page gets a new one.
    wait_until(lambda: page.execute_script("return sessionStorage.getItem('circle.token')") != short, timeout=20, what="a new token")
    wait_until(lambda: page.find_element(By.ID, "conn").get_attribute("data-state") == "connected", what="connected again")
    assert page.find_element(By.ID, "app").is_displayed()
    post(page, "still here")
    wait_until(lambda: stored_seqs(page) == [1], what="a post after the renewal")


def test_an_idle_connection_closed_by_the_server_comes_back_quietly(new_page):
    server = Server(extra_args=["--idle-timeout", "1s"])
    server.start()
    try:
        page = new_page()
        sign_in(page, server.port, "alice")
        # Counts every time the reconnecting bar is shown, however briefly.
        page.execute_script("""window.__bars = 0;
            const banner = document.getElementById('banner');
            new MutationObserver(() => { if (!banner.classList.contains('hidden')) window.__bars++; })
                .observe(banner, {attributes: true, attributeFilter: ['class']});""")
        # No circle open, so nothing keeps the connection busy: the server closes it (4002).
        wait_until(lambda: server.metric("circle_connections_opened_total") >= 3, timeout=30, what="two idle closes and reconnects")
        wait_until(lambda: page.find_element(By.ID, "conn").get_attribute("data-state") == "connected", what="connected")
        assert page.execute_script("return window.__bars") == 0, "the reconnecting bar showed"
    finally:
        server.cleanup()
