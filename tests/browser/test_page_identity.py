"""Accounts on the chat page (docs/PAGE.md, "Signing in", "Accounts"): the first admin through the
setup link of a server started without --dev, sign-up through an invite made on the admin screen,
password sign-in, signing out everywhere, a ban ending a page at once, the CSRF header, and a
circle's members chosen by name."""

import os
import re
import subprocess
import sys
import time
import urllib.request

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import WebDriverWait

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import CIRCLE, Server, console_errors, free_port, png  # noqa: E402

PASSWORD = "correct horse battery"
# Hashing a password (bcrypt) in a debug build on a loaded machine takes a while.
SIGN_IN_WAIT = 90


class AccountServer(Server):
    """`circle serve` WITHOUT --dev on an empty data directory, its log kept to read the setup link."""

    def start(self):
        self.log_path = os.path.join(self.data, "serve.log")
        self.log = open(self.log_path, "ab")
        self.process = subprocess.Popen(
            [CIRCLE, "serve", "--port", str(self.port), "--data", self.data, "--jwt-secret", self.secret, "--log-level", "notice", *self.extra_args],
            stdout=self.log, stderr=subprocess.STDOUT,
        )
        deadline = time.time() + 30
        while time.time() < deadline:
            try:
                urllib.request.urlopen(f"{self.url}/healthz", timeout=1)
                return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("server did not start")

    def setup_link(self):
        deadline = time.time() + 20
        while time.time() < deadline:
            with open(self.log_path, encoding="utf-8", errors="replace") as log:
                match = re.search(r"(https?://[^\s\"']+/#setup=[A-Za-z0-9_\-]+)", log.read())
            if match:
                return match.group(1)
            time.sleep(0.05)
        raise AssertionError("no setup link in the server's log")

    def cleanup(self):
        super().cleanup()
        self.log.close()


@pytest.fixture
def accounts():
    s = AccountServer()
    s.start()
    yield s
    s.cleanup()


def wait(page, condition, what, timeout=15):
    return WebDriverWait(page, timeout, poll_frequency=0.05).until(lambda _: condition(), message=f"timed out waiting for {what}")


def shown(page, element_id):
    elements = page.find_elements(By.ID, element_id)
    return bool(elements) and elements[0].is_displayed()


def connected(page):
    return page.find_element(By.ID, "conn").get_attribute("data-state") == "connected"


def at_sign_in_form(page):
    return shown(page, "signinform") and not shown(page, "app")


def fill(page, element_id, text):
    box = page.find_element(By.ID, element_id)
    box.clear()
    box.send_keys(text)


def page_fetch(page, method, path, body=None, csrf=True):
    """One request from the page's own context (its cookie): {status, body}. With `csrf`, the
    session's X-Circle-CSRF value from GET /v1/auth/state is sent."""
    page.set_script_timeout(30)
    return page.execute_async_script("""
        const [method, path, body, csrf, done] = arguments;
        (async () => {
            const headers = {'Content-Type': 'application/json'};
            if (csrf) headers['X-Circle-CSRF'] = (await (await fetch('/v1/auth/state')).json()).csrf;
            const response = await fetch(path, {method, headers, body: body === null ? undefined : JSON.stringify(body)});
            let json = null;
            try { json = await response.json(); } catch (error) { /* no body */ }
            done({status: response.status, body: json});
        })().catch((error) => done({status: -1, body: String(error)}));""", method, path, body, csrf)


def set_up_admin(page, server, name="ada", display="Ada Admin"):
    link = server.setup_link()
    page.get(link)
    wait(page, lambda: shown(page, "setupform"), "the setup form")
    assert "#setup=" not in page.current_url, "the setup secret stayed in the address bar"
    fill(page, "setupname", name)
    fill(page, "setupdisplay", display)
    fill(page, "setuppass", PASSWORD)
    fill(page, "setuppass2", PASSWORD)
    page.find_element(By.ID, "setupbtn").click()
    wait(page, lambda: connected(page), "the admin in the chat", SIGN_IN_WAIT)


