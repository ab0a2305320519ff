from django.apps import AppConfig


class CostCenterConfig(AppConfig):
    name = "costcenter"
    verbose_name = "CostCenter"
    default_auto_field = "django.db.models.BigAutoField"
