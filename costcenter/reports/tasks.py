"""Celery tasks: the beat's planner fans out one delivery task per due report."""

from __future__ import annotations

from celery import shared_task


@shared_task(name="reports.plan_reports", acks_late=True, expires=240)
def plan_reports() -> int:
    """Create the due deliveries (never twice) and queue each due one, retries included.
    A delivery task that finds its row already claimed or sent does nothing."""
    from costcenter.reports.delivery import plan

    due = plan()
    for delivery_id in due:
        deliver_report.apply_async(args=[delivery_id])
    return len(due)


@shared_task(name="reports.deliver_report", acks_late=True)
def deliver_report(delivery_id: int) -> str | None:
    from costcenter.reports.delivery import deliver

    return deliver(delivery_id)