def sign_in_with_password(page, server, name, password=PASSWORD):
    page.get(server.url + "/")
    wait(page, lambda: shown(page, "signinname"), "the sign-in form")
    fill(page, "signinname", name)
    fill(page, "signinpass", password)
    page.find_element(By.ID, "signinbtn").click()


def open_menu_item(page, panel):
    page.find_element(By.ID, "mebtn").click()
    item = page.find_element(By.CSS_SELECTOR, f'#menu [data-panel="{panel}"]')
    wait(page, item.is_displayed, "the account menu")
    item.click()
    wait(page, lambda: page.find_element(By.ID, "sheet").get_attribute("data-panel") == panel, f"the {panel} panel")


def create_invite_via_admin_screen(page, circles=()):
    open_menu_item(page, "admin")
    for circle in circles:
        box = page.find_element(By.CSS_SELECTOR, f'#sheet .circle-choice input[value="{circle}"]')
        if not box.is_selected():
            box.click()
    page.find_element(By.XPATH, "//div[@id='sheet']//button[normalize-space()='Create an invite']").click()
    wait(page, lambda: page.find_elements(By.CSS_SELECTOR, "#sheet input.invite-url"), "the invite link")
    url = page.find_element(By.CSS_SELECTOR, "#sheet input.invite-url").get_attribute("value")
    page.find_element(By.ID, "sheetclose").click()
    return url


def sign_up(page, url, name, display=""):
    page.get(url)
    wait(page, lambda: shown(page, "signupfields"), "the sign-up form")
    assert "#invite=" not in page.current_url, "the invite secret stayed in the address bar"
    fill(page, "signupname", name)
    if display:
        fill(page, "signupdisplay", display)
    fill(page, "signuppass", PASSWORD)
    fill(page, "signuppass2", PASSWORD)
    page.find_element(By.ID, "signupbtn").click()


def test_first_run_setup_creates_the_admin_and_opens_the_chat(accounts, new_page):
    page = new_page()
    page.get(accounts.url + "/")
    wait(page, lambda: shown(page, "signinform"), "the sign-in form")
    assert "setup link" in page.find_element(By.ID, "signinnote").text
    set_up_admin(page, accounts)
    assert page.find_element(By.ID, "me").text == "Ada Admin"
    assert page.find_element(By.CSS_SELECTOR, '#menu [data-panel="admin"]').get_attribute("textContent") == "Admin"
    state = page_fetch(page, "GET", "/v1/auth/state", csrf=False)
    assert state["status"] == 200 and state["body"]["user"]["role"] == "admin" and not state["body"]["setupRequired"]
    # The cookie is the credential: nothing is kept in the tab's storage, and a reload stays signed in.
    assert page.execute_script("return sessionStorage.getItem('circle.token')") is None
    page.refresh()
    wait(page, lambda: connected(page), "connected again after a reload", SIGN_IN_WAIT)
    # The setup link works once.
    other = new_page()
    other.get(accounts.setup_link())
    wait(other, lambda: shown(other, "setupform"), "the setup form")
    fill(other, "setupname", "mallory")
    fill(other, "setuppass", PASSWORD)
    fill(other, "setuppass2", PASSWORD)
    other.find_element(By.ID, "setupbtn").click()
    wait(other, lambda: "setup link" in other.find_element(By.ID, "setuperr").text, "the used link refused", SIGN_IN_WAIT)
    assert not [e for e in console_errors(page) if "Content Security Policy" in e["message"]]


