from django.apps import AppConfig


class CostCenterConfig(AppConfig):
    name = "costcenter"
    verbose_name = "CostCenter"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.db.models.signals import post_delete, post_save, pre_save

        from costcenter import reprice
        from costcenter.models import Endpoint, GpuHourPrice, Pool, TokenPrice

        for model, receiver in (
            (TokenPrice, reprice.token_price_changed),
            (GpuHourPrice, reprice.gpu_price_changed),
            (Pool, reprice.pool_changed),
            (Endpoint, reprice.endpoint_changed),
        ):
            pre_save.connect(
                reprice._remember, sender=model, dispatch_uid=f"reprice-remember-{model.__name__}"
            )
            post_save.connect(receiver, sender=model, dispatch_uid=f"reprice-save-{model.__name__}")
        post_delete.connect(reprice.token_price_changed, sender=TokenPrice, dispatch_uid="reprice-del-token")
        post_delete.connect(reprice.gpu_price_changed, sender=GpuHourPrice, dispatch_uid="reprice-del-gpu")
