"""How the chat page presents a conversation: grouped posts with avatars and day separators, no
internal sequence numbers, empty states, unread counts, photo thumbnails, focus styles, and a
phone layout that leads from the circle list into the conversation."""

import os
import re

from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys

from harness import open_circle, png, post, posts, set_viewport, sign_in, wait_until


def test_consecutive_posts_share_one_author_line(server, new_page):
    server.send_lines("lounge", ["first from carol", "second from carol"], "carol")
    server.send_lines("lounge", ["dave here"], "dave")
    server.send_lines("lounge", ["carol again"], "carol")
    alice = new_page()
    sign_in(alice, server.port, "alice")
    open_circle(alice, "lounge")
    wait_until(lambda: len(posts(alice)) == 4, what="four posts")
    shape = alice.execute_script("""return [...document.querySelectorAll('#list .post')].map(p => [
        p.classList.contains('continued'), p.querySelector('.head').offsetParent !== null ? p.querySelector('.author').textContent : null,
        p.querySelector('.avatar').offsetParent !== null ? p.querySelector('.avatar').textContent : null])""")
    assert shape == [[False, "carol", "C"], [True, None, None], [False, "dave", "D"], [False, "carol", "C"]], shape
    days = [d.text for d in alice.find_elements(By.CSS_SELECTOR, "#list .day")]
    assert days == ["Today"]
    text = alice.find_element(By.ID, "list").text
    assert not re.search(r"#\d", text), text  # no internal sequence numbers
    # Each post's time is there, with the full date as its title.
    times = alice.find_elements(By.CSS_SELECTOR, "#list .post .head time")
    assert times and all(t.get_attribute("datetime") and t.get_attribute("title") for t in times)

    # A new post adds one line to the log; the others stay in place (not re-announced).
    alice.execute_script("""window.__added = [];
        new MutationObserver(ms => ms.forEach(m => m.addedNodes.forEach(n => window.__added.push(n.className))))
            .observe(document.getElementById('list'), {childList: true});""")
    post(alice, "one from alice")
    wait_until(lambda: alice.find_elements(By.CSS_SELECTOR, '#list .post[data-seq="5"][data-state="sent"]'), what="alice's post stored")
    added = alice.execute_script("return window.__added")
    assert len(added) == 1 and added[0].startswith("post mine"), added


def test_empty_states_and_unread_counts(server, new_page):
    server.create_circle("quiet", "carol")
    alice = new_page()
    sign_in(alice, server.port, "alice")
    welcome = alice.find_element(By.ID, "welcome")
    assert welcome.is_displayed() and "Welcome, alice" in welcome.text
    open_circle(alice, "quiet")
    wait_until(lambda: "No posts yet" in alice.find_element(By.ID, "list").text, what="the empty circle's intro")
    assert "This is the beginning of #quiet" in alice.find_element(By.ID, "list").text
    assert not welcome.is_displayed()

    open_circle(alice, "lounge")
    open_circle(alice, "quiet")
    server.send_lines("lounge", ["one", "two"], "carol")
    badge = lambda: alice.find_elements(By.CSS_SELECTOR, '#circles li[data-name="lounge"] .badge')  # noqa: E731
    wait_until(lambda: badge() and badge()[0].text == "2", what="two unread in lounge")
    assert alice.title.startswith("(2) ")
    open_circle(alice, "lounge")
    wait_until(lambda: not badge(), what="read once opened")
    # A "New" line stands right above the first post that arrived while away.
    order = alice.execute_script("return [...document.querySelectorAll('#list .new-line, #list .post')].map(n => n.classList.contains('post') ? n.querySelector('.body').innerText : 'NEW')")
    assert order == ["NEW", "one", "two"], order


def test_photos_show_as_thumbnails_that_open_full_size(server, new_page):
    path = os.path.join(server.data, "big.png")
    with open(path, "wb") as f:
        f.write(png(1600, 1200))
    server.post_photo("lounge", path, "bob", caption="a big one")
    alice = new_page(1200, 900)
    sign_in(alice, server.port, "alice")
    open_circle(alice, "lounge")
    img = alice.find_element(By.CSS_SELECTOR, "#list .photo img")
    wait_until(lambda: alice.execute_script("return arguments[0].complete && arguments[0].naturalWidth", img) == 1600, what="the photo loaded")
    assert img.get_attribute("loading") == "lazy"
    size = img.size
    assert size["width"] <= 360 and size["height"] <= 300, size
    assert abs(size["width"] / size["height"] - 4 / 3) < 0.02, size
    alice.find_element(By.CSS_SELECTOR, "#list .photo").click()
    viewer = alice.find_element(By.ID, "viewerimg")
    wait_until(lambda: viewer.is_displayed() and viewer.size["width"] > 360, what="the photo at a larger size")
    alice.find_element(By.ID, "viewerclose").send_keys(Keys.ESCAPE)
    wait_until(lambda: not viewer.is_displayed(), what="the viewer closed")

    # Drawn again after a reload, the photo's box has its size before the image arrives.
    alice.refresh()
    wait_until(lambda: alice.find_elements(By.CSS_SELECTOR, "#circles li[data-name=lounge]"), what="reloaded")
    open_circle(alice, "lounge")
    box = alice.find_element(By.CSS_SELECTOR, "#list .photo")
    assert "unsized" not in box.get_attribute("class")
    assert abs(box.size["width"] - 360) <= 2, box.size


