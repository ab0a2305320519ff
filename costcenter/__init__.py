"""CostCenter: the Django project and its core app."""

from costcenter.celery import app as celery_app

__all__ = ["celery_app"]
