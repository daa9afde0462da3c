"""Passkeys on the chat page (docs/PAGE.md, "Passkeys"), with Chromium's virtual authenticator: the
first admin and an invited member without a password, signing in with a passkey, the Profile
panel's passkeys, a browser without a passkey for this server, and approving a device
(`circle login --code`, docs/PAGE.md, "Approving a device")."""

import os
import sys

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.common.virtual_authenticator import VirtualAuthenticatorOptions

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import console_errors  # noqa: E402
from test_page_identity import (  # noqa: E402
    PASSWORD, SIGN_IN_WAIT, AccountServer, connected, create_invite_via_admin_screen, fill, open_menu_item, page_fetch, shown, wait,
)


class PasskeyServer(AccountServer):
    """An account server that knows its public URL, http://localhost:PORT (a secure context, and
    the RP ID `localhost`); the page is opened there, not at 127.0.0.1."""

    def __init__(self):
        super().__init__()
        self.extra_args = ["--public-url", self.url]

    @property
    def url(self):
        return f"http://localhost:{self.port}"


@pytest.fixture
def keys_server():
    s = PasskeyServer()
    s.start()
    yield s
    s.cleanup()


def with_authenticator(page):
    page.add_virtual_authenticator(VirtualAuthenticatorOptions(
        protocol="ctap2", transport="internal", has_resident_key=True, has_user_verification=True, is_user_verified=True))
    return page


def set_up_admin_with_a_passkey(page, server, name="ada"):
    page.get(server.setup_link().replace("127.0.0.1", "localhost"))
    wait(page, lambda: shown(page, "setupform"), "the setup form")
    # A passkey is the first way: the password fields are not shown.
    assert not shown(page, "setuppass")
    assert page.find_element(By.ID, "setupbtn").text == "Use a passkey"
    fill(page, "setupname", name)
    page.find_element(By.ID, "setupbtn").click()
    wait(page, lambda: in_chat(page), "the admin in the chat", SIGN_IN_WAIT)


def in_chat(page):
    """The chat is shown and connected (the connection's state of a signed-out page can be stale)."""
    return shown(page, "app") and connected(page)


def sign_in_with_passkey(page, server):
    page.get(server.url + "/")
    wait(page, lambda: shown(page, "passkeysignin"), "the passkey button")
    page.find_element(By.ID, "passkeysignin").click()


def sign_out(page):
    page.find_element(By.ID, "signout").click()
    wait(page, lambda: shown(page, "signinform"), "the sign-in form")


def passkey_names(page):
    return page.execute_script("return [...document.querySelectorAll('#sheet ul.passkeys li[data-id] strong')].map(n => n.textContent)")


def test_the_first_admin_sets_up_and_signs_in_with_a_passkey(keys_server, new_page):
    page = with_authenticator(new_page())
    page.get(keys_server.url + "/")
    wait(page, lambda: shown(page, "signinform"), "the sign-in form")
    state = page_fetch(page, "GET", "/v1/auth/state", csrf=False)
    assert "passkey" in state["body"]["methods"]
    set_up_admin_with_a_passkey(page, keys_server)
    assert page.find_element(By.ID, "me").text == "ada"
    assert len(page.get_credentials()) == 1
    # No password was set: the password sign-in refuses any.
    status, _, _ = keys_server.http("POST", "/v1/auth/signin", body={"name": "ada", "password": "anything at all"})
    assert status == 401

    sign_out(page)
    assert shown(page, "passkeysignin")
    page.find_element(By.ID, "passkeysignin").click()
    wait(page, lambda: in_chat(page), "signed in with the passkey", SIGN_IN_WAIT)
    assert page.find_element(By.ID, "me").text == "ada"

    # The account has no password; the Profile panel sets one with the current one left empty.
    open_menu_item(page, "profile")
    boxes = page.find_elements(By.CSS_SELECTOR, "#sheet input[type=password]")
    assert len(boxes) == 3
    boxes[1].send_keys(PASSWORD)
    boxes[2].send_keys(PASSWORD)
    page.find_element(By.XPATH, "//div[@id='sheet']//button[normalize-space()='Change the password']").click()
    wait(page, lambda: "The password is changed." in page.find_element(By.ID, "sheet").text, "the password set", SIGN_IN_WAIT)
    status, _, _ = keys_server.http("POST", "/v1/auth/signin", body={"name": "ada", "password": PASSWORD})
    assert status == 200
    assert not [e for e in console_errors(page) if "Content Security Policy" in e["message"]]


