"""The chat features of issue 15 in the page, in headless Chromium against a real `circle serve`:
editing and deleting one's own posts, reactions, replies with a quote, unread counts with the
"New" line, the read marker reaching the reader's other page, and loaded posts staying on screen
while the server restarts. Other users' changes are made over a raw WebSocket (websocket-client,
which Selenium installs)."""

from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys

from harness import Raw, console_errors, open_circle, post, posts, set_viewport, sign_in, wait_until


def post_node(page, seq):
    return page.find_element(By.CSS_SELECTOR, f'#list .post[data-seq="{seq}"]')


def post_text(page, seq):
    return page.execute_script(
        "const p = document.querySelector(`#list .post[data-seq='${arguments[0]}']`);"
        "if (!p) return null; const b = p.querySelector('.body, .tombstone'); return b ? b.innerText : '';", seq)


def chips(page, seq):
    """{emoji: (count, mine)} under post `seq`."""
    found = page.execute_script(
        "return [...document.querySelectorAll(`#list .post[data-seq='${arguments[0]}'] .chip[data-emoji]`)]"
        ".map(c => [c.dataset.emoji, Number(c.querySelector('.chip-count').textContent), c.classList.contains('me')])", seq)
    return {emoji: (count, mine) for emoji, count, mine in found}


def action(page, seq, name):
    """Hovers post `seq` and presses one of its action buttons (act-react, act-reply, …)."""
    node = post_node(page, seq)
    ActionChains(page).move_to_element(node).perform()
    button = node.find_element(By.CSS_SELECTOR, f".actions .{name}")
    wait_until(button.is_displayed, what=f"{name} shown on hover")
    button.click()


def badge(page, circle):
    found = page.find_elements(By.CSS_SELECTOR, f'#circles li[data-name="{circle}"] .badge')
    return found[0].text if found else None


def focus(page):
    """Headless windows are not always focused: tell the page it is (the page marks posts read
    only when its tab has the focus)."""
    page.execute_cdp_cmd("Emulation.setFocusEmulationEnabled", {"enabled": True})


def test_own_posts_are_edited_in_place_and_others_see_the_edit(server, new_page):
    alice, bob = new_page(), new_page()
    sign_in(alice, server.port, "alice")
    sign_in(bob, server.port, "bob")
    open_circle(alice, "lounge")
    open_circle(bob, "lounge")
    post(alice, "helo everyone")
    post(bob, "hi alice")
    wait_until(lambda: post_text(alice, 2) == "hi alice", what="both posts at alice")

    # Only one's own posts offer Edit.
    ActionChains(alice).move_to_element(post_node(alice, 2)).perform()
    assert not post_node(alice, 2).find_elements(By.CSS_SELECTOR, ".act-edit")
    action(alice, 1, "act-edit")
    editor = post_node(alice, 1).find_element(By.CSS_SELECTOR, ".editor textarea")
    assert editor.get_attribute("value") == "helo everyone"
    editor.send_keys(Keys.CONTROL, "a")
    editor.send_keys("hello everyone", Keys.ENTER)
    for page in (alice, bob):
        wait_until(lambda page=page: post_text(page, 1) == "hello everyone (edited)", what="the edit shown with (edited)")
    assert post_node(bob, 1).find_element(By.CSS_SELECTOR, ".edited").get_attribute("title").startswith("Edited ")

    # Up in the empty composer edits the last own post; Esc leaves it unchanged.
    alice.find_element(By.ID, "text").send_keys(Keys.ARROW_UP)
    wait_until(lambda: post_node(alice, 1).find_elements(By.CSS_SELECTOR, ".editor textarea"), what="editing by arrow up")
    post_node(alice, 1).find_element(By.CSS_SELECTOR, ".editor textarea").send_keys(" and more", Keys.ESCAPE)
    wait_until(lambda: not alice.find_elements(By.CSS_SELECTOR, "#list .editor"), what="editor closed")
    assert post_text(alice, 1) == "hello everyone (edited)"

    # A page that loads the circle afterwards gets the edited text from the history.
    carol = new_page()
    sign_in(carol, server.port, "carol")
    open_circle(carol, "lounge")
    wait_until(lambda: post_text(carol, 1) == "hello everyone (edited)", what="the edit in the history")
    for page in (alice, bob, carol):
        assert not console_errors(page), console_errors(page)


