"""System entries (docs/PROTOCOL.md, System entries) in the page, in headless Chromium against a
real `circle serve`: a member added or removed over HTTP shows as a quiet centred line among
the posts, live and after a reload, and is not counted as unread; the circle's start shows
above its first entry, and goes with the system entries when they are turned off."""

from selenium.webdriver.common.by import By

from harness import console_errors, open_circle, post, sign_in, wait_until


def system_lines(page):
    return page.execute_script(
        "return [...document.querySelectorAll('#list .system-entry')].map(n => [Number(n.dataset.systemSeq), n.querySelector('.system-text').textContent])")


def origin_line(page):
    return page.execute_script("const n = document.querySelector('#list .intro .intro-origin'); return n ? n.textContent : ''")


def test_members_added_and_removed_show_as_quiet_lines(server, new_page):
    server.create_circle("den", "alice", private=True)
    alice = new_page()
    sign_in(alice, server.port, "alice")
    open_circle(alice, "den")
    # The circle's start, above its first entry (not an entry: the first post stays seq 1).
    wait_until(lambda: origin_line(alice).startswith("alice created #den on "), what="the origin line")
    post(alice, "first")
    wait_until(lambda: alice.find_elements(By.CSS_SELECTOR, '#list .post[data-seq="1"]'), what="alice's post stored")

    # Live: added over HTTP while the page is open.
    server.add_member("den", "alice", "bob")
    wait_until(lambda: system_lines(alice) == [[2, "alice added bob"]], what="the added line")
    line = alice.find_element(By.CSS_SELECTOR, "#list .system-entry")
    assert line.value_of_css_property("justify-content") == "center"
    assert not line.find_elements(By.CSS_SELECTOR, ".actions")

    # bob sees it in the history, and it does not count as unread for him.
    bob = new_page()
    sign_in(bob, server.port, "bob")
    _, _, listed = server.http("GET", "/v1/circles/den", "bob")
    assert listed["unread"] == 1 and listed["systemEntries"] is True
    open_circle(bob, "den")
    wait_until(lambda: system_lines(bob) == [[2, "alice added bob"]], what="the added line at bob")

    status, _, _ = server.http("DELETE", "/v1/circles/den/members/bob", "bob")
    assert status == 200
    wait_until(lambda: system_lines(alice) == [[2, "alice added bob"], [3, "bob left"]], what="the left line")
    # After a reload, from the history page: the same lines, between the posts.
    alice.refresh()
    open_circle(alice, "den")
    wait_until(lambda: system_lines(alice) == [[2, "alice added bob"], [3, "bob left"]], what="the lines after a reload")
    assert console_errors(alice) == []


def test_the_owner_turns_system_entries_off_in_the_members_sheet(server, new_page):
    server.create_circle("den", "alice", private=True)
    alice = new_page()
    sign_in(alice, server.port, "alice")
    open_circle(alice, "den")
    alice.find_element(By.ID, "membersbtn").click()
    box = alice.find_element(By.ID, "systementries")
    wait_until(box.is_displayed, what="the switch shown")
    assert box.is_selected()
    box.click()

    def switched_off():
        _, _, listed = server.http("GET", "/v1/circles/den", "alice")
        return listed["systemEntries"] is False
    wait_until(switched_off, what="system entries off on the server")
    alice.find_element(By.ID, "sheetclose").click()
    server.add_member("den", "alice", "bob")
    post(alice, "after")
    wait_until(lambda: alice.find_elements(By.CSS_SELECTOR, '#list .post[data-seq="1"]'), what="the post stored as seq 1")
    assert system_lines(alice) == []
    # The origin line goes with the system entries.
    wait_until(lambda: origin_line(alice) == "", what="the origin line hidden")
    # Someone who does not manage the circle sees no switch.
    server.add_member("den", "alice", "cy")
    cy = new_page()
    sign_in(cy, server.port, "cy")
    open_circle(cy, "den")
    cy.find_element(By.ID, "membersbtn").click()
    wait_until(lambda: cy.find_elements(By.CSS_SELECTOR, '#sheet li[data-user="cy"]'), what="the members listed for cy")
    assert not cy.find_elements(By.ID, "systementries")
    assert console_errors(alice) == [] and console_errors(cy) == []