def test_keyboard_focus_is_visible(server, new_page):
    alice = new_page()
    sign_in(alice, server.port, "alice")
    target = None
    for _ in range(12):
        ActionChains(alice).send_keys(Keys.TAB).perform()
        active = alice.switch_to.active_element
        if active.get_attribute("class") and "circle-link" in active.get_attribute("class"):
            target = active
            break
    assert target is not None, "the circle list is reachable with Tab"
    style = alice.execute_script("const s = getComputedStyle(document.activeElement); return [s.outlineStyle, s.outlineWidth]")
    assert style[0] == "solid" and style[1] == "2px", style
    target.send_keys(Keys.ENTER)
    wait_until(lambda: alice.find_element(By.ID, "title").text == "# lounge", what="opened with the keyboard")


def test_on_a_phone_the_circle_list_leads_into_the_conversation(server, new_page):
    server.send_lines("lounge", ["hello phone"], "carol")
    alice = new_page(390, 844)
    set_viewport(alice, 390, 844)
    sign_in(alice, server.port, "alice")
    side, main = alice.find_element(By.ID, "side"), alice.find_element(By.ID, "main")
    assert side.is_displayed() and not main.is_displayed()
    assert side.size["width"] == 390
    open_circle(alice, "lounge")
    wait_until(lambda: main.is_displayed() and not side.is_displayed(), what="the conversation instead of the list")
    assert main.size["width"] == 390
    wait_until(lambda: posts(alice) == ["hello phone"], what="the post")
    assert alice.find_element(By.ID, "text").is_displayed()
    alice.find_element(By.ID, "back").click()
    wait_until(lambda: side.is_displayed() and not main.is_displayed(), what="back to the list")


def test_jump_to_latest_appears_when_scrolled_up(server, new_page):
    server.send_lines("lounge", [f"line {index}" for index in range(40)], "carol")
    alice = new_page()
    sign_in(alice, server.port, "alice")
    open_circle(alice, "lounge")
    jump = alice.find_element(By.ID, "jump")
    wait_until(lambda: posts(alice)[-1:] == ["line 39"], what="the newest post")
    assert not jump.is_displayed()
    alice.execute_script("document.getElementById('messages').scrollTop = 200")
    wait_until(lambda: jump.is_displayed(), what="the jump button")
    server.send_lines("lounge", ["while you were up there"], "carol")
    wait_until(lambda: "while you were up there" in posts(alice), what="the new post")
    top = alice.execute_script("return document.getElementById('messages').scrollTop")
    assert top < 400, "the page pulled the reader down"
    jump.click()
    wait_until(lambda: alice.execute_script(
        "const m = document.getElementById('messages'); return m.scrollHeight - m.scrollTop - m.clientHeight") < 4, what="at the newest post")
    wait_until(lambda: not jump.is_displayed(), what="the jump button gone")


def test_many_posts_that_came_in_while_away_open_at_the_first_of_them(server, new_page):
    server.create_circle("other", "carol")
    server.send_lines("lounge", [f"seen {index}" for index in range(5)], "carol")
    alice = new_page()
    sign_in(alice, server.port, "alice")
    open_circle(alice, "lounge")
    open_circle(alice, "other")
    server.send_lines("lounge", [f"new {index}" for index in range(40)], "carol")
    wait_until(lambda: alice.find_element(By.CSS_SELECTOR, '#circles li[data-name="lounge"] .badge').text == "40", what="40 unread")
    open_circle(alice, "lounge")
    position = alice.execute_script("""const box = document.getElementById('messages').getBoundingClientRect();
        const line = document.querySelector('#list .new-line').getBoundingClientRect();
        return [line.top - box.top, box.height];""")
    assert 0 <= position[0] < 60, position
    assert alice.find_element(By.ID, "jump").is_displayed()
