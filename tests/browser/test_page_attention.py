"""Mentions, direct messages and notification levels in the page (issue 35, "In the stream"), in
headless Chromium against a real `circle serve`: completing a name after "@", the mention
highlighted for the person named and counted in their circle list, starting a direct message
from a person's name, and the notification level reaching the user's other page."""

from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import Select

from harness import console_errors, open_circle, post, sign_in, wait_until


def post_node(page, seq):
    return page.find_element(By.CSS_SELECTOR, f'#list .post[data-seq="{seq}"]')


def completions(page):
    return page.execute_script(
        "const l = document.getElementById('mentionlist');"
        "return l.classList.contains('hidden') ? [] : [...l.querySelectorAll('li')].map(li => li.dataset.name)")


def mention_badge(page, circle):
    found = page.find_elements(By.CSS_SELECTOR, f'li[data-name="{circle}"] .mention-badge')
    return found[0].text if found else None


def test_a_name_is_completed_after_at_and_the_mention_is_highlighted_for_its_person(server, new_page):
    server.create_circle("den", "alice", private=True)
    server.add_member("den", "alice", "bob")
    server.add_member("den", "alice", "bea")
    # Seqs 1 and 2 are the system entries of those two additions: the posts are 3 and 4.
    alice, bob = new_page(), new_page()
    sign_in(alice, server.port, "alice")
    sign_in(bob, server.port, "bob")
    open_circle(bob, "den")
    post(bob, "hi all")
    open_circle(alice, "den")
    wait_until(lambda: len(alice.find_elements(By.CSS_SELECTOR, '#list .post[data-seq="3"]')) == 1, what="bob's post at alice")

    box = alice.find_element(By.ID, "text")
    box.send_keys("thanks @b")
    # bob wrote here; bea has not: only the names the page knows are offered.
    wait_until(lambda: completions(alice) == ["bob"], what="bob offered after @b")
    box.send_keys(Keys.TAB)
    wait_until(lambda: box.get_attribute("value") == "thanks @bob ", what="the name completed")
    assert completions(alice) == []
    box.send_keys("see you")
    # Escape closes the list without touching the text.
    box.send_keys(" @bo")
    wait_until(lambda: completions(alice) == ["bob"], what="offered again")
    box.send_keys(Keys.ESCAPE)
    wait_until(lambda: completions(alice) == [], what="closed by Escape")
    assert box.get_attribute("value") == "thanks @bob see you @bo"
    box.send_keys(Keys.BACKSPACE * 4)
    alice.find_element(By.ID, "sendbtn").click()

    # bob is mentioned: the post is marked and "@bob" highlighted; alice's copy is not marked.
    wait_until(lambda: len(bob.find_elements(By.CSS_SELECTOR, '#list .post[data-seq="4"].mentioned')) == 1, what="the mention marked for bob")
    assert [s.text for s in post_node(bob, 4).find_elements(By.CSS_SELECTOR, ".mention")] == ["@bob"]
    wait_until(lambda: len(alice.find_elements(By.CSS_SELECTOR, '#list .post[data-seq="4"]')) == 1, what="the post stored at alice")
    assert "mentioned" not in post_node(alice, 4).get_attribute("class")

    # The circle list counts it for bob while he looks elsewhere, as the server does.
    server.create_circle("lobby", "carol")
    bob.execute_script("refreshCircles()")
    open_circle(bob, "lobby")
    post(alice, "and @bob again")

    def counted():
        _, _, body = server.http("GET", "/v1/circles/den", "bob")
        return body["mentions"]
    wait_until(lambda: counted() >= 1 and mention_badge(bob, "den") == f"@{counted()}", what="bob's mention count")
    assert console_errors(alice) == [] and console_errors(bob) == []


def test_a_direct_message_is_started_from_a_persons_name(server, new_page):
    alice, bob = new_page(), new_page()
    sign_in(alice, server.port, "alice")
    sign_in(bob, server.port, "bob")
    # bob's list is not refreshed on its timer in this test: the DM must reach it as it is started.
    bob.execute_script("clearInterval(S.heartbeat)")
    open_circle(bob, "lounge")
    post(bob, "anyone around?")
    open_circle(alice, "lounge")
    wait_until(lambda: len(alice.find_elements(By.CSS_SELECTOR, '#list .post[data-seq="1"] button.author')) == 1, what="bob's name as a button")

    alice.find_element(By.CSS_SELECTOR, '#list .post[data-seq="1"] button.author').click()
    wait_until(lambda: alice.find_element(By.ID, "title").text == "bob", what="the DM open at alice")
    dm = alice.execute_script("return S.current")
    assert dm.startswith("dm.")
    # Listed apart from the circles, named by the other person.
    assert alice.find_elements(By.CSS_SELECTOR, f'#circles li[data-name="{dm}"]') == []
    assert alice.find_element(By.CSS_SELECTOR, f'#dms li[data-name="{dm}"]').text.startswith("bob")
    assert Select(alice.find_element(By.ID, "notify")).first_selected_option.get_attribute("value") == "all"
    post(alice, "psst")
    wait_until(lambda: len(alice.find_elements(By.CSS_SELECTOR, '#list .post[data-seq="1"][data-state="sent"]')) == 1, what="alice's DM post stored")

    # Starting it again from the "new message" form gives the same one.
    alice.find_element(By.ID, "newdmbtn").click()
    alice.find_element(By.ID, "dmnames").send_keys("bob")
    alice.find_element(By.ID, "dmstart").click()
    wait_until(lambda: alice.execute_script("return document.getElementById('newdm').classList.contains('hidden')"), what="the form closed")
    assert alice.execute_script("return S.current") == dm
    assert len(alice.find_elements(By.CSS_SELECTOR, "#dms li")) == 1

    # bob finds it in his list at once (the server's `added`), and reads alice's post in it.
    wait_until(lambda: len(bob.find_elements(By.CSS_SELECTOR, f'#dms li[data-name="{dm}"]')) == 1, what="the DM listed at bob")
    bob.find_element(By.CSS_SELECTOR, f'#dms li[data-name="{dm}"] button').click()
    wait_until(lambda: bob.find_element(By.ID, "title").text == "alice", what="the DM open at bob")
    wait_until(lambda: "psst" in bob.find_element(By.ID, "list").text, what="alice's post at bob")
    assert console_errors(alice) == [] and console_errors(bob) == []


def test_the_notification_level_reaches_the_users_other_page(server, new_page):
    first, second = new_page(), new_page()
    sign_in(first, server.port, "alice")
    sign_in(second, server.port, "alice")
    open_circle(first, "lounge")
    open_circle(second, "lounge")
    level = Select(first.find_element(By.ID, "notify"))
    assert level.first_selected_option.get_attribute("value") == "mentions"
    level.select_by_value("none")
    wait_until(lambda: Select(second.find_element(By.ID, "notify")).first_selected_option.get_attribute("value") == "none",
               what="the level at the other page")
    status, _, body = server.http("GET", "/v1/circles/lounge", "alice")
    assert status == 200 and body["notify"] == "none", body
