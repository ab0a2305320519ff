"""Debian's Chromium driven by Playwright (no browser download), for the page tests.

On CI (``CI=true``) a missing Chromium fails the run; on a developer machine without it the
browser tests are skipped with the install hint.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from django.db import connections

from tests.conftest import ROOT

SCREENSHOTS = ROOT / "test-output" / "screenshots"
CHROMIUM_ARGS = [
    "--no-sandbox",  # CI runs as root
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    # The machine has no network: without these Chromium keeps calling home and logs errors.
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def chromium_path() -> str | None:
    for candidate in (os.environ.get("CHROMIUM_PATH"), "/usr/bin/chromium", shutil.which("chromium")):
        if candidate and Path(candidate).exists():
            return candidate
    return None


@pytest.fixture
def browser_page(live_server, monkeypatch):
    """A fresh page in headless Chromium; console errors and page errors fail the test."""
    executable = chromium_path()
    if executable is None:
        if os.environ.get("CI"):
            pytest.fail("Chromium is missing: .ci/run must install Debian's chromium package")
        pytest.skip("Chromium not found: apt-get install chromium (or set CHROMIUM_PATH)")
    from playwright.sync_api import sync_playwright

    # Playwright's sync API keeps an event loop in this thread; the ORM calls made here are
    # still synchronous and safe, so Django's async guard is relaxed for these tests only.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    errors: list[str] = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, headless=True, args=CHROMIUM_ARGS)
        context = browser.new_context(viewport={"width": 1366, "height": 900})
        page = context.new_page()
        page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
        page.on("pageerror", lambda error: errors.append(str(error)))
        page.base_url = live_server.url
        page.console_errors = errors
        yield page
        # Database work done while Playwright's loop was current ran on connections of that
        # context (Django's connections are context-local): close them, or they would outlive
        # the test and block dropping the test database.
        connections.close_all()
        context.close()
        browser.close()
    assert errors == [], f"console errors: {errors}"


def screenshot(page, name: str) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)