def test_sign_up_through_an_invite_made_on_the_admin_screen(accounts, new_page):
    admin = new_page()
    set_up_admin(admin, accounts)
    admin.find_element(By.ID, "newbtn").click()
    fill(admin, "newcircle", "lounge")
    admin.find_element(By.ID, "newprivate").click()
    admin.find_element(By.ID, "createbtn").click()
    wait(admin, lambda: admin.find_elements(By.CSS_SELECTOR, '#circles li[data-name="lounge"]'), "lounge listed")
    url = create_invite_via_admin_screen(admin, ["lounge"])
    assert "#invite=" in url

    bob = new_page()
    bob.get(url)
    wait(bob, lambda: shown(bob, "signupfields"), "the sign-up form")
    assert "#lounge" in bob.find_element(By.ID, "signupoffer").text
    # A taken name is refused with the server's reason, and the form stays.
    fill(bob, "signupname", "ada")
    fill(bob, "signuppass", PASSWORD)
    fill(bob, "signuppass2", PASSWORD)
    bob.find_element(By.ID, "signupbtn").click()
    wait(bob, lambda: "taken" in bob.find_element(By.ID, "signuperr").text, "the taken name refused", SIGN_IN_WAIT)
    fill(bob, "signupname", "bob")
    fill(bob, "signupdisplay", "Bob Builder")
    fill(bob, "signuppass", PASSWORD)
    fill(bob, "signuppass2", PASSWORD)
    bob.find_element(By.ID, "signupbtn").click()
    wait(bob, lambda: connected(bob), "bob in the chat", SIGN_IN_WAIT)
    assert bob.find_element(By.ID, "me").text == "Bob Builder"
    # The invite added him to the private circle.
    wait(bob, lambda: bob.find_elements(By.CSS_SELECTOR, '#circles li[data-name="lounge"]'), "lounge listed for bob")
    # A used-up invite is refused with the server's reason.
    carol = new_page()
    carol.get(url)
    wait(carol, lambda: "does not work" in carol.find_element(By.ID, "signuperr").text, "the used invite refused")
    assert not shown(carol, "signupfields")


def test_sign_in_with_a_password_shows_a_wrong_password(accounts, new_page):
    admin = new_page()
    set_up_admin(admin, accounts)
    page = new_page()
    sign_in_with_password(page, accounts, "ada", "not the password")
    wait(page, lambda: "the name or the password is wrong" in page.find_element(By.ID, "signinerr").text, "the refusal shown", SIGN_IN_WAIT)
    assert at_sign_in_form(page)
    fill(page, "signinpass", PASSWORD)
    page.find_element(By.ID, "signinbtn").click()
    wait(page, lambda: connected(page), "signed in", SIGN_IN_WAIT)
    assert page.find_element(By.ID, "me").text == "Ada Admin"
    assert page.find_element(By.ID, "signinerr").get_attribute("textContent") == ""


def test_signing_out_everywhere_ends_the_other_window(accounts, new_page):
    first = new_page()
    set_up_admin(first, accounts)
    second = new_page()
    sign_in_with_password(second, accounts, "ada")
    wait(second, lambda: connected(second), "the second window signed in", SIGN_IN_WAIT)

    open_menu_item(first, "sessions")
    wait(first, lambda: len(first.find_elements(By.CSS_SELECTOR, "#sheet .rows .row-item")) == 2, "both sessions listed")
    assert "this browser" in first.find_element(By.ID, "sheet").text
    first.find_element(By.XPATH, "//div[@id='sheet']//button[normalize-space()='Sign out everywhere']").click()
    first.find_element(By.XPATH, "//div[@id='sheet']//div[contains(@class,'confirm-inline')]/button[normalize-space()='Sign out everywhere']").click()
    wait(first, lambda: at_sign_in_form(first), "this window at the sign-in form")
    wait(second, lambda: at_sign_in_form(second), "the other window at the sign-in form")
    # The cookie is gone: a reload stays signed out.
    second.refresh()
    wait(second, lambda: shown(second, "signinname"), "still signed out after a reload")
    assert not shown(second, "app")