def test_sign_up_through_an_invite_with_a_passkey(keys_server, new_page):
    admin = with_authenticator(new_page())
    set_up_admin_with_a_passkey(admin, keys_server)
    url = create_invite_via_admin_screen(admin)

    bob = with_authenticator(new_page())
    bob.get(url)
    wait(bob, lambda: shown(bob, "signupfields"), "the sign-up form")
    assert not shown(bob, "signuppass")
    # The password is the other way, and back.
    bob.find_element(By.ID, "signupmode").click()
    assert shown(bob, "signuppass") and bob.find_element(By.ID, "signupbtn").text == "Create my account"
    bob.find_element(By.ID, "signupmode").click()
    assert not shown(bob, "signuppass") and bob.find_element(By.ID, "signupbtn").text == "Use a passkey"
    fill(bob, "signupname", "bob")
    fill(bob, "signupdisplay", "Bob B.")
    bob.find_element(By.ID, "signupbtn").click()
    wait(bob, lambda: in_chat(bob), "bob in the chat", SIGN_IN_WAIT)
    assert bob.find_element(By.ID, "me").text == "Bob B."
    assert len(bob.get_credentials()) == 1

    sign_out(bob)
    bob.find_element(By.ID, "passkeysignin").click()
    wait(bob, lambda: in_chat(bob), "bob signed in with his passkey", SIGN_IN_WAIT)
    assert bob.find_element(By.ID, "me").text == "Bob B."


def test_the_profile_panel_adds_lists_and_removes_passkeys(keys_server, new_page):
    page = with_authenticator(new_page())
    set_up_admin_with_a_passkey(page, keys_server)
    # A second authenticator (a security key, say) for the second passkey: the first already
    # holds one for this account, which excludeCredentials turns away.
    first = page.get_credentials()
    page.remove_virtual_authenticator()
    with_authenticator(page)

    open_menu_item(page, "profile")
    wait(page, lambda: len(passkey_names(page)) == 1, "the first passkey listed")
    name = page.find_element(By.XPATH, "//div[@id='sheet']//label[starts-with(normalize-space(), 'Name')][following-sibling::input[@placeholder='laptop']]")
    box = page.find_element(By.ID, name.get_attribute("for"))
    box.send_keys("security key")
    page.find_element(By.XPATH, "//div[@id='sheet']//button[normalize-space()='Add a passkey']").click()
    wait(page, lambda: len(passkey_names(page)) == 2, "two passkeys listed")
    assert "security key" in passkey_names(page)
    assert "is added" in page.find_element(By.CSS_SELECTOR, "#sheet ul.passkeys ~ p.hint[role=status]").text
    assert len(page.get_credentials()) == 1 and page.get_credentials()[0].id != first[0].id

    # Remove the first one, with a confirmation.
    item = page.find_element(By.XPATH, "//div[@id='sheet']//ul[contains(@class,'passkeys')]/li[not(.//strong[.='security key'])]")
    item.find_element(By.XPATH, ".//button[normalize-space()='Remove']").click()
    page.find_element(By.XPATH, "//div[@id='sheet']//div[contains(@class,'confirm-inline')]//button[normalize-space()='Remove']").click()
    wait(page, lambda: passkey_names(page) == ["security key"], "one passkey left")
    listed = page_fetch(page, "GET", "/v1/auth/passkeys", csrf=False)
    assert [p["name"] for p in listed["body"]["passkeys"]] == ["security key"]

    # The remaining one signs in.
    page.find_element(By.ID, "sheetclose").click()
    sign_out(page)
    page.find_element(By.ID, "passkeysignin").click()
    wait(page, lambda: in_chat(page), "signed in with the security key", SIGN_IN_WAIT)


def test_a_browser_without_a_passkey_for_this_server_stays_at_the_sign_in_form(keys_server, new_page):
    page = with_authenticator(new_page())
    set_up_admin_with_a_passkey(page, keys_server)
    sign_out(page)

    # A passkey of another server on the same host (the same RP ID): this one says so.
    other = PasskeyServer()
    other.start()
    try:
        foreign = with_authenticator(new_page())
        set_up_admin_with_a_passkey(foreign, other, name="eve")
        sign_in_with_passkey(foreign, keys_server)
        wait(foreign, lambda: "not registered here" in foreign.find_element(By.ID, "signinerr").text, "the server's refusal", SIGN_IN_WAIT)
        assert shown(foreign, "signinform") and not shown(foreign, "app")
    finally:
        other.cleanup()

    # No passkey at all: the browser's dialog fails, and the page says so calmly.
    page.remove_all_credentials()
    page.find_element(By.ID, "passkeysignin").click()
    wait(page, lambda: "No passkey was used" in page.find_element(By.ID, "signinerr").text, "the calm message", 60)
    assert shown(page, "signinform") and not shown(page, "app")
    assert not page.find_element(By.ID, "passkeysignin").get_attribute("disabled")