def test_a_deleted_post_becomes_a_tombstone_everywhere(server, new_page):
    alice, bob = new_page(), new_page()
    sign_in(alice, server.port, "alice")
    sign_in(bob, server.port, "bob")
    open_circle(alice, "lounge")
    open_circle(bob, "lounge")
    post(alice, "oops, wrong circle")
    post(alice, "this one stays")
    wait_until(lambda: post_text(bob, 2) == "this one stays", what="bob sees both")
    ActionChains(bob).move_to_element(post_node(bob, 1)).perform()
    assert not post_node(bob, 1).find_elements(By.CSS_SELECTOR, ".act-delete")  # not bob's post, not his circle

    action(alice, 1, "act-delete")
    confirm = post_node(alice, 1).find_element(By.CSS_SELECTOR, ".confirm")
    assert "Delete this post?" in confirm.text
    confirm.find_element(By.CSS_SELECTOR, "button.danger").click()
    for page in (alice, bob):
        wait_until(lambda page=page: post_text(page, 1) == "message deleted", what="the tombstone")
        assert "oops" not in page.find_element(By.ID, "list").text
        assert post_text(page, 2) == "this one stays"
    assert not post_node(alice, 1).find_elements(By.CSS_SELECTOR, ".actions")

    bob.refresh()
    wait_until(lambda: post_text(bob, 1) == "message deleted", what="the tombstone from the history")


def test_reactions_are_added_counted_and_taken_back(server, new_page):
    alice, bob = new_page(), new_page()
    sign_in(alice, server.port, "alice")
    sign_in(bob, server.port, "bob")
    open_circle(alice, "lounge")
    open_circle(bob, "lounge")
    post(alice, "lunch at noon?")
    wait_until(lambda: post_text(bob, 1) == "lunch at noon?", what="bob sees the post")

    action(bob, 1, "act-react")
    picker = bob.find_element(By.ID, "picker")
    wait_until(picker.is_displayed, what="the picker")
    assert len(picker.find_elements(By.CSS_SELECTOR, ".pick")) == 8
    picker.find_element(By.CSS_SELECTOR, '.pick[aria-label="React with 👍"]').click()
    wait_until(lambda: chips(bob, 1) == {"👍": (1, True)}, what="bob's reaction, highlighted for him")
    wait_until(lambda: chips(alice, 1) == {"👍": (1, False)}, what="bob's reaction at alice")

    # Alice adds hers by clicking the chip; carol reacts with another emoji over the raw protocol.
    post_node(alice, 1).find_element(By.CSS_SELECTOR, '.chip[data-emoji="👍"]').click()
    carol = Raw(server, "carol")
    carol.request({"action": "join", "circle": "lounge"})
    carol.request({"action": "react", "circle": "lounge", "target": 1, "emoji": "🎉"})
    wait_until(lambda: chips(alice, 1) == {"👍": (2, True), "🎉": (1, False)}, what="two thumbs and a party at alice")
    wait_until(lambda: chips(bob, 1) == {"👍": (2, True), "🎉": (1, False)}, what="the same at bob")

    # Bob takes his back.
    post_node(bob, 1).find_element(By.CSS_SELECTOR, '.chip[data-emoji="👍"]').click()
    wait_until(lambda: chips(bob, 1) == {"👍": (1, False), "🎉": (1, False)}, what="bob's reaction gone")
    wait_until(lambda: chips(alice, 1) == {"👍": (1, True), "🎉": (1, False)}, what="bob's reaction gone at alice")
    carol.close()

    # A reload shows the same counts from the history page (with "me" for alice).
    alice.refresh()
    wait_until(lambda: chips(alice, 1) == {"👍": (1, True), "🎉": (1, False)}, what="reactions from the history")
    assert not console_errors(bob), console_errors(bob)


