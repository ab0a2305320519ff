"""The redelivery cap's counter, in-process (the drills in test_drills_celery.py run it for real)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from costcenter import tasks as core_tasks
from costcenter.celery import MAX_TASK_STARTS, CappedTask
from ingest import tasks as ingest_tasks
from ingest.models import TaskStart
from ingest.task_starts import count_start, prune, refuse

pytestmark = pytest.mark.django_db


def test_starts_are_counted_per_task_id_with_the_latest_worker():
    assert count_start("id-1", "ingest.ingest_usage_file", "a@host") == 1
    assert count_start("id-1", "ingest.ingest_usage_file", "b@host") == 2
    assert count_start("id-2", "ingest.ingest_usage_file", "a@host") == 1
    one = TaskStart.objects.get(task_id="id-1")
    assert (one.starts, one.worker, one.refused) == (2, "b@host", "")
    assert one.first_started_at <= one.last_started_at


def test_a_refusal_is_recorded_with_its_reason():
    count_start("id-3", "costcenter.recompute_costs", "a@host")
    reason = refuse("id-3", "costcenter.recompute_costs", 4, 3)
    assert TaskStart.objects.get(task_id="id-3").refused == reason
    assert "refused at start 4" in reason and "started 3 times without finishing" in reason


def test_counts_older_than_a_week_are_pruned():
    count_start("old", "x", "w")
    count_start("new", "x", "w")
    TaskStart.objects.filter(task_id="old").update(last_started_at=timezone.now() - timedelta(days=8))
    assert prune() == 1
    assert list(TaskStart.objects.values_list("task_id", flat=True)) == ["new"]


def test_every_task_is_capped_and_calls_in_process_are_not_counted():
    assert MAX_TASK_STARTS == 3  # the default without CELERY_TASK_MAX_STARTS
    for task in (ingest_tasks.ingest_usage_file, core_tasks.recompute_costs, core_tasks.deliver_notification):
        assert isinstance(task, CappedTask), task.name
    assert isinstance(ingest_tasks.ingest_usage_file, ingest_tasks.IngestFileTask)
    # A direct call (tests, management commands' twins) runs the task and counts nothing.
    ingest_tasks.create_partitions_ahead()
    assert not TaskStart.objects.exists()
