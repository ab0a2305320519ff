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
