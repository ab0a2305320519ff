from django.apps import AppConfig


class ReportsConfig(AppConfig):
    name = "costcenter.reports"
    label = "reports"
    verbose_name = "E-mailed reports"
    default_auto_field = "django.db.models.BigAutoField"
