"""The pages in a real browser: log in, see the catalog and its chart, no console errors."""

from __future__ import annotations

import pytest

from tests.browser import screenshot
from tests.conftest import PASSWORD

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def log_in(page, username: str) -> None:
    page.goto(page.base_url + "/")
    assert "/accounts/login/" in page.url
    page.fill("#id_username", username)
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(page.base_url + "/")


def test_a_manager_logs_in_and_sees_the_catalog_with_its_chart(people, browser_page):
    page = browser_page
    log_in(page, "carol")
    assert page.title() == "Overview · CostCenter"
    page.wait_for_selector("[data-chart=gpus-chart] .main-svg")
    bars = page.locator("[data-chart=gpus-chart] .bars .point")
    assert bars.count() == 2  # one bar per pool
    assert page.locator("[data-chart=gpus-chart] .legendtext").all_text_contents() == ["AMD", "NVIDIA"]
    assert "h100-a" in page.locator("table").first.inner_text()
    # The dashboards are links in the navigation (pages still to come are listed, not links).
    assert page.locator("nav a", has_text="Explorer").count() == 1
    screenshot(page, "overview")

    page.click("nav >> text=Teams")
    page.wait_for_url(page.base_url + "/teams/")
    assert page.locator("tbody tr").count() == 4
    screenshot(page, "teams")

    page.click("button:has-text('Log out')")
    page.wait_for_url("**/accounts/login/")


def test_a_team_member_sees_only_their_team_and_a_narrow_window_still_works(people, browser_page):
    page = browser_page
    page.set_viewport_size({"width": 390, "height": 844})
    log_in(page, "bob")
    teams = page.locator("section.card", has=page.get_by_role("heading", name="Your teams")).inner_text()
    assert "Customer Support" in teams and "Network Ops" not in teams
    page.wait_for_selector("[data-chart=gpus-chart] .main-svg")
    # Nothing wider than the window except inside scrollable table wrappers.
    overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
    assert overflow <= 0
    screenshot(page, "overview-narrow")
    # With bob's session cookies, another team's page is not found (a request, not a navigation,
    # so the expected 404 does not count as a console error).
    assert page.request.get(page.base_url + "/teams/netops/").status == 404
    assert page.request.get(page.base_url + "/teams/support/").status == 200


def test_keyboard_users_can_skip_to_the_content(people, browser_page):
    page = browser_page
    log_in(page, "alice")
    page.keyboard.press("Tab")
    focused = page.evaluate("document.activeElement.textContent")
    assert focused == "Skip to content"