def test_a_banned_user_is_returned_to_the_sign_in_form_at_once(accounts, new_page):
    admin = new_page()
    set_up_admin(admin, accounts)
    assert page_fetch(admin, "POST", "/v1/circles", {"name": "lounge", "private": False})["status"] == 201
    invite = page_fetch(admin, "POST", "/v1/admin/invites", {"hours": 1, "uses": 1})
    assert invite["status"] == 201, invite

    bob = new_page()
    sign_up(bob, invite["body"]["url"], "bob")
    wait(bob, lambda: connected(bob), "bob in the chat", SIGN_IN_WAIT)
    wait(bob, lambda: bob.find_elements(By.CSS_SELECTOR, '#circles li[data-name="lounge"] button'), "lounge listed")
    bob.find_element(By.CSS_SELECTOR, '#circles li[data-name="lounge"] button').click()
    wait(bob, lambda: bob.find_element(By.ID, "title").text.endswith("lounge"), "lounge open")

    open_menu_item(admin, "admin")
    wait(admin, lambda: admin.find_elements(By.CSS_SELECTOR, '#sheet li[data-user="bob"]'), "bob listed")
    admin.find_element(By.CSS_SELECTOR, '#sheet li[data-user="bob"] button[aria-label="Ban bob"]').click()
    confirm = admin.find_element(By.XPATH, "//li[@data-user='bob']//div[contains(@class,'confirm-inline')]/button[normalize-space()='Ban']")
    confirm.click()
    started = time.monotonic()
    wait(bob, lambda: at_sign_in_form(bob), "bob back at the sign-in form", 10)
    print(f"bob's page was at the sign-in form {time.monotonic() - started:.2f} s after the ban was clicked")
    assert "signed out" in bob.find_element(By.ID, "signinerr").text
    wait(admin, lambda: admin.find_element(By.CSS_SELECTOR, '#sheet li[data-user="bob"]').get_attribute("data-status") == "banned", "bob shown banned")
    # He cannot sign in again, and is told why.
    sign_in_with_password(bob, accounts, "bob")
    wait(bob, lambda: bob.find_element(By.ID, "signinerr").text != "", "the refusal", SIGN_IN_WAIT)
    assert at_sign_in_form(bob)


def test_a_change_without_the_csrf_header_is_refused(accounts, new_page):
    page = new_page()
    set_up_admin(page, accounts)
    refused = page_fetch(page, "POST", "/v1/circles", {"name": "forged", "private": False}, csrf=False)
    assert refused["status"] == 403, refused
    assert "X-Circle-CSRF" in refused["body"]["error"]["message"]
    allowed = page_fetch(page, "POST", "/v1/circles", {"name": "real", "private": False})
    assert allowed["status"] == 201, allowed
    # The page's own changes carry the header: starting a circle through its form works.
    page.find_element(By.ID, "newbtn").click()
    fill(page, "newcircle", "made-here")
    page.find_element(By.ID, "createbtn").click()
    wait(page, lambda: page.find_element(By.ID, "title").text.endswith("made-here"), "the circle made on the page")


def test_the_owner_adds_and_removes_members_by_name(accounts, new_page):
    admin = new_page()
    set_up_admin(admin, accounts)
    invite = page_fetch(admin, "POST", "/v1/admin/invites", {"hours": 1, "uses": 1})
    carol = new_page()
    sign_up(carol, invite["body"]["url"], "carol", "Carol Singer")
    wait(carol, lambda: connected(carol), "carol in the chat", SIGN_IN_WAIT)

    admin.find_element(By.ID, "newbtn").click()
    fill(admin, "newcircle", "team")
    admin.find_element(By.ID, "newprivate").click()
    admin.find_element(By.ID, "createbtn").click()
    wait(admin, lambda: admin.find_element(By.ID, "title").text.endswith("team"), "team open")
    admin.find_element(By.ID, "membersbtn").click()
    wait(admin, lambda: admin.find_elements(By.CSS_SELECTOR, '#sheet li[data-user="ada"]'), "the owner listed")
    assert sorted(admin.execute_script("return [...document.querySelectorAll('#peoplelist option')].map(o => o.value)")) == ["ada", "carol"]
    box = admin.find_element(By.CSS_SELECTOR, "#sheet input[list=peoplelist]")
    box.send_keys("Carol Singer")   # a display name is taken when it names one person
    admin.find_element(By.XPATH, "//div[@id='sheet']//button[normalize-space()='Add']").click()
    wait(admin, lambda: admin.find_elements(By.CSS_SELECTOR, '#sheet li[data-user="carol"]'), "carol added")
    assert "Carol Singer" in admin.find_element(By.CSS_SELECTOR, '#sheet li[data-user="carol"]').text
    # Carol sees the private circle once she asks for the list again (a reload).
    carol.refresh()
    wait(carol, lambda: carol.find_elements(By.CSS_SELECTOR, '#circles li[data-name="team"]'), "team listed for carol", SIGN_IN_WAIT)
    admin.find_element(By.CSS_SELECTOR, '#sheet li[data-user="carol"] button').click()
    wait(admin, lambda: not admin.find_elements(By.CSS_SELECTOR, '#sheet li[data-user="carol"]'), "carol removed")