def test_approving_a_device_from_its_link_and_from_the_menu(keys_server, new_page):
    page = with_authenticator(new_page())
    set_up_admin_with_a_passkey(page, keys_server)
    status, _, start = keys_server.http("POST", "/v1/auth/device", body={"device": "laptop"})
    assert status in (200, 201), start
    assert start["url"] == f"{keys_server.url}/#device={start['code']}"

    page.get(start["url"])
    wait(page, lambda: page.find_element(By.ID, "sheet").get_attribute("data-panel") == "device", "the approval panel", SIGN_IN_WAIT)
    assert f"Sign in the device showing {start['code']}?" in page.find_element(By.ID, "sheet").text
    assert "#device=" not in page.current_url
    page.find_element(By.XPATH, "//div[@id='sheet']//button[normalize-space()='Approve']").click()
    wait(page, lambda: "is signed in as ada" in page.find_element(By.ID, "sheet").text, "the approval done")
    status, _, credential = keys_server.http("POST", "/v1/auth/device/token", body={"code": start["code"], "pollToken": start["pollToken"]})
    assert status == 200, credential
    assert credential["user"] == "ada" and credential["token"]
    page.find_element(By.XPATH, "//div[@id='sheet']//button[normalize-space()='Done']").click()
    wait(page, lambda: not shown(page, "sheet"), "the panel closed")

    # From the account menu: a code typed; an unknown one is refused, a real one approved.
    status, _, second = keys_server.http("POST", "/v1/auth/device", body={"device": "desktop"})
    assert status in (200, 201), second
    open_menu_item(page, "device")
    code = page.find_element(By.CSS_SELECTOR, "#sheet input[placeholder='WDJB-MJHT']")
    code.send_keys("ZZZZ-ZZZZ")
    page.find_element(By.XPATH, "//div[@id='sheet']//button[normalize-space()='Approve']").click()
    wait(page, lambda: "No device is waiting with the code ZZZZ-ZZZZ" in page.find_element(By.CSS_SELECTOR, "#sheet .form-error").text, "the unknown code refused")
    code.clear()
    code.send_keys(second["code"].lower())
    page.find_element(By.XPATH, "//div[@id='sheet']//button[normalize-space()='Approve']").click()
    wait(page, lambda: "is signed in as ada" in page.find_element(By.ID, "sheet").text, "the typed code approved")
    status, _, credential = keys_server.http("POST", "/v1/auth/device/token", body={"code": second["code"], "pollToken": second["pollToken"]})
    assert status == 200 and credential["user"] == "ada", credential

    # The link opened while signed out: the sign-in form says why, and the question follows the sign-in.
    page.find_element(By.XPATH, "//div[@id='sheet']//button[normalize-space()='Done']").click()
    sign_out(page)
    status, _, third = keys_server.http("POST", "/v1/auth/device", body={"device": "tablet"})
    assert status in (200, 201), third
    page.get(third["url"])
    wait(page, lambda: shown(page, "signinnote") and third["code"] in page.find_element(By.ID, "signinnote").text, "the note")
    page.find_element(By.ID, "passkeysignin").click()
    wait(page, lambda: page.find_element(By.ID, "sheet").get_attribute("data-panel") == "device", "the approval panel after signing in", SIGN_IN_WAIT)
    assert f"Sign in the device showing {third['code']}?" in page.find_element(By.ID, "sheet").text
    page.find_element(By.XPATH, "//div[@id='sheet']//button[normalize-space()='Cancel']").click()
    wait(page, lambda: not shown(page, "sheet"), "the panel closed")
    status, _, _ = keys_server.http("POST", "/v1/auth/device/token", body={"code": third["code"], "pollToken": third["pollToken"]})
    assert status == 202


def test_the_passkey_button_and_device_links_follow_how_the_page_is_signed_in(keys_server, new_page):
    page = with_authenticator(new_page())
    page.get(keys_server.url + "/")
    wait(page, lambda: shown(page, "signinform"), "the sign-in form")
    # No account exists yet: there is nothing a passkey could sign in to.
    assert shown(page, "signinnote") and not shown(page, "passkeysignin")
    set_up_admin_with_a_passkey(page, keys_server)
    sign_out(page)
    assert shown(page, "passkeysignin")
    # The access-token form is another way in; the passkey button goes with the account fields.
    page.find_element(By.ID, "signinmode").click()
    wait(page, lambda: shown(page, "tokenrow"), "the token field")
    assert not shown(page, "passkeysignin")

    # Signed in with a pasted token of ada's (kept in memory only): a device link opened in this
    # tab asks the question, and the approval goes through with the token.
    page.find_element(By.ID, "tokenin").send_keys(keys_server.token("ada"))
    page.find_element(By.ID, "signinbtn").click()
    wait(page, lambda: in_chat(page), "ada in the chat by token", SIGN_IN_WAIT)
    status, _, start = keys_server.http("POST", "/v1/auth/device", body={"device": "laptop"})
    assert status == 201, start
    page.execute_script("location.hash = arguments[0]", "#device=" + start["code"])
    wait(page, lambda: page.find_element(By.ID, "sheet").get_attribute("data-panel") == "device", "the approval panel", SIGN_IN_WAIT)
    page.find_element(By.XPATH, "//div[@id='sheet']//button[normalize-space()='Approve']").click()
    wait(page, lambda: "is signed in as ada" in page.find_element(By.ID, "sheet").text, "the approval done")
    status, _, credential = keys_server.http("POST", "/v1/auth/device/token", body={"code": start["code"], "pollToken": start["pollToken"]})
    assert status == 200 and credential["user"] == "ada", credential
