"""The chat page's findings of issue 32, each tested against a real `circle serve`: a phone's circle
list does not mark read what it does not show; reloads and restarts are not announced as joins,
while a return after being away is; a chosen photo waits in the composer until it is sent."""

import os

from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys

from harness import (Raw, circle_button, console_errors, holds_for, notices, open_circle, png, posts, presence_events, presence_timing,
                     record_presence_events, set_viewport, sign_in, stored_seqs, wait_until)


def focus(page):
    """Headless windows are not always focused: tell the page it is (it marks posts read only
    when its tab has the focus)."""
    page.execute_cdp_cmd("Emulation.setFocusEmulationEnabled", {"enabled": True})


def server_unread(server, user, circle):
    status, _, body = server.http("GET", "/v1/circles", user)
    assert status == 200, body
    return next(c for c in body["circles"] if c["name"] == circle).get("unread", 0)


def badge(page, circle):
    found = page.find_elements(By.CSS_SELECTOR, f'#circles li[data-name="{circle}"] .badge')
    return found[0].text if found and found[0].is_displayed() else None


# ---------------------------------------------------------------- read markers on a phone

def test_posts_arriving_while_the_phone_shows_the_circle_list_stay_unread(server, new_page):
    server.send_lines("lounge", ["before you came"], "bob")
    alice = new_page(390, 844)
    set_viewport(alice, 390, 844)
    focus(alice)
    sign_in(alice, server.port, "alice")
    open_circle(alice, "lounge")
    # The conversation screen shows the post: it is read (the marking itself works here).
    wait_until(lambda: server_unread(server, "alice", "lounge") == 0 and posts(alice) == ["before you came"], what="the shown post read")

    alice.find_element(By.ID, "back").click()
    wait_until(lambda: circle_button(alice, "lounge").is_displayed() and not alice.find_element(By.ID, "messages").is_displayed(),
               what="the circle list screen")
    server.send_lines("lounge", ["while alice looks at the list", "and another"], "bob")
    wait_until(lambda: badge(alice, "lounge") == "2", what="the unread badge on the list")
    assert server_unread(server, "alice", "lounge") == 2
    # Nothing marks them read while the list is shown (a post arriving, the 25 s refresh, focus).
    alice.execute_script("window.dispatchEvent(new Event('focus'))")
    holds_for(lambda: server_unread(server, "alice", "lounge") == 2 and badge(alice, "lounge") == "2", 1.5,
              "the posts stay unread on the server and in the list")
    assert "(2)" in alice.title

    # Opening the circle shows them, under the New line, and then they are read.
    circle_button(alice, "lounge").click()
    wait_until(lambda: posts(alice)[-1:] == ["and another"], what="the conversation again")
    assert alice.find_elements(By.CSS_SELECTOR, "#list .new-line"), "the New line above the unread posts"
    wait_until(lambda: server_unread(server, "alice", "lounge") == 0, what="read once shown")


# ---------------------------------------------------------------- presence notices

def test_a_reload_is_not_announced_but_a_return_after_being_away_is(server, new_page):
    alice, bob = new_page(), new_page()
    record_presence_events(alice)
    # No settling time after alice's own join, so bob's first arrival is said; a leave is said
    # after 2 s away (instead of 2 minutes).
    presence_timing(alice, server.port, 0, 2000)
    sign_in(alice, server.port, "alice")
    open_circle(alice, "lounge")
    sign_in(bob, server.port, "bob")
    open_circle(bob, "lounge")
    wait_until(lambda: notices(alice) == ["bob joined"], what="bob coming online said")

    # A reload: bob leaves and joins again at once. Alice's page gets both events and says nothing.
    bob.refresh()
    wait_until(lambda: presence_events(alice)[-3:] == ["joined bob", "left bob", "joined bob"], what="the reload's events at alice")
    wait_until(lambda: bob.find_element(By.ID, "conn").get_attribute("data-state") == "connected", what="bob back")
    holds_for(lambda: notices(alice) == ["bob joined"], 3.0, "no line for the reload, also after the 2 s")

    # Bob goes away and stays away: said after the 2 s, at the place he left.
    bob.quit()
    wait_until(lambda: presence_events(alice)[-1:] == ["left bob"], what="bob's leave at alice")
    assert notices(alice) == ["bob joined"], "not said at once"
    wait_until(lambda: notices(alice) == ["bob joined", "bob left"], what="bob's leave said once he stayed away")

    # Back after being away: said.
    bob_again = new_page()
    sign_in(bob_again, server.port, "bob")
    open_circle(bob_again, "lounge")
    wait_until(lambda: notices(alice) == ["bob joined", "bob left", "bob joined"], what="bob's return said")
    assert not console_errors(alice), console_errors(alice)