def test_a_reply_quotes_the_post_and_leads_back_to_it(server, new_page):
    server.send_lines("lounge", ["Where do we meet on Friday?"], "carol")
    bob = new_page(1000, 600)
    sign_in(bob, server.port, "bob")
    open_circle(bob, "lounge")
    wait_until(lambda: post_text(bob, 1) == "Where do we meet on Friday?", what="carol's question")
    action(bob, 1, "act-reply")
    assert bob.find_element(By.ID, "replybar").is_displayed()
    assert "Replying to carol" in bob.find_element(By.ID, "replybar").text
    post(bob, "At the harbour, 10:00")
    wait_until(lambda: bob.find_elements(By.CSS_SELECTOR, '#list .post[data-seq="2"] .quote'), what="the reply with its quote")
    assert not bob.find_element(By.ID, "replybar").is_displayed()
    quote = post_node(bob, 2).find_element(By.CSS_SELECTOR, ".quote")
    assert quote.find_element(By.CSS_SELECTOR, ".quote-author").text == "carol"
    assert quote.find_element(By.CSS_SELECTOR, ".quote-text").text == "Where do we meet on Friday?"
    assert quote.get_attribute("data-target") == "1"

    # Many posts later, the quote scrolls back to the question.
    server.send_lines("lounge", [f"chatter {index}" for index in range(40)], "dave")
    wait_until(lambda: len(posts(bob)) == 42, what="the chatter")
    bob.execute_script("const m = document.getElementById('messages'); m.scrollTop = m.scrollHeight")
    wait_until(lambda: bob.execute_script(
        "const m = document.getElementById('messages'); return m.scrollHeight - m.scrollTop - m.clientHeight < 40"), what="at the bottom")
    in_view = ("const r = document.querySelector('#list .post[data-seq=\"1\"]').getBoundingClientRect();"
               "const m = document.getElementById('messages').getBoundingClientRect(); return r.top >= m.top && r.bottom <= m.bottom")
    assert not bob.execute_script(in_view)
    bob.execute_script("document.querySelector('#list .post[data-seq=\"2\"] .quote').click()")
    wait_until(lambda: bob.execute_script(in_view), what="the question scrolled into view")
    assert "flash" in post_node(bob, 1).get_attribute("class")

    # Others get the reply with its quote too (from the history).
    carol = new_page()
    sign_in(carol, server.port, "carol")
    open_circle(carol, "lounge")
    wait_until(lambda: carol.find_elements(By.CSS_SELECTOR, '#list .post[data-seq="2"] .quote'), what="carol sees the quote")


def plans_read(server):
    status, _, body = server.http("GET", "/v1/circles", "alice")
    assert status == 200
    return next(c for c in body["circles"] if c["name"] == "plans")["readSeq"]


