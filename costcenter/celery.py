"""The Celery app and the one beat schedule.

Every periodic job is declared in ``beat_schedule`` below with a comment saying why it runs
when, and each has a management-command twin that calls the same service.
"""

from __future__ import annotations

import os

from celery import Celery, Task
from celery.schedules import crontab

from costcenter.env import env_int, env_str

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "costcenter.settings")


# A message may start this many times; a start beyond it is refused (see CappedTask).
MAX_TASK_STARTS = env_int("CELERY_TASK_MAX_STARTS", 3, minimum=1)


class CappedTask(Task):
    """Every task: its starts are counted per task id and too many are refused.

    With ``acks_late`` a message whose worker dies is delivered again — how a killed worker loses
    nothing — but a message that kills every worker taking it would loop forever. The count is a
    database row (ingest.task_starts), committed before the work begins, so a start that dies is
    still counted. Calls in the current process (tests, ``task()``, eager mode) are not counted.
    """

    def __call__(self, *args, **kwargs):
        request = self.request
        if request.id and not request.called_directly and not request.is_eager:
            from ingest.task_starts import count_start, refuse

            starts = count_start(request.id, self.name, request.hostname or "")
            if starts > MAX_TASK_STARTS:
                reason = refuse(request.id, self.name, starts, MAX_TASK_STARTS)
                self.on_refused(reason, args, kwargs)
                return None  # acknowledged: the message is done with, not redelivered again
        return super().__call__(*args, **kwargs)

    def on_refused(self, reason: str, args: tuple, kwargs: dict) -> None:
        """Make a refusal visible where users look; the default only logs (done by refuse())."""


app = Celery("costcenter", task_cls=CappedTask)
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
        # E-mailed reports are due at an hour of each subscriber's own time zone (Monday 09:00 by
        # default), so a tick every 5 minutes sends them at most 5 minutes late; it also queues
        # SMTP retries. A (subscription, period) row is created once, so extra ticks send nothing.
        "plan-reports": {
            "task": "reports.plan_reports",
            "schedule": crontab(minute="*/5"),
            "options": {"expires": 240},
        },
    },
)
if env_str("CELERY_BROKER_URL") and (visibility := env_int("CELERY_VISIBILITY_TIMEOUT", 0, minimum=0)):
    # Redis (and SQS) hand an unacknowledged message to another worker after this many seconds
    # (default one hour). A worker killed mid-task is redelivered only then; a task running longer
    # than this is redelivered while it still runs (the per-file lock makes the copy skip it).
    # Idle workers look for such messages every few seconds (kombu's default is every ~100 s).
    app.conf.broker_transport_options = {
        "visibility_timeout": visibility,
        "unacked_restore_interval": max(1, min(10, visibility // 2)),
        "unacked_restore_throttle": 1,
    }
app.autodiscover_tasks()