def test_a_server_restart_is_not_announced(server, new_page):
    alice = new_page()
    record_presence_events(alice)
    # No settling time after alice's own join: only the rule for people who were here holds.
    presence_timing(alice, server.port, 0, 120000)
    sign_in(alice, server.port, "alice")
    open_circle(alice, "lounge")
    bob = Raw(server, "bob")
    bob.request({"action": "join", "circle": "lounge"})
    wait_until(lambda: notices(alice) == ["bob joined"], what="bob coming online said")

    server.stop()
    bob.close()
    server.start()
    wait_until(lambda: alice.find_element(By.ID, "conn").get_attribute("data-state") == "connected", timeout=40, what="alice back")
    # Bob comes back after alice: the server announces him to her; her page keeps quiet.
    bob = Raw(server, "bob")
    bob.request({"action": "join", "circle": "lounge"})
    wait_until(lambda: presence_events(alice).count("joined bob") == 2, what="bob's rejoin reaching alice")
    bob.request({"action": "post", "circle": "lounge", "text": "still here"})
    wait_until(lambda: stored_seqs(alice) == [1], what="bob's post after the restart")
    assert notices(alice) == ["bob joined"], notices(alice)
    bob.close()


# ---------------------------------------------------------------- photos

def media_received(server):
    return server.metric("circle_media_received_bytes_total")


def server_posts(server):
    status, _, body = server.http("GET", "/v1/circles/lounge/messages", "carol")
    assert status == 200, body
    return body["posts"]


def photo_bar_shows(page, name):
    return page.execute_script("""
        const bar = document.getElementById('photobar'), img = document.getElementById('photothumb');
        return !bar.classList.contains('hidden') && bar.offsetHeight > 0 && img.complete && img.naturalWidth > 0
            && img.src.startsWith('blob:') && document.getElementById('photoname').textContent.startsWith(arguments[0]);""", name)


def photo_bar_hidden(page):
    return page.execute_script("return document.getElementById('photobar').classList.contains('hidden') && !document.getElementById('photothumb').getAttribute('src')")


def test_a_chosen_photo_is_previewed_and_posted_only_when_sent(server, new_page):
    alice = new_page()
    sign_in(alice, server.port, "alice")
    alice.execute_script("""window.__violations = [];
        document.addEventListener('securitypolicyviolation', e => window.__violations.push(e.violatedDirective + ' ' + e.blockedURI));""")
    open_circle(alice, "lounge")
    path = os.path.join(server.data, "harbour.png")
    with open(path, "wb") as f:
        f.write(png(48, 32))
    picker = alice.find_element(By.ID, "photo")
    composer = alice.find_element(By.ID, "text")
    send = alice.find_element(By.ID, "sendbtn")
    assert not send.is_enabled(), "nothing to post yet"

    # Chosen: a thumbnail above the composer, nothing uploaded, nothing posted; × takes it away.
    picker.send_keys(path)
    wait_until(lambda: photo_bar_shows(alice, "harbour.png"), what="the preview")
    assert send.is_enabled(), "a photo alone can be posted"
    holds_for(lambda: media_received(server) == 0 and not alice.find_elements(By.CSS_SELECTOR, "#list .post"), 1.0,
              "no upload and no post while the photo waits")
    assert server_posts(server) == []
    alice.find_element(By.ID, "photocancel").click()
    wait_until(lambda: photo_bar_hidden(alice), what="the preview gone after ×")
    assert not send.is_enabled()

    # Chosen again: Escape in the composer takes it away too.
    picker.send_keys(path)
    wait_until(lambda: photo_bar_shows(alice, "harbour.png"), what="the preview again")
    composer.send_keys(Keys.ESCAPE)
    wait_until(lambda: photo_bar_hidden(alice), what="the preview gone after Escape")
    assert media_received(server) == 0 and server_posts(server) == []

    # Chosen a third time, with a caption typed, and sent: one post with both.
    picker.send_keys(path)
    wait_until(lambda: photo_bar_shows(alice, "harbour.png"), what="the preview a third time")
    composer.send_keys("the harbour at dawn")
    send.click()
    wait_until(lambda: stored_seqs(alice) == [1], what="the photo post stored")
    wait_until(lambda: photo_bar_hidden(alice), what="the preview cleared after sending")
    stored = server_posts(server)
    assert len(stored) == 1, stored
    assert stored[0]["text"] == "the harbour at dawn" and stored[0].get("attachment"), stored
    assert media_received(server) > 0
    wait_until(lambda: posts(alice) == ["the harbour at dawn"], what="the caption shown")
    assert composer.get_attribute("value") == ""
    assert alice.execute_script("return window.__violations") == []
    assert not console_errors(alice), console_errors(alice)