def test_unread_counts_and_the_new_line(server, new_page):
    server.create_circle("plans", "carol")
    server.send_lines("plans", ["my own earlier post"], "alice")
    # Alice reads the circle once (her marker moves to 1), then leaves.
    before = new_page(1000, 700)
    focus(before)
    sign_in(before, server.port, "alice")
    open_circle(before, "plans")
    wait_until(lambda: plans_read(server) == 1, what="plans read up to 1")
    before.quit()
    server.send_lines("plans", ["first news", "second news", "third news"], "carol")
    alice = new_page(1000, 700)
    focus(alice)
    sign_in(alice, server.port, "alice")
    # From the circle list (GET /v1/circles): three posts by others since alice's marker.
    wait_until(lambda: badge(alice, "plans") == "3", what="three unread in plans")
    assert badge(alice, "lounge") is None
    assert alice.title.startswith("(3) ")

    open_circle(alice, "plans")
    order = alice.execute_script("return [...document.querySelectorAll('#list .new-line, #list .post')]"
                                 ".map(n => n.classList.contains('post') ? n.querySelector('.body').innerText : 'NEW')")
    assert order == ["my own earlier post", "NEW", "first news", "second news", "third news"], order
    # Seen (tab focused, newest post on screen): marked read, on the server too.
    wait_until(lambda: badge(alice, "plans") is None, what="plans read")
    status, _, body = server.http("GET", "/v1/circles", "alice")
    assert status == 200
    plans = next(c for c in body["circles"] if c["name"] == "plans")
    assert (plans["readSeq"], plans["unread"], plans["lastSeq"]) == (4, 0, 4), plans

    # Posts arriving while another circle is shown count up live.
    open_circle(alice, "lounge")
    server.send_lines("plans", ["fourth news", "fifth news"], "carol")
    wait_until(lambda: badge(alice, "plans") == "2", what="two new unread, live")
    open_circle(alice, "plans")
    wait_until(lambda: badge(alice, "plans") is None, what="read again")
    order = alice.execute_script("return [...document.querySelectorAll('#list .new-line, #list .post')]"
                                 ".map(n => n.classList.contains('post') ? n.querySelector('.body').innerText : 'NEW')")
    assert order[-3:] == ["NEW", "fourth news", "fifth news"], order


def test_the_read_marker_reaches_the_readers_other_page(server, new_page):
    server.create_circle("plans", "carol")
    server.send_lines("plans", ["news one", "news two"], "carol")
    laptop, phone = new_page(1000, 700), new_page(1000, 700)
    focus(laptop)
    sign_in(laptop, server.port, "alice")
    sign_in(phone, server.port, "alice")
    open_circle(phone, "lounge")   # the phone's tab shows another circle
    for page in (laptop, phone):
        wait_until(lambda page=page: badge(page, "plans") == "2", what="two unread on both pages")

    open_circle(laptop, "plans")
    wait_until(lambda: badge(laptop, "plans") is None, what="read on the laptop")
    wait_until(lambda: badge(phone, "plans") is None, what="the marker reached the phone")
    assert not phone.title.startswith("(")


def test_loaded_posts_stay_while_the_server_restarts(server, new_page):
    server.send_lines("lounge", ["one", "two", "three"], "carol")
    alice = new_page()
    sign_in(alice, server.port, "alice")
    open_circle(alice, "lounge")
    wait_until(lambda: posts(alice) == ["one", "two", "three"], what="three posts")

    server.stop()
    wait_until(lambda: alice.find_element(By.ID, "conn").get_attribute("data-state") == "reconnecting", what="reconnecting")
    banner = alice.find_element(By.ID, "banner")
    assert banner.is_displayed() and "Reconnecting" in banner.text
    assert posts(alice) == ["one", "two", "three"]   # still shown while the server is away
    server.start()

    # Changes made by others after the restart arrive on the resumed stream.
    carol = Raw(server, "carol")
    carol.request({"action": "join", "circle": "lounge"})
    carol.request({"action": "edit", "circle": "lounge", "target": 2, "text": "two, edited"})
    carol.request({"action": "react", "circle": "lounge", "target": 3, "emoji": "👀"})
    carol.request({"action": "delete", "circle": "lounge", "target": 1})
    carol.close()
    wait_until(lambda: alice.find_element(By.ID, "conn").get_attribute("data-state") == "connected", timeout=40, what="back")
    assert not alice.find_element(By.ID, "banner").is_displayed()
    wait_until(lambda: [post_text(alice, seq) for seq in (1, 2, 3)] == ["message deleted", "two, edited (edited)", "three"],
               what="edit and delete applied")
    wait_until(lambda: chips(alice, 3) == {"👀": (1, False)}, what="the reaction applied")


