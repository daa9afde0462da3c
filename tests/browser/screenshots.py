"""Screenshots of the chat page for the docs: a seeded conversation at desktop (1280×800) and phone
(390×844) size, against a real `circle serve` (CIRCLE_BIN, default .build/debug/circle).

    .venv-browser/bin/python tests/browser/screenshots.py docs/screenshots/page-after

writes PREFIX-desktop.png, PREFIX-phone.png (the conversation) and PREFIX-phone-list.png (the
circle list). Not a test: it asserts nothing about the page's look."""

import os
import subprocess
import sys
import time

from selenium.webdriver.common.by import By

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import CIRCLE, Raw, Server, browser, png, set_viewport, sign_in_with_token, wait_until  # noqa: E402
from selenium.webdriver.common.action_chains import ActionChains  # noqa: E402


def seed(server, folder):
    server.create_circle("general", "carol")
    server.create_circle("design", "alice")
    server.create_circle("random", "bob")
    server.create_circle("core-team", "alice", private=True)
    server.send_lines("design", ["Moodboard for the new onboarding is up, comments welcome"], "alice")
    server.send_lines("general", ["Morning all! The **staging server** is back up after the upgrade.",
                                  "Release notes: https://example.com/circle/releases/2026-11-24"], "carol")
    server.send_lines("general", ["Nice. Did the `--compression` flag make it in?"], "dave")
    server.send_lines("general", ["It did, details in _docs/API.md_."], "carol")
    post_one(server, "general", "Token for testing:\n```\ncircle token --user dave --ttl 7d\n```", "carol")
    photo = os.path.join(folder, "harbour.png")
    with open(photo, "wb") as f:
        f.write(png(1200, 800, "scene"))
    server.post_photo("general", photo, "bob", caption="The view from the offsite on Friday")
    post_one(server, "general", "wrong circle, sorry", "dave")
    server.send_lines("general", ["That looks *amazing*. Same place next year?"], "alice")
    # Edits, a delete, reactions and a reply (issue 15), made over the protocol as the users.
    # general: 1-2 carol, 3 dave, 4 carol, 5 carol, 6 bob's photo, 7 dave (deleted), 8 alice.
    people = {name: Raw(server, name) for name in ("alice", "bob", "carol", "dave")}
    for raw in people.values():
        raw.request({"action": "join", "circle": "general"})
    people["carol"].request({"action": "edit", "circle": "general", "target": 4, "text": "It did, details in _docs/CLI.md_."})
    people["dave"].request({"action": "delete", "circle": "general", "target": 7})
    for name, target, emoji in (("dave", 1, "🎉"), ("alice", 1, "🎉"), ("bob", 1, "👍"), ("alice", 6, "❤️"),
                                ("carol", 6, "❤️"), ("dave", 6, "😮"), ("dave", 4, "🙏")):
        people[name].request({"action": "react", "circle": "general", "target": target, "emoji": emoji})
    people["bob"].request({"action": "post", "circle": "general", "text": "Already booked it :)", "replyTo": 8})
    for raw in people.values():
        raw.close()


def post_one(server, circle, text, user):
    result = server.cli_send(circle, text, user)
    assert result.returncode == 0, result.stderr


def typing(server, user, circle):
    """A connection that joins `circle` and says `user` is typing there (typing needs the join's
    ack first, hence the pause). Close its stdin to end it."""
    token = server.token(user)
    process = subprocess.Popen(
        [CIRCLE, "ws", f"ws://127.0.0.1:{server.port}/v1/ws", "--subprotocol", "circle.v1", "--header", f"Authorization: Bearer {token}", "--quiet"],
        stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, text=True,
    )
    process.stdin.write(f'{{"action":"join","id":"j","circle":"{circle}"}}\n')
    process.stdin.flush()
    time.sleep(1)
    process.stdin.write(f'{{"action":"typing","id":"t","circle":"{circle}"}}\n')
    process.stdin.flush()
    return process


def click_circle(page, name):
    # The old page's list items are clickable themselves; the new page's hold a button.
    wait_until(lambda: page.find_elements(By.CSS_SELECTOR, f'#circles li[data-name="{name}"]'), what=f"{name} listed")
    items = page.find_elements(By.CSS_SELECTOR, f'#circles li[data-name="{name}"]')
    buttons = items[0].find_elements(By.TAG_NAME, "button")
    (buttons[0] if buttons else items[0]).click()


def settle(page):
    wait_until(lambda: page.execute_script(
        "return [...document.images].every(i => i.complete)"), what="images loaded")
    time.sleep(0.5)


def main():
    prefix = sys.argv[1] if len(sys.argv) > 1 else os.path.join("docs", "screenshots", "page")
    os.makedirs(os.path.dirname(prefix) or ".", exist_ok=True)
    server = Server()
    server.start()
    page = browser(1280, 800)
    try:
        seed(server, server.data)
        token = server.token("alice")
        set_viewport(page, 1280, 800)
        sign_in_with_token(page, server.port, token)
        click_circle(page, "random")
        time.sleep(0.5)
        click_circle(page, "general")
        wait_until(lambda: "Already booked" in page.find_element(By.ID, "list").text, what="general shown")
        server.send_lines("random", ["Anyone up for lunch?", "Tacos at 12:30"], "dave")
        writer = typing(server, "dave", "general")
        wait_until(lambda: "typing" in page.find_element(By.ID, "typing").text, what="dave typing")
        settle(page)
        # The actions of a post show on hover.
        ActionChains(page).move_to_element(page.find_elements(By.CSS_SELECTOR, '#list .post')[-1]).perform()
        time.sleep(0.3)
        page.save_screenshot(prefix + "-desktop.png")
        writer.stdin.close()
        writer.wait(timeout=20)

        ActionChains(page).move_to_element(page.find_element(By.ID, "title")).perform()
        set_viewport(page, 390, 844)
        page.get(page.current_url)
        wait_until(lambda: page.find_elements(By.CSS_SELECTOR, '#circles li[data-name="general"]'), what="list after reload")
        time.sleep(1)
        if page.find_element(By.ID, "side").is_displayed():
            page.save_screenshot(prefix + "-phone-list.png")
        click_circle(page, "general")
        wait_until(lambda: "Already booked" in page.find_element(By.ID, "list").text, what="general shown on the phone")
        settle(page)
        page.execute_script("const m = document.getElementById('messages'); m.scrollTop = m.scrollHeight")
        # The tap on the circle left the pointer over a post: move it off the conversation.
        ActionChains(page).move_to_element(page.find_element(By.ID, "title")).perform()
        time.sleep(0.5)
        page.save_screenshot(prefix + "-phone.png")
    finally:
        page.quit()
        server.cleanup()
    print("wrote", prefix + "-*.png")


if __name__ == "__main__":
    main()
