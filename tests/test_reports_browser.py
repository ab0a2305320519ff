"""The report preview and settings pages in a real browser (Debian's Chromium via Playwright).

The preview renders the charts for real (plotly's static export in a second headless Chromium)
and shows them as data: URIs under the site's Content-Security-Policy: a blocked image would be a
console error, which fails the test (tests/browser.py).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from costcenter.reports.models import Subscription
from costcenter.reports.periods import last_complete
from tests.browser import screenshot
from tests.conftest import PASSWORD
from tests.test_budget_world import spend

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def log_in(page, username: str) -> None:
    page.goto(page.base_url + "/accounts/login/")
    page.fill("#id_username", username)
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(page.base_url + "/")


def test_the_preview_shows_the_last_week_with_its_charts(people, browser_page, settings):
    page = browser_page
    # The live server runs in real time (a frozen clock would expire the browser's session cookie).
    week = last_complete("weekly", "UTC", datetime.now(UTC))
    spend({week.start + timedelta(hours=12): "10.00", week.start + timedelta(days=2): "2.50"})
    spend({week.previous().start + timedelta(hours=5): "5.00"})
    Subscription.objects.create(user=people["alice"], time_zone="UTC")

    log_in(page, "alice")
    page.click("text=Reports")
    page.wait_for_url(page.base_url + "/reports/")
    page.goto(page.base_url + "/reports/preview/")
    body = page.text_content("body")
    assert f"Week of {week.label}" in body
    assert "$12.50" in body and "$5.00" in body and "+150.0%" in body
    images = page.eval_on_selector_all(
        "img", "(imgs) => imgs.map((i) => [i.alt, i.naturalWidth, i.src.slice(0, 22)])"
    )
    assert len(images) == 2, images
    for alt, width, source in images:
        assert alt and width == 640 and source == "data:image/png;base64,"
    screenshot(page, "report-preview")


def test_the_settings_page_saves_from_the_keyboard(people, browser_page):
    page = browser_page
    log_in(page, "carol")
    page.goto(page.base_url + "/reports/")
    page.check("#id_active")
    page.select_option("#id_frequency", "monthly")
    page.select_option("#id_scope", "org")
    page.fill("#id_time_zone", "America/New_York")
    page.locator("#id_time_zone").press("Enter")
    page.wait_for_selector("text=Report settings saved.")
    subscription = Subscription.objects.get(user=people["carol"])
    assert (subscription.frequency, subscription.scope, subscription.time_zone, subscription.active) == (
        "monthly",
        "org",
        "America/New_York",
        True,
    )
    screenshot(page, "report-settings")
