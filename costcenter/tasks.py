"""Celery tasks of the core app, and the one way to queue any task from a service."""

from __future__ import annotations

from celery import shared_task
from django.db import transaction


def enqueue_on_commit(task, *args, **kwargs) -> None:
    """Queue ``task`` only once the current transaction commits (at once outside one).

    A task queued inside a transaction could run before the rows it reads are committed, or
    for rows that a rollback then removes; tasks take ids, never model instances.
    """
    transaction.on_commit(lambda: task.apply_async(args=args, kwargs=kwargs))


@shared_task(name="costcenter.recompute_costs", acks_late=True, expires=240)
def recompute_costs() -> int:
    """Cost new usage, price changes and the hours that just ended."""
    from costcenter.costing import recompute

    return recompute()


# --- Budgets and alerts ----------------------------------------------------------------------------
@shared_task(name="costcenter.evaluate_alerts", acks_late=True, expires=55)
def evaluate_alerts() -> int:
    """Evaluate budgets and alert rules, then fan out one delivery task per due notification
    (new ones and retries whose backoff has passed). Claims make duplicates harmless."""
    from costcenter.alerts import evaluate_all
    from costcenter.notify import due_ids

    evaluate_all()
    due = due_ids()
    for notification_id in due:
        deliver_notification.apply_async(args=[notification_id])
    return len(due)


@shared_task(name="costcenter.deliver_notification", acks_late=True)
def deliver_notification(notification_id: int) -> str | None:
    from costcenter.notify import deliver

    return deliver(notification_id)


def _evaluate_after_rollups(sender=None, **kwargs) -> None:
    """Costs just changed: evaluate budgets now rather than at the next minute."""
    if getattr(sender, "name", None) == "costcenter.recompute_costs":
        evaluate_alerts.apply_async()


def _connect_signals() -> None:
    from celery.signals import task_success

    task_success.connect(
        _evaluate_after_rollups, weak=False, dispatch_uid="costcenter.evaluate_after_rollups"
    )


_connect_signals()
