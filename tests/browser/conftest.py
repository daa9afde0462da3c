"""Fixtures of the browser tests: a real `circle serve` with the public circle "lounge" (owned by
alice), and headless Chromium pages that are closed after each test."""

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Server, browser  # noqa: E402


@pytest.fixture
def server():
    s = Server()
    s.start()
    s.create_circle("lounge", "alice")
    yield s
    s.cleanup()


@pytest.fixture
def new_page():
    pages = []

    def make(width=1000, height=700):
        page = browser(width, height)
        pages.append(page)
        return page

    yield make
    for page in pages:
        try:
            page.quit()
        except Exception:  # a test may have closed it already
            pass
