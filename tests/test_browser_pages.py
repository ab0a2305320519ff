"""The dashboards in a real browser (Debian's Chromium via Playwright, see tests/browser.py).

A manager opens every page on a small demo fleet: each chart is drawn with data, changing a
filter changes the chart, drill-downs lead where they say, and no page logs a console error.
User data that looks like HTML is drawn as text; the pages work in a narrow window and from the
keyboard. Screenshots of every page land in test-output/screenshots/.
"""

from __future__ import annotations

import io
from datetime import UTC, datetime, timedelta
from urllib.parse import parse_qs, urlparse

import pytest
from django.core.management import call_command

from tests.browser import screenshot
from tests.conftest import PASSWORD

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

NOW = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
EVIL = "<img src=x onerror=alert(1)>"


def log_in(page, username: str) -> None:
    page.goto(page.base_url + "/")
    page.fill("#id_username", username)
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(page.base_url + "/")


def points(page, chart: str) -> int:
    """How many data points the plotly figure in ``[data-chart=chart]`` drew."""
    page.wait_for_selector(f"[data-chart={chart}] .main-svg")
    return page.evaluate(
        """(id) => document.querySelector(`[data-chart=${id}]`).data
                 .reduce((n, trace) => n + (trace.x || trace.y || []).length, 0)""",
        chart,
    )


def legend(page, chart: str) -> list[str]:
    """The legend as drawn (plotly shows none for a single trace)."""
    return page.locator(f"[data-chart={chart}] .legendtext").all_text_contents()


def trace_names(page, chart: str) -> list[str]:
    page.wait_for_selector(f"[data-chart={chart}] .main-svg")
    return page.evaluate(
        "(id) => document.querySelector(`[data-chart=${id}]`).data.map((t) => t.name)", chart
    )


def query_of(url: str) -> dict[str, list[str]]:
    return parse_qs(urlparse(url).query)


@pytest.fixture
def demo_fleet(people, tmp_path):
    from costcenter.costing import recompute

    call_command("demo", days=3, attempts_per_day=300, now=NOW, dir=tmp_path, stdout=io.StringIO())
    recompute(now=NOW)


def test_a_manager_opens_every_dashboard_changes_filters_and_drills_down(demo_fleet, browser_page):
    page = browser_page
    log_in(page, "carol")

    # Overview: KPIs, spend by model; stacking by team changes the chart; a mover drills down.
    assert points(page, "spend-chart") > 0
    assert page.locator(".kpi").count() == 9
    by_model = legend(page, "spend-chart")
    assert "gpt-4o-mini" in by_model
    screenshot(page, "dash-overview")
    page.select_option("#id_stack_by", "team")
    page.click("form.filters button[type=submit]")
    page.wait_for_url("**stack_by=team**")
    assert points(page, "spend-chart") > 0
    by_team = legend(page, "spend-chart")
    assert by_team != by_model and {"netops", "support"} <= set(by_team)
    page.locator("ol.movers a").first.click()
    page.wait_for_url("**/explorer/**")
    drilled = query_of(page.url)
    assert drilled["group_by"] == ["model"] and "team" in drilled

    # Explorer: group by workload, then drill into one workload; sort; CSV.
    page.goto(page.base_url + "/explorer/?period=7d")
    assert points(page, "explorer-chart") > 0
    before = legend(page, "explorer-chart")
    page.select_option("#id_group_1", "workload")
    page.click("form.filters button[type=submit]")
    page.wait_for_url("**group_by=workload**")
    after = legend(page, "explorer-chart")
    assert after != before and "chat" in after
    screenshot(page, "dash-explorer")
    page.click("a[data-drill=workload] >> text=chat")
    page.wait_for_url("**workload=chat**")
    assert query_of(page.url)["group_by"] == ["model"]
    assert set(trace_names(page, "explorer-chart")) <= {"gpt-4o-mini", "claude-sonnet-4"}
    page.click("th >> text=Attempts")
    page.wait_for_url("**sort=-attempts**")
    csv_url = page.get_attribute("a[download]", "href")
    download = page.request.get(page.base_url + csv_url)
    assert download.status == 200 and download.text().startswith("model,period,attempts")

    # Models × hardware: the scatter, and a workload filter narrows the matrix.
    page.click("nav >> text=Models × Hardware")
    assert points(page, "matrix-chart") > 0
    all_rows = page.locator("table.matrix tbody tr").count()
    assert page.locator("td.best").count() >= 5
    screenshot(page, "dash-models-hardware")
    page.select_option("#id_workload", "summarize")
    page.click("form.filters button[type=submit]")
    page.wait_for_url("**workload=summarize**")
    assert 0 < page.locator("table.matrix tbody tr").count() < all_rows

    # GPU fleet: utilisation lines and busy/idle bars; the MI300X pool is flagged under-used.
    page.click("nav >> text=GPU fleet")
    assert points(page, "utilisation-chart") > 0
    assert points(page, "fleet-cost-chart") == 4
    assert "under-used" in page.locator("tr.under-used").first.inner_text()
    screenshot(page, "dash-fleet")
    page.select_option("#id_vendor", "nvidia")
    page.click("form.filters button[type=submit]")
    page.wait_for_url("**vendor=nvidia**")
    assert trace_names(page, "utilisation-chart") == ["h100-a"]

    # Cost change: yesterday against the day before, as a waterfall with a sentence.
    day1, day2 = (NOW - timedelta(days=2)).date(), (NOW - timedelta(days=1)).date()
    page.goto(
        f"{page.base_url}/cost-change/?before_start={day1}&before_end={day1}&after_start={day2}&after_end={day2}"
    )
    assert points(page, "waterfall-chart") == 9
    assert page.locator("[data-explanation]").inner_text().startswith("Spend ")
    screenshot(page, "dash-cost-change")
    page.select_option("#id_team", "support")
    page.click("form.filters button[type=submit]")
    page.wait_for_url("**team=support**")
    assert page.locator("[data-explanation]").count() == 1

    # Ingestion health.
    page.click("nav >> text=Ingestion")
    assert points(page, "ingestion-chart") > 0
    assert "mistral-large-2411" in page.locator("#unpriced-heading + p + .table-wrap").inner_text()
    screenshot(page, "dash-ingestion")


