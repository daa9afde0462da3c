"""Search on the page (issue 36), in headless Chromium against a real `circle serve`: the search
box finds posts in the circles the user may read, and a hit opens the conversation at the post,
scrolled to it and highlighted, loading older pages as needed."""

from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys

from harness import console_errors, sign_in, wait_until


def test_a_search_hit_opens_the_conversation_at_the_post(server, new_page):
    server.create_circle("secret", "carol", private=True)
    # The hit is far from the newest post: the first page (50 posts) does not hold it.
    lines = [f"filler number {index}" for index in range(1, 121)]
    lines[10] = "the zebra crossing is closed today"
    server.send_lines("lounge", lines, "alice")
    assert server.cli_send("secret", "zebra plans for carol only", "carol").returncode == 0

    page = new_page()
    sign_in(page, server.port, "bob")
    page.find_element(By.ID, "searchq").send_keys("Zebra", Keys.ENTER)
    wait_until(lambda: page.find_elements(By.CSS_SELECTOR, "#searchresults .search-hit"), what="a hit listed")
    hits = page.find_elements(By.CSS_SELECTOR, "#searchresults .search-hit")
    # Carol's private circle gives bob nothing.
    assert [(hit.get_attribute("data-circle"), hit.get_attribute("data-seq")) for hit in hits] == [("lounge", "11")]
    assert hits[0].find_element(By.TAG_NAME, "mark").text == "zebra"
    assert "#lounge" in hits[0].text

    hits[0].click()
    wait_until(lambda: page.find_element(By.ID, "title").text.endswith("lounge"), what="lounge opened")
    wait_until(lambda: page.find_elements(By.CSS_SELECTOR, '#list .post.found[data-seq="11"]'), what="the hit highlighted")
    found = page.find_element(By.CSS_SELECTOR, '#list .post.found[data-seq="11"]')
    assert "zebra crossing" in found.text
    assert len(page.find_elements(By.CSS_SELECTOR, "#list .post.found")) == 1
    in_view = page.execute_script(
        "const n = arguments[0].getBoundingClientRect(); const b = document.getElementById('messages').getBoundingClientRect();"
        "return n.top >= b.top - 1 && n.bottom <= b.bottom + 1;", found)
    assert in_view, "the post is not scrolled into view"
    assert not console_errors(page)

    # A query that cannot be run says why (the browser logs the 400 itself).
    box = page.find_element(By.ID, "searchq")
    box.clear()
    box.send_keys("-zebra", Keys.ENTER)
    wait_until(lambda: "Search failed" in page.find_element(By.ID, "searchresults").text, what="the refusal shown")