def test_profile_password_and_personal_tokens(accounts, new_page, tmp_path):
    page = new_page()
    set_up_admin(page, accounts)
    open_menu_item(page, "profile")
    name = page.find_element(By.CSS_SELECTOR, "#sheet input[autocomplete=name]")
    name.clear()
    name.send_keys("Ada L.")
    page.find_element(By.XPATH, "//div[@id='sheet']//button[normalize-space()='Save']").click()
    wait(page, lambda: page.find_element(By.ID, "me").text == "Ada L.", "the display name saved")
    # A photo, uploaded with the session cookie and the CSRF header, becomes the avatar.
    photo = tmp_path / "face.png"
    photo.write_bytes(png(48, 48))
    page.find_element(By.CSS_SELECTOR, "#sheet input[type=file]").send_keys(str(photo))
    wait(page, lambda: page.execute_script(
        "const i = document.querySelector('#meavatar img'); return !!i && i.complete && i.naturalWidth === 48"), "the avatar shown")
    # The password: a wrong current one is refused, then changed.
    current, new, again = page.find_elements(By.CSS_SELECTOR, "#sheet input[type=password]")
    current.send_keys("not the password")
    new.send_keys("another long password")
    again.send_keys("another long password")
    page.find_element(By.XPATH, "//div[@id='sheet']//button[normalize-space()='Change the password']").click()
    wait(page, lambda: "current password is wrong" in page.find_element(By.ID, "sheet").text, "the wrong password refused", SIGN_IN_WAIT)
    current.clear()
    current.send_keys(PASSWORD)
    page.find_element(By.XPATH, "//div[@id='sheet']//button[normalize-space()='Change the password']").click()
    wait(page, lambda: "The password is changed." in page.find_element(By.ID, "sheet").text, "the password changed", SIGN_IN_WAIT)
    page.find_element(By.ID, "sheetclose").click()

    # A personal token is shown once, works as a bearer credential, and is revoked from the list.
    open_menu_item(page, "tokens")
    page.find_element(By.CSS_SELECTOR, "#sheet input[placeholder='deploy script']").send_keys("my script")
    page.find_element(By.XPATH, "//div[@id='sheet']//button[normalize-space()='Create a token']").click()
    wait(page, lambda: page.find_elements(By.CSS_SELECTOR, "#sheet input.token-value"), "the token shown")
    token = page.find_element(By.CSS_SELECTOR, "#sheet input.token-value").get_attribute("value")
    assert accounts.http("GET", "/v1/circles", headers={"Authorization": "Bearer " + token})[0] == 200
    wait(page, lambda: len(page.find_elements(By.CSS_SELECTOR, "#sheet .rows .row-item")) == 1, "the token listed")
    assert "my script" in page.find_element(By.CSS_SELECTOR, "#sheet .rows .row-item").text
    page.find_element(By.XPATH, "//div[@id='sheet']//button[normalize-space()='Revoke']").click()
    wait(page, lambda: not page.find_elements(By.CSS_SELECTOR, "#sheet .rows .row-item"), "the token revoked")
    assert accounts.http("GET", "/v1/circles", headers={"Authorization": "Bearer " + token})[0] == 401
    # Esc closes the panel and the focus goes back to the account button.
    page.find_element(By.CSS_SELECTOR, "#sheet input[placeholder='deploy script']").send_keys(Keys.ESCAPE)
    wait(page, lambda: not shown(page, "sheet"), "the panel closed")
    assert page.switch_to.active_element.get_attribute("id") == "mebtn"

    # The new password signs in; the old one no longer does.
    other = new_page()
    sign_in_with_password(other, accounts, "ada", PASSWORD)
    wait(other, lambda: "wrong" in other.find_element(By.ID, "signinerr").text, "the old password refused", SIGN_IN_WAIT)
    fill(other, "signinpass", "another long password")
    other.find_element(By.ID, "signinbtn").click()
    wait(other, lambda: connected(other), "signed in with the new password", SIGN_IN_WAIT)