def test_on_a_phone_a_long_press_opens_the_actions(server, new_page):
    server.send_lines("lounge", ["press and hold me"], "carol")
    bob = new_page(390, 844)
    set_viewport(bob, 390, 844)
    bob.execute_cdp_cmd("Emulation.setTouchEmulationEnabled", {"enabled": True, "maxTouchPoints": 1})
    sign_in(bob, server.port, "bob")
    open_circle(bob, "lounge")
    wait_until(lambda: post_text(bob, 1) == "press and hold me", what="the post")
    assert not post_node(bob, 1).find_element(By.CSS_SELECTOR, ".actions").is_displayed()
    rect = bob.execute_script("const r = document.querySelector('#list .post[data-seq=\"1\"] .body').getBoundingClientRect(); return [r.x + 10, r.y + 5]")
    point = {"x": rect[0], "y": rect[1]}
    bob.execute_cdp_cmd("Input.dispatchTouchEvent", {"type": "touchStart", "touchPoints": [point]})
    wait_until(lambda: "menu-open" in post_node(bob, 1).get_attribute("class"), what="the actions opened by holding")
    bob.execute_cdp_cmd("Input.dispatchTouchEvent", {"type": "touchEnd", "touchPoints": []})
    actions = post_node(bob, 1).find_element(By.CSS_SELECTOR, ".actions")
    assert actions.is_displayed()
    assert not actions.find_elements(By.CSS_SELECTOR, ".act-edit")   # carol's post
    actions.find_element(By.CSS_SELECTOR, ".act-react").click()
    bob.find_element(By.CSS_SELECTOR, '#picker .pick[aria-label="React with ❤️"]').click()
    wait_until(lambda: chips(bob, 1) == {"❤️": (1, True)}, what="the reaction from the phone")
    wait_until(lambda: "menu-open" not in post_node(bob, 1).get_attribute("class"), what="the actions closed")


def test_the_keyboard_reaches_a_posts_actions(server, new_page):
    server.send_lines("lounge", ["first", "second"], "carol")
    alice = new_page()
    sign_in(alice, server.port, "alice")
    open_circle(alice, "lounge")
    post(alice, "mine")
    wait_until(lambda: alice.find_elements(By.CSS_SELECTOR, '#list .post[data-seq="3"][data-state="sent"]'), what="alice's post stored")
    # One tab stop for the timeline: the newest post, just before the composer's controls.
    alice.find_element(By.ID, "text").click()
    ActionChains(alice).key_down(Keys.SHIFT).send_keys(Keys.TAB).send_keys(Keys.TAB).key_up(Keys.SHIFT).perform()
    assert alice.switch_to.active_element.get_attribute("data-seq") == "3"
    assert post_node(alice, 3).find_element(By.CSS_SELECTOR, ".act-edit").is_displayed()
    ActionChains(alice).send_keys(Keys.ARROW_UP).perform()
    assert alice.switch_to.active_element.get_attribute("data-seq") == "2"
    assert [n.get_attribute("tabindex") for n in alice.find_elements(By.CSS_SELECTOR, "#list .post")] == ["-1", "0", "-1"]
    ActionChains(alice).send_keys(Keys.TAB).perform()
    assert "act-react" in alice.switch_to.active_element.get_attribute("class")
    ActionChains(alice).send_keys(Keys.ENTER).perform()
    wait_until(lambda: alice.find_element(By.ID, "picker").is_displayed(), what="the picker from the keyboard")
    ActionChains(alice).send_keys(Keys.ENTER).perform()   # the first emoji has the focus
    wait_until(lambda: chips(alice, 2) == {"👍": (1, True)}, what="a reaction made with the keyboard")


