"""The Celery app: settings for long idempotent tasks, and tasks queued only after commit."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from celery import shared_task
from django.conf import settings
from django.db import transaction

from costcenter.celery import app
from costcenter.models import Team
from costcenter.tasks import enqueue_on_commit


@shared_task(name="tests.touch_team")
def touch_team(team_id: int) -> None:  # only published here, never run
    raise AssertionError("not meant to run in the test process")


def test_it_is_configured_for_long_idempotent_tasks():
    assert app.conf.task_acks_late is True
    assert app.conf.task_reject_on_worker_lost is True
    assert app.conf.worker_prefetch_multiplier == 1
    assert isinstance(app.conf.beat_schedule, dict)
    assert app.conf.timezone == "UTC"


@pytest.mark.skipif(not settings.CELERY_BROKER_URL.startswith("filesystem://"), reason="a broker URL is set")
def test_without_a_broker_url_it_uses_a_filesystem_broker_under_costcenter_home():
    assert app.conf.broker_url == "filesystem://"
    queue = Path(app.conf.broker_transport_options["data_folder_in"])
    assert queue.is_dir() and queue.is_relative_to(settings.COSTCENTER_HOME)


def queued_messages(queue: Path) -> dict[Path, dict]:
    return {path: json.loads(path.read_text()) for path in queue.glob("*.msg")}


@pytest.mark.skipif(not settings.CELERY_BROKER_URL.startswith("filesystem://"), reason="a broker URL is set")
@pytest.mark.django_db(transaction=True)
def test_a_task_is_queued_only_when_the_transaction_commits():
    queue = Path(app.conf.broker_transport_options["data_folder_in"])
    before = set(queued_messages(queue))
    with transaction.atomic():
        team = Team.objects.create(slug="queued", name="Queued")
        enqueue_on_commit(touch_team, team.pk)
        assert set(queued_messages(queue)) == before, "published before commit"
    new = {path: message for path, message in queued_messages(queue).items() if path not in before}
    try:
        assert len(new) == 1
        (message,) = new.values()
        assert message["headers"]["task"] == "tests.touch_team"
        assert message["headers"]["argsrepr"] == f"({team.pk},)"
    finally:
        for path in new:
            path.unlink()

    with transaction.atomic():
        enqueue_on_commit(touch_team, 0)
        transaction.set_rollback(True)
    assert set(queued_messages(queue)) == before, "a rolled-back transaction published a task"