def test_a_pasted_token_is_kept_in_memory_only(accounts, new_page):
    page = new_page()
    set_up_admin(page, accounts)
    other = new_page()
    other.get(accounts.url + "/")
    wait(other, lambda: shown(other, "signinname"), "the sign-in form")
    assert not shown(other, "tokenin") and not shown(other, "devname")
    other.find_element(By.ID, "signinmode").click()
    wait(other, lambda: shown(other, "tokenin"), "the token field")
    other.find_element(By.ID, "tokenin").send_keys(accounts.token("ada"))
    other.find_element(By.ID, "signinbtn").click()
    wait(other, lambda: connected(other), "signed in with the token")
    assert other.execute_script("return sessionStorage.getItem('circle.token')") is None
    # The account's own panels need the session cookie; a token's page does not offer them.
    for panel in ("profile", "sessions", "tokens", "admin"):
        item = other.find_element(By.CSS_SELECTOR, f'#menu [data-panel="{panel}"]').find_element(By.XPATH, "..")
        assert "hidden" in item.get_attribute("class").split(), panel
    other.refresh()
    wait(other, lambda: shown(other, "signinname"), "signed out after a reload")
    assert not shown(other, "app")


def test_the_admin_screen_lists_webhooks_their_failed_deliveries_and_sends_again(new_page):
    # Deliveries to a closed port fail at once; given up after a second, the webhook is disabled.
    server = AccountServer()
    server.extra_args = ["--allow-private-outbound", "--webhook-retry-after", "100ms", "--webhook-give-up-after", "1s"]
    server.start()
    try:
        page = new_page()
        set_up_admin(page, server)
        assert page_fetch(page, "POST", "/v1/circles", {"name": "general"})["status"] == 201
        closed = free_port()
        made = page_fetch(page, "POST", "/v1/admin/webhooks", {"url": f"http://127.0.0.1:{closed}/hook", "circle": "general"})
        assert made["status"] == 201, made
        sent = server.cli_send("general", "hello hooks", "ada")
        assert sent.returncode == 0, sent.stderr

        def disabled():
            hooks = page_fetch(page, "GET", "/v1/admin/webhooks", csrf=False)["body"]["webhooks"]
            return hooks and hooks[0]["status"] == "disabled"
        wait(page, disabled, "the webhook disabled after its delivery failed for a second", 60)

        open_menu_item(page, "admin")
        item = f'#sheet li.webhook[data-id="{made["body"]["id"]}"]'
        wait(page, lambda: page.find_elements(By.CSS_SELECTOR, item + '[data-status="disabled"]'), "the disabled webhook listed")
        text = page.find_element(By.CSS_SELECTOR, item).text
        assert f"http://127.0.0.1:{closed}/hook" in text and "#general" in text and "1 failed" in text, text
        assert "failed for" in page.find_element(By.CSS_SELECTOR, item + " .webhook-reason").text
        page.find_element(By.CSS_SELECTOR, item + ' button[aria-label^="Deliveries of"]').click()
        failed = item + ' li.delivery[data-status="failed"]'
        wait(page, lambda: page.find_elements(By.CSS_SELECTOR, failed), "the failed delivery")
        assert "#general/1 post" in page.find_element(By.CSS_SELECTOR, failed).text
        page.find_element(By.XPATH, f"//li[@data-id='{made['body']['id']}']//button[normalize-space()='Send again']").click()
        wait(page, lambda: page.find_elements(By.CSS_SELECTOR, item + ' li.delivery[data-status="pending"]'), "the delivery pending again")
        page.find_element(By.XPATH, f"//li[@data-id='{made['body']['id']}']//button[normalize-space()='Enable']").click()
        wait(page, lambda: page.find_elements(By.CSS_SELECTOR, item + '[data-status="active"]'), "the webhook enabled")
    finally:
        server.cleanup()
