"""The Celery app and the one beat schedule.

Every periodic job is declared in ``beat_schedule`` below with a comment saying why it runs
when, and each has a management-command twin that calls the same service.
"""

from __future__ import annotations

import os

from celery import Celery
from celery.schedules import crontab

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "costcenter.settings")

app = Celery("costcenter")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.conf.update(
    # Long tasks (ingest, recompute) are acknowledged only when done, so a worker killed
    # mid-task leaves the message for another worker; tasks are written to be idempotent.
    task_acks_late=True,
    task_reject_on_worker_lost=True,
    # One message at a time per process: a long ingest must not hold a queue of others hostage.
    worker_prefetch_multiplier=1,
    task_ignore_result=True,
    task_serializer="json",
    accept_content=["json"],
    timezone="UTC",
    enable_utc=True,
    broker_connection_retry_on_startup=True,
    beat_schedule={
        # New and grown usage files should show up within a minute or two; files still being
        # written are left for the next tick (ingest.sources.SETTLE_SECONDS).
        "scan-usage-directories": {
            "task": "ingest.scan_usage_directories",
            "schedule": crontab(minute="*"),
            "options": {"expires": 55},
        },
        # Costs trail usage by at most a few minutes; each run only does marked and new hours, and
        # concurrent runs are safe (whole-bucket rewrites, version-checked marks).
        "recompute-costs": {
            "task": "costcenter.recompute_costs",
            "schedule": crontab(minute="*/5"),
            "options": {"expires": 240},
        },
        # The coming months' partitions exist before their first row arrives, so no insert waits
        # on DDL at midnight of the 1st. Daily is plenty: two months are kept ahead.
        "create-partitions-ahead": {
            "task": "ingest.create_partitions_ahead",
            "schedule": crontab(minute=17, hour=3),
            "options": {"expires": 3600},
        },
        # A Prometheus window becomes due two scrape intervals after it closes; every 5 minutes
        # keeps hourly data at most ~7 minutes late and is the finest step a source may use.
        # A run with nothing due sends no query; a run that finds the last still running skips.
        "pull-prometheus-metrics": {
            "task": "ingest.pull_prometheus_metrics",
            "schedule": crontab(minute="*/5"),
            "options": {"expires": 290},
        },
        # Budgets and alert rules: a threshold crossed within the last minute's rollups should
        # reach people within a minute or two; the task also sends due notification retries.
        # Transitions are claimed once, so an overlapping or late tick sends nothing twice.
        "evaluate-alerts": {
            "task": "costcenter.evaluate_alerts",
            "schedule": crontab(minute="*"),
            "options": {"expires": 55},
        },
    },
)
app.autodiscover_tasks()
