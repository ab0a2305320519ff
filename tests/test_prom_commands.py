"""The ingest_metrics / import_openmetrics commands and the beat task, without a Prometheus."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from costcenter.celery import app
from ingest.models import PrometheusSource
from ingest.tasks import pull_prometheus_metrics


def run(*args) -> str:
    out = StringIO()
    call_command(*args, stdout=out, stderr=out)
    return out.getvalue()


@pytest.mark.django_db
def test_no_source_says_how_to_add_one(settings):
    settings.PROMETHEUS_URL = ""
    assert "set PROMETHEUS_URL" in run("ingest_metrics")


@pytest.mark.django_db
def test_prometheus_url_creates_the_default_source_and_errors_are_visible(settings):
    settings.PROMETHEUS_URL = "http://127.0.0.1:9"  # nothing listens there
    settings.PROMETHEUS_RETRIES = 0
    with pytest.raises(CommandError, match="some queries failed"):
        run("ingest_metrics")
    source = PrometheusSource.objects.get(name="default")
    assert source.url == "http://127.0.0.1:9" and "unavailable" in source.last_error


@pytest.mark.django_db
def test_unknown_source_and_bad_times():
    with pytest.raises(CommandError, match="no Prometheus source named 'nope'"):
        run("ingest_metrics", "--source", "nope")
    with pytest.raises(CommandError, match="no offset"):
        run("ingest_metrics", "--start", "2026-01-01T00:00:00")


@pytest.mark.django_db
def test_import_openmetrics_missing_file(tmp_path):
    with pytest.raises(CommandError, match="no such file"):
        run("import_openmetrics", str(tmp_path / "missing.om"))


def test_beat_runs_the_pull_every_five_minutes():
    entry = app.conf.beat_schedule["pull-prometheus-metrics"]
    assert entry["task"] == "ingest.pull_prometheus_metrics"
    assert entry["schedule"].minute == set(range(0, 60, 5))


@pytest.mark.django_db
def test_the_task_pulls_enabled_sources_only(settings):
    settings.PROMETHEUS_URL = ""
    PrometheusSource.objects.create(name="off", url="http://127.0.0.1:9", enabled=False)
    PrometheusSource.objects.create(name="offline", url="", enabled=True)  # an import-only source
    assert pull_prometheus_metrics() == []