def test_a_page_older_than_the_stream_does_not_take_a_change_back(server, new_page):
    """A history page read before an edit the tab already applied from its WebSocket (its
    lastSeq is lower) keeps the edited post and is asked for again."""
    bob = new_page()
    sign_in(bob, server.port, "bob")
    alice = Raw(server, "alice")
    alice.request({"action": "join", "circle": "lounge"})
    first = alice.request({"action": "post", "circle": "lounge", "text": "version one"})
    open_circle(bob, "lounge")
    wait_until(lambda: post_text(bob, first["seq"]) == "version one", what="the post at bob")
    # The page as it was before the edit, read now and held back.
    stale = bob.execute_async_script(
        "const done = arguments[arguments.length - 1];"
        "fetch('/v1/circles/lounge/messages?limit=50', {headers: {Authorization: 'Bearer ' + S.token}})"
        ".then(r => r.json()).then(done);")
    assert stale["lastSeq"] == first["seq"], stale
    alice.request({"action": "edit", "circle": "lounge", "target": first["seq"], "text": "version two"})
    wait_until(lambda: post_text(bob, first["seq"]) == "version two (edited)", what="the edit streamed to bob")

    # The next history fetch answers with the stale page; later ones reach the server.
    bob.execute_script(
        "window.pageFetches = 0; const real = window.fetch; let served = false;"
        "window.fetch = (url, options) => {"
        "  if (String(url).includes('/messages')) {"
        "    window.pageFetches += 1;"
        "    if (!served) { served = true; return Promise.resolve(new Response(JSON.stringify(arguments[0]),"
        "      {status: 200, headers: {'Content-Type': 'application/json'}})); }"
        "  }"
        "  return real(url, options);"
        "};", stale)
    bob.execute_async_script(
        "const done = arguments[arguments.length - 1];"
        "const d = circleData('lounge'); d.loaded = false; loadOlder('lounge', true).then(() => done(true));")
    assert bob.execute_script("return window.pageFetches") == 2  # the stale page, then a fresh one
    assert post_text(bob, first["seq"]) == "version two (edited)"
    alice.close()
    assert not console_errors(bob), console_errors(bob)


def test_a_read_only_circle_offers_its_members_no_composer(server, new_page):
    # The owner makes "news" read-only: members see why they cannot post; the owner still can.
    server.create_circle("news", "alice")
    status, _, body = server.http("PUT", "/v1/circles/news/read-only", "alice", {"readOnly": True})
    assert status == 200 and body["readOnly"] is True, body
    alice, bob = new_page(), new_page()
    sign_in(alice, server.port, "alice")
    sign_in(bob, server.port, "bob")
    open_circle(bob, "news")
    box = bob.find_element(By.ID, "text")
    wait_until(lambda: not box.is_enabled(), what="bob's composer disabled")
    assert "read-only" in box.get_attribute("placeholder"), box.get_attribute("placeholder")
    assert not bob.find_element(By.ID, "sendbtn").is_enabled() and not bob.find_element(By.ID, "attach").is_enabled()
    _, _, listed = server.http("GET", "/v1/circles/news", "bob")
    assert listed["readOnly"] is True, listed

    open_circle(alice, "news")
    post(alice, "only the owner writes here")
    wait_until(lambda: len(bob.find_elements(By.CSS_SELECTOR, '#list .post[data-seq="1"]')) == 1, what="alice's post at bob")

    # Opened again: bob's page learns it with the circle list and offers the composer again.
    status, _, body = server.http("PUT", "/v1/circles/news/read-only", "alice", {"readOnly": False})
    assert status == 200 and body["readOnly"] is False, body
    bob.execute_script("refreshCircles()")
    wait_until(lambda: box.is_enabled(), what="bob's composer enabled again")
    assert box.get_attribute("placeholder") == "Message #news"
    post(bob, "thanks")
    wait_until(lambda: len(alice.find_elements(By.CSS_SELECTOR, '#list .post[data-seq="2"]')) == 1, what="bob's post at alice")
    assert console_errors(alice) == [] and console_errors(bob) == []