def test_names_that_look_like_html_are_drawn_as_text(people, browser_page):
    from costcenter.costing import recompute
    from costcenter.models import Team
    from ingest.records import UsageRecord
    from ingest.services import ingest_items, source_for

    Team.objects.filter(slug="netops").update(name=EVIL)
    hour = NOW - timedelta(hours=2)
    records = [
        UsageRecord(
            idempotency_key=f"x-{n}",
            task_id=f"t-{n}",
            attempt=1,
            request_id=f"x-{n}",
            ts=hour + timedelta(minutes=n),
            model=EVIL if n % 2 else "llama-3.1-8b-instruct",
            model_version="",
            endpoint="vllm-h100-a",
            workload=EVIL,
            team="netops",
            status="success",
            http_status=200,
            error_type=None,
            latency_ms=900,
            ttft_ms=90,
            queue_wait_ms=None,
            prompt_tokens=1000,
            completion_tokens=100,
            cached_tokens=0,
            reasoning_tokens=None,
        )  # fmt: skip
        for n in range(10)
    ]
    assert ingest_items(records, source=source_for("t"), origin="test").rejected == 0
    recompute(now=NOW)
    page = browser_page
    dialogs: list[str] = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    log_in(page, "alice")
    assert EVIL in legend(page, "spend-chart")
    for path, chart in (
        ("/explorer/?period=7d&group_by=workload", "explorer-chart"),
        ("/explorer/?period=7d&group_by=model&granularity=total", "explorer-chart"),
        ("/models-hardware/?period=7d", "matrix-chart"),
    ):
        page.goto(page.base_url + path)
        assert points(page, chart) > 0
        text = page.locator(f"[data-chart={chart}]").inner_text() + page.locator("main").inner_text()
        assert EVIL in text
    assert page.locator("main img").count() == 0
    screenshot(page, "dash-html-names")
    assert dialogs == []


def test_the_dashboards_fit_a_narrow_window_and_work_from_the_keyboard(demo_fleet, browser_page):
    page = browser_page
    page.set_viewport_size({"width": 390, "height": 844})
    log_in(page, "bob")
    for path, name in (
        ("/", "overview"),
        ("/explorer/?period=7d", "explorer"),
        ("/models-hardware/?period=7d", "models-hardware"),
        ("/fleet/?period=7d", "fleet"),
        ("/cost-change/", "cost-change"),
        ("/ingestion/", "ingestion"),
    ):
        page.goto(page.base_url + path)
        page.wait_for_load_state("load")
        overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
        assert overflow <= 0, (path, overflow)
        screenshot(page, f"dash-{name}-narrow")
    # From the keyboard: pick "group by team" and apply, then sort by a column header.
    page.goto(page.base_url + "/explorer/?period=7d")
    page.focus("#id_group_1")
    page.keyboard.type("Team")
    for _ in range(20):  # Tab on to the Apply button
        page.keyboard.press("Tab")
        if page.evaluate("document.activeElement.type") == "submit":
            break
    page.keyboard.press("Enter")
    page.wait_for_url("**group_by=team**")
    assert set(page.locator("a[data-drill=team]").all_text_contents()) == {"support"}
    page.locator("th a", has_text="Tasks").first.focus()
    page.keyboard.press("Enter")
    page.wait_for_url("**sort=-tasks**")
