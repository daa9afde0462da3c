"""The chat page in a real browser (headless Chromium through chromedriver), against a real
`circle serve` process: two pages and a CLI client exchange posts, typing shows, and the page
recovers after the server restarts without losing or repeating a post; history pages in; photos.

Run by scripts/browser-test (which installs Chromium, chromedriver and Selenium)."""

import os

from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys

from harness import ROOT, open_circle, png, post, posts, presence_timing, sign_in, stored_seqs, wait_until


def conn_state(page):
    return page.find_element(By.ID, "conn").get_attribute("data-state")


def test_two_pages_and_the_cli_chat_and_survive_a_restart(server, new_page):
    alice, bob = new_page(), new_page()
    presence_timing(alice, server.port, 0, 120000)  # bob's join, right after alice's, is said
    sign_in(alice, server.port, "alice")
    sign_in(bob, server.port, "bob")
    open_circle(alice, "lounge")
    open_circle(bob, "lounge")
    wait_until(lambda: "bob joined" in alice.find_element(By.ID, "list").text, what="bob's join seen by alice")

    post(alice, "hello from alice")
    wait_until(lambda: "hello from alice" in posts(bob), what="bob sees alice")
    wait_until(lambda: stored_seqs(alice) == [1], what="alice's post stored as seq 1")
    assert alice.find_element(By.CSS_SELECTOR, '#list .post[data-seq="1"]').get_attribute("data-state") == "sent"

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
    wait_until(lambda: conn_state(alice) == "reconnecting", what="alice reconnecting")
    wait_until(lambda: "Reconnecting" in alice.find_element(By.ID, "banner").text, what="alice's banner")
    post(bob, "posted while the server was down")
    wait_until(lambda: bob.find_elements(By.CSS_SELECTOR, '#list .post[data-state="sending"]'), what="bob's post waiting")
    server.start()
    wait_until(lambda: conn_state(alice) == "connected", timeout=40, what="alice back")
    wait_until(lambda: conn_state(bob) == "connected", timeout=40, what="bob back")
    assert not alice.find_element(By.ID, "banner").is_displayed()
    wait_until(lambda: "posted while the server was down" in posts(alice), timeout=20, what="queued post delivered")
    result = server.cli_send("lounge", "after the restart", "carol")
    assert result.returncode == 0, result.stderr
    wait_until(lambda: "after the restart" in posts(alice), what="post after restart")

    expected = ["hello from alice", "hello from the cli", "posted while the server was down", "after the restart"]
    for page in (alice, bob):
        wait_until(lambda page=page: posts(page) == expected, what="every post once, in order")
        wait_until(lambda page=page: stored_seqs(page) == [1, 2, 3, 4], what="all four stored")


def test_older_posts_load_by_scrolling_up(server, new_page):
    server.send_lines("lounge", [f"old {index}" for index in range(60)], "carol")
    alice = new_page(390, 800)
    sign_in(alice, server.port, "alice")
    open_circle(alice, "lounge")
    wait_until(lambda: posts(alice)[-1:] == ["old 59"], what="newest posts shown")
    assert "old 0" not in posts(alice)  # only the newest page at first
    alice.execute_script("document.getElementById('messages').scrollTop = 0")
    wait_until(lambda: posts(alice)[:1] == ["old 0"], what="older posts loaded by scrolling up")
    assert posts(alice) == [f"old {index}" for index in range(60)]
    wait_until(lambda: "This is the beginning of #lounge" in alice.find_element(By.ID, "list").text, what="the circle's start shown")
    assert alice.find_element(By.ID, "text").is_displayed()


def loaded_photos(page):
    return page.execute_script(
        "return [...document.querySelectorAll('#list .post .photo img')].filter(i => i.complete && i.naturalWidth > 0).map(i => i.naturalWidth + 'x' + i.naturalHeight)")


def test_a_photo_is_attached_posted_and_shown_to_others(server, new_page):
    alice, bob = new_page(), new_page()
    presence_timing(alice, server.port, 0, 120000)  # bob's join, right after alice's, is said
    sign_in(alice, server.port, "alice")
    sign_in(bob, server.port, "bob")
    open_circle(alice, "lounge")
    open_circle(bob, "lounge")
    wait_until(lambda: "bob joined" in alice.find_element(By.ID, "list").text, what="both joined")

    path = os.path.join(server.data, "blue.png")
    with open(path, "wb") as f:
        f.write(png(40, 30))
    alice.find_element(By.ID, "text").send_keys("a blue square")
    alice.find_element(By.ID, "photo").send_keys(path)
    wait_until(lambda: alice.find_element(By.ID, "photobar").is_displayed(), what="the photo waiting to be sent")
    alice.find_element(By.ID, "sendbtn").click()

    for page in (alice, bob):
        wait_until(lambda page=page: loaded_photos(page) == ["40x30"], what="the photo shown")
        wait_until(lambda page=page: posts(page) == ["a blue square"], what="the caption shown")
    wait_until(lambda: stored_seqs(alice) == [1], what="alice's photo post stored as seq 1")
    # Bob's copy comes from the server (alice's may still be the local preview).
    assert bob.execute_script("return document.querySelector('#list .photo img').src").startswith(f"http://127.0.0.1:{server.port}/v1/media/")

    # A file that is not an image is refused, and the page says so, with a way out.
    bogus = os.path.join(server.data, "not-really.png")
    with open(bogus, "wb") as f:
        f.write(b"hello, not a png at all")
    bob.find_element(By.ID, "photo").send_keys(bogus)
    wait_until(lambda: bob.find_element(By.ID, "photobar").is_displayed(), what="the file waiting to be sent")
    bob.find_element(By.ID, "text").send_keys(Keys.ENTER)
    wait_until(lambda: bob.find_elements(By.CSS_SELECTOR, '#list .post[data-state="failed"]'), what="the bogus photo refused")
    failed = bob.find_element(By.CSS_SELECTOR, '#list .post[data-state="failed"]')
    assert "Not posted" in failed.text
    failed.find_element(By.XPATH, ".//button[text()='Discard']").click()
    wait_until(lambda: not bob.find_elements(By.CSS_SELECTOR, '#list .post[data-state="failed"]'), what="the failed post discarded")
